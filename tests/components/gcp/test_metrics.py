"""GKE's managed DCGM metrics into Managed Service for Prometheus, on every bundled GKE stack."""

from __future__ import annotations

from typing import Callable

import pytest

from gpu_cluster.components.engine import OfflineRun
from gpu_cluster.components.spec import read_stack_file
from tests.components.gcp.conftest import PROJECT

GKE = "gcp:container/cluster:Cluster"
POOL = "gcp:container/nodePool:NodePool"
SERVICE = "gcp:projects/service:Service"


@pytest.mark.parametrize("stack", ["gcp-h100-gke", "gcp-h200-gke", "gcp-b200-gke"])
def test_bundled_gke_stacks_send_dcgm_metrics_to_managed_prometheus(
    stack: str, offline: Callable[..., OfflineRun]
) -> None:
    _, raw = read_stack_file(stack)
    run = offline(raw)
    mc = run.one(GKE).inputs["monitoringConfig"]
    # cluster-toolkit gke-cluster main.tf at d64aec82: its default components plus DCGM, and
    # managed collection on.
    assert mc == {
        "enableComponents": [
            "SYSTEM_COMPONENTS",
            "POD",
            "DAEMONSET",
            "DEPLOYMENT",
            "STATEFULSET",
            "STORAGE",
            "HPA",
            "CADVISOR",
            "KUBELET",
            "DCGM",
        ],
        "managedPrometheus": {"enabled": True},
    }
    # The DCGM package needs GKE's managed GPU driver on every GPU pool (GKE's "Collect and view
    # DCGM metrics"): a pool whose driver is the user's own would export nothing.
    gpu_pools = [p for p in run.of_type(POOL) if p.inputs["nodeConfig"].get("guestAccelerators")]
    assert gpu_pools, "no GPU pool rendered"
    for p in gpu_pools:
        for acc in p.inputs["nodeConfig"]["guestAccelerators"]:
            assert acc["gpuDriverInstallationConfig"]["gpuDriverVersion"] in ("LATEST", "DEFAULT")
    # Managed Service for Prometheus stores into Cloud Monitoring: the stack turns its API on.
    assert "monitoring.googleapis.com" in {s.inputs["service"] for s in run.of_type(SERVICE)}


DASHBOARD = "gcp:monitoring/dashboard:Dashboard"


@pytest.mark.parametrize("stack", ["gcp-h100-gke", "gcp-h200-gke", "gcp-b200-gke"])
def test_bundled_gke_stacks_create_the_gpu_dashboard(stack: str, offline: Callable[..., OfflineRun]) -> None:
    import json

    from gpu_cluster.components.dashboard import PANELS

    _, raw = read_stack_file(stack)
    run = offline(raw)
    dash = run.one(DASHBOARD)
    assert dash.inputs["project"] == PROJECT  # the stack's project, as every other resource
    body = json.loads(dash.inputs["dashboardJson"])
    name = run.one(GKE).inputs["name"]
    assert body["displayName"] == f"{name}: GPUs per node"
    queries = [
        t["widget"]["xyChart"]["dataSets"][0]["timeSeriesQuery"]["prometheusQuery"]
        for t in body["mosaicLayout"]["tiles"]
    ]
    assert len(queries) == len(PANELS)
    for q, p in zip(queries, PANELS, strict=True):
        # This cluster's series only (managed collection's cluster label), per node (instance).
        assert f'{p.metric}{{cluster="{name}"}}' in q and "by (instance)" in q
