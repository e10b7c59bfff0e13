"""A JobSet Kueue holds: what its Workload says while the job waits for capacity.

On a pool with queued provisioning (GKE flex-start), Kueue's webhook creates the JobSet suspended
and Kueue admits it only once its ProvisioningRequest admission check is Ready, that is once GKE
has every node at once (components/k8s/kueue.py). The wait is for capacity, not the job: it has no
bound of ours. Kueue bounds it: a failed ProvisioningRequest is retried ``backoffLimitCount``
times (default 3), after which the Workload is deactivated (``spec.active: false``, condition
``Evicted`` with reason ``Deactivated``) and stays suspended for good (kubernetes-sigs/kueue
v0.17.8: apis/kueue/v1beta2/provisioningrequestconfig_types.go lines 127-157, RetryStrategy;
apis/kueue/v1beta2/workload_types.go line 68 ``active`` and lines 1052-1054 WorkloadDeactivated;
site/content/en/docs/concepts/admission_check/provisioning_request.md lines 89-91 and 121-127).

So ``validate submit`` starts the job's clock at admission and, while the JobSet is suspended,
reports the Workload's admission check, its requeue count and Kueue's reason; it stops, saying so,
when Kueue deactivates the Workload.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Kueue's Workload API (kueue.x-k8s.io/v1beta2, the version the chart installs: components/k8s/kueue.py).
WORKLOAD_GROUP, WORKLOAD_VERSION, WORKLOAD_PLURAL = "kueue.x-k8s.io", "v1beta2", "workloads"
DEACTIVATED = "Deactivated"
"""Condition reason of an Evicted Workload whose ``spec.active`` went false (workload_types.go:1054)."""
REQUEUING_LIMIT = "RequeuingLimitExceeded"
"""Reason Kueue gives when the retries ran out (workload_types.go, WorkloadRequeuingLimitExceeded)."""


@dataclass(frozen=True, slots=True)
class Queued:
    """A suspended JobSet's place in Kueue."""

    line: str
    """One line for the progress report."""
    gave_up: str | None = None
    """Why Kueue will not admit it any more (the Workload is deactivated); None while it may."""


def suspended(jobset: Mapping[str, Any]) -> bool:
    return bool((jobset.get("spec") or {}).get("suspend"))


def owned_by(workload: Mapping[str, Any], jobset: Mapping[str, Any]) -> bool:
    meta = jobset.get("metadata") or {}
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "JobSet" and (ref.get("uid") == meta.get("uid") or ref.get("name") == meta.get("name")):
            return True
    return False


