"""GCP: the calls that replace a GKE node or a Cluster Director (Slurm) node.

GKE, A3/A4 nodes in a reservation: report-and-replace through the node label
``cloud.google.com/fault-behavior`` (its value says what was seen), after which GKE evicts the pods,
reports the host as faulty and moves the VM to a healthy host of the reservation, writing its
progress in the label ``cloud.google.com/report-and-replace-status`` (PodsEvicted, then
OperationRUNNING, then OperationDone or an error); retrying means labelling again ("Report faulty
hosts through GKE", cloud.google.com/ai-hypercomputer/docs/manage/manage-gke-clusters, read through
shared/reference/SELFHEAL.md G2). The node keeps its name and its VM; what changes is the host,
``resourceStatus.physicalHost`` (Compute Engine Instance resource), which is the identity heal
compares.

GKE, other nodes: the node pool's managed instance group recreates the VM under the same name
(Compute Engine ``instanceGroupManagers.recreateInstances``, body ``{"instances": [URL]}``); the
group is found from the node pool (GKE ``projects.locations.clusters.nodePools.get``,
``NodePool.instanceGroupUrls``) and the pool from the node's label ``cloud.google.com/gke-nodepool``.
The VM's ``id`` changes with a recreate.

Cluster Director (Slurm on GCP), A4X Max, A4X, A4 and A3 Ultra in a reservation:
``instances.reportHostAsFaulty`` with ``disruptionSchedule: IMMEDIATE`` and ``faultReasons[].behavior``
(the google-cloud-compute 1.48.0 types: BEHAVIOR_UNSPECIFIED, CHIP_ERROR, PERFORMANCE,
SILENT_DATA_CORRUPTION, UNRECOVERABLE_GPU_ERROR; "Report faulty host",
cloud.google.com/ai-hypercomputer/docs/manage/report-faulty-host; duplicates are refused and the
calls are rate limited, SELFHEAL.md G3). Other machine types: Slurm powers the node down, which
makes slurm-gcp delete the VM, and up, which recreates it ("Manage static nodes",
cloud.google.com/cluster-toolkit/docs/slurm/manage-static-nodes, SELFHEAL.md S1; slurm-gcp's
slurmsync resumes a powered-down static node, S2); a Slurm node is named as its VM.

Compute Engine calls carry ``requestId``, "so that if you must retry your request, the server will
know to ignore the request if it has already been completed" (the compute_v1 request types): the
incident's token, as a UUID, is that id.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from gpu_cluster.heal.adapters import AdapterError, DocumentedPath, Instance, MissingSdk, NodeState, Outcome, Progress
from gpu_cluster.heal.engine import request_uuid
from gpu_cluster.components.validation_time import REPLACE_PATHS

FAULT_LABEL = "cloud.google.com/fault-behavior"
STATUS_LABEL = "cloud.google.com/report-and-replace-status"
OPERATION_LABEL = "cloud.google.com/report-and-replace-operation"
POOL_LABEL = "cloud.google.com/gke-nodepool"


def gke_behavior(why: str) -> str:
    """The label's value for the finding (SELFHEAL.md G2: XID, PERFORMANCE, SDC, or unspecified)."""
    w = why.lower()
    if "xid" in w:
        return "XID"
    if w.startswith(("health.", "pairwise:")) or "straggler" in w or "gemm" in w:
        return "PERFORMANCE"
    return "unspecified"


def gce_behavior(why: str) -> str:
    """``faultReasons[].behavior`` for the finding (compute_v1 InstancesReportHostAsFaultyRequestFaultReason)."""
    w = why.lower()
    if "xid" in w:
        return "UNRECOVERABLE_GPU_ERROR"
    if "ecc" in w or "gpus answered" in w or "remap" in w:
        return "CHIP_ERROR"
    if w.startswith(("health.", "pairwise:")) or "straggler" in w or "gemm" in w:
        return "PERFORMANCE"
    return "BEHAVIOR_UNSPECIFIED"


