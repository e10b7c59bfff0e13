"""Run a validation job on Kubernetes: one JobSet and the ConfigMap carrying its code.

``configmap`` and the rendered JobSet are exactly what is created (the ConfigMap is then
owned by the JobSet, so deleting the JobSet removes both); :class:`KubeApi` is the thin layer over the official
``kubernetes`` client that creates, watches, reads logs and deletes; :func:`follow` and
:func:`fetch` work through any object with :class:`KubeApi`'s methods, which is how the tests
check the path down to the objects without an API server.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from workloads.launch.bundle import Bundle
from workloads.launch.jobset import API_VERSION, CONTAINER
from workloads.launch.validation import BUNDLE_KEY
from workloads.validate import archive

JOBSET_GROUP, JOBSET_VERSION = API_VERSION.split("/")
JOBSET_PLURAL = "jobsets"
NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
# The Job controller's index label on each pod (Kubernetes 1.28+).
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


def configmap(name: str, namespace: str, bundle: Bundle) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {"app.kubernetes.io/name": name, "app.kubernetes.io/component": "code"},
        "annotations": {"gpu-cluster/bundle-digest": bundle.digest},
    }
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "binaryData": {BUNDLE_KEY: bundle.base64}}


def owner(jobset: Mapping[str, Any]) -> dict[str, Any]:
    """The owner reference that hands the ConfigMap to the JobSet's garbage collection."""
    meta = jobset["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "name": meta["name"],
        "uid": meta["uid"],
        "blockOwnerDeletion": False,
    }


class Api(Protocol):
    def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]: ...
    def create_configmap(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]: ...
    def get_jobset(self, namespace: str, name: str) -> dict[str, Any]: ...
    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]: ...
    def pod_log(self, namespace: str, pod: str) -> str: ...
    def delete_jobset(self, namespace: str, name: str) -> None: ...
    def set_owner(self, namespace: str, configmap: str, owner: Mapping[str, Any]) -> None: ...
    def create_networkpolicy(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]: ...
    def set_networkpolicy_owner(self, namespace: str, name: str, owner: Mapping[str, Any]) -> None: ...
    def list_nodes(self, selector: str) -> list[dict[str, Any]]: ...