def _conditions(workload: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type")): c for c in (workload.get("status") or {}).get("conditions") or []}


def describe(workload: Mapping[str, Any] | None) -> Queued:
    """The line for a suspended JobSet from its Workload (None: Kueue has made none yet, or it
    could not be read)."""
    if workload is None:
        return Queued("queued · suspended; no Kueue Workload for it yet")
    name = (workload.get("metadata") or {}).get("name", "?")
    status = workload.get("status") or {}
    conds = _conditions(workload)
    attempts = int((status.get("requeueState") or {}).get("count") or 0)
    evicted = conds.get("Evicted") or {}
    active = (workload.get("spec") or {}).get("active", True)
    if active is False or (evicted.get("status") == "True" and evicted.get("reason") == DEACTIVATED):
        why = evicted.get("message") or (conds.get("Requeued") or {}).get("message") or "spec.active is false"
        return Queued(
            f"queued · Kueue deactivated Workload {name} after {attempts} requeue(s)",
            gave_up=f"Kueue deactivated Workload {name} after {attempts} requeue(s): {why}",
        )
    checks = [
        f"{c.get('name', '?')} {c.get('state', '?')}" + (f" ({c['message']})" if c.get("message") else "")
        for c in status.get("admissionChecks") or []
    ]
    quota = conds.get("QuotaReserved") or {}
    parts = [f"Workload {name}"]
    parts.append(
        "quota reserved" if quota.get("status") == "True" else f"no quota yet ({quota.get('reason', 'pending')})"
    )
    if checks:
        parts.append("admission check " + ", ".join(checks))
    if attempts:
        parts.append(f"requeued {attempts} time(s)")
    return Queued("queued · waiting for capacity: " + "; ".join(parts))


def find(workloads: list[dict[str, Any]], jobset: Mapping[str, Any]) -> dict[str, Any] | None:
    mine = [w for w in workloads if owned_by(w, jobset)]
    return mine[-1] if mine else None


# ---------------------------------------------------------------------------------------------
# Checks pinned by hostname (the post-hang pair search, heal's confirm and revalidate) on a queued
# pool. They run on nodes that already exist, so they go around Kueue (gpu_cluster.workloads.launch.jobset.
# unqueued): a JobSet without the
# ``kueue.x-k8s.io/queue-name`` label is not Kueue's (Configuration.manageJobsWithoutQueueName
# "Defaults to false; therefore, those jobs are not managed and if they are created unsuspended,
# they will start immediately": kueue v0.17.8 apis/config/v1beta2/configuration_types.go lines
# 43-50; the chart leaves it unset, charts/kueue/values.yaml line 142; no LocalQueue is named
# ``default``, which would be filled in for an unlabelled job: site/content/en/docs/tasks/manage/
# enforce_job_management/setup_default_local_queue.md lines 16-17, and ours is ``gpu-jobs``,
# components/k8s/kueue.py). Through Kueue they would wait on a ProvisioningRequest for new nodes,
# which can never carry the pinned names. Their pods tolerate the pool's taints
# (``scheduler.tolerations``, GKE's ``cloud.google.com/gke-queued`` among them) as every job's do.
# Nor do they take the main job's request over: the annotation that marks a pod as consuming a
# ProvisioningRequest (autoscaling.x-k8s.io/consume-provisioning-request) is what Kueue puts on the
# pods of a Workload it admitted (kueue v0.17.8 pkg/controller/admissionchecks/provisioning/
# controller.go lines 649-660, podSetUpdates), that request is gone once the main job ends (below),
# and pods consuming a missing request "will be unschedulable indefinitely" (kubernetes/autoscaler
# cluster-autoscaler/proposals/provisioning-request.md at 09fb959, "Adding pods that consume given
# ProvisioningRequest").
#
# What they cannot do is bring a node back. A queued pool's nodes come only through a
# ProvisioningRequest (GKE API NodePool.QueuedProvisioning.enabled: "nodes can be only obtained
# through queuing via the Cluster Autoscaler ProvisioningRequest API": cloud.google.com/dotnet/docs/
# reference/Google.Cloud.Container.V1/latest/Google.Cloud.Container.V1.NodePool.Types.QueuedProvisioning,
# read 2026-12-07), so a pinned pod whose node is gone waits for good. When the job that asked for
# them ends, Kueue deletes its ProvisioningRequest (kueue v0.17.8 pkg/controller/admissionchecks/
# provisioning/controller.go lines 131-148: a finished Workload's requests are deleted), after
# which the cluster autoscaler "will no longer guard the nodes from deletion and proceed with
# standard scale-down logic" (kubernetes/autoscaler
# cluster-autoscaler/proposals/provisioning-request.md at 09fb959, "Canceling the requests"; "When
# pods finish the work and nodes become unused the CA will scale them down", "CRD lifecycle" step 6).
# So before a pinned check is created, and when one never ended, its nodes are read: one gone, or
# tainted ``ToBeDeletedByClusterAutoscaler`` (the taint the autoscaler puts on a node it is removing,
# NoSchedule: cluster-autoscaler/utils/taints/taints.go line 41 and MarkToBeDeleted, at 0af55ac),
# means the check cannot run, said in one line, instead of a wait on nodes that will not come.
CA_DELETING_TAINT = "ToBeDeletedByClusterAutoscaler"


class NodesGone(RuntimeError):
    """A pinned check's nodes are gone or being removed: it cannot run (one line)."""


def unavailable(listed: list[dict[str, Any]], names: list[str]) -> dict[str, str]:
    """Each of ``names`` a pinned pod could not land on, with why: not among the ``listed`` nodes
    (the API's node list), or being removed by the cluster autoscaler."""
    by_name = {str((n.get("metadata") or {}).get("name")): n for n in listed}
    out: dict[str, str] = {}
    for name in names:
        node = by_name.get(name)
        if node is None:
            out[name] = "gone"
        elif any(t.get("key") == CA_DELETING_TAINT for t in (node.get("spec") or {}).get("taints") or []):
            out[name] = "being removed by the cluster autoscaler"
    return out


def gone_line(gone: Mapping[str, str], queue: str | None) -> str:
    """Why a pinned check cannot run, from :func:`unavailable` (the caller says which check)."""
    nodes = ", ".join(f"{n} ({why})" for n, why in sorted(gone.items()))
    why = (
        f"; on a queued-provisioning pool (Kueue queue {queue}) nodes live only while a job holds them: Kueue "
        "deletes a finished job's ProvisioningRequest and the cluster autoscaler then scales its nodes down, and no "
        "new node will carry these names"
        if queue
        else ""
    )
    return f"its node(s) {nodes}{why}"