def compute_clients(credentials: Any = None, endpoint: str | None = None) -> dict[str, Any]:
    try:
        from google.cloud import compute_v1
    except ImportError:
        raise MissingSdk("google-cloud-compute") from None
    if credentials is None:
        import google.auth
        from google.auth import exceptions as auth_exc

        try:
            credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
        except auth_exc.DefaultCredentialsError:
            raise AdapterError(
                "no Google credentials found (run `gcloud auth application-default login`, or set "
                "GOOGLE_APPLICATION_CREDENTIALS)"
            ) from None
    from google.auth.transport.requests import AuthorizedSession

    kw: dict[str, Any] = {
        "credentials": credentials,
        "transport": "rest",
        "client_options": {"api_endpoint": endpoint or "compute.googleapis.com"},
    }
    return {
        "instances": compute_v1.InstancesClient(**kw),
        "igm": compute_v1.InstanceGroupManagersClient(**kw),
        "operations": compute_v1.ZoneOperationsClient(**kw),
        "session": AuthorizedSession(credentials),  # type: ignore[no-untyped-call]
        "container": (endpoint or "https://container.googleapis.com").rstrip("/"),
    }


def _api(what: str, fn: Any, **kw: Any) -> Any:
    from google.api_core import exceptions as gexc

    try:
        return fn(**kw)
    except gexc.NotFound:
        return None
    except gexc.GoogleAPICallError as exc:
        raise AdapterError(f"{what}: {exc.code} {exc.message}"[:400]) from None


class GceInstances:
    """A node's VM, and what identifies the machine under it now."""

    def __init__(self, clients: Mapping[str, Any], project: str, zone: str) -> None:
        self.c = clients
        self.project = project
        self.zone = zone

    def get(self, name: str) -> Any:
        return _api(
            "compute instances.get", self.c["instances"].get, project=self.project, zone=self.zone, instance=name
        )

    def identity(self, vm: Any) -> str:
        host = vm.resource_status.physical_host if vm.resource_status else ""
        return f"{vm.id}@{host}" if host else str(vm.id)

    def instance(self, name: str) -> Instance:
        vm = self.get(name)
        if vm is None:
            return Instance(id="", state=f"no VM {name} in {self.zone}")
        ra = vm.reservation_affinity
        window = f"reservation {', '.join(ra.values)}" if ra and ra.values else ""
        return Instance(id=self.identity(vm), state=vm.status, window=window)


def vm_name(node: NodeState) -> str:
    """GKE: the providerID's last part (gce://PROJECT/ZONE/NAME); Slurm: the node's name."""
    return node.instance.rsplit("/", 1)[-1] if node.instance.startswith("gce://") else node.node


class GkeMigCloud(DocumentedPath):
    name = path = "gke-mig-recreate"

    def __init__(self, clients: Mapping[str, Any], project: str, zone: str, cluster: str) -> None:
        self.c = clients
        self.vms = GceInstances(clients, project, zone)
        self.project, self.zone, self.cluster = project, zone, cluster
        self.call = f"{REPLACE_PATHS[self.name][1]} (Compute Engine API reference)"

    def instance(self, node: NodeState) -> Instance:
        return self.vms.instance(vm_name(node))

    def group_of(self, node: NodeState) -> str:
        pool = node.labels.get(POOL_LABEL, "")
        if not pool:
            raise AdapterError(f"{node.node} has no {POOL_LABEL} label: not a GKE node pool's node")
        url = (
            f"{self.c['container']}/v1/projects/{self.project}/locations/{self.zone}/clusters/{self.cluster}"
            f"/nodePools/{pool}"
        )
        got = self.c["session"].get(url, timeout=30)
        if got.status_code != 200:
            raise AdapterError(f"GKE nodePools.get {pool}: HTTP {got.status_code}: {got.text[:200]}")
        urls = [u for u in got.json().get("instanceGroupUrls", []) if f"/zones/{self.zone}/" in u]
        if not urls:
            raise AdapterError(f"node pool {pool} has no instance group in {self.zone}")
        return str(urls[0]).rsplit("/", 1)[-1]

    def replace(self, node: NodeState, instance: Instance, token: str, why: str) -> Outcome:
        from google.cloud import compute_v1

        group = self.group_of(node)
        name = vm_name(node)
        op = _api(
            "compute instanceGroupManagers.recreateInstances",
            self.c["igm"].recreate_instances,
            request=compute_v1.RecreateInstancesInstanceGroupManagerRequest(
                project=self.project,
                zone=self.zone,
                instance_group_manager=group,
                instance_group_managers_recreate_instances_request_resource=(
                    compute_v1.InstanceGroupManagersRecreateInstancesRequest(
                        instances=[f"zones/{self.zone}/instances/{name}"]
                    )
                ),
                request_id=request_uuid(token),
            ),
        )
        if op is None:
            return Outcome(ok=False, detail=f"instance group {group} not found")
        return Outcome(
            ok=True,
            detail=f"{name} being recreated by {group} (operation {op.name}, requestId {request_uuid(token)})",
            extra={"op": op.name, "group": group},
        )

    def progress(self, node: NodeState, old: str, token: str, facts: Mapping[str, Any]) -> Progress:
        vm = self.vms.get(vm_name(node))
        if vm is None:
            return Progress(started=True, detail=f"{vm_name(node)} is being recreated (no VM yet)")
        now = self.vms.identity(vm)
        op = self._op(str(facts.get("op", "")))
        if op is not None and op.error and op.error.errors:
            return Progress(started=True, failed=f"operation {op.name}: {op.error.errors[0].message}")
        if now != old:
            return Progress(
                started=True,
                new_instance=now if vm.status == "RUNNING" else "",
                node=node.node,
                detail=f"VM {now} {vm.status}",
            )
        state = getattr(op.status, "name", str(op.status)) if op is not None else ""
        return Progress(started=op is not None, detail=f"VM {now} {vm.status}" + (f", operation {state}" if op else ""))

    def _op(self, name: str) -> Any:
        if not name:
            return None
        return _api(
            "compute zoneOperations.get", self.c["operations"].get, project=self.project, zone=self.zone, operation=name
        )


