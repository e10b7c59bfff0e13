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
    # The DCGM charts, then the validation's two, held by the same cluster label.
    assert len(queries) == len(PANELS) + 2
    assert all(f'{{cluster="{name}"}}' in q for q in queries[len(PANELS) :])
    for q, p in zip(queries[: len(PANELS)], PANELS, strict=True):
        # This cluster's series only (managed collection's cluster label), per node (instance).
        assert f'{p.metric}{{cluster="{name}"}}' in q and "by (instance)" in q


CHART = "kubernetes:helm.sh/v4:Chart"
POD_MONITORING = "kubernetes:monitoring.googleapis.com/v1:PodMonitoring"


def test_the_pushgateway_is_on_the_system_pool_and_managed_collection_scrapes_it() -> None:
    """The validation's figures on GKE: the Pushgateway chart on the system pool and a PodMonitoring of
    its pods, whose fields the liveness model holds to prometheus-engine's types."""
    from gpu_cluster.components.contract import METRICS_PUSH_NAMESPACE, PUSHGATEWAY_STACKS
    from gpu_cluster.components.k8s.metrics import PUSHGATEWAY_JOB
    from tests.components._liveness import bundled

    assert "gke" in PUSHGATEWAY_STACKS
    p = bundled("gcp-h100-gke")
    (chart,) = [c for c in p.run.of_type(CHART) if c.inputs["chart"].endswith("/prometheus-pushgateway")]
    assert chart.inputs["namespace"] == METRICS_PUSH_NAMESPACE
    assert chart.inputs["values"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "system"}
    (check,) = p.checks("scheduling", "chart prometheus-pushgateway 3.8.0: gpu-cluster-pushgateway")
    assert check.holds and "pool system" in check.why
    (mon,) = p.run.of_type(POD_MONITORING)
    meta = mon.inputs["metadata"]
    assert (meta["name"], meta["namespace"]) == (PUSHGATEWAY_JOB, METRICS_PUSH_NAMESPACE)
    spec = mon.inputs["spec"]
    # The chart's pod label and port name (components/k8s/metrics.py), and no pod metadata label: a
    # ``node`` target label would displace the pushed one.
    assert spec["selector"] == {"matchLabels": {"app.kubernetes.io/name": "prometheus-pushgateway"}}
    assert spec["endpoints"] == [{"port": "metrics", "interval": "30s"}]
    assert spec["targetLabels"] == {"metadata": []}
    (adm,) = p.checks("admission", f"PodMonitoring {PUSHGATEWAY_JOB}")
    assert adm.holds and "2ffde4e" in adm.check


def test_a_pod_monitoring_field_the_type_lacks_fails_admission() -> None:
    """The model is prometheus-engine's PodMonitoringSpec: a misspelt field, an endpoint without its
    interval and a metadata label outside the enum each fail, naming the line."""
    from gpu_cluster.components.liveness import apis

    spec = {
        "selector": {},
        "endpoints": [{"port": "metrics", "honorLabels": True}],
        "targetLabels": {"metadata": ["namespace"]},
    }
    problems = {p.path: p for p in apis.check_fields(apis.POD_MONITORING.spec, spec)}
    assert set(problems) == {
        "spec.endpoints[0].honorLabels",
        "spec.endpoints[0].interval",
        "spec.targetLabels.metadata[0]",
    }
    assert problems["spec.endpoints[0].interval"].line == 238
    assert apis.APIS[("monitoring.googleapis.com/v1", "PodMonitoring")] is apis.POD_MONITORING
