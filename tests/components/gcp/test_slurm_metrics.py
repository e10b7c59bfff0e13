"""Cluster Director's GPU metrics (components/gcp/slurm_metrics.py): the node set's startup script
configures the Ops Agent's DCGM receiver as the references write it, the dashboard charts the series
that receiver sends under Cloud Monitoring's PromQL names, and the plan's liveness sees the exporter."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable

import yaml

from gpu_cluster.components.engine import OfflineRun
from gpu_cluster.components.gcp import slurm_metrics
from gpu_cluster.components.spec import read_stack_file
from tests.components.gcp.conftest import PROJECT
from tests.components.test_dashboard import _aggregations, _selectors, parse

CD = "gcp:hypercomputecluster/cluster:Cluster"
DASHBOARD = "gcp:monitoring/dashboard:Dashboard"
SERVICE = "gcp:projects/service:Service"

# GoogleCloudPlatform/ops-agent integration_test/third_party_apps_test/applications/dcgm/enable at
# 257b782: the configuration the agent's own DCGM test writes (receiver version 2).
OPS_AGENT_TEST_CONFIG = {
    "metrics": {
        "receivers": {"dcgm": {"type": "dcgm", "receiver_version": 2}},
        "service": {"pipelines": {"dcgm": {"receivers": ["dcgm"]}}},
    }
}
# GoogleCloudPlatform/opentelemetry-operations-collector receiver/dcgmreceiver/metadata.yaml at
# 34805c0: the metrics enabled by default, name -> (unit, kind); "sum" ones are cumulative and
# monotonic. Attributes as the Ops Agent renames them (ops-agent apps/dcgm.go at 588c4b9).
RECEIVER_ENABLED = {
    "gpu.dcgm.utilization": ("1", "gauge", ()),
    "gpu.dcgm.sm.utilization": ("1", "gauge", ()),
    "gpu.dcgm.pipe.utilization": ("1", "gauge", ("pipe",)),
    "gpu.dcgm.codec.encoder.utilization": ("1", "gauge", ()),
    "gpu.dcgm.codec.decoder.utilization": ("1", "gauge", ()),
    "gpu.dcgm.memory.bytes_used": ("By", "gauge", ("state",)),
    "gpu.dcgm.memory.bandwidth_utilization": ("1", "gauge", ()),
    "gpu.dcgm.pcie.io": ("By", "sum", ("direction",)),
    "gpu.dcgm.nvlink.io": ("By", "sum", ("direction",)),
    "gpu.dcgm.energy_consumption": ("J", "sum", ()),
    "gpu.dcgm.temperature": ("Cel", "gauge", ()),
    "gpu.dcgm.clock.frequency": ("Hz", "gauge", ()),
    "gpu.dcgm.clock.throttle_duration.time": ("s", "sum", ("violation",)),
    "gpu.dcgm.ecc_errors": ("1", "sum", ("error_type",)),
}
BY_PROMQL = {slurm_metrics.metric(name): name for name in RECEIVER_ENABLED}


def test_promql_names_follow_cloud_monitorings_mapping() -> None:
    # cloud.google.com/monitoring/promql/promql-mapping: its own examples, then ours.
    assert slurm_metrics.metric("gpu.dcgm.temperature") == "workload_googleapis_com:gpu_dcgm_temperature"
    assert slurm_metrics.metric("gpu.dcgm.clock.throttle_duration.time") == (
        "workload_googleapis_com:gpu_dcgm_clock_throttle_duration_time"
    )


def test_the_agent_config_is_the_one_the_ops_agent_test_writes() -> None:
    assert yaml.safe_load(slurm_metrics.ops_agent_config()) == OPS_AGENT_TEST_CONFIG


def test_the_startup_script_parses_and_writes_that_config() -> None:
    script = slurm_metrics.startup_script()
    bash = shutil.which("bash")
    assert bash is not None
    subprocess.run([bash, "-n"], input=script, text=True, check=True)
    body = re.search(r"cat > (\S+) <<'EOF'\n(.*?)^EOF$", script, re.S | re.M)
    assert body is not None and body.group(1) == "/etc/google-cloud-ops-agent/config.yaml"
    assert yaml.safe_load(body.group(2)) == OPS_AGENT_TEST_CONFIG
    # DCGM on and the agent restarted after the config changes (cluster-toolkit a3ultra blueprint at
    # 1047080, lines 589-606); the agent installed the documented way where missing.
    assert "systemctl enable --now nvidia-dcgm.service" in script
    assert script.index("cat > /etc/google-cloud-ops-agent") < script.index("systemctl restart google-cloud-ops-agent")
    assert "add-google-cloud-ops-agent-repo.sh --also-install" in script
    # Never fails the node's boot.
    assert script.rstrip().endswith("exit 0") and "set -e" not in script


def test_the_startup_script_runs_to_the_end_without_dcgm(tmp_path: Path) -> None:
    """On an image without DCGM the script logs why and exits 0, touching nothing else."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    for tool, rc in (("systemctl", 1), ("logger", 0), ("curl", 1)):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\nexit {rc}\n')
        (bin_dir / tool).chmod(0o755)
    done = subprocess.run(
        ["/bin/bash", "-c", slurm_metrics.startup_script()],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0
    log = calls.read_text().splitlines()
    assert log == [
        "systemctl cat nvidia-dcgm.service",
        "logger -t gpu-cluster-metrics nvidia-dcgm.service is not on this image: no DCGM metrics from this node",
    ]


def test_every_panel_charts_a_metric_the_receiver_sends_per_vm() -> None:
    for p in slurm_metrics.PANELS:
        tree = parse(p.promql(slurm_metrics.NODE_LABEL))
        (sel,) = _selectors(tree)
        assert sel[1] == p.metric and p.metric in BY_PROMQL, p.title
        unit, kind, attrs = RECEIVER_ENABLED[BY_PROMQL[p.metric]]
        assert set(sel[2]) <= set(attrs), p.title  # only labels the series has
        (agg,) = _aggregations(tree)
        assert agg[2] == ("instance_id",), p.title
        # rate() over the cumulative sums only, and every cumulative sum through rate().
        assert (agg[3][0] == "call") == (kind == "sum"), p.title
        # Units: a ratio is charted x100 as %, joules per second as W, bytes per second as By/s.
        if unit == "1" and kind == "gauge":
            assert tree[0] == "*" and tree[1] == ("number", 100.0) and p.monitoring_unit == "%"
        if unit == "J":
            assert p.monitoring_unit == "W"
        if unit == "By" and kind == "sum":
            assert p.monitoring_unit == "By/s"
        if unit == "Cel":
            assert p.monitoring_unit == "Cel"


def test_the_panels_cover_what_the_receiver_offers_of_the_issue() -> None:
    """Issue 46's list, as far as the receiver's enabled metrics reach (no XID: disabled there)."""
    names = {BY_PROMQL[p.metric] for p in slurm_metrics.PANELS}
    assert {
        "gpu.dcgm.utilization",
        "gpu.dcgm.pipe.utilization",
        "gpu.dcgm.memory.bytes_used",
        "gpu.dcgm.energy_consumption",
        "gpu.dcgm.temperature",
        "gpu.dcgm.ecc_errors",
        "gpu.dcgm.nvlink.io",
    } <= names
    assert not any("xid" in p.metric for p in slurm_metrics.PANELS)


def test_the_bundled_cluster_director_stack_has_exporter_store_and_dashboard(
    offline: Callable[..., OfflineRun],
) -> None:
    _, raw = read_stack_file("gcp-h200-slurm")
    run = offline(raw)
    cd = run.one(CD)
    [node_set] = cd.inputs["orchestrator"]["slurm"]["nodeSets"]
    assert node_set["computeInstance"]["startupScript"] == slurm_metrics.startup_script()
    # The store: the project's Cloud Monitoring, its API on.
    assert "monitoring.googleapis.com" in {s.inputs["service"] for s in run.of_type(SERVICE)}
    dash = run.one(DASHBOARD)
    assert dash.inputs["project"] == PROJECT
    body = json.loads(dash.inputs["dashboardJson"])
    assert body["displayName"] == f"{raw['name']}: GPUs per node"
    queries = [
        t["widget"]["xyChart"]["dataSets"][0]["timeSeriesQuery"]["prometheusQuery"]
        for t in body["mosaicLayout"]["tiles"]
    ]
    assert queries == [p.promql("instance_id") for p in slurm_metrics.PANELS]


def test_liveness_sees_the_exporter_in_the_node_sets_startup_script() -> None:
    from gpu_cluster.components import liveness as live
    from tests.components._liveness import bundled, mutate_plan

    planned = bundled("gcp-h200-slurm")
    [check] = planned.checks("node-image", "GPU metrics exporter")
    assert check.holds and "Ops Agent's DCGM receiver" in check.why and "startupScript" in check.why
    assert not planned.failed()

    def drop(inputs: dict[str, Any]) -> None:
        for n in inputs["orchestrator"]["slurm"]["nodeSets"]:
            n["computeInstance"].pop("startupScript")

    [cd] = planned.plan.of(CD)
    broken = live.evaluate(mutate_plan(planned.plan, CD, cd.name, drop), planned.job)
    [failed] = [c for c in broken.failed if "GPU metrics exporter" in c.check]
    assert "no boot script" in failed.why and failed.fix