class GkeReportCloud(DocumentedPath):
    """A3/A4 GKE nodes in a reservation: the report-and-replace label.

    What Google's page says, and what heal does with it ("Report faulty hosts through GKE",
    cloud.google.com/ai-hypercomputer/docs/manage/manage-gke-clusters, last updated 2026-04-06;
    SELFHEAL.md G2):

    - labelling ``cloud.google.com/fault-behavior`` makes GKE taint the node, evict its pods, report
      the host and, once the VM is back on a healthy host, remove the taint and that label; "after
      you report a host as faulty, don't send additional requests until the operation completes",
      so heal labels once per attempt and a rerun that finds the label (or a status this call
      caused) never labels again;
    - ``cloud.google.com/report-and-replace-status``: PodsEvicted, OperationRUNNING, OperationDone
      ("the underlying host has been reported as faulty and the GKE node is ready to be moved to a
      new host"), or an error (ERROR; GKE then clears the taint and the fault-behavior label), and
      ``cloud.google.com/report-and-replace-operation`` names the Compute Engine operation. GKE
      leaves the status on the node: a later incident would read an old OperationDone as its own,
      so heal clears the status and the operation in the same patch that sets the fault label,
      journals them as they were before (``prepare``), and removes all three once the node is
      revalidated and back in service (``settle``);
    - reporting takes 10-12 minutes, the host's repair "3-14 days, or even longer at times": a
      repair still not done past the path's budget (gpu_cluster.components.validation_time REPLACE_PATHS), an
      error, or a VM left TERMINATED ("you must manually restart the instance") is ESCALATED with
      what to watch, never labelled again in a loop ("to retry the operation for transient errors
      like rate limits, re-apply the label" is a person's call).
    """

    name = path = "gke-report-and-replace"

    def __init__(
        self, clients: Mapping[str, Any], project: str, zone: str, kube: Any, clock: Callable[[], float] = time.time
    ) -> None:
        self.vms = GceInstances(clients, project, zone)
        self.zone = zone
        self.kube = kube
        """Anything with ``labels(node)`` and ``set_labels(node, {key: value or None})`` (heal's KubeScheduler)."""
        self.clock = clock
        self.call = f"{REPLACE_PATHS[self.name][1]} (Google, manage-gke-clusters)"

    def instance(self, node: NodeState) -> Instance:
        return self.vms.instance(vm_name(node))

    def prepare(self, node: NodeState, old: Instance) -> dict[str, Any]:
        """The report's labels before heal labels the node (an earlier incident's, or none)."""
        labels = self.kube.labels(node.node)
        return {"gke_labels_before": {k: labels.get(k, "") for k in (STATUS_LABEL, OPERATION_LABEL)}}

    def replace(self, node: NodeState, instance: Instance, token: str, why: str) -> Outcome:
        value = gke_behavior(why)
        self.kube.set_labels(node.node, {FAULT_LABEL: value, STATUS_LABEL: None, OPERATION_LABEL: None})
        return Outcome(ok=True, detail=f"labelled {FAULT_LABEL}={value}", extra={"op": f"{FAULT_LABEL}={value}"})

    def watch(self, node: NodeState) -> str:
        return (
            f"watch `kubectl get node {node.node} -L {STATUS_LABEL},{OPERATION_LABEL}` and the VM "
            f"(`gcloud compute instances describe {vm_name(node)} --zone {self.zone}`: REPAIRING until the host "
            "is repaired, TERMINATED when it must be started by hand); when it runs on a healthy host, validate "
            "again and heal the new report"
        )

    def progress(self, node: NodeState, old: str, token: str, facts: Mapping[str, Any]) -> Progress:
        labels = self.kube.labels(node.node)
        status, op = labels.get(STATUS_LABEL, ""), labels.get(OPERATION_LABEL, "")
        before = facts.get("gke_labels_before") or {}
        earlier = status == before.get(STATUS_LABEL, "") and op == before.get(OPERATION_LABEL, "")
        if FAULT_LABEL not in labels and (not status or earlier):
            return Progress(
                started=False,
                detail="not labelled" + (f" ({STATUS_LABEL}={status} is an earlier one's)" if status else ""),
            )
        if "error" in status.lower():
            return Progress(
                started=True,
                escalate=f"GKE answered {STATUS_LABEL}={status} (operation {op or '-'}); Google retries a "
                f"transient error (a rate limit) when the label is applied again, which is a person's call: "
                + self.watch(node),
            )
        vm = self.vms.get(vm_name(node))
        now = self.vms.identity(vm) if vm is not None else ""
        done = status == "OperationDone" and vm is not None and vm.status == "RUNNING"
        detail = f"{STATUS_LABEL}={status or '(not yet)'}; VM {now or '-'} {vm.status if vm is not None else ''}"
        if not done:
            asked = float(facts.get("asked_at") or self.clock())
            budget, _basis = self.replace_estimate()
            if status == "OperationDone" and vm is not None and vm.status == "TERMINATED":
                why = "Compute Engine left the VM TERMINATED after the report (Google: it must be restarted by hand)"
            elif self.clock() - asked > budget:
                why = (
                    f"not back after {(self.clock() - asked) / 60:.0f} min ({detail}): reporting takes 10-12 min and "
                    "the host's repair 3-14 days or longer (Google, manage-gke-clusters)"
                )
            else:
                why = ""
            if why:
                return Progress(started=True, escalate=f"{why}; it stays out of service: {self.watch(node)}")
        return Progress(
            started=True,
            new_instance=(now if now != old else f"{now} (repaired, {token})") if done else "",
            node=node.node,
            detail=detail,
        )

    def settle(self, node: NodeState, facts: Mapping[str, Any]) -> str:
        """After the node is revalidated and back in service: the report's labels removed and read back,
        so the node's next incident is reported anew."""
        keys = (FAULT_LABEL, STATUS_LABEL, OPERATION_LABEL)
        if any(k in self.kube.labels(node.node) for k in keys):
            self.kube.set_labels(node.node, dict.fromkeys(keys))
        left = [k for k in keys if k in self.kube.labels(node.node)]
        if left:
            raise AdapterError(f"the report's labels are still on {node.node} after removing them: {', '.join(left)}")
        return f"{FAULT_LABEL}, {STATUS_LABEL} and {OPERATION_LABEL} removed (read back)"


