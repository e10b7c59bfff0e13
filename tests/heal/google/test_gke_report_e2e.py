"""I10 end to end: a GKE A3/A4 node in a reservation healed through Google's report-and-replace
label, with every seam real but the cluster: heal's KubeScheduler against the test API server
(tests/kubeapi.py) and Google's compute client against recorded answers in the Instance shape
(tests/heal/google/test_gcp.py). The test plays GKE as "Report faulty hosts through GKE"
(cloud.google.com/ai-hypercomputer/docs/manage/manage-gke-clusters) describes it: once the node
carries cloud.google.com/fault-behavior it reports the host, writes report-and-replace-status and
-operation, moves the VM to a healthy host and removes the fault label; or, for the long repair,
stays at OperationRUNNING. The check passes the node only on a host it was not bad on.

Killed between the label and its journal line, the rerun labels nothing again; at the end the
report's labels are gone; a second incident on the same node (even with an earlier status left on
it) is reported anew; a repair past its budget is ESCALATED, not relabelled."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.heal.adapters import CheckResult
from gpu_cluster.heal.engine import Engine
from gpu_cluster.heal.evidence import read_report
from gpu_cluster.heal.gcp import FAULT_LABEL, OPERATION_LABEL, STATUS_LABEL, GkeReportCloud
from gpu_cluster.heal.journal import JOURNAL, Journal, read
from gpu_cluster.heal.kubernetes import TAINT_KEY, KubeScheduler
from gpu_cluster.heal.policy import Limits
from gpu_cluster.heal.states import State
from tests.heal.google.test_gcp import COMPUTE, P, VM, Z, clients, error, instance
from tests.heal.recorded import Recorded
from tests.kubeapi import KubeApiServer, Store

T = 1_800_000_000.0
PEERS = ("gke-train-gpu-1a2b3c4d-p001", "gke-train-gpu-1a2b3c4d-p002")
XID = "gate xid.run (gpu1): XID 48 double-bit ECC"


class Killed(BaseException):
    """Stands for SIGKILL inside the run: nothing after it writes the journal."""


class LabelsThenDies(GkeReportCloud):
    def replace(self, *a: Any, **k: Any) -> Any:
        super().replace(*a, **k)
        raise Killed


class Gke:
    """GKE's part: on a fresh fault label, report the host (counted), then either finish (the VM on
    a new host, status OperationDone, the fault label removed) or keep repairing."""

    def __init__(self, server: KubeApiServer, compute: Recorded, finish: bool = True) -> None:
        self.server, self.compute, self.finish = server, compute, finish
        self.reports = 0
        self.host = "/a1/b0/c0"
        server.store.on("nodes", self.on_node, "MODIFIED")

    def vm(self, status: str = "RUNNING") -> None:
        self.compute.answer(
            "GET", f"{COMPUTE}/instances/{VM}", instance(VM, "1111", host=self.host, status=status, reservation="r1")
        )

    def on_node(self, store: Store, _type: str, obj: dict[str, Any]) -> None:
        labels = obj["metadata"].get("labels") or {}
        if FAULT_LABEL not in labels or STATUS_LABEL in labels:
            return
        self.reports += 1
        labels[OPERATION_LABEL] = f"operation-{self.reports}"
        if self.finish:
            labels[STATUS_LABEL] = "OperationDone"
            del labels[FAULT_LABEL]
            self.host = f"/a1/b{self.reports}/c9"
            self.vm()
        else:
            labels[STATUS_LABEL] = "OperationRUNNING"
            self.vm("REPAIRING")
        store.put(store.resource("nodes"), "", obj)


class HostChecker:
    """Fails the node on the hosts in ``bad`` (its own GPU finding), passes it elsewhere."""

    def __init__(self, gke: Gke) -> None:
        self.gke = gke
        self.bad = {gke.host}
        self.calls: list[tuple[str, str, str]] = []

    def estimate(self) -> tuple[float, str]:
        return 600.0, "test"

    def check(self, node: str, peer: str, incident: str, purpose: str) -> CheckResult:
        self.calls.append((node, peer, purpose))
        bad = node == VM and self.gke.host in self.bad
        return CheckResult(ran=True, passed=not bad, own=bad, detail=f"{node} on {self.gke.host}")


def k8s_node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "cloud.google.com/gke-nodepool": "gpu"}},
        "spec": {"providerID": f"gce://{P}/{Z}/{name}"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def report(path: Path, why: str) -> Path:
    nodes = [{"node": VM, "verdict": "FAIL", "reasons": [why]}]
    nodes += [{"node": p, "verdict": "PASS", "reasons": []} for p in PEERS]
    doc = {"verdict": "FAIL", "local": False, "instance_type": "a3-ultragpu-8g", "nodes": nodes, "measurements": []}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


@pytest.fixture
def world() -> Iterator[tuple[KubeApiServer, Recorded]]:
    compute = Recorded(lambda path: error(404, "NOT_FOUND", f"The resource '{path}' was not found"))
    with KubeApiServer() as server:
        for name in (VM, *PEERS):
            server.store.create(server.store.resource("nodes"), "", k8s_node(name))
        yield server, compute
    compute.close()


def run(
    run_dir: Path,
    server: KubeApiServer,
    compute: Recorded,
    checker: HostChecker,
    rep: Path,
    clock: list[float],
    cloud_type: type[GkeReportCloud] = GkeReportCloud,
) -> int:
    def tick(_s: float) -> None:
        clock[0] += 300.0

    kube = KubeScheduler(server.kubeconfig())
    with Journal(run_dir, clock=lambda: clock[0]) as j:
        engine = Engine(
            cluster="train",
            journal=j,
            scheduler=kube,
            cloud=cloud_type(clients(compute), P, Z, kube, clock=lambda: clock[0]),
            checker=checker,
            limits=Limits(apply=True),
            say=lambda line: None,
            sleep=tick,
            poll_s=0.0,
        )
        return engine.run(read_report(rep)).code


def node_doc(server: KubeApiServer) -> dict[str, Any]:
    return server.store.get(server.store.resource("nodes"), "", VM)


def report_labels(server: KubeApiServer) -> dict[str, str]:
    labels = node_doc(server)["metadata"].get("labels") or {}
    return {k: v for k, v in labels.items() if k in (FAULT_LABEL, STATUS_LABEL, OPERATION_LABEL)}


def test_killed_between_the_label_and_its_line_the_rerun_labels_once_and_the_labels_go(
    tmp_path: Path, world: tuple[KubeApiServer, Recorded]
) -> None:
    server, compute = world
    gke = Gke(server, compute)
    gke.vm()
    checker = HostChecker(gke)
    clock = [T]
    first = report(tmp_path / "report-1.json", XID)
    with pytest.raises(Killed):
        run(tmp_path, server, compute, checker, first, clock, LabelsThenDies)
    entries, _ = read(tmp_path / JOURNAL)
    assert entries[-1].state is State.REPLACING and entries[-1].event == "intent"  # the label's line never came
    assert gke.reports == 1

    assert run(tmp_path, server, compute, checker, first, clock) == 0
    assert gke.reports == 1  # the rerun read the status this call caused and labelled nothing again
    entries, notes = read(tmp_path / JOURNAL)
    assert not notes and entries[-1].state is State.HEALTHY
    assert "already under way on re-read" in next(e.detail for e in entries if e.event == "done")
    assert "report-and-replace-operation removed (read back)" in entries[-1].detail
    assert report_labels(server) == {}
    doc = node_doc(server)
    assert "unschedulable" not in doc["spec"] and not any(
        t["key"] == TAINT_KEY for t in doc["spec"].get("taints") or []
    )

    # a second incident on the same node, later, with an earlier status left on it (a heal of an
    # older version, or a person's own report): reported anew, not read as already done
    node = node_doc(server)
    node["metadata"]["labels"].update({STATUS_LABEL: "OperationDone", OPERATION_LABEL: "operation-old"})
    server.store.put(server.store.resource("nodes"), "", node)
    checker.bad.add(gke.host)
    clock[0] += 86_400.0
    assert run(tmp_path, server, compute, checker, report(tmp_path / "report-2.json", XID + " again"), clock) == 0
    assert gke.reports == 2
    entries, _ = read(tmp_path / JOURNAL)
    second = [e for e in entries if e.incident == entries[-1].incident]
    assert len({e.incident for e in entries}) == 2 and second[-1].state is State.HEALTHY
    done = next(e for e in second if e.state is State.REPLACING and e.event == "done")
    assert done.detail == f"labelled {FAULT_LABEL}=XID"
    intent = next(e for e in second if e.state is State.REPLACING and e.event == "intent")
    assert intent.extra["gke_labels_before"] == {STATUS_LABEL: "OperationDone", OPERATION_LABEL: "operation-old"}
    assert report_labels(server) == {}


def test_a_repair_of_days_ends_escalated_not_relabelled(tmp_path: Path, world: tuple[KubeApiServer, Recorded]) -> None:
    server, compute = world
    gke = Gke(server, compute, finish=False)
    gke.vm()
    checker = HostChecker(gke)
    clock = [T]
    rep = report(tmp_path / "report.json", XID)
    # the wait for the new instance ends at --join-timeout (30 min): rerun to keep waiting
    assert run(tmp_path, server, compute, checker, rep, clock) == 2
    entries, _ = read(tmp_path / JOURNAL)
    assert entries[-1].state is State.RETRY and "rerun to keep waiting" in entries[-1].detail
    # the rerun, past the path's budget (report 12 min + the 30 min bound): ESCALATED, with what to watch
    clock[0] = T + 3 * 3600
    assert run(tmp_path, server, compute, checker, rep, clock) == 2
    entries, _ = read(tmp_path / JOURNAL)
    last = entries[-1]
    assert last.state is State.ESCALATED
    assert "3-14 days" in last.detail and f"kubectl get node {VM} -L {STATUS_LABEL},{OPERATION_LABEL}" in last.detail
    assert gke.reports == 1 and sum(1 for e in entries if e.state is State.REPLACING and e.event == "intent") == 1
    # it stays out of service under heal's mark, and GKE's labels stay for the person to watch
    doc = node_doc(server)
    assert doc["spec"]["unschedulable"] is True
    assert report_labels(server) == {
        FAULT_LABEL: "XID",
        STATUS_LABEL: "OperationRUNNING",
        OPERATION_LABEL: "operation-1",
    }
    # a third run does nothing more: the incident ended
    assert run(tmp_path, server, compute, checker, rep, clock) == 0
    assert gke.reports == 1
