"""Run a validation job on Kubernetes: one JobSet and the ConfigMap carrying its code.

``configmap`` and the rendered JobSet are exactly what is created (the ConfigMap is then
owned by the JobSet, so deleting the JobSet removes both); :class:`KubeApi` is the thin layer over the official
``kubernetes`` client that creates, watches, reads logs and deletes; :func:`follow` and
:func:`fetch` work through any object with :class:`KubeApi`'s methods, which is how the tests
check the path down to the objects without an API server.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import ssl
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

import yaml

from gpu_cluster.workloads.launch.bundle import Bundle
from gpu_cluster.workloads.launch.jobset import API_VERSION, CONTAINER
from gpu_cluster.workloads.launch.validation import BUNDLE_KEY
from gpu_cluster.workloads.validate import archive, kube_queue
from gpu_cluster.workloads.validate.drain import TAINT_KEY
from gpu_cluster.components.contract import UNVALIDATED_TAINT_KEY

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
    def check_jobset_api(self, namespace: str) -> None: ...
    def watch_jobsets(self, namespace: str, selector: str, timeout_s: float) -> Iterator[dict[str, Any]]: ...
    def get_node(self, name: str) -> dict[str, Any]: ...
    def set_node_taints(self, name: str, taints: list[dict[str, Any]], resource_version: str) -> None: ...
    def list_workloads(self, namespace: str) -> list[dict[str, Any]]: ...


class ClusterUnreachable(RuntimeError):
    """The API server could not be used: one line, ``cluster: reason; next step`` (exit 3)."""


# Where the advice points: the stack keys a person changes and what to run.
_CIDR_HINT = (
    "if the endpoint is public, your address must be inside orchestration.deployer_cidrs "
    "(curl -s https://checkip.amazonaws.com, add it as /32, pulumi up); a private endpoint is "
    "reached only from inside the VPC"
)
_CREDS_HINT = (
    "refresh the credentials the kubeconfig's exec plugin uses (aws sso login / aws configure, or "
    "gcloud auth login), then rerun"
)
T = TypeVar("T")


def _root(exc: BaseException) -> BaseException:
    """The innermost cause urllib3 wraps (MaxRetryError.reason, then __cause__/__context__)."""
    seen: set[int] = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        nxt = getattr(exc, "reason", None)
        if isinstance(nxt, BaseException):
            exc = nxt
            continue
        if exc.__cause__ is not None:
            exc = exc.__cause__
            continue
        break
    return exc


def explain(exc: BaseException, server: str, *, action: str) -> str | None:
    """One line for a failure to use the API at ``server`` while doing ``action``, or None when
    ``exc`` is not an API/transport failure (a bug: let it raise)."""
    import urllib3.exceptions as u3
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException

    where = urlsplit(server).netloc or server
    if isinstance(exc, ApiException):
        status = exc.status
        if status == 401:
            return f"cluster: the API at {where} refused the credentials ({action}: 401 Unauthorized): {_CREDS_HINT}"
        if status == 403:
            return (
                f"cluster: the API at {where} forbids it ({action}: 403 Forbidden): the identity the kubeconfig "
                "authenticates as needs access to the cluster (EKS: an access entry; GKE: IAM roles/container."
                "developer) and to the jobs' namespace"
            )
        if status == 404 and "jobset" in action:
            return (
                f"cluster: the API at {where} has no {API_VERSION} JobSet ({action}: 404 Not Found): the JobSet "
                "controller is not installed; run pulumi up for this stack (its in-cluster layer installs it), "
                "or its layer stack for a private cluster"
            )
        return f"cluster: the API at {where} answered {status} {exc.reason} ({action}): {str(exc.body or '')[:200]}"
    if isinstance(exc, ConfigException):
        return f"cluster: the kubeconfig could not be used ({exc}): {_CREDS_HINT}"
    root = _root(exc)
    if isinstance(root, u3.NameResolutionError) or "Name or service not known" in str(root):
        return (
            f"cluster: the API address {where} does not resolve (DNS): the cluster may be deleted or the outputs "
            "stale; run `pulumi stack output` again (or pass a fresh --outputs FILE)"
        )
    if isinstance(root, (u3.SSLError, ssl.SSLError)):
        return (
            f"cluster: TLS with the API at {where} failed ({str(root)[:160]}): the server's certificate is not the "
            "one the kubeconfig's certificate-authority-data trusts; use the kubeconfig of this stack's current "
            "outputs (kubeconfig_command)"
        )
    if isinstance(root, (u3.ConnectTimeoutError, u3.ReadTimeoutError, TimeoutError)):
        return f"cluster: the API at {where} did not answer in time ({action}): {_CIDR_HINT}"
    if isinstance(root, (u3.NewConnectionError, ConnectionRefusedError)) or "Connection refused" in str(root):
        return f"cluster: nothing accepts connections at {where} ({action}: connection refused): {_CIDR_HINT}"
    if isinstance(root, (u3.HTTPError, OSError)):
        return f"cluster: the API at {where} could not be reached ({action}: {str(root)[:160]}): {_CIDR_HINT}"
    return None


def _plainly(action: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Turn a transport or API failure of a KubeApi call into ClusterUnreachable (one line)."""

    def wrap(fn: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(fn)
        def call(self: KubeApi, *args: Any, **kwargs: Any) -> T:
            if self.no_credentials:
                raise ClusterUnreachable(self.no_credentials)
            try:
                return fn(self, *args, **kwargs)
            except Exception as exc:
                line = explain(exc, self.server, action=action)
                if line is None:
                    raise
                raise ClusterUnreachable(line) from None

        return call

    return wrap


class _Hold(logging.Filter):
    """Keeps the records it is given (the kubeconfig loader's root-logger errors) from every handler."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            self.held.append(" ".join(record.getMessage().split()))
        return False


@contextlib.contextmanager
def _loader_logs() -> Iterator[list[str]]:
    """What the kubernetes client logs while it loads a kubeconfig, held instead of printed. Its
    loader reports a failed exec credential plugin with ``logging.error`` on the root logger, which
    configures logging for the whole process when nothing has (so every later urllib3 warning
    printed too) and then loads on without credentials: the user saw its raw lines before ours."""
    root = logging.getLogger()
    hold, quiet = _Hold(), logging.NullHandler()
    root.addFilter(hold)
    root.addHandler(quiet)  # logging.error() calls basicConfig() on a root with no handler
    try:
        yield hold.held
    finally:
        root.removeHandler(quiet)
        root.removeFilter(hold)


class _NoRetryWarnings(logging.Filter):
    """urllib3's "Retrying (...)" warning: the client retries once, and the failure that follows is
    said in one line (:func:`explain`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Retrying ")


_NO_RETRY_WARNINGS = _NoRetryWarnings()


def _exec_command(doc: Any) -> str:
    """The kubeconfig's credential command as a person would type it (``aws eks get-token``)."""
    for user in (doc or {}).get("users") or []:
        exec_ = ((user or {}).get("user") or {}).get("exec") or {}
        if exec_.get("command"):
            return " ".join([str(exec_["command"]), *(str(a) for a in (exec_.get("args") or [])[:2])])
    return "its exec plugin"


class KubeApi:
    """The official client, configured from the stack's kubeconfig output. Every call has a
    timeout and one retry, and a failure to reach or use the API is one line
    (:class:`ClusterUnreachable`), never the client's traceback."""

    def __init__(self, kubeconfig: str, *, connect_timeout_s: float = 15.0, read_timeout_s: float = 120.0) -> None:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        doc = yaml.safe_load(kubeconfig)
        clusters = (doc or {}).get("clusters") or [{}]
        self.server = str((clusters[0].get("cluster") or {}).get("server", "?"))
        cfg = client.Configuration()
        cfg.retries = 1
        logging.getLogger("urllib3.connectionpool").addFilter(_NO_RETRY_WARNINGS)  # once: a set of filters
        try:
            with _loader_logs() as said:
                api_client = config.new_client_from_config_dict(doc, client_configuration=cfg)
        except ConfigException as exc:
            raise ClusterUnreachable(explain(exc, self.server, action="loading the kubeconfig") or str(exc)) from None
        # The loader logs a failed credential command and goes on with none: every call would then
        # be refused (401) for a reason the user never sees. The first call says it, in one line,
        # before it reaches for the network.
        self.no_credentials = (
            f"cluster: the kubeconfig's credential command `{_exec_command(doc)}` failed "
            f"({'; '.join(said)[:400]}): {_CREDS_HINT}"
            if said
            else ""
        )
        self.server = str(api_client.configuration.host or self.server)
        self._timeout = (connect_timeout_s, read_timeout_s)
        self._core = client.CoreV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self._client = api_client

    def _plain(self, obj: Any) -> dict[str, Any]:
        return obj if isinstance(obj, dict) else dict(self._client.sanitize_for_serialization(obj))

    @_plainly("creating the jobset")
    def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._plain(
            self._custom.create_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, dict(body), _request_timeout=self._timeout
            )
        )

    @_plainly("creating the code ConfigMap")
    def create_configmap(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        # The client takes a plain dict body as it takes its model objects.
        return self._plain(
            self._core.create_namespaced_config_map(namespace, dict(body), _request_timeout=self._timeout)
        )

    @_plainly("reading the jobset")
    def get_jobset(self, namespace: str, name: str) -> dict[str, Any]:
        return self._plain(
            self._custom.get_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, name, _request_timeout=self._timeout
            )
        )

    @_plainly("listing the job's pods")
    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        pods = self._core.list_namespaced_pod(namespace, label_selector=selector, _request_timeout=self._timeout)
        return [self._plain(p) for p in pods.items]

    @_plainly("reading a pod's log")
    def pod_log(self, namespace: str, pod: str) -> str:
        # The body itself: kubernetes 36 returns the repr of the log's bytes ("b'...'") for a str
        # response (kubernetes-client/python issue 2596), and older clients parsed a log that
        # happened to be JSON (issue 1354); the report archive in pod 0's log survives neither.
        resp = self._core.read_namespaced_pod_log(
            pod, namespace, container=CONTAINER, _request_timeout=self._timeout, _preload_content=False
        )
        try:
            return bytes(resp.data).decode("utf-8", errors="replace")
        finally:
            resp.release_conn()

    @_plainly("deleting the jobset")
    def delete_jobset(self, namespace: str, name: str) -> None:
        self._custom.delete_namespaced_custom_object(
            JOBSET_GROUP,
            JOBSET_VERSION,
            namespace,
            JOBSET_PLURAL,
            name,
            propagation_policy="Foreground",
            _request_timeout=self._timeout,
        )

    @_plainly("handing the ConfigMap to the jobset")
    def set_owner(self, namespace: str, configmap: str, owner: Mapping[str, Any]) -> None:
        self._core.patch_namespaced_config_map(
            configmap, namespace, {"metadata": {"ownerReferences": [dict(owner)]}}, _request_timeout=self._timeout
        )

    @_plainly("creating the job's NetworkPolicy")
    def create_networkpolicy(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        from kubernetes import client

        api = client.NetworkingV1Api(self._client)
        return self._plain(api.create_namespaced_network_policy(namespace, dict(body), _request_timeout=self._timeout))

    @_plainly("handing the NetworkPolicy to the jobset")
    def set_networkpolicy_owner(self, namespace: str, name: str, owner: Mapping[str, Any]) -> None:
        from kubernetes import client

        client.NetworkingV1Api(self._client).patch_namespaced_network_policy(
            name, namespace, {"metadata": {"ownerReferences": [dict(owner)]}}, _request_timeout=self._timeout
        )

    @_plainly("checking the jobset API")
    def check_jobset_api(self, namespace: str) -> None:
        """Before anything is created: the JobSet resource is served (the CRD is installed) and
        the credentials may list it in the namespace."""
        self._custom.list_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, limit=1, _request_timeout=self._timeout
        )

    @_plainly("reading the Kueue workloads")
    def list_workloads(self, namespace: str) -> list[dict[str, Any]]:
        """Kueue's Workloads in the namespace (a queued JobSet's admission state)."""
        q = kube_queue
        found = self._custom.list_namespaced_custom_object(
            q.WORKLOAD_GROUP, q.WORKLOAD_VERSION, namespace, q.WORKLOAD_PLURAL, _request_timeout=self._timeout
        )
        return [self._plain(w) for w in found.get("items", [])]

    @_plainly("listing the GPU nodes")
    def list_nodes(self, selector: str) -> list[dict[str, Any]]:
        nodes = self._core.list_node(label_selector=selector, _request_timeout=self._timeout)
        return [self._plain(n) for n in nodes.items]

    @_plainly("watching the pair jobsets")
    def watch_jobsets(self, namespace: str, selector: str, timeout_s: float) -> Iterator[dict[str, Any]]:
        """The JobSets with labels ``selector`` as they change (each current one first), for at most
        ``timeout_s``; the caller stops reading when it has what it waits for."""
        from kubernetes import watch

        w = watch.Watch()
        # A list of the current objects, then a watch from there (the API's list-then-watch).
        for event in w.stream(
            self._custom.list_namespaced_custom_object,
            JOBSET_GROUP,
            JOBSET_VERSION,
            namespace,
            JOBSET_PLURAL,
            label_selector=selector,
            timeout_seconds=max(1, int(timeout_s)),
            _request_timeout=(self._timeout[0], max(1.0, timeout_s) + self._timeout[1]),
        ):
            obj = event.get("object")
            if isinstance(obj, dict):
                yield obj

    @_plainly("reading a node")
    def get_node(self, name: str) -> dict[str, Any]:
        return self._plain(self._core.read_node(name, _request_timeout=self._timeout))

    @_plainly("tainting a node")
    def set_node_taints(self, name: str, taints: list[dict[str, Any]], resource_version: str) -> None:
        # A merge patch replaces the list whole; the resourceVersion makes it refuse (409) a
        # node changed since it was read, instead of dropping a taint another controller added.
        self._core.patch_node(
            name,
            {"metadata": {"resourceVersion": resource_version}, "spec": {"taints": taints}},
            _content_type="application/merge-patch+json",
            _request_timeout=self._timeout,
        )


def create(
    api: Api, jobset: Mapping[str, Any], bundle: Bundle, policy: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The job's NetworkPolicy first (no pod of the job is ever unprotected), the code's
    ConfigMap (pods that start before it would wait on their volume), then the JobSet, then
    the JobSet made the owner of both; the JobSet as created."""
    meta = jobset["metadata"]
    # A missing CRD or a refused identity is found before any object of the run exists.
    api.check_jobset_api(meta["namespace"])
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
    queued: kube_queue.Queued | None = None
    """Where Kueue holds the JobSet suspended: what its Workload says; None once admitted."""


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
    queued = None
    if outcome is None and kube_queue.suspended(js):
        try:
            queued = kube_queue.describe(kube_queue.find(api.list_workloads(namespace), js))
        except ClusterUnreachable as exc:  # no Kueue API, or not readable: say so, keep waiting
            queued = kube_queue.Queued(f"queued · suspended; its Kueue Workload could not be read ({exc})")
    return JobSetState(done=outcome is not None, outcome=outcome or "Running", pods=pods, queued=queued)


class QueueGaveUp(RuntimeError):
    """Kueue deactivated a queued JobSet's Workload: it will not run without someone acting."""


def follow(
    api: Api,
    namespace: str,
    name: str,
    *,
    expected_nodes: int,
    poll_s: float,
    timeout_s: float,
    say: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> JobSetState:
    """Poll until the JobSet ends. ``timeout_s`` counts from admission: while Kueue holds it
    suspended (waiting for capacity) the clock does not run, and the wait ends only when Kueue
    gives up on it (:class:`QueueGaveUp`) or it is admitted."""
    started = clock()
    admitted: float | None = None
    last = ""
    while True:
        st = poll(api, namespace, name)
        counts: dict[str, int] = {}
        for phase in st.pods.values():
            counts[phase] = counts.get(phase, 0) + 1
        now = clock()
        if st.queued is None and admitted is None:
            admitted = now
        elapsed = now - started
        line = (
            st.queued.line
            if st.queued is not None
            else f"{st.outcome.lower()} · pods "
            + (", ".join(f"{n} {p}" for p, n in sorted(counts.items())) or "none yet")
            + f" of {expected_nodes}"
        )
        if line != last:
            say(f"[{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}] jobset {name} {line}")
            last = line
        if st.done:
            return st
        if st.queued is not None and st.queued.gave_up:
            raise QueueGaveUp(
                f"jobset {name} will not run: {st.queued.gave_up}; it stays suspended (delete it with --delete, "
                f"or kubectl delete jobset {name} -n {namespace}, and submit again when capacity is likelier)"
            )
        if admitted is not None and now - admitted > timeout_s:
            raise TimeoutError(
                f"jobset {name} not finished {timeout_s:.0f} s after it was admitted; it keeps running "
                f"(delete it with --delete, or kubectl delete jobset {name} -n {namespace})"
            )
        sleep(poll_s)


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


TAINT = {"key": TAINT_KEY, "value": "failed", "effect": "NoSchedule"}
"""What a failed node gets (gpu_cluster.workloads.validate.drain.TAINT_KEY, the same as kubectl taint there)."""
TAINT_TEXT = f"{TAINT['key']}={TAINT['value']}:{TAINT['effect']}"


def taint(api: Api, node: str) -> bool:
    """Put TAINT on ``node`` (read, then a merge patch conditional on what was read); False when it
    already had it (a rerun never doubles an action)."""
    doc = api.get_node(node)
    taints = list((doc.get("spec") or {}).get("taints") or [])
    if any(t.get("key") == TAINT["key"] and t.get("effect") == TAINT["effect"] for t in taints):
        return False
    api.set_node_taints(node, [*taints, dict(TAINT)], str(doc["metadata"].get("resourceVersion", "")))
    return True


def admit(api: Api, node: str) -> bool | None:
    """Take the GPU pools' registration taint (components/contract.py UNVALIDATED_TAINT_KEY) off a
    node a validation passed, and read the node back: True when it was removed, False when the node
    had none (a node validated before, or a pool without it), None when it is still there after the
    patch. The patch is conditional on what was read, as :func:`taint`."""
    doc = api.get_node(node)
    taints = list((doc.get("spec") or {}).get("taints") or [])
    kept = [t for t in taints if t.get("key") != UNVALIDATED_TAINT_KEY]
    if len(kept) == len(taints):
        return False
    api.set_node_taints(node, kept, str(doc["metadata"].get("resourceVersion", "")))
    back = (api.get_node(node).get("spec") or {}).get("taints") or []
    return None if any(t.get("key") == UNVALIDATED_TAINT_KEY for t in back) else True


def pod_nodes(api: Api, namespace: str, name: str) -> dict[int, str]:
    """A JobSet's pods: completion index -> the Kubernetes node it ran on (``spec.nodeName``)."""
    out: dict[int, str] = {}
    for pod in api.list_pods(namespace, f"{NAME_LABEL}={name}"):
        index = (pod.get("metadata", {}).get("labels") or {}).get(INDEX_LABEL)
        node = (pod.get("spec") or {}).get("nodeName")
        if isinstance(index, str) and index.isdigit() and node:
            out[int(index)] = str(node)
    return out
