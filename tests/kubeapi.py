"""A Kubernetes API server for tests: an in-memory object store served over HTTP on 127.0.0.1.

No kube-apiserver can run here, so the commands that talk to one (``validate submit`` on
Kubernetes, ``gpu-cluster heal``) are tested against this: the official ``kubernetes`` client,
configured from :meth:`KubeApiServer.kubeconfig`, talks to it over a real socket exactly as it
would to a cluster. What it speaks, and how (the REST conventions of the Kubernetes API
reference, "API Concepts", kubernetes.io/docs/reference/using-api/api-concepts/, read 2026-12):

- paths: ``/api/v1/...`` (the core group) and ``/apis/<group>/<version>/...``, namespaced
  (``/namespaces/<ns>/<plural>[/<name>[/<subresource>]]``) and cluster-scoped
  (``/<plural>[/<name>[/<subresource>]]``); a list across namespaces at ``/<plural>``;
- verbs: create (POST), get, list (``labelSelector``, ``fieldSelector``, ``limit``), watch
  (``?watch=true``: a chunked stream of ``{"type": ADDED|MODIFIED|DELETED, "object": ...}`` lines
  from ``resourceVersion``, ending after ``timeoutSeconds``), patch (JSON merge patch, RFC 7386;
  strategic merge patch on built-in kinds, merged like a merge patch with lists replaced; JSON
  patch, RFC 6902; custom resources refuse strategic merge with 415 as the real server does),
  replace (PUT, with the ``resourceVersion`` conflict check: 409 Conflict when the object changed
  since it was read, which is what a ``coordination.k8s.io/v1`` Lease's holders rely on), delete (``propagationPolicy``:
  dependents named by ``ownerReferences`` are deleted with their owner, standing in for the
  garbage collector);
- subresources: ``status`` (get, patch, replace), ``pods/log`` (``container``) and
  ``pods/eviction`` (POST a policy/v1 Eviction: the pod is deleted, unless a PodDisruptionBudget
  of its namespace whose ``spec.selector.matchLabels`` it matches has ``status.disruptionsAllowed``
  under 1, which the API server answers with 429 TooManyRequests, as "API-initiated eviction",
  kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/, says; an allowed eviction takes
  one from ``disruptionsAllowed``, as the server does before the disruption controller recounts)
  built in; :meth:`KubeApiServer.subresource` adds others (a handler per resource, name and method);
- the service proxy, ``/api/v1/namespaces/<ns>/services/<name>[:<port>]/proxy/<path>``
  (kubernetes.io/docs/tasks/access-application-cluster/access-cluster-services, "Manually
  constructing apiserver proxy URLs", read 2026-12-07): the request, its method, body and
  Content-Type, is forwarded to the backend :meth:`KubeApiServer.proxy_to` names for that service
  and port (a real server on 127.0.0.1 standing in for the service's pods) and its answer returned;
  404 where the Service object does not exist, 503 where it has no backend (the API server's "no
  endpoints available for service");
- errors as ``Status`` objects (404 NotFound, 409 AlreadyExists / Conflict, 422 Invalid, 415,
  405 MethodNotAllowed, 401 Unauthorized when the server was given a token).

No controller runs: a test plays the ones it needs through :attr:`KubeApiServer.store` (its
``on`` hooks fire when an object is created, patched or deleted; ``put``/``set_log`` change the
world as a controller or a kubelet would). Every request is kept in :attr:`KubeApiServer.requests`.
"""

from __future__ import annotations

import builtins
import copy
import itertools
import json
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Resource:
    """One kind the server serves."""

    group: str
    """'' for the core group."""
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    builtin: bool = True
    """Built-in kinds take strategic merge patches; custom resources do not."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


BUILTIN: tuple[Resource, ...] = (
    Resource("", "v1", "pods", "Pod"),
    Resource("", "v1", "configmaps", "ConfigMap"),
    Resource("", "v1", "secrets", "Secret"),
    Resource("", "v1", "services", "Service"),
    Resource("", "v1", "events", "Event"),
    Resource("", "v1", "serviceaccounts", "ServiceAccount"),
    Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"),
    Resource("", "v1", "nodes", "Node", namespaced=False),
    Resource("", "v1", "namespaces", "Namespace", namespaced=False),
    Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False),
    Resource("batch", "v1", "jobs", "Job"),
    Resource("apps", "v1", "daemonsets", "DaemonSet"),
    Resource("apps", "v1", "deployments", "Deployment"),
    Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"),
    Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget"),
    Resource("coordination.k8s.io", "v1", "leases", "Lease"),
    Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", builtin=False),
)


class ApiError(Exception):
    """Answered as a Kubernetes ``Status`` with this code and reason."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def status(self) -> Obj:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