class GceReportCloud(DocumentedPath):
    """Cluster Director nodes of a series Compute Engine takes reports for: reportHostAsFaulty."""

    name = path = "gce-report-host-as-faulty"

    def __init__(self, clients: Mapping[str, Any], project: str, zone: str) -> None:
        self.c = clients
        self.vms = GceInstances(clients, project, zone)
        self.project, self.zone = project, zone
        self.call = f"{REPLACE_PATHS[self.name][1]} (Compute Engine API reference; Google, report-faulty-host)"

    def instance(self, node: NodeState) -> Instance:
        return self.vms.instance(vm_name(node))

    def replace(self, node: NodeState, instance: Instance, token: str, why: str) -> Outcome:
        from google.cloud import compute_v1

        body = compute_v1.InstancesReportHostAsFaultyRequest(
            disruption_schedule="IMMEDIATE",
            fault_reasons=[
                compute_v1.InstancesReportHostAsFaultyRequestFaultReason(
                    behavior=gce_behavior(why), description=f"gpu-cluster heal: {why}"[:256]
                )
            ],
        )
        op = _api(
            "compute instances.reportHostAsFaulty",
            self.c["instances"].report_host_as_faulty,
            request=compute_v1.ReportHostAsFaultyInstanceRequest(
                project=self.project,
                zone=self.zone,
                instance=vm_name(node),
                instances_report_host_as_faulty_request_resource=body,
                request_id=request_uuid(token),
            ),
        )
        if op is None:
            return Outcome(ok=False, detail=f"no VM {vm_name(node)} in {self.zone}")
        return Outcome(
            ok=True,
            detail=f"host of {vm_name(node)} reported ({gce_behavior(why)}); operation {op.name}",
            extra={"op": op.name},
        )

    def progress(self, node: NodeState, old: str, token: str, facts: Mapping[str, Any]) -> Progress:
        name = str(facts.get("op", ""))
        op = (
            _api(
                "compute zoneOperations.get",
                self.c["operations"].get,
                project=self.project,
                zone=self.zone,
                operation=name,
            )
            if name
            else None
        )
        if op is None:
            return Progress(started=False, detail="no report operation yet")
        if op.error and op.error.errors:
            return Progress(started=True, failed=f"operation {op.name}: {op.error.errors[0].message}")
        vm = self.vms.get(vm_name(node))
        now = self.vms.identity(vm) if vm is not None else ""
        status = getattr(op.status, "name", str(op.status))  # compute_v1's Operation.status is an enum
        done = status == "DONE" and vm is not None and vm.status == "RUNNING"
        return Progress(
            started=True,
            new_instance=(now if now != old else f"{now} (repaired, {token})") if done else "",
            detail=f"operation {op.name} {status}; VM {now or '-'} {vm.status if vm else ''}",
        )


