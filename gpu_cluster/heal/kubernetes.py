"""Kubernetes: quarantine is cordon, a taint of ours and eviction through the Eviction API; return
is the reverse. Through the official client and the stack's kubeconfig, as ``validate submit``.

- Cordon: ``spec.unschedulable: true`` (what ``kubectl cordon`` patches; the node then carries
  ``node.kubernetes.io/unschedulable:NoSchedule``, "Taints and Tolerations", kubernetes.io).
- Our taint, ``gpu-cluster.io/heal=<incident>:NoSchedule``: a taint's value is at most 63
  characters of a label value (Kubernetes API reference, Taint; label value syntax), which an
  incident id is; the reason goes into the annotation ``gpu-cluster.io/heal-reason``.
- Eviction: ``POST /api/v1/namespaces/<ns>/pods/<pod>/eviction`` with a policy/v1 Eviction for every
  pod on the node but DaemonSet pods, mirror pods and finished ones (what ``kubectl drain
  --ignore-daemonsets`` leaves); the API server refuses with 429 when a PodDisruptionBudget would be
  violated ("API-initiated eviction", kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/),
  and heal asks again until its deadline, never deleting a pod past its budget.
- The GPU pools' registration taint, ``gpu-cluster.io/unvalidated=true:NoSchedule``
  (components/contract.py; EKS and GKE pools register every new node with it, docs/heal.md I6): a
  replacement joins out of work before heal sees it. A node that carries it is not in service; the
  check's pods tolerate it, and the return to service after a passed check (the revalidation, or a
  second look that cleared the node) removes it with heal's own marks, in the same patch; from a
  node that carries no mark of heal's (its first validation FAILed it, the second look cleared it)
  it is removed alone, and a cordon heal did not write stays.
- A replacement on EKS or AKS comes with another node name; the node that stands in the slot is the
  one whose ``spec.providerID`` names the new instance (``aws:///<zone>/<instance-id>``,
  ``azure:///subscriptions/.../virtualMachines/<n>``, ``gce://<project>/<zone>/<name>``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from gpu_cluster.components.contract import UNVALIDATED_TAINT_EFFECT, UNVALIDATED_TAINT_KEY
from gpu_cluster.heal.adapters import AdapterError, MissingSdk, NodeState, Outcome

TAINT_KEY = "gpu-cluster.io/heal"
REASON_ANNOTATION = "gpu-cluster.io/heal-reason"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


def tolerations() -> list[dict[str, str]]:
    """What a check's pods carry to run on a quarantined node (its cordon and our taint) and on a
    replacement not yet validated (the pools' registration taint)."""
    return [
        {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
        {"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"},
        {"key": UNVALIDATED_TAINT_KEY, "operator": "Exists", "effect": UNVALIDATED_TAINT_EFFECT},
    ]


class KubeScheduler:
    kind = "kubernetes"

    def __init__(self, kubeconfig: str, *, timeout_s: float = 60.0) -> None:
        try:
            from kubernetes import client, config
            from kubernetes.config.config_exception import ConfigException
        except ImportError:
            raise MissingSdk("kubernetes", "validate") from None
        doc = yaml.safe_load(kubeconfig)
        cfg = client.Configuration()
        cfg.retries = 1
        self.server = str((((doc or {}).get("clusters") or [{}])[0].get("cluster") or {}).get("server", "?"))
        try:
            api = config.new_client_from_config_dict(doc, client_configuration=cfg)
        except ConfigException as exc:
            raise AdapterError(f"cluster: the kubeconfig could not be used ({exc})") from None
        self._api = api
        self.core = client.CoreV1Api(api)
        self.timeout = (15.0, timeout_s)

    def _call(self, action: str, fn: Any, *args: Any, **kw: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return fn(*args, _request_timeout=self.timeout, **kw)
        except ApiException as exc:
            if exc.status == 404:
                return None
            from gpu_cluster.workloads.validate.kube import explain

            raise AdapterError(explain(exc, self.server, action=action) or f"{action}: {exc.status}") from None
        except Exception as exc:  # urllib3 transport errors: one line, never the client's traceback
            from gpu_cluster.workloads.validate.kube import explain

            line = explain(exc, self.server, action=action)
            if line is None:
                raise
            raise AdapterError(line) from None

    def _plain(self, obj: Any) -> dict[str, Any]:
        return dict(self._api.sanitize_for_serialization(obj)) if obj is not None else {}

    def read(self, name: str) -> dict[str, Any]:
        return self._plain(self._call(f"reading node {name}", self.core.read_node, name))

    def node(self, name: str) -> NodeState:
        doc = self.read(name)
        if not doc:
            return NodeState(node=name, present=False, detail=f"no node {name} in the cluster")
        spec, status = doc.get("spec") or {}, doc.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        ours = [t for t in spec.get("taints") or [] if t.get("key") == TAINT_KEY]
        unvalidated = any(t.get("key") == UNVALIDATED_TAINT_KEY for t in spec.get("taints") or [])
        cordoned = bool(spec.get("unschedulable"))
        return NodeState(
            node=name,
            present=True,
            ready=ready,
            in_service=not cordoned and not ours and not unvalidated,
            held_by=str(ours[0].get("value")) if ours else None,
            instance=str(spec.get("providerID") or ""),
            labels=dict((doc.get("metadata") or {}).get("labels") or {}),
            unvalidated=unvalidated,
            detail=("Ready" if ready else "NotReady")
            + (", cordoned" if cordoned else "")
            + (f", tainted by {ours[0].get('value')}" if ours else "")
            + (", not yet validated" if unvalidated else ""),
        )

    def _patch(self, name: str, body: Mapping[str, Any], action: str) -> None:
        # A JSON merge patch: the taints list is written whole (read, changed, written back).
        self._call(action, self.core.patch_node, name, dict(body))

    def pods_on(self, name: str) -> list[dict[str, Any]]:
        got = self._call(
            f"listing the pods on {name}", self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={name}"
        )
        pods = [self._plain(p) for p in (got.items if got is not None else [])]
        out = []
        for p in pods:
            meta = p.get("metadata") or {}
            if any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or []):
                continue
            if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
                continue
            if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            out.append(p)
        return out

    def quarantine(self, name: str, incident: str, why: str) -> Outcome:
        doc = self.read(name)
        if not doc:
            return Outcome(ok=False, detail=f"no node {name}")
        taints = [t for t in (doc.get("spec") or {}).get("taints") or [] if t.get("key") != TAINT_KEY]
        taints.append({"key": TAINT_KEY, "value": incident, "effect": "NoSchedule"})
        self._patch(
            name,
            {
                "metadata": {"annotations": {REASON_ANNOTATION: why[:1000]}},
                "spec": {"unschedulable": True, "taints": taints},
            },
            f"cordoning and tainting {name}",
        )
        from kubernetes import client

        blocked: list[str] = []
        for pod in self.pods_on(name):
            meta = pod["metadata"]
            where = f"{meta['namespace']}/{meta['name']}"
            body = client.V1Eviction(metadata=client.V1ObjectMeta(name=meta["name"], namespace=meta["namespace"]))
            try:
                self._evict(meta["name"], meta["namespace"], body)
            except _Refused:
                blocked.append(where)
        left = self.pods_on(name)
        if left:
            return Outcome(
                ok=False,
                pending=True,
                detail=f"cordoned and tainted; {len(left)} pod(s) still on it: "
                + ", ".join(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in left[:5])
                + (f", eviction refused by a PodDisruptionBudget: {', '.join(blocked[:5])}" if blocked else ""),
            )
        return Outcome(ok=True, detail=f"cordoned, tainted {TAINT_KEY}={incident}:NoSchedule, no pod left to evict")

    def _evict(self, pod: str, namespace: str, body: Any) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.create_namespaced_pod_eviction(pod, namespace, body, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 429:
                raise _Refused(pod) from None
            if exc.status == 404:
                return  # gone already
            from gpu_cluster.workloads.validate.kube import explain

            raise AdapterError(explain(exc, self.server, action=f"evicting {namespace}/{pod}") or str(exc)) from None

    def release(self, name: str, incident: str) -> Outcome:
        doc = self.read(name)
        if not doc:
            return Outcome(ok=False, detail=f"no node {name}")
        taints = (doc.get("spec") or {}).get("taints") or []
        ours = [t for t in taints if t.get("key") == TAINT_KEY]
        if ours and ours[0].get("value") != incident:
            return Outcome(
                ok=False, detail=f"its {TAINT_KEY} taint is incident {ours[0].get('value')}'s; left as it is"
            )
        # Called only after a passed check (the revalidation, or the second look that cleared the
        # node): that check is the validation the registration taint waits for, so it goes too.
        if not ours:
            # No mark of heal's (the second look cleared a node whose first validation FAILed, so
            # it kept its registration taint): the registration taint goes, as `validate submit`
            # removes it from a node it passed (workloads/validate/kube.py admit); a cordon or an
            # annotation heal did not write is someone else's and stays.
            kept = [t for t in taints if t.get("key") != UNVALIDATED_TAINT_KEY]
            if len(kept) == len(taints):
                return Outcome(ok=True, detail="no mark of heal's and no registration taint on it")
            self._patch(name, {"spec": {"taints": kept or None}}, f"removing {UNVALIDATED_TAINT_KEY} from {name}")
            return Outcome(ok=True, detail=f"{UNVALIDATED_TAINT_KEY} removed")
        kept = [t for t in taints if t.get("key") not in (TAINT_KEY, UNVALIDATED_TAINT_KEY)]
        self._patch(
            name,
            {
                "metadata": {"annotations": {REASON_ANNOTATION: None}},
                "spec": {"unschedulable": None, "taints": kept or None},
            },
            f"returning {name} to service",
        )
        admitted = any(t.get("key") == UNVALIDATED_TAINT_KEY for t in taints)
        return Outcome(
            ok=True, detail="uncordoned, taint removed" + (f", {UNVALIDATED_TAINT_KEY} removed" if admitted else "")
        )

    def successor(self, slot_node: str, old_instance: str, new_instance: str) -> str | None:
        if not new_instance:
            return None
        want = new_instance.lower().rstrip("/")
        got = self._call("listing nodes", self.core.list_node)
        for n in got.items if got is not None else []:
            provider = str(n.spec.provider_id or "").lower().rstrip("/")
            if provider == want or provider.endswith("/" + want) or provider.endswith(want):
                return str(n.metadata.name)
        return None

    def open_for_check(self, name: str, peer: str, incident: str) -> Outcome:
        return Outcome(ok=True, detail="the check's pods tolerate the cordon and the taint")

    def close_check(self, name: str, peer: str, incident: str) -> None:
        return None

    # GKE's report-and-replace goes through node labels (gpu_cluster/heal/gcp.py).
    def labels(self, name: str) -> dict[str, str]:
        return dict(((self.read(name).get("metadata") or {}).get("labels")) or {})

    def label(self, name: str, key: str, value: str) -> None:
        self.set_labels(name, {key: value})

    def set_labels(self, name: str, labels: Mapping[str, str | None]) -> None:
        """One patch: a value sets a label, None removes it (JSON merge patch, RFC 7386: null
        deletes the member), so setting one and clearing others is a single change of the node."""
        what = ", ".join(f"{k}={v}" if v is not None else f"{k}-" for k, v in labels.items())
        self._patch(name, {"metadata": {"labels": dict(labels)}}, f"labelling {name} {what}")


class _Refused(Exception):
    """429 from the Eviction API: a PodDisruptionBudget holds the pod."""