def not_found(res: Resource, name: str) -> ApiError:
    what = f"{res.plural}.{res.group}" if res.group else res.plural
    return ApiError(404, "NotFound", f'{what} "{name}" not found')


# ---------------------------------------------------------------------------------------------
# Selectors (labels.Parse and fields.ParseSelector, the forms kubectl and the client send).

_SET = re.compile(r"^\s*([^\s!=,()]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_terms(selector: str) -> list[str]:
    """Split on commas outside parentheses (``a in (x,y),b=c``)."""
    terms, depth, cur = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        terms.append(cur)
    return [t.strip() for t in terms if t.strip()]


def label_match(selector: str, labels: Mapping[str, str]) -> bool:
    for term in _split_terms(selector or ""):
        if (m := _SET.match(term)) is not None:
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",") if v.strip()}
            if (op == "in") != (key in labels and labels[key] in values):
                return False
        elif "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = (s.strip() for s in term.replace("==", "=").split("=", 1))
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif term not in labels:
            return False
    return True


def _field(obj: Mapping[str, Any], path: str) -> str | None:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return None if cur is None else str(cur)


def field_match(selector: str, obj: Mapping[str, Any]) -> bool:
    for term in _split_terms(selector or ""):
        neg = "!=" in term
        key, value = (s.strip() for s in term.replace("==", "=").replace("!=", "=").split("=", 1))
        if (_field(obj, key) == value) == neg:
            return False
    return True


# ---------------------------------------------------------------------------------------------
# Patches.


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, ``null`` removes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", f"JSON patch path {path!r} does not start with /")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(doc: Any, ops: list[Mapping[str, Any]]) -> Any:
    """RFC 6902: add, remove, replace, test (what clients send to change one field)."""
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = _pointer(str(op.get("path", "")))
        if not parts:
            raise ApiError(422, "Invalid", "JSON patch on the whole object is not supported here")
        parent: Any = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent.setdefault(p, {})
        last = parts[-1]
        kind = op.get("op")
        if kind == "test":
            have = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if have != op.get("value"):
                raise ApiError(422, "Invalid", f"JSON patch test failed at {op.get('path')}")
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                idx = len(parent) if last == "-" else int(last)
                if kind == "add":
                    parent.insert(idx, copy.deepcopy(op.get("value")))
                else:
                    parent[idx] = copy.deepcopy(op.get("value"))
            else:
                if kind == "replace" and last not in parent:
                    raise ApiError(422, "Invalid", f"JSON patch replace: no {op.get('path')}")
                parent[last] = copy.deepcopy(op.get("value"))
        elif kind == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            elif last in parent:
                del parent[last]
            else:
                raise ApiError(422, "Invalid", f"JSON patch remove: no {op.get('path')}")
        else:
            raise ApiError(422, "Invalid", f"JSON patch op {kind!r} is not supported here (add, remove, replace, test)")
    return doc


# ---------------------------------------------------------------------------------------------
# The store.

Hook = Callable[["Store", str, Obj], None]
"""(store, event type ADDED|MODIFIED|DELETED, the object as stored) -> None."""


@dataclass(slots=True)
class _Event:
    rv: int
    type: str
    res: Resource
    obj: Obj


