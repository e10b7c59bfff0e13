"""Heal's incidents published where the stack's store gets them (gpu_cluster/heal/publish.py): on
EKS and AKS through the Kubernetes API server's service proxy (tests/kubeapi.py, forwarding to a
real Pushgateway on 127.0.0.1) into the Pushgateway a real Prometheus scrapes with the stacks' job,
where the dashboard's annotation query finds them; on Slurm into the textfile directory when there
is one, else beside the journal; a failure is one line and never raises."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpu_cluster.components import dashboard
from gpu_cluster.components.contract import METRICS_PUSH_NAMESPACE, METRICS_PUSH_SERVICE
from gpu_cluster.components.k8s.metrics import pushgateway_scrape_job
from gpu_cluster.heal import publish
from gpu_cluster.heal.journal import Entry, Journal
from gpu_cluster.heal.states import State
from gpu_cluster.workloads.validate import metrics_export
from tests.kubeapi import KubeApiServer
from tests.prom_stack import query, start_prometheus, start_pushgateway, stop
from tests.workloads.test_metrics_push import needs

CLUSTER = "h100-eks"


def _journal(run_dir: Path) -> Journal:
    """A journal of two incidents, written and reopened (as a later run reads it)."""
    with Journal(run_dir) as j:
        for state in (State.SUSPECT, State.CONFIRMED, State.QUARANTINED):
            j.append(Entry(at=1.0, cluster=CLUSTER, slot="gpu-2", node="gpu-2", incident="inc-1", state=state))
        j.append(Entry(at=2.0, cluster=CLUSTER, slot="gpu-5", node="gpu-5", incident="inc-2", state=State.SUSPECT))
    return Journal(run_dir)


def _outputs(kubeconfig: str, orchestrator: str = "eks") -> SimpleNamespace:
    return SimpleNamespace(
        orchestrator=orchestrator,
        access=SimpleNamespace(kubeconfig=kubeconfig),
        scheduler=SimpleNamespace(kind="kubernetes"),
    )


@needs
def test_incidents_reach_the_pushgateway_through_the_api_server_proxy(tmp_path: Path) -> None:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        pushgw = start_pushgateway(tmp_path, procs)
        prom = start_prometheus(tmp_path, procs, pushgateway_scrape_job(), pushgw)
        with KubeApiServer(token="heal-token") as api, _journal(tmp_path) as j:
            services = api.store.resource("services")
            api.store.create(services, METRICS_PUSH_NAMESPACE, {"metadata": {"name": METRICS_PUSH_SERVICE}, "spec": {}})
            api.proxy_to(METRICS_PUSH_NAMESPACE, METRICS_PUSH_SERVICE, publish.SERVICE_PORT_NAME, pushgw)
            publisher = publish.for_outputs(_outputs(api.kubeconfig()))
            line = publish.publish(publisher, j, CLUSTER, tmp_path)
            assert line.startswith("heal: incidents published: pushed to gpu-cluster-pushgateway.kube-system"), line
            # Heal's own credentials, on the proxy path of the stack's service.
            (put,) = [(m, p) for m, p, _ in api.requests if m == "PUT"]
            assert put[1].startswith(publish.PROXY + "/metrics/job@base64/")
        (ann,) = dashboard.grafana()["annotations"]["list"]
        got = query(prom, ann["expr"])
        assert sorted((r["metric"]["node"], r["metric"]["incident"], r["metric"]["state"]) for r in got) == [
            ("gpu-2", "inc-1", "QUARANTINED"),
            ("gpu-5", "inc-2", "SUSPECT"),
        ]
        assert {r["metric"]["cluster"] for r in got} == {CLUSTER}
        assert {r["metric"]["job"] for r in got} == {metrics_export.HEAL_JOB}
    finally:
        stop(procs)


def test_a_service_without_endpoints_is_one_line_and_no_raise(tmp_path: Path) -> None:
    with KubeApiServer() as api, _journal(tmp_path) as j:
        api.store.create(
            api.store.resource("services"), METRICS_PUSH_NAMESPACE, {"metadata": {"name": METRICS_PUSH_SERVICE}}
        )
        line = publish.publish(publish.for_outputs(_outputs(api.kubeconfig())), j, CLUSTER, tmp_path)
        assert line.startswith("heal: incidents not published (") and "503" in line, line
        # No such Service (a stack built before the Pushgateway): the same, with the server's 404.
        api.store.delete(api.store.resource("services"), METRICS_PUSH_NAMESPACE, METRICS_PUSH_SERVICE)
        line = publish.publish(publish.for_outputs(_outputs(api.kubeconfig())), j, CLUSTER, tmp_path)
        assert line.startswith("heal: incidents not published (") and "404" in line, line


def test_slurm_writes_the_textfile_directory_or_beside_the_journal(tmp_path: Path) -> None:
    textfile = tmp_path / "node-exporter"
    textfile.mkdir()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with _journal(run_dir) as j:
        line = publish.publish(publish.TextFile(textfile), j, CLUSTER, run_dir)
        assert line.endswith("which this node's exporter serves") and (textfile / metrics_export.HEAL_FILE).is_file()
        text = (textfile / metrics_export.HEAL_FILE).read_text()
        assert (
            f'{metrics_export.HEAL_INCIDENT}{{cluster="{CLUSTER}",node="gpu-2",incident="inc-1",state="QUARANTINED"}} 1'
            in text
        )
        line = publish.publish(publish.TextFile(tmp_path / "absent"), j, CLUSTER, run_dir)
        assert "has no" in line and (run_dir / metrics_export.HEAL_FILE).read_text() == text
    slurm = SimpleNamespace(
        orchestrator="slurm", access=SimpleNamespace(kubeconfig=None), scheduler=SimpleNamespace(kind="slurm")
    )
    assert isinstance(publish.for_outputs(slurm), publish.TextFile)
    # GKE deploys the Pushgateway too (components/gcp/metrics.py): heal pushes there like EKS and AKS.
    assert publish.for_outputs(_outputs("x", "gke")) == publish.KubePush("x")
    # A stack whose outputs give heal no kubeconfig (the private endpoint's) keeps them beside the journal.
    assert publish.for_outputs(_outputs("", "gke")) is publish.beside_journal


def test_a_publisher_that_fails_never_raises(tmp_path: Path) -> None:
    def broken(text: str, cluster: str, run_dir: Path) -> str:
        raise RuntimeError("store down")

    with _journal(tmp_path) as j:
        assert (
            publish.publish(broken, j, CLUSTER, tmp_path) == "heal: incidents not published (RuntimeError: store down)"
        )


@pytest.mark.parametrize("where", ["beside"])
def test_no_incidents_publishes_nothing(tmp_path: Path, where: str) -> None:
    with Journal(tmp_path) as j:
        assert publish.publish(None, j, CLUSTER, tmp_path) == "heal: no incidents to publish"
    assert not (tmp_path / metrics_export.HEAL_FILE).exists()
