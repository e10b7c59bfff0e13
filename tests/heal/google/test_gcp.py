"""heal's GCP calls through Google's own client library (REST transport, anonymous credentials)
against recorded answers in the documented shapes:

- Compute Engine Instance (id, name, status, resourceStatus.physicalHost, reservationAffinity):
  cloud.google.com/compute/docs/reference/rest/v1/instances/get
- Operation (kind compute#operation, name, operationType, status PENDING | RUNNING | DONE,
  targetLink, error.errors[]): cloud.google.com/compute/docs/reference/rest/v1/zoneOperations/get
- instanceGroupManagers.recreateInstances (POST, body {"instances": [...]}, query requestId):
  cloud.google.com/compute/docs/reference/rest/v1/instanceGroupManagers/recreateInstances
- instances.reportHostAsFaulty (POST, body {disruptionSchedule, faultReasons[{behavior, description}]},
  query requestId): cloud.google.com/compute/docs/reference/rest/v1/instances/reportHostAsFaulty
- GKE NodePool (name, instanceGroupUrls[]):
  cloud.google.com/kubernetes-engine/docs/reference/rest/v1/projects.locations.clusters.nodePools
- errors: {"error": {"code", "message", "status"}} (cloud.google.com/apis/design/errors).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials

from gpu_cluster.heal.adapters import NodeState
from gpu_cluster.heal.gcp import (
    FAULT_LABEL,
    OPERATION_LABEL,
    POOL_LABEL,
    STATUS_LABEL,
    GceReportCloud,
    GkeMigCloud,
    GkeReportCloud,
    compute_clients,
    gce_behavior,
    gke_behavior,
)
from gpu_cluster.heal.engine import request_uuid
from tests.heal.recorded import Recorded

P, Z, CLUSTER = "heal-project", "europe-west1-b", "train"
VM = "gke-train-gpu-1a2b3c4d-x7k2"
COMPUTE = f"/compute/v1/projects/{P}/zones/{Z}"
T = 1_800_000_000.0


def error(code: int, status: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


@pytest.fixture
def server() -> Iterator[Recorded]:
    s = Recorded(lambda path: error(404, "NOT_FOUND", f"The resource '{path}' was not found"))
    yield s
    s.close()


def clients(server: Recorded) -> dict[str, Any]:
    return compute_clients(AnonymousCredentials(), endpoint=server.url)  # type: ignore[no-untyped-call]


def instance(name: str, vm_id: str, host: str = "", status: str = "RUNNING", reservation: str = "") -> dict[str, Any]:
    doc: dict[str, Any] = {
        "kind": "compute#instance",
        "id": vm_id,
        "name": name,
        "zone": f"https://www.googleapis.com/compute/v1/projects/{P}/zones/{Z}",
        "machineType": f"https://www.googleapis.com/compute/v1/projects/{P}/zones/{Z}/machineTypes/a3-ultragpu-8g",
        "status": status,
        "selfLink": f"https://www.googleapis.com/compute/v1/projects/{P}/zones/{Z}/instances/{name}",
    }
    if host:
        doc["resourceStatus"] = {"physicalHost": host}
    if reservation:
        doc["reservationAffinity"] = {
            "consumeReservationType": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": [reservation],
        }
    return doc


def operation(name: str, kind: str, status: str = "RUNNING", target: str = VM, err: str = "") -> dict[str, Any]:
    doc: dict[str, Any] = {
        "kind": "compute#operation",
        "id": "7777",
        "name": name,
        "zone": f"https://www.googleapis.com/compute/v1/projects/{P}/zones/{Z}",
        "operationType": kind,
        "targetLink": f"https://www.googleapis.com/compute/v1/projects/{P}/zones/{Z}/instances/{target}",
        "status": status,
        "progress": 100 if status == "DONE" else 0,
        "selfLink": f"https://www.googleapis.com/compute/v1/projects/{P}/zones/{Z}/operations/{name}",
    }
    if err:
        doc["error"] = {"errors": [{"code": "HOST_NOT_FAULTY", "message": err}]}
    return doc


def managed(name: str, vm_id: str, action: str = "NONE", status: str = "RUNNING") -> dict[str, Any]:
    """A ManagedInstance as listManagedInstances answers (compute_v1 ManagedInstance: currentAction,
    id, instance, instanceStatus)."""
    return {
        "instance": f"https://www.googleapis.com/compute/v1/projects/{P}/zones/{Z}/instances/{name}",
        "id": vm_id,
        "currentAction": action,
        "instanceStatus": status,
    }


def gke_node(labels: dict[str, str] | None = None) -> NodeState:
    return NodeState(
        node=VM,
        present=True,
        ready=True,
        instance=f"gce://{P}/{Z}/{VM}",
        labels={"cloud.google.com/gke-nodepool": "gpu", **(labels or {})},
    )


def test_gke_node_recreated_by_its_pools_group_with_a_request_id(server: Recorded) -> None:
    server.answer("GET", f"{COMPUTE}/instances/{VM}", instance(VM, "1111"))
    server.answer(
        "GET",
        f"/v1/projects/{P}/locations/{Z}/clusters/{CLUSTER}/nodePools/gpu",
        {
            "name": "gpu",
            "instanceGroupUrls": [
                f"https://www.googleapis.com/compute/v1/projects/{P}/zones/{Z}/instanceGroupManagers/gke-train-gpu-1a2b3c4d-grp"
            ],
            "status": "RUNNING",
        },
    )
    group = f"{COMPUTE}/instanceGroupManagers/gke-train-gpu-1a2b3c4d-grp"
    igm = f"{group}/recreateInstances"
    server.answer("POST", igm, operation("operation-recreate-1", "compute.instanceGroupManagers.recreateInstances"))
    server.answer(
        "GET", group, {"kind": "compute#instanceGroupManager", "name": "gke-train-gpu-1a2b3c4d-grp", "targetSize": 3}
    )
    server.answer("POST", f"{group}/listManagedInstances", {"managedInstances": [managed(VM, "1111")]})
    cloud = GkeMigCloud(clients(server), P, Z, CLUSTER)
    node = gke_node()
    inst = cloud.instance(node)
    assert inst.id == "1111" and inst.state == "RUNNING"
    assert cloud.prepare(node, inst) == {"group": "gke-train-gpu-1a2b3c4d-grp", "target_size": 3}
    assert not cloud.progress(node, "1111", "h-1-a1", {}).started
    out = cloud.replace(node, inst, "h-1-a1", "health.matmul: straggler")
    assert out.ok and out.extra == {"op": "operation-recreate-1", "group": "gke-train-gpu-1a2b3c4d-grp"}
    (post,) = [r for r in server.made("POST") if r["path"] == igm]
    assert post["body"] == {"instances": [f"zones/{Z}/instances/{VM}"]}
    assert post["query"]["requestId"] == request_uuid("h-1-a1")
    assert uuid.UUID(post["query"]["requestId"]).version == 5
    # the same token gives the same requestId: a rerun's call is the same request to Compute Engine
    assert request_uuid("h-1-a1") == request_uuid("h-1-a1") != request_uuid("h-1-a2")
    # the group recreating it: started, no replacement yet, even with the new VM up
    server.answer("GET", f"{COMPUTE}/operations/operation-recreate-1", operation("operation-recreate-1", "x", "DONE"))
    server.answer("GET", f"{COMPUTE}/instances/{VM}", instance(VM, "2222"))
    server.answer(
        "POST", f"{group}/listManagedInstances", {"managedInstances": [managed(VM, "2222", "RECREATING", "STAGING")]}
    )
    prog = cloud.progress(node, "1111", "h-1-a1", out.extra)
    assert prog.started and prog.new_instance == "" and "RECREATING" in prog.detail
    # recreated, as the group says: the VM keeps its name, gets a new id
    server.answer("POST", f"{group}/listManagedInstances", {"managedInstances": [managed(VM, "2222")]})
    prog = cloud.progress(node, "1111", "h-1-a1", out.extra)
    assert prog.started and prog.new_instance == "2222" and prog.node == VM
    # killed after the call, before the line: the group not yet acting, nothing journalled: not started
    server.answer("POST", f"{group}/listManagedInstances", {"managedInstances": [managed(VM, "1111")]})
    assert not cloud.progress(node, "1111", "h-1-a1", {}).started


def test_a_pool_group_error_is_one_line(server: Recorded) -> None:
    server.answer(
        "GET",
        f"/v1/projects/{P}/locations/{Z}/clusters/{CLUSTER}/nodePools/gpu",
        error(403, "PERMISSION_DENIED", "Required 'container.nodePools.get' permission"),
        status=403,
    )
    from gpu_cluster.heal.adapters import AdapterError

    with pytest.raises(AdapterError, match="nodePools.get gpu: HTTP 403"):
        GkeMigCloud(clients(server), P, Z, CLUSTER).group_of(gke_node())


class Labels:
    """The two calls GkeReportCloud makes of the Kubernetes side (heal's KubeScheduler has them;
    tests/heal/test_kubernetes.py drives those against the API server)."""

    def __init__(self) -> None:
        self.on: dict[str, str] = {}

    def labels(self, node: str) -> dict[str, str]:
        return dict(self.on)

    def set_labels(self, node: str, labels: dict[str, str | None]) -> None:
        for key, value in labels.items():
            if value is None:
                self.on.pop(key, None)
            else:
                self.on[key] = value


def test_gke_report_and_replace_follows_the_status_label(server: Recorded) -> None:
    server.answer("GET", f"{COMPUTE}/instances/{VM}", instance(VM, "1111", host="/a1/b2/c3", reservation="h200-block"))
    kube = Labels()
    cloud = GkeReportCloud(clients(server), P, Z, kube)
    node = gke_node()
    inst = cloud.instance(node)
    assert inst.id == "1111@/a1/b2/c3" and inst.window == "reservation h200-block"
    assert not cloud.progress(node, inst.id, "t", {}).started
    out = cloud.replace(node, inst, "t", "health.matmul: straggler, 0.33 under 0.5 x")
    assert out.ok and kube.on == {FAULT_LABEL: "PERFORMANCE"}
    assert cloud.progress(node, inst.id, "t", {}).started  # labelled, no status yet
    for status in ("PodsEvicted", "OperationRUNNING"):
        kube.on[STATUS_LABEL] = status
        assert cloud.progress(node, inst.id, "t", {}).new_instance == ""
    kube.on[STATUS_LABEL] = "OperationDone"
    server.answer("GET", f"{COMPUTE}/instances/{VM}", instance(VM, "1111", host="/a1/b9/c7", reservation="h200-block"))
    assert cloud.progress(node, inst.id, "t", {}).new_instance == "1111@/a1/b9/c7"
    # an error is a person's call (Google: re-apply the label for a transient one), never a loop (I10)
    kube.on[STATUS_LABEL] = "ERROR"
    kube.on[OPERATION_LABEL] = "operation-1700000000-abc"
    got = cloud.progress(node, inst.id, "t", {})
    assert got.started and not got.failed and not got.new_instance
    assert "report-and-replace-status=ERROR (operation operation-1700000000-abc)" in got.escalate
    assert f"kubectl get node {VM} -L {STATUS_LABEL},{OPERATION_LABEL}" in got.escalate


def test_gke_report_a_repair_of_days_is_escalated_and_an_earlier_status_is_not_progress(server: Recorded) -> None:
    """I10: GKE leaves report-and-replace-status on the node; an earlier incident's OperationDone is
    not this one's progress (the label patch clears it, and what it was is journalled by prepare);
    a repair still not done past the path's budget (report 10-12 min, then a host repair of 3-14
    days, Google) or a VM left TERMINATED is ESCALATED with what to watch."""
    vm = f"{COMPUTE}/instances/{VM}"
    server.answer("GET", vm, instance(VM, "1111", host="/a1/b2/c3", reservation="h200-block"))
    kube = Labels()
    kube.on.update({STATUS_LABEL: "OperationDone", OPERATION_LABEL: "operation-old"})
    now = [T]
    cloud = GkeReportCloud(clients(server), P, Z, kube, clock=lambda: now[0])
    node = gke_node()
    inst = cloud.instance(node)
    facts = {**cloud.prepare(node, inst), "asked_at": T}
    assert facts["gke_labels_before"] == {STATUS_LABEL: "OperationDone", OPERATION_LABEL: "operation-old"}
    first = cloud.progress(node, inst.id, "t", facts)
    assert not first.started and "is an earlier one's" in first.detail
    cloud.replace(node, inst, "t", "gate xid.run (gpu1): XID 48")
    assert kube.on == {FAULT_LABEL: "XID"}  # set, and the earlier status and operation cleared, in one patch
    assert cloud.progress(node, inst.id, "t", facts).started
    # GKE: reported, the host's repair goes on (the VM waits REPAIRING)
    kube.on = {STATUS_LABEL: "OperationDone", OPERATION_LABEL: "operation-new"}
    server.answer("GET", vm, instance(VM, "1111", host="/a1/b2/c3", status="REPAIRING", reservation="h200-block"))
    budget, _ = cloud.replace_estimate()
    now[0] = T + budget - 1
    waiting = cloud.progress(node, inst.id, "t", facts)
    assert waiting.started and not waiting.escalate and not waiting.new_instance
    now[0] = T + budget + 1
    late = cloud.progress(node, inst.id, "t", facts)
    assert "3-14 days" in late.escalate and "it stays out of service" in late.escalate
    assert f"gcloud compute instances describe {VM} --zone {Z}" in late.escalate
    now[0] = T + 60
    server.answer("GET", vm, instance(VM, "1111", host="/a1/b2/c3", status="TERMINATED", reservation="h200-block"))
    assert "left the VM TERMINATED" in cloud.progress(node, inst.id, "t", facts).escalate
    # back on a healthy host: done; then settle removes all three labels and reads them back
    server.answer("GET", vm, instance(VM, "1111", host="/a1/b9/c7", reservation="h200-block"))
    assert cloud.progress(node, inst.id, "t", facts).new_instance == "1111@/a1/b9/c7"
    kube.on.update({FAULT_LABEL: "XID", POOL_LABEL: "gpu"})
    assert "removed (read back)" in cloud.settle(node, facts)
    assert kube.on == {POOL_LABEL: "gpu"}


def test_cluster_director_reports_the_host_with_its_behaviour_and_request_id(server: Recorded) -> None:
    node = NodeState(node="train-a3u-0", present=True, ready=True)
    path = f"{COMPUTE}/instances/train-a3u-0"
    server.answer("GET", path, instance("train-a3u-0", "3333", host="/x/y/z"))
    server.answer(
        "POST",
        f"{path}/reportHostAsFaulty",
        operation("operation-report-1", "compute.instances.reportHostAsFaulty", target="train-a3u-0"),
    )
    cloud = GceReportCloud(clients(server), P, Z)
    inst = cloud.instance(node)
    assert not cloud.progress(node, inst.id, "h-2-a1", {}).started
    out = cloud.replace(node, inst, "h-2-a1", "gate xid.run (gpu3): XID 79 fell off the bus")
    assert out.ok and out.extra["op"] == "operation-report-1"
    (post,) = server.made("POST")
    assert post["body"] == {
        "disruptionSchedule": "IMMEDIATE",
        "faultReasons": [
            {
                "behavior": "UNRECOVERABLE_GPU_ERROR",
                "description": "gpu-cluster heal: gate xid.run (gpu3): XID 79 fell off the bus",
            }
        ],
    }
    assert post["query"]["requestId"] == request_uuid("h-2-a1")
    op = f"{COMPUTE}/operations/operation-report-1"
    server.answer("GET", op, operation("operation-report-1", "compute.instances.reportHostAsFaulty", "RUNNING"))
    assert cloud.progress(node, inst.id, "h-2-a1", out.extra).new_instance == ""
    server.answer("GET", op, operation("operation-report-1", "compute.instances.reportHostAsFaulty", "DONE"))
    server.answer("GET", path, instance("train-a3u-0", "3333", host="/x/q/r"))
    assert cloud.progress(node, inst.id, "h-2-a1", out.extra).new_instance == "3333@/x/q/r"
    server.answer("GET", op, operation("operation-report-1", "x", "DONE", err="The host is not faulty per diagnostics"))
    assert "not faulty" in cloud.progress(node, inst.id, "h-2-a1", out.extra).failed


def test_the_behaviour_follows_the_finding() -> None:
    assert gke_behavior("gate xid.run (gpu1): XID 48") == "XID"
    assert gke_behavior("pairwise: pair with known-good n1: 12.00") == "PERFORMANCE"
    assert gke_behavior("main: rank 3 lacks its fabric: no RDMA device") == "unspecified"
    assert gce_behavior("gate ecc.volatile (gpu2): 4 uncorrected") == "CHIP_ERROR"
    assert gce_behavior("7 GPUs answered, the catalog says 8") == "CHIP_ERROR"
    assert gce_behavior("health.matmul: straggler") == "PERFORMANCE"
    assert gce_behavior("main: rank 3 failed: device setup: x") == "BEHAVIOR_UNSPECIFIED"