@dataclass(slots=True)
class Store:
    resources: dict[tuple[str, str, str], Resource] = field(default_factory=dict)
    objects: dict[tuple[str, str, str, str, str], Obj] = field(default_factory=dict)
    """(group, version, plural, namespace or '', name) -> object."""
    logs: dict[tuple[str, str, str], str] = field(default_factory=dict)
    """(namespace, pod, container or '') -> log text."""
    events: list[_Event] = field(default_factory=list)
    hooks: dict[tuple[str, str], list[Hook]] = field(default_factory=dict)
    """(plural, event type or '*') -> callbacks, run after the change, outside the lock."""
    _rv: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _cond: threading.Condition = field(default_factory=threading.Condition)
    last_rv: int = 0

    def __post_init__(self) -> None:
        for res in BUILTIN:
            self.register(res)

    def register(self, res: Resource) -> Resource:
        self.resources[(res.group, res.version, res.plural)] = res
        return res

    def resource(self, plural: str, group: str | None = None) -> Resource:
        found = [r for r in self.resources.values() if r.plural == plural and (group is None or r.group == group)]
        if len(found) != 1:
            raise KeyError(f"resource {plural!r} (group {group!r}): {len(found)} registered")
        return found[0]

    def on(self, plural: str, hook: Hook, event: str = "*") -> None:
        """Call ``hook`` after an object of ``plural`` is created (ADDED), changed (MODIFIED) or
        deleted (DELETED); ``event`` '*' for all three."""
        self.hooks.setdefault((plural, event), []).append(hook)

    # -- reading

    def _key(self, res: Resource, ns: str, name: str) -> tuple[str, str, str, str, str]:
        return (res.group, res.version, res.plural, ns if res.namespaced else "", name)

    def get(self, res: Resource, ns: str, name: str) -> Obj:
        with self._cond:
            obj = self.objects.get(self._key(res, ns, name))
            if obj is None:
                raise not_found(res, name)
            return copy.deepcopy(obj)

    def list(self, res: Resource, ns: str | None, labels: str = "", fields: str = "") -> builtins.list[Obj]:
        """``ns`` None: every namespace."""
        with self._cond:
            out = []
            for (g, v, p, ons, _), obj in sorted(self.objects.items()):
                if (g, v, p) != (res.group, res.version, res.plural) or (ns is not None and ons != ns):
                    continue
                if label_match(labels, obj.get("metadata", {}).get("labels") or {}) and field_match(fields, obj):
                    out.append(copy.deepcopy(obj))
            return out

    # -- writing (every change is an event, with a new resourceVersion)

    def _stamp(self, obj: Obj) -> int:
        rv = next(self._rv)
        obj["metadata"]["resourceVersion"] = str(rv)
        self.last_rv = rv
        return rv

    def _emit(self, type_: str, res: Resource, obj: Obj) -> None:
        self.events.append(_Event(int(obj["metadata"]["resourceVersion"]), type_, res, copy.deepcopy(obj)))
        self._cond.notify_all()

    def _fire(self, type_: str, res: Resource, obj: Obj) -> None:
        for key in ((res.plural, type_), (res.plural, "*")):
            for hook in self.hooks.get(key, []):
                hook(self, type_, copy.deepcopy(obj))

    def create(self, res: Resource, ns: str, body: Mapping[str, Any]) -> Obj:
        obj = copy.deepcopy(dict(body))
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{uuid.uuid4().hex[:5]}"
        name = meta.get("name")
        if not name:
            raise ApiError(422, "Invalid", f"{res.kind} is invalid: metadata.name: Required value")
        if res.namespaced:
            if meta.get("namespace") not in (None, ns):
                raise ApiError(
                    400, "BadRequest", "the namespace of the provided object does not match the namespace sent"
                )
            meta["namespace"] = ns
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        meta.setdefault("generation", 1)
        with self._cond:
            key = self._key(res, ns, name)
            if key in self.objects:
                raise ApiError(409, "AlreadyExists", f'{res.plural} "{name}" already exists')
            self._stamp(obj)
            self.objects[key] = obj
            self._emit("ADDED", res, obj)
            made = copy.deepcopy(obj)
        self._fire("ADDED", res, made)
        return made

    def put(self, res: Resource, ns: str, obj: Mapping[str, Any], *, check_rv: bool = False) -> Obj:
        """Replace (or, from a test playing a controller, create) an object whole."""
        new = copy.deepcopy(dict(obj))
        name = new["metadata"]["name"]
        with self._cond:
            key = self._key(res, ns, name)
            old = self.objects.get(key)
            if old is None:
                if check_rv:
                    raise not_found(res, name)
                new["metadata"].setdefault("uid", str(uuid.uuid4()))
                new["metadata"].setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
                if res.namespaced:
                    new["metadata"]["namespace"] = ns
            else:
                sent = new["metadata"].get("resourceVersion")
                if check_rv and sent and sent != old["metadata"]["resourceVersion"]:
                    raise ApiError(
                        409,
                        "Conflict",
                        f'Operation cannot be fulfilled on {res.plural} "{name}": the object has been modified; '
                        "please apply your changes to the latest version and try again",
                    )
                new["metadata"]["uid"] = old["metadata"]["uid"]
                new["metadata"]["creationTimestamp"] = old["metadata"].get("creationTimestamp")
            new["apiVersion"], new["kind"] = res.api_version, res.kind
            self._stamp(new)
            self.objects[key] = new
            type_ = "ADDED" if old is None else "MODIFIED"
            self._emit(type_, res, new)
            made = copy.deepcopy(new)
        self._fire(type_, res, made)
        return made

    def patch(self, res: Resource, ns: str, name: str, content_type: str, patch: Any, *, sub: str = "") -> Obj:
        kind = content_type.split(";")[0].strip().lower()
        if kind == "application/strategic-merge-patch+json" and not res.builtin:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types include: "
                f"application/json-patch+json, application/merge-patch+json (strategic merge patch is not "
                f"supported for the custom resource {res.plural}.{res.group})",
            )
        with self._cond:
            cur = self.get(res, ns, name)
            if kind in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                if not isinstance(patch, Mapping):
                    raise ApiError(422, "Invalid", "a merge patch must be a JSON object")
                if sub == "status":
                    patch = {"status": patch.get("status")} if "status" in patch else {}
                elif "status" in patch and sub == "":
                    patch = {k: v for k, v in patch.items() if k != "status"}  # status only through /status
                new = merge_patch(cur, patch)
            elif kind == "application/json-patch+json":
                if not isinstance(patch, list):
                    raise ApiError(422, "Invalid", "a JSON patch must be a JSON array")
                new = json_patch(cur, patch)
            else:
                raise ApiError(415, "UnsupportedMediaType", f"unsupported patch type {content_type!r}")
            for keep in ("name", "namespace", "uid", "creationTimestamp"):
                if keep in cur["metadata"]:
                    new.setdefault("metadata", {})[keep] = cur["metadata"][keep]
            new["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
        return self.put(res, ns, new)

    def delete(self, res: Resource, ns: str, name: str, propagation: str = "Background") -> Obj:
        with self._cond:
            key = self._key(res, ns, name)
            obj = self.objects.pop(key, None)
            if obj is None:
                raise not_found(res, name)
            self._stamp(obj)
            self._emit("DELETED", res, obj)
            gone = copy.deepcopy(obj)
        self._fire("DELETED", res, gone)
        if propagation != "Orphan":
            # The garbage collector's part: dependents whose ownerReferences name the deleted uid.
            uid = gone["metadata"]["uid"]
            for (g, v, p, ons, oname), dep in list(self.objects.items()):
                owners = dep.get("metadata", {}).get("ownerReferences") or []
                if any(o.get("uid") == uid for o in owners):
                    with_res = self.resources[(g, v, p)]
                    try:
                        self.delete(with_res, ons, oname, propagation)
                    except ApiError:
                        pass  # already gone
        return gone

    def set_log(self, ns: str, pod: str, text: str, container: str = "") -> None:
        """What ``pods/log`` answers for the pod (and container, '' for the pod's only one)."""
        with self._cond:
            self.logs[(ns, pod, container)] = text

    def events_after(self, rv: int, res: Resource) -> builtins.list[_Event]:
        return [e for e in self.events if e.rv > rv and e.res == res]


# ---------------------------------------------------------------------------------------------
# The HTTP side.

SubHandler = Callable[["KubeApiServer", Resource, str, str, "Request"], tuple[int, Any]]
"""(server, resource, namespace, name, request) -> (HTTP status, JSON body or str for text/plain)."""


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: Any


_PROXY = re.compile(
    r"^/api/v1/namespaces/(?P<ns>[^/]+)/services/(?P<svc>[^/:]+)(?::(?P<port>[^/]+))?/proxy(?P<rest>/.*)?$"
)
_PATH = re.compile(
    r"^/(?:api/(?P<cv>v1)|apis/(?P<g>[^/]+)/(?P<v>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+)(?=/))?"
    r"/(?P<plural>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?/?$"
)


class KubeApiServer:
    """The server; a context manager (``with KubeApiServer() as api: ... api.kubeconfig()``)."""

    def __init__(self, token: str | None = None) -> None:
        self.store = Store()
        self.token = token
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        """(method, path, query) of every request, in order."""
        self.subresources: dict[tuple[str, str, str], SubHandler] = {}
        self.backends: dict[tuple[str, str, str], str] = {}
        """(namespace, service, port) -> the base URL the service proxy forwards to."""
        self.subresource("pods", "log", "GET")(_pod_log)
        self.subresource("pods", "eviction", "POST")(_eviction)
        for method in ("GET", "PATCH", "PUT"):
            for plural in {r.plural for r in self.store.resources.values()}:
                self.subresource(plural, "status", method)(_status)
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="kubeapi", daemon=True)

    # -- set-up

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def kubeconfig(self, namespace: str = "default") -> str:
        user: dict[str, Any] = {"token": self.token} if self.token else {}
        return yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "test", "cluster": {"server": self.url}}],
                "users": [{"name": "test", "user": user}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test", "namespace": namespace}}],
                "current-context": "test",
            }
        )

    def register(self, group: str, version: str, plural: str, kind: str, *, namespaced: bool = True) -> Resource:
        """Serve a custom resource (``builtin=False``: no strategic merge patch)."""
        res = Resource(group, version, plural, kind, namespaced=namespaced, builtin=False)
        self.store.register(res)
        for method in ("GET", "PATCH", "PUT"):
            self.subresource(plural, "status", method)(_status)
        return res

    def proxy_to(self, namespace: str, service: str, port: str, url: str) -> None:
        """The service proxy forwards ``<service>:<port>`` of ``namespace`` to ``url``."""
        self.backends[(namespace, service, port)] = url.rstrip("/")

    def proxy(self, req: Request, raw: bytes) -> tuple[int, bytes, str]:
        """Forward a service-proxy request to its backend: (status, body, content type)."""
        m = _PROXY.match(req.path)
        assert m is not None
        ns, svc, port = m.group("ns"), m.group("svc"), m.group("port") or ""
        self.store.get(self.store.resource("services"), ns, svc)  # 404 first, as the server does
        base = self.backends.get((ns, svc, port))
        if base is None:
            raise ApiError(503, "ServiceUnavailable", f'no endpoints available for service "{svc}:{port}"')
        query = urllib.parse.urlencode(dict(req.query))
        fwd = urllib.request.Request(
            base + (m.group("rest") or "/") + (f"?{query}" if query else ""),
            data=raw if req.method in ("POST", "PUT", "PATCH") else None,
            method=req.method,
            headers={"Content-Type": req.headers.get("content-type", "")} if raw else {},
        )
        try:
            with urllib.request.urlopen(fwd, timeout=60) as resp:
                return int(resp.status), resp.read(), resp.headers.get("Content-Type", "text/plain")
        except urllib.error.HTTPError as err:
            return int(err.code), err.read(), err.headers.get("Content-Type", "text/plain")

    def subresource(self, plural: str, name: str, method: str) -> Callable[[SubHandler], SubHandler]:
        """Decorator: serve ``<plural>/<object>/<name>`` for ``method`` with the handler."""

        def add(fn: SubHandler) -> SubHandler:
            self.subresources[(plural, name, method.upper())] = fn
            return fn

        return add

    def __enter__(self) -> KubeApiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stopping.set()
        with self.store._cond:
            self.store._cond.notify_all()
        self._server.shutdown()
        self._server.server_close()

    # -- routing

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                split = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
                server.requests.append((self.command, split.path, query))
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if _PROXY.match(split.path):
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    try:
                        if server.token is not None and headers.get("authorization") != f"Bearer {server.token}":
                            raise ApiError(401, "Unauthorized", "Unauthorized")
                        code, data, ctype = server.proxy(Request(self.command, split.path, query, headers, None), raw)
                    except ApiError as err:
                        self._json(err.code, err.status())
                        return
                    self._send(code, data, ctype)
                    return
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    self._json(400, ApiError(400, "BadRequest", "the body is not JSON").status())
                    return
                req = Request(self.command, split.path, query, {k.lower(): v for k, v in self.headers.items()}, body)
                try:
                    if server.token is not None and req.headers.get("authorization") != f"Bearer {server.token}":
                        raise ApiError(401, "Unauthorized", "Unauthorized")
                    if req.method == "GET" and query.get("watch", "").lower() in ("true", "1"):
                        self._watch(req)
                        return
                    code, answer = server.dispatch(req)
                except ApiError as err:
                    self._json(err.code, err.status())
                    return
                if isinstance(answer, str):
                    self._send(code, answer.encode(), "text/plain")
                else:
                    self._json(code, answer)

            def _send(self, code: int, data: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _json(self, code: int, doc: Any) -> None:
                self._send(code, json.dumps(doc).encode(), "application/json")

            def _watch(self, req: Request) -> None:
                res, ns, name, sub = server.route(req.path)
                if name or sub:
                    raise ApiError(405, "MethodNotAllowed", "watch is served on collections only")
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for event in server.watch(res, ns, req.query):
                    data = json.dumps(event).encode() + b"\n"
                    try:
                        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                        self.wfile.flush()
                    except OSError:
                        return
                try:
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    pass

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        return Handler

    def route(self, path: str) -> tuple[Resource, str | None, str, str]:
        m = _PATH.match(path)
        if m is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        group, version = ("", m.group("cv")) if m.group("cv") else (m.group("g"), m.group("v"))
        res = self.store.resources.get((group, version, m.group("plural")))
        if res is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        ns = m.group("ns")
        if ns is not None and not res.namespaced:
            raise ApiError(404, "NotFound", f"{res.plural} is not namespaced ({path})")
        return res, ns, m.group("name") or "", m.group("sub") or ""

    def dispatch(self, req: Request) -> tuple[int, Any]:
        res, ns, name, sub = self.route(req.path)
        store, q = self.store, req.query
        if sub:
            handler = self.subresources.get((res.plural, sub, req.method))
            if handler is None:
                raise ApiError(404, "NotFound", f"{res.plural}/{sub} does not answer {req.method} here")
            return handler(self, res, ns or "", name, req)
        if res.namespaced and ns is None and (name or req.method != "GET"):
            raise ApiError(404, "NotFound", f"{res.plural} is namespaced: use /namespaces/<ns>/{res.plural}")
        where = ns or ""
        if req.method == "GET" and name:
            return 200, store.get(res, where, name)
        if req.method == "GET":
            items = store.list(
                res, ns if res.namespaced else None, q.get("labelSelector", ""), q.get("fieldSelector", "")
            )
            if q.get("limit", "").isdigit() and int(q["limit"]) > 0:
                items = items[: int(q["limit"])]
            return 200, {
                "apiVersion": res.api_version,
                "kind": f"{res.kind}List",
                "metadata": {"resourceVersion": str(store.last_rv)},
                "items": items,
            }
        if req.method == "POST" and not name:
            if not isinstance(req.body, Mapping):
                raise ApiError(400, "BadRequest", "the body must be an object")
            return 201, store.create(res, where, req.body)
        if req.method == "PUT" and name:
            if not isinstance(req.body, Mapping) or req.body.get("metadata", {}).get("name") != name:
                raise ApiError(400, "BadRequest", "the body's metadata.name must be the name in the path")
            store.get(res, where, name)  # 404 first
            return 200, store.put(res, where, req.body, check_rv=True)
        if req.method == "PATCH" and name:
            return 200, store.patch(res, where, name, req.headers.get("content-type", ""), req.body)
        if req.method == "DELETE" and name:
            policy = q.get("propagationPolicy") or (req.body or {}).get("propagationPolicy") or "Background"
            gone = store.delete(res, where, name, str(policy))
            return 200, gone
        raise ApiError(405, "MethodNotAllowed", f"{req.method} {req.path} is not served here")

    def watch(self, res: Resource, ns: str | None, query: Mapping[str, str]) -> Iterator[Obj]:
        """Events for a watch: the current objects as ADDED (no ``resourceVersion``, or "0"), then
        every change after it, until ``timeoutSeconds`` (default 30) or the server stops."""
        labels, fields = query.get("labelSelector", ""), query.get("fieldSelector", "")
        timeout = float(query.get("timeoutSeconds") or 30)
        deadline = time.monotonic() + timeout
        store = self.store

        def wanted(obj: Obj) -> bool:
            meta = obj.get("metadata", {})
            return (
                (ns is None or not res.namespaced or meta.get("namespace") == ns)
                and label_match(labels, meta.get("labels") or {})
                and field_match(fields, obj)
            )

        rv_text = query.get("resourceVersion", "")
        if rv_text in ("", "0"):
            with store._cond:
                rv = store.last_rv
                current = store.list(res, ns if res.namespaced else None, labels, fields)
            for obj in current:
                yield {"type": "ADDED", "object": obj}
        else:
            rv = int(rv_text)
        while not self._stopping.is_set():
            with store._cond:
                pending = [e for e in store.events_after(rv, res) if wanted(e.obj)]
                if not pending:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    store._cond.wait(timeout=min(left, 0.5))
                    pending = [e for e in store.events_after(rv, res) if wanted(e.obj)]
                if pending:
                    rv = pending[-1].rv
                else:
                    rv = max(rv, max((e.rv for e in store.events if e.res == res), default=rv))
            for e in pending:
                yield {"type": e.type, "object": copy.deepcopy(e.obj)}
            if time.monotonic() >= deadline:
                return


def _pod_log(server: KubeApiServer, res: Resource, ns: str, name: str, req: Request) -> tuple[int, Any]:
    pod = server.store.get(res, ns, name)
    containers = [c.get("name", "") for c in (pod.get("spec", {}).get("containers") or [])]
    want = req.query.get("container", "")
    if want and containers and want not in containers:
        raise ApiError(400, "BadRequest", f"container {want} is not valid for pod {name}")
    if not want and len(containers) > 1:
        raise ApiError(
            400,
            "BadRequest",
            f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]",
        )
    logs = server.store.logs
    text = logs.get((ns, name, want)) if want else None
    if text is None:
        text = logs.get((ns, name, ""), "")
    return 200, text