class SlurmPowerCycleCloud(DocumentedPath):
    """Cluster Director nodes of other series: ``scontrol update state=POWER_DOWN``, then
    ``state=POWER_UP``; slurm-gcp deletes the VM and creates a new one under the node's name."""

    name = path = "slurm-power-cycle"

    def __init__(self, clients: Mapping[str, Any], project: str, zone: str, slurm: Any) -> None:
        self.vms = GceInstances(clients, project, zone)
        self.slurm = slurm
        """heal's SlurmScheduler (its ``info`` and ``_scontrol``)."""
        self.call = f"{REPLACE_PATHS[self.name][1]} (Google, manage-static-nodes; scontrol(1))"

    def instance(self, node: NodeState) -> Instance:
        return self.vms.instance(node.node)

    def replace(self, node: NodeState, instance: Instance, token: str, why: str) -> Outcome:
        info = self.slurm.info(node.node)
        reason = info.reason.split(" [", 1)[0] if info is not None else ""
        self.slurm._scontrol("update", f"nodename={node.node}", "state=POWER_DOWN")
        info = self.slurm.info(node.node)
        return Outcome(
            ok=True,
            detail=f"state=POWER_DOWN: {info.state if info else '?'}",
            extra={"op": "POWER_DOWN", "reason": reason},
        )

    def progress(self, node: NodeState, old: str, token: str, facts: Mapping[str, Any]) -> Progress:
        info = self.slurm.info(node.node)
        flags = set(info.state.split("+")) if info else set()
        if "POWERED_DOWN" in flags:
            # Powering down clears the drain (seen on slurm-wlm 22.05: IDLE+DRAIN became
            # IDLE+POWERED_DOWN); drained again before it powers up, the new VM joins out of service.
            if "DRAIN" not in flags and facts.get("reason"):
                self.slurm._scontrol("update", f"nodename={node.node}", "state=drain", f"reason={facts['reason']}")
            self.slurm._scontrol("update", f"nodename={node.node}", "state=POWER_UP")
            return Progress(started=True, detail="powered down; drained again, state=POWER_UP asked")
        if flags & {"POWERING_DOWN", "POWER_DOWN", "POWERING_UP"}:
            return Progress(started=True, detail=f"{info.state if info else ''}")
        vm = self.vms.get(node.node)
        now = self.vms.identity(vm) if vm is not None else ""
        if now and now != old and vm.status == "RUNNING":
            return Progress(started=True, new_instance=now, detail=f"new VM {now}")
        return Progress(
            started=bool(facts.get("op")) and now != old, detail=f"{info.state if info else '?'}; VM {now or '-'}"
        )
