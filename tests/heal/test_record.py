"""The certificate's record: heal adds each incident to the report that named the node (report.json
and a section of report.md), ``validate diff`` shows them, a rerun sees the same report, and the
plan prints what a replacement and its revalidation are expected to take."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_cluster.components import validation_time as vt
from gpu_cluster.components.catalog import load_catalog
from gpu_cluster.heal.evidence import read_report
from gpu_cluster.heal.journal import Journal
from gpu_cluster.heal.record import record
from tests.heal.world import engine, write_report
from gpu_cluster.workloads.validate import diff, report_html
from gpu_cluster.workloads.validate.certificate import INCIDENTS


def test_incidents_go_into_the_report_and_the_diff(tmp_path: Path) -> None:
    path = write_report(tmp_path)
    (tmp_path / "report.md").write_text("# Cluster validation: FAIL\n\nbody\n", encoding="utf-8")
    page = report_html.render(
        json.loads(path.read_text()), decided_by="decided by node local-3", svg=None, title="FAIL"
    )
    (tmp_path / "report.html").write_text(page, encoding="utf-8")
    ev = read_report(path)
    with Journal(tmp_path) as j:
        e, _w = engine(tmp_path, j)
        assert e.run(ev).code == 0
        written = record(j, ev, tmp_path)
    assert {p.name for p in written} == {"report.json", "report.md", "report.html", "heal.json"}
    html = (tmp_path / "report.html").read_text()
    assert html.count(report_html.INCIDENTS_BEGIN) == 1 and "local-3.i0 -&gt; local-3.i1" in html
    doc = json.loads(path.read_text())
    (inc,) = doc["incidents"]
    assert inc["node"] == "local-3" and inc["state"] == "HEALTHY" and inc["replacements"] == 1
    assert (inc["old_instance"], inc["new_instance"], inc["peer"]) == ("local-3.i0", "local-3.i1", "local-1")
    assert inc["figures"]["multi_node.all_reduce cluster"]["value"] == 1.0
    md = (tmp_path / "report.md").read_text()
    assert md.count(INCIDENTS) == 1 and "| local-3.i0 -> local-3.i1 | local-1 |" in md
    # recording again replaces the section, and the report's identity is what the judge wrote
    with Journal(tmp_path) as j:
        record(j, read_report(path), tmp_path)
    assert (tmp_path / "report.md").read_text().count(INCIDENTS) == 1
    assert read_report(path).report_id == ev.report_id
    d = diff.diff_reports(json.loads(path.read_text()), doc)
    (line,) = d.incidents
    assert line.startswith("local-3 HEALTHY, replaced local-3.i0 -> local-3.i1 (now local-3); revalidated with local-1")
    assert any("Incidents (gpu-cluster heal)" in ln for ln in diff.render_markdown(d))


@pytest.mark.parametrize(
    ("cloud", "kind", "capacity", "itype", "path"),
    [
        ("aws", "eks", "on-demand", "p5.48xlarge", "eks-asg"),
        ("aws", "eks", "capacity-block", "p5.48xlarge", "eks-capacity-block"),
        ("aws", "slurm", "on-demand", "p5en.48xlarge", "pcs"),
        ("gcp", "gke", "reservation", "a3-ultragpu-8g", "gke-report-and-replace"),
        ("gcp", "gke", "flex-start", "a3-megagpu-8g", "gke-mig-recreate"),
        ("gcp", "slurm", "reservation", "a3-ultragpu-8g", "gce-report-host-as-faulty"),
        ("gcp", "slurm", "reservation", "a3-megagpu-8g", "slurm-power-cycle"),
        ("azure", "aks", "on-demand", "Standard_ND96isr_H100_v5", "aks-delete-machines"),
    ],
)
def test_each_stack_gets_its_documented_replacement(
    cloud: str, kind: str, capacity: str, itype: str, path: str
) -> None:
    assert vt.replace_path(cloud, kind, capacity, itype) == path
    est = vt.replace_estimate(path)
    assert est.seconds >= vt.JOIN_BOUND_S and est.basis


def test_the_revalidation_is_one_launch_with_the_sweeps_at_the_floors_size() -> None:
    it = load_catalog().get("p5.48xlarge")
    rev = vt.revalidate_estimate(it).seconds
    full = vt.total_s(vt.estimate(it, 2))
    # a gate, a health pass and two 8 GiB rows: more than a launch, far less than the whole validation
    assert vt.LAUNCH_S + 45 < rev < full / 2


def test_the_plan_prints_the_heal_line(capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_cluster.components import plan

    assert plan.main(["gcp-h200-gke"]) == 0
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.strip().startswith("heal ")]
    assert (
        "replacement ~42 min" in line and "cloud.google.com/fault-behavior" in line and "revalidation ~1.8 min" in line
    )
