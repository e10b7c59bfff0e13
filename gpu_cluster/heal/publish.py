"""Heal's incidents as metrics (issue 46 item 3): after an ``--apply`` run, every incident of the
journal as ``gpu_cluster_heal_incident{cluster,node,incident,state}``
(gpu_cluster.workloads.validate.metrics_export.render_incidents), where the stack's store gets it,
so the Grafana file's ``heal incidents`` annotation (components/dashboard.py) shows them:

* EKS, AKS and GKE: the stack's Pushgateway (components/k8s/metrics.py), which heal, running outside the
  cluster, reaches through the API server's service proxy,
  ``/api/v1/namespaces/<ns>/services/<service>:<port name>/proxy/<path>`` (kubernetes.io/docs/tasks/
  access-application-cluster/access-cluster-services, "Manually constructing apiserver proxy URLs",
  read 2026-12-07), with the kubeconfig heal already acts with (it needs ``services/proxy`` in
  kube-system; the API reference's ``connect PUT /api/v1/namespaces/{namespace}/services/{name}/
  proxy/{path}``). The group is ``job=gpu-cluster-heal, cluster=<name>``: each run PUTs the state of
  every incident its journal holds, replacing the last one (prometheus/pushgateway README.md lines
  366-370 at v1.11.3).
* Slurm stacks: the file ``gpu-cluster-heal.prom`` in the node exporter's textfile directory
  (components/contract.py METRICS_TEXTFILE_DIR) when heal runs on a node that has it (a compute
  node of PCS or Azure Slurm), which the node's collector already sends to the store; else beside the
  journal, for a person to copy there.
* The rehearsal (``--local``) and Cluster Director: beside the journal.

Publishing never changes what heal did or its exit status: a failure is one line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_cluster.components.contract import (
    METRICS_PUSH_NAMESPACE,
    METRICS_PUSH_SERVICE,
    METRICS_TEXTFILE_DIR,
    PUSHGATEWAY_STACKS,
)
from gpu_cluster.heal.journal import Journal
from gpu_cluster.heal.states import State
from gpu_cluster.workloads.validate import metrics_export

# The chart's Service port name (prometheus-community/helm-charts charts/prometheus-pushgateway/
# values.yaml line 33 at 4fa56e1, ``service.portName: http``): the proxy path names the port.
SERVICE_PORT_NAME = "http"
PROXY = f"/api/v1/namespaces/{METRICS_PUSH_NAMESPACE}/services/{METRICS_PUSH_SERVICE}:{SERVICE_PORT_NAME}/proxy"


def incidents_text(journal: Journal, cluster: str) -> str:
    """Every incident of the journal at its current state."""
    rows = [(cluster, i.node, i.incident, i.state.value) for i in journal.incidents()]
    return metrics_export.render_incidents(rows, [s.value for s in State])


@dataclass(frozen=True, slots=True)
class KubePush:
    """The Pushgateway through the API server's service proxy, with heal's kubeconfig."""

    kubeconfig: str
    timeout_s: float = 30.0

    def __call__(self, text: str, cluster: str, run_dir: Path) -> str:
        from gpu_cluster.workloads.validate.kube import KubeApi

        api = KubeApi(self.kubeconfig, read_timeout_s=self.timeout_s)
        path = PROXY + metrics_export.push_path(metrics_export.HEAL_JOB, {"cluster": cluster})
        resp = api._client.call_api(  # noqa: SLF001 - the client's own transport, auth and TLS
            path,
            "PUT",
            header_params={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
            body=text,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=False,
            _request_timeout=(self.timeout_s, self.timeout_s),
        )
        status = resp[1] if isinstance(resp, tuple) else getattr(resp, "status", 0)
        return f"pushed to {METRICS_PUSH_SERVICE}.{METRICS_PUSH_NAMESPACE} through {api.server} (HTTP {status})"


@dataclass(frozen=True, slots=True)
class TextFile:
    """The node exporter's textfile directory where this host has one, else beside the journal."""

    directory: Path = Path(METRICS_TEXTFILE_DIR)

    def __call__(self, text: str, cluster: str, run_dir: Path) -> str:
        if self.directory.is_dir():
            try:
                path = metrics_export.write_textfile(text, self.directory, metrics_export.HEAL_FILE)
                return f"written to {path}, which this node's exporter serves"
            except OSError as exc:
                beside = metrics_export.write_textfile(text, run_dir, metrics_export.HEAL_FILE)
                return f"written to {beside} ({self.directory}: {exc.strerror or exc})"
        path = metrics_export.write_textfile(text, run_dir, metrics_export.HEAL_FILE)
        return (
            f"written to {path} (this host has no {self.directory}: copy it into a node exporter's textfile directory)"
        )


def beside_journal(text: str, cluster: str, run_dir: Path) -> str:
    """The rehearsal and Cluster Director: no store this run reaches."""
    return f"written to {metrics_export.write_textfile(text, run_dir, metrics_export.HEAL_FILE)} (no store is reached from here)"


Publisher = Callable[[str, str, Path], str]


def for_outputs(outs: Any) -> Publisher:
    """Where a stack's incidents go (module docstring)."""
    if outs.orchestrator in PUSHGATEWAY_STACKS and outs.access.kubeconfig:
        return KubePush(outs.access.kubeconfig)
    if outs.scheduler.kind == "slurm":
        return TextFile()
    return beside_journal


def publish(publisher: Publisher | None, journal: Journal, cluster: str, run_dir: Path) -> str:
    """One line saying where the incidents went, or why not; never raises."""
    publisher = publisher or beside_journal
    try:
        if not journal.incidents():
            return "heal: no incidents to publish"
        return f"heal: incidents published: {publisher(incidents_text(journal, cluster), cluster, run_dir)}"
    except Exception as exc:  # noqa: BLE001 - publishing must never change heal's outcome
        return f"heal: incidents not published ({type(exc).__name__}: {str(exc)[:300]})"