class KubeApi:
    """The official client, configured from the stack's kubeconfig output."""

    def __init__(self, kubeconfig: str) -> None:
        from kubernetes import client, config

        api_client = config.new_client_from_config_dict(yaml.safe_load(kubeconfig))
        self._core = client.CoreV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self._client = api_client

    def _plain(self, obj: Any) -> dict[str, Any]:
        return obj if isinstance(obj, dict) else dict(self._client.sanitize_for_serialization(obj))

    def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._plain(
            self._custom.create_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, dict(body)
            )
        )

    def create_configmap(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        # The client takes a plain dict body as it takes its model objects.
        return self._plain(self._core.create_namespaced_config_map(namespace, dict(body)))

    def get_jobset(self, namespace: str, name: str) -> dict[str, Any]:
        return self._plain(
            self._custom.get_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, name)
        )

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return [self._plain(p) for p in self._core.list_namespaced_pod(namespace, label_selector=selector).items]

    def pod_log(self, namespace: str, pod: str) -> str:
        return str(self._core.read_namespaced_pod_log(pod, namespace, container=CONTAINER))

    def delete_jobset(self, namespace: str, name: str) -> None:
        self._custom.delete_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, name, propagation_policy="Foreground"
        )

    def set_owner(self, namespace: str, configmap: str, owner: Mapping[str, Any]) -> None:
        self._core.patch_namespaced_config_map(configmap, namespace, {"metadata": {"ownerReferences": [dict(owner)]}})

    def create_networkpolicy(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        from kubernetes import client

        return self._plain(client.NetworkingV1Api(self._client).create_namespaced_network_policy(namespace, dict(body)))

    def set_networkpolicy_owner(self, namespace: str, name: str, owner: Mapping[str, Any]) -> None:
        from kubernetes import client

        client.NetworkingV1Api(self._client).patch_namespaced_network_policy(
            name, namespace, {"metadata": {"ownerReferences": [dict(owner)]}}
        )

    def list_nodes(self, selector: str) -> list[dict[str, Any]]:
        return [self._plain(n) for n in self._core.list_node(label_selector=selector).items]


def create(
    api: Api, jobset: Mapping[str, Any], bundle: Bundle, policy: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The job's NetworkPolicy first (no pod of the job is ever unprotected), the code's
    ConfigMap (pods that start before it would wait on their volume), then the JobSet, then
    the JobSet made the owner of both; the JobSet as created."""
    meta = jobset["metadata"]
    if policy is not None:
        api.create_networkpolicy(meta["namespace"], policy)
    api.create_configmap(meta["namespace"], configmap(meta["name"], meta["namespace"], bundle))
    made = api.create_jobset(meta["namespace"], jobset)
    api.set_owner(meta["namespace"], meta["name"], owner(made))
    if policy is not None:
        api.set_networkpolicy_owner(meta["namespace"], policy["metadata"]["name"], owner(made))
    return made


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSetState:
    done: bool
    outcome: str
    """Completed, Failed or Running (or what the controller says)."""
    pods: Mapping[str, str]
    """Pod name -> phase."""


def _condition(js: Mapping[str, Any]) -> str | None:
    for cond in js.get("status", {}).get("conditions", []) or []:
        if cond.get("status") == "True" and cond.get("type") in ("Completed", "Failed"):
            return str(cond["type"])
    return None


def poll(api: Api, namespace: str, name: str) -> JobSetState:
    js = api.get_jobset(namespace, name)
    pods = {
        p["metadata"]["name"]: p.get("status", {}).get("phase", "Unknown")
        for p in api.list_pods(namespace, f"{NAME_LABEL}={name}")
    }
    outcome = _condition(js)
    return JobSetState(done=outcome is not None, outcome=outcome or "Running", pods=pods)


def follow(
    api: Api,
    namespace: str,
    name: str,
    *,
    expected_nodes: int,
    poll_s: float,
    timeout_s: float,
    say: Callable[[str], None],
) -> JobSetState:
    started = time.monotonic()
    last = ""
    while True:
        st = poll(api, namespace, name)
        counts: dict[str, int] = {}
        for phase in st.pods.values():
            counts[phase] = counts.get(phase, 0) + 1
        elapsed = time.monotonic() - started
        line = (
            f"{st.outcome.lower()} · pods "
            + (", ".join(f"{n} {p}" for p, n in sorted(counts.items())) or "none yet")
            + f" of {expected_nodes}"
        )
        if line != last:
            say(f"[{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}] jobset {name} {line}")
            last = line
        if st.done:
            return st
        if elapsed > timeout_s:
            raise TimeoutError(
                f"jobset {name} not finished after {timeout_s:.0f} s; it keeps running "
                f"(delete it with --delete, or kubectl delete jobset {name} -n {namespace})"
            )
        time.sleep(poll_s)


def fetch(api: Api, namespace: str, name: str, dest: Path) -> list[str]:
    """Every pod's log into ``dest/logs``, and pod 0's report archive into ``dest``."""
    logs = dest / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    got: list[str] = []
    for pod in api.list_pods(namespace, f"{NAME_LABEL}={name}"):
        pod_name = pod["metadata"]["name"]
        text = api.pod_log(namespace, pod_name)
        (logs / f"{pod_name}.log").write_text(text, encoding="utf-8")
        if pod["metadata"].get("labels", {}).get(INDEX_LABEL) == "0":
            got += archive.extract(text, dest)
    return got


def node_states(api: Api, selector: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """``(node, state, reasons)``: Ready or NotReady, cordoned, and the taints a judge or a
    cloud put on it."""
    rows = []
    for node in api.list_nodes(",".join(f"{k}={v}" for k, v in selector.items())):
        ready = next(
            (c.get("status") for c in node.get("status", {}).get("conditions", []) or [] if c.get("type") == "Ready"),
            "Unknown",
        )
        spec = node.get("spec", {})
        state = ("Ready" if ready == "True" else "NotReady") + (
            ",SchedulingDisabled" if spec.get("unschedulable") else ""
        )
        taints = [f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}" for t in spec.get("taints", []) or []]
        rows.append((node["metadata"]["name"], state, "; ".join(taints)))
    return sorted(rows)
