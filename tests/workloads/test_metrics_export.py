"""The validation's figures as metrics, read by the real programs: ``promtool check metrics`` lints
the file, a real node exporter's textfile collector serves it, and a real Prometheus, scraping it
with the Slurm stacks' own node-exporter job (components/azure/slurm_metrics.py, the same job as
PCS's collector), answers PromQL with the labels cluster, run and node."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_cluster.components import dashboard
from gpu_cluster.components.azure import slurm_metrics as azure_metrics
from gpu_cluster.heal.states import State
from gpu_cluster.workloads.validate import metrics_export
from gpu_cluster.workloads.validate.report import Curve, Report
from gpu_cluster.workloads.validate.verdict import Measurement, NodeVerdict, Verdict
from tests.prom_stack import NODE_EXPORTER, PROMETHEUS, PROMTOOL, query, scraped_textfile

needs = pytest.mark.skipif(
    not (PROMETHEUS and NODE_EXPORTER and PROMTOOL),
    reason="prometheus, promtool and prometheus-node-exporter (scripts/install-system-deps.sh)",
)


def _report() -> Report:
    pair = Measurement(check="pairs.all_reduce", scope="pair:gpu-2+gpu-1", value=12.5, unit="GB/s", floor_fail=20.0)
    return Report(
        verdict=Verdict.FAIL,
        local=False,
        floors_applied=True,
        instance_type="p5.48xlarge",
        nodes=[
            NodeVerdict(node="gpu-1"),
            NodeVerdict(node="gpu-2", verdict=Verdict.FAIL, reasons=['pair "search" named it\nslow']),
        ],
        measurements=[pair.judge()],
        transport={},
        versions={},
        curves=[
            Curve(
                op="all_reduce",
                scope="cluster",
                points=[(1 << 20, 1.5), (1 << 30, 310.5)],
                expected=[(1 << 20, 4.0), (1 << 30, 360.0)],
                model_floors=[(1 << 20, 2.0, 1.0), (1 << 30, 288.0, 216.0)],
            )
        ],
    )


def _render() -> str:
    return metrics_export.render_report(_report(), cluster="c1", run="run-7", judged_at=1_765_000_000.0)


def _incidents() -> str:
    return metrics_export.render_incidents(
        [("c1", "gpu-2", "inc-1", State.QUARANTINED.value)], [s.value for s in State]
    )


@needs
@pytest.mark.parametrize("text", [_render(), _incidents()], ids=["validation", "heal"])
def test_promtool_accepts_the_files(text: str) -> None:
    done = subprocess.run([PROMTOOL or "", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    # promtool's lint prints its complaints and still exits 0 for some: none at all is the bar.
    assert (done.stdout + done.stderr).strip() == ""


def test_each_family_is_one_block_with_its_help_and_type() -> None:
    text = _render()
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(names) == len(set(names))
    assert 'node="gpu-2"' in text and "reasons" not in text
    # The busbw figures are bytes per second (GB/s x 1e9).
    assert (
        f'{metrics_export.BUSBW}{{cluster="c1",run="run-7",collective="all_reduce",scope="cluster",size_bytes="1073741824"}} 310500000000'
        in text
    )


def test_write_is_atomic_and_leaves_no_temp(tmp_path: Path) -> None:
    path = metrics_export.write_textfile("a 1\n", tmp_path)
    metrics_export.write_textfile(_render(), tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [metrics_export.VALIDATION_FILE]
    assert path.read_text() == _render()
    assert path.stat().st_mode & 0o777 == 0o644


@pytest.fixture
def scraped(tmp_path: Path) -> Iterator[str]:
    """A node exporter serving ``tmp_path/textfile`` and a Prometheus scraping it with the stack's
    node-exporter job; yields Prometheus's address."""
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    metrics_export.write_textfile(_render(), textfile)
    metrics_export.write_textfile(_incidents(), textfile, metrics_export.HEAL_FILE)
    config = azure_metrics.prometheus_config("http://127.0.0.1:9/unused", "unused")
    with scraped_textfile(
        tmp_path, textfile, config["scrape_configs"], azure_metrics.HOST_PLACEHOLDER, "batch-host"
    ) as prom:
        yield prom


@needs
def test_prometheus_reads_the_figures_through_the_node_exporter(scraped: str) -> None:
    verdicts = query(scraped, f'{metrics_export.NODE_VERDICT}{{cluster="c1",run="run-7"}} == 1')
    got = {r["metric"]["node"]: r["metric"]["verdict"] for r in verdicts}
    # honor_labels: the node judged, not the host that served the file (it would be exported_node).
    assert got == {"gpu-1": "PASS", "gpu-2": "FAIL"}
    assert all("exported_node" not in r["metric"] for r in verdicts)
    codes = query(scraped, f'{metrics_export.NODE_VERDICT_CODE}{{node="gpu-2"}}')
    assert [(r["metric"]["cluster"], r["metric"]["run"], r["value"][1]) for r in codes] == [("c1", "run-7", "2")]
    bw = query(scraped, f'{metrics_export.BUSBW}{{cluster="c1",run="run-7",size_bytes="{1 << 30}"}}')
    assert [float(r["value"][1]) for r in bw] == [310.5e9]
    # The series without a node of its own carries the serving host's, from the job's relabelling.
    assert bw[0]["metric"]["node"] == "batch-host"
    below = query(
        scraped,
        f"{metrics_export.BUSBW} < on(cluster,run,collective,scope,size_bytes) {metrics_export.BUSBW_FLOOR_WARN}",
    )
    assert [r["metric"]["size_bytes"] for r in below] == [str(1 << 20)]
    pair = query(scraped, f'{metrics_export.PAIR_VERDICT_CODE}{{run="run-7"}}')
    assert [(r["metric"]["node"], r["metric"]["peer"], r["value"][1]) for r in pair] == [("gpu-2", "gpu-1", "2")]
    # The dashboard's validation section and heal annotation, as Grafana would send them.
    board = dashboard.grafana()
    for panel in board["panels"][len(dashboard.PANELS) :]:
        for t in panel["targets"]:
            assert query(scraped, t["expr"]), f"{panel['title']}: {t['expr']} returned nothing"
    (ann,) = board["annotations"]["list"]
    inc = query(scraped, ann["expr"])
    assert [(r["metric"]["node"], r["metric"]["incident"], r["metric"]["state"]) for r in inc] == [
        ("gpu-2", "inc-1", "QUARANTINED")
    ]


def test_both_slurm_boot_scripts_serve_the_textfile_directory() -> None:
    from gpu_cluster.components.aws import slurm_metrics as aws_metrics
    from gpu_cluster.components.contract import METRICS_TEXTFILE_DIR

    pcs = aws_metrics.node_script("https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/", "us-east-1")
    azure = "\n".join(azure_metrics.node_lines("https://x/write", "client"))
    for script in (pcs, azure):
        # The directory is made before the exporter starts, and the exporter reads it through /host.
        assert script.index(f"mkdir -p {METRICS_TEXTFILE_DIR}") < script.index("--name node-exporter")
        assert f"--collector.textfile.directory=/host{METRICS_TEXTFILE_DIR}" in script
    scrape = aws_metrics.collector_config("https://x/", "us-east-1")["receivers"]["prometheus"]["config"]
    jobs = {j["job_name"]: j for j in scrape["scrape_configs"]}
    assert jobs["node-exporter"].get("honor_labels") is True and "honor_labels" not in jobs["dcgm-exporter"]
