"""The metrics cost estimate (components/metrics_cost.py): its arithmetic against numbers worked by
hand for one stack per cloud, its counts against the files they were read from, every priced item
with its source, and the plan's text and JSON carrying it."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from gpu_cluster.components import metrics_cost as mc
from gpu_cluster.components.plan import plan_stack, render, to_json
from gpu_cluster.workloads.validate.metrics_export import render_report
from gpu_cluster.workloads.validate.report import Report
from gpu_cluster.workloads.validate.verdict import NodeVerdict, Verdict

DATA = Path(__file__).resolve().parents[1] / "data"
MONTH_S = 730 * 3600  # 2,628,000 s


def _counted(csv: str) -> list[str]:
    """The counter file's rule (its own header): '#' starts a comment; each line is field, type, help."""
    out = []
    for line in csv.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, kind = (p.strip() for p in line.split(",")[:2])
        if kind != "label":
            out.append(name)
    return out


def test_the_dcgm_series_are_the_counter_files_uncommented_metrics() -> None:
    csv = (DATA / "dcgm-exporter-4.5.3-4.8.2-default-counters.csv").read_text()
    counted = _counted(csv)
    assert tuple(counted) == mc.load().dcgm_counters
    assert len(counted) == 25
    # the one uncommented label line is left out, and a commented-out counter is not counted
    assert "DCGM_FI_DRIVER_VERSION" in csv and "DCGM_FI_DRIVER_VERSION" not in counted
    assert "# DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" in csv and "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" not in counted


def test_the_node_exporter_figure_is_the_measured_series() -> None:
    lines = (DATA / "node-exporter-1.5.0-debian-2core.prom").read_text().splitlines()
    series = [x for x in lines if x and not x.startswith("#")]
    assert len(series) == len(set(series)) == mc.load().node_exporter_series == 507


def test_the_validation_series_match_what_the_judge_publishes() -> None:
    """render_report for 3 nodes and no curves: 3 x per-node + per-run series."""
    rep = Report(
        verdict=Verdict.PASS,
        local=False,
        floors_applied=True,
        instance_type=None,
        nodes=[NodeVerdict(node=f"n{i}") for i in range(3)],
        measurements=[],
        transport={},
        versions={},
    )
    text = render_report(rep, cluster="c", run="r", judged_at=1.0)
    series = [x for x in text.splitlines() if x and not x.startswith("#")]
    assert len(series) == 3 * mc.VALIDATION_SERIES_PER_NODE + mc.VALIDATION_SERIES_PER_RUN


def _est(**kw: object) -> mc.Estimate:
    args = dict(cloud="aws", orchestrator="eks", nodes=4, gpus_per_node=8, gpu_vendor="nvidia", resources=[])
    args.update(kw)
    e = mc.estimate(**args)  # type: ignore[arg-type]
    assert e is not None
    return e


def test_eks_by_hand() -> None:
    # 4 nodes x (25 x 8 DCGM + 5 validation) + 2 = 822 series; 2,628,000 / 30 = 87,600 scrapes
    e = _est(resources=[("aws:grafana/workspace:Workspace", "g"), ("aws:amp/workspace:Workspace", "w")])
    assert (e.series, e.interval_s, e.samples_per_month) == (822, 30, 822 * 87_600)
    assert e.samples_per_month == 72_007_200
    # AMP's rate was not read: not priced; AMG's minimum editor is $9
    amp, amg = e.items
    assert amp["usd_per_month"] is None and "not in the copy read" in amp["why"]
    assert amg["usd_per_month"] == 9.0 and e.usd_per_month == 9.0
    assert e.resources == ["aws:grafana/workspace:Workspace g", "aws:amp/workspace:Workspace w"]


def test_pcs_counts_the_node_exporter() -> None:
    e = _est(orchestrator="slurm", nodes=2)
    # 2 x (200 + 507 + 5) + 2 = 1,426
    assert e.series == 1426 and e.samples_per_month == 1426 * 87_600
    assert e.series_per_node == {"dcgm": 200, "node_exporter": 507, "validation": 5}
    # no Grafana workspace in the resources: no Grafana item
    assert [i["what"] for i in e.items] == ["AMP ingestion and storage"] and e.usd_per_month == 0.0


def test_gke_by_hand() -> None:
    e = _est(cloud="gcp", orchestrator="gke", nodes=4)
    # 822 series x 87,600 = 72,007,200 samples; / 1e6 x $0.15 = $10.80
    assert e.samples_per_month == 72_007_200
    assert e.items[0]["usd_per_month"] == pytest.approx(10.80) and e.usd_per_month == pytest.approx(10.80)


def test_azure_by_hand_and_unpriced() -> None:
    e = _est(cloud="azure", orchestrator="aks", nodes=2, resources=[("azure-native:dashboard:Grafana", "g")])
    # 2 x 205 + 2 = 412 series x 87,600 = 36,091,200 samples
    assert (e.series, e.samples_per_month) == (412, 36_091_200)
    assert [i["usd_per_month"] for i in e.items] == [None, None] and e.usd_per_month == 0.0
    amd = _est(cloud="azure", orchestrator="aks", nodes=2, gpu_vendor="amd")
    assert amd.series == 2 * 5 + 2 and "dcgm" not in amd.series_per_node


def test_cluster_director_is_not_estimated_by_samples() -> None:
    e = _est(cloud="gcp", orchestrator="slurm")
    assert e.series == 0 and all(i["usd_per_month"] is None for i in e.items)
    assert any("bytes" in a for a in e.assumptions)


def test_every_price_names_a_source_with_its_date() -> None:
    data = mc.load()
    assert data.prices
    for p in data.prices.values():
        assert p.source in data.sources and p.url.startswith("https://") and re.fullmatch(r"\d{4}-\d{2}-\d{2}", p.read)
    for cloud, kind in [("aws", "eks"), ("gcp", "gke")]:
        e = _est(cloud=cloud, orchestrator=kind, resources=[("aws:grafana/workspace:Workspace", "g")])
        priced = [i for i in e.items if i["usd_per_month"] is not None]
        assert priced and all(i["source"].startswith("https://") and i["read"] for i in priced)
        assert all(i.get("why") for i in e.items if i["usd_per_month"] is None)


def test_the_interval_is_the_one_the_stack_renders(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_cluster.components.aws import metrics as eks

    monkeypatch.setattr(eks, "SCRAPE_INTERVAL", "60s")
    assert _est().samples_per_month == 822 * 43_800


@pytest.mark.parametrize("stack", ["aws-h100-eks", "gcp-h100-gke", "azure-h100-slurm"])
def test_the_plan_shows_the_estimate_in_text_and_json(stack: str) -> None:
    summary, run = plan_stack(stack)
    out = io.StringIO()
    render(summary, run, out)
    [row] = [x for x in out.getvalue().splitlines() if x.startswith("    metrics     ") and "series" in x]
    doc = json.loads(json.dumps(to_json(summary, run), default=str))
    m = doc["summary"]["metrics"]
    assert f"{m['series']:,} series" in row and f"{m['samples_per_month']:,} samples/month" in row
    # the metrics resources the estimate names are in the plan's resource list
    listed = {f"{r['type']} {r['name']}" for r in doc["resources"]}
    assert m["resources"] and set(m["resources"]) <= listed