def _status(server: KubeApiServer, res: Resource, ns: str, name: str, req: Request) -> tuple[int, Any]:
    store = server.store
    if req.method == "GET":
        return 200, store.get(res, ns, name)
    if req.method == "PATCH":
        return 200, store.patch(res, ns, name, req.headers.get("content-type", ""), req.body, sub="status")
    cur = store.get(res, ns, name)
    body = req.body if isinstance(req.body, Mapping) else {}
    cur["status"] = copy.deepcopy(body.get("status"))
    cur["metadata"]["resourceVersion"] = (body.get("metadata") or {}).get("resourceVersion") or cur["metadata"][
        "resourceVersion"
    ]
    return 200, store.put(res, ns, cur, check_rv=True)


def _eviction(server: KubeApiServer, res: Resource, ns: str, name: str, req: Request) -> tuple[int, Any]:
    store = server.store
    pod = store.get(res, ns, name)
    labels = pod.get("metadata", {}).get("labels") or {}
    pdbs = store.resource("poddisruptionbudgets", "policy")
    for pdb in store.list(pdbs, ns):
        want = ((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        if not want or any(labels.get(k) != v for k, v in want.items()):
            continue
        allowed = int((pdb.get("status") or {}).get("disruptionsAllowed") or 0)
        if allowed < 1:
            raise ApiError(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            )
        pdb.setdefault("status", {})["disruptionsAllowed"] = allowed - 1
        store.put(pdbs, ns, pdb)
    store.delete(res, ns, name)
    return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
