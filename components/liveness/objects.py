"""Every object a job's pod names exists where the pod runs, and its namespace admits it.

* existence: the namespace, the ServiceAccount, each PersistentVolumeClaim with the volume it is
  bound to and that volume's CSI driver installed on the cluster, each ConfigMap and Secret (a
  volume, an env reference, an image pull secret): in the plan, among the job's manifests, or made
  by whoever submits the job;
* admission in the namespace: Pod Security admission's enforce level against what the pod asks
  (hostPath, capabilities, privilege, ...), each ResourceQuota and LimitRange against the job.

A missing object or a rejecting namespace is a job that never starts: the API server refuses the
pod (namespace, ServiceAccount, Pod Security, quota, LimitRange) or the kubelet never starts it
(claim, ConfigMap, Secret, CSI driver). Each rule is from its upstream page (sources.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gpu_cluster.components.liveness import facts
from gpu_cluster.components.liveness.cluster import quantity
from gpu_cluster.components.liveness.facts import cite
from gpu_cluster.components.liveness.model import Check, Job, Plan

CORE = "kubernetes:core/v1"
# Namespaces every cluster has (k8s-namespace: kube-system, kube-public, default are created by the
# API server; kube-node-lease too).
BUILT_IN_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def _meta(r: Mapping[str, Any]) -> Mapping[str, Any]:
    return r.get("metadata") or {}


def _objects(plan: Plan, job: Job, kind: str) -> dict[tuple[str, str], str]:
    """(namespace, name) -> where it comes from, of every object of ``kind`` the plan or the job makes."""
    out: dict[tuple[str, str], str] = {}
    for r in plan.of(f"{CORE}:{kind}"):
        m = _meta(r.inputs)
        out[(str(m.get("namespace") or "default"), str(m.get("name") or r.name))] = f"the plan ({r.name})"
    for m in job.manifests:
        if m.get("kind") == kind:
            meta = _meta(m)
            out[(str(meta.get("namespace") or "default"), str(meta.get("name")))] = "the job's manifests"
    for made in job.created_at_submit:
        k, _, ref = made.partition(" ")
        ns, _, name = ref.partition("/")
        if k == kind:
            out[(ns, name)] = "made by the submitter with the job"
    return out


def _pods(job: Job) -> Iterator[tuple[str, str, Mapping[str, Any], int]]:
    """(object, namespace, pod spec, replicas) of each pod template."""
    for obj, pod, count in job.pods():
        ns = obj.split(" ", 1)[1].split("/", 1)[0]
        yield obj, ns, pod, count


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]


def _fail(obj: str, check: str, why: str, source: str, fix: str) -> Check:
    return Check(kind="admission", object=obj, check=check, holds=False, why=why, source=source, fix=fix)


def _ok(obj: str, check: str, why: str, source: str) -> Check:
    return Check(kind="admission", object=obj, check=check, holds=True, why=why, source=source)


def checks(plan: Plan, job: Job | None) -> list[Check]:
    if job is None or job.scheduler != "kubernetes":
        return []
    out: list[Check] = []
    namespaces = {str(_meta(r.inputs).get("name") or r.name): r for r in plan.of(f"{CORE}:Namespace")}
    for obj, ns, pod, count in _pods(job):
        if ns not in namespaces and ns not in BUILT_IN_NAMESPACES:
            out.append(
                _fail(
                    obj,
                    f"namespace {ns} exists",
                    f"the plan makes no namespace {ns} (it makes {', '.join(sorted(namespaces)) or 'none'}): "
                    "the API server rejects the job",
                    cite("k8s-namespace"),
                    f"submit into the stack's job namespace (stack output scheduler.namespace) or plan namespace {ns}",
                )
            )
            continue  # everything else in it is missing too: one reason, not ten
        out.append(_ok(obj, f"namespace {ns} exists", f"the plan makes it ({ns})", cite("k8s-namespace")))
        out += _references(plan, job, obj, ns, pod)
        labels = (
            {str(k): str(v) for k, v in (_meta(namespaces[ns].inputs).get("labels") or {}).items()}
            if ns in namespaces
            else {}
        )
        out.append(pod_security(obj, ns, labels, pod))
        out += quotas(plan, obj, ns, pod, count)
    return out


# ---------------------------------------------------------------------------------------------
# What the pod names.


def _references(plan: Plan, job: Job, obj: str, ns: str, pod: Mapping[str, Any]) -> list[Check]:
    out: list[Check] = []
    sa = str(pod.get("serviceAccountName") or pod.get("serviceAccount") or "default")
    if sa != "default":
        have = _objects(plan, job, "ServiceAccount")
        out.append(
            _ok(obj, f"ServiceAccount {ns}/{sa} exists", have[(ns, sa)], cite("k8s-namespace"))
            if (ns, sa) in have
            else _fail(
                obj,
                f"ServiceAccount {ns}/{sa} exists",
                f"nothing makes ServiceAccount {sa} in {ns}: the ServiceAccount admission controller rejects the pod",
                cite("k8s-namespace"),
                f"create ServiceAccount {sa} in {ns} (or drop serviceAccountName)",
            )
        )
    configmaps, secrets = _objects(plan, job, "ConfigMap"), _objects(plan, job, "Secret")
    for what, name, optional in _named(pod):
        have, src = (
            (configmaps, cite("k8s-configmap-volume")) if what == "ConfigMap" else (secrets, cite("k8s-secret-volume"))
        )
        check = f"{what} {ns}/{name} exists"
        if (ns, name) in have:
            out.append(_ok(obj, check, have[(ns, name)], src))
        elif optional:
            out.append(_ok(obj, check, "missing, and the pod marks it optional", src))
        else:
            out.append(
                _fail(
                    obj,
                    check,
                    f"nothing makes {what} {name} in {ns} (neither the plan, nor the job, nor its submitter): "
                    "the pod never starts",
                    src,
                    f"create {what} {name} in namespace {ns} before the job, or mark the reference optional",
                )
            )
    for vol in pod.get("volumes") or []:
        claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
        if claim:
            out += _claim(plan, obj, ns, str(claim))
    return out


def _named(pod: Mapping[str, Any]) -> Iterator[tuple[str, str, bool]]:
    """(ConfigMap or Secret, name, optional) of every reference the pod makes."""
    for vol in pod.get("volumes") or []:
        if vol.get("configMap"):
            yield "ConfigMap", str(vol["configMap"].get("name")), bool(vol["configMap"].get("optional"))
        if vol.get("secret"):
            yield "Secret", str(vol["secret"].get("secretName")), bool(vol["secret"].get("optional"))
        for src in (vol.get("projected") or {}).get("sources") or []:
            for key, kind in (("configMap", "ConfigMap"), ("secret", "Secret")):
                if src.get(key):
                    yield kind, str(src[key].get("name")), bool(src[key].get("optional"))
    for c in _containers(pod):
        for e in c.get("envFrom") or []:
            for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
                if e.get(key):
                    yield kind, str(e[key].get("name")), bool(e[key].get("optional"))
        for e in c.get("env") or []:
            ref = e.get("valueFrom") or {}
            for key, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
                if ref.get(key):
                    yield kind, str(ref[key].get("name")), bool(ref[key].get("optional"))
    for s in pod.get("imagePullSecrets") or []:
        yield "Secret", str(s.get("name")), False


def _claim(plan: Plan, obj: str, ns: str, claim: str) -> list[Check]:
    src = cite("k8s-pvc")
    check = f"PersistentVolumeClaim {ns}/{claim} exists, bound to a volume whose CSI driver runs"
    pvc = next(
        (
            r
            for r in plan.of(f"{CORE}:PersistentVolumeClaim")
            if str(_meta(r.inputs).get("name") or r.name) == claim
            and str(_meta(r.inputs).get("namespace") or "default") == ns
        ),
        None,
    )
    if pvc is None:
        return [
            _fail(
                obj,
                check,
                f"the plan makes no claim {claim} in {ns}: the pod stays Pending",
                src,
                f"claim the stack's volume (the claim the stack makes in {ns}) or plan claim {claim}",
            )
        ]
    volume = str((pvc.inputs.get("spec") or {}).get("volumeName") or "")
    pv = next(
        (r for r in plan.of(f"{CORE}:PersistentVolume") if str(_meta(r.inputs).get("name") or r.name) == volume), None
    )
    if pv is None:
        return [
            _fail(
                obj,
                check,
                f"claim {claim} names volume {volume or '(none)'}, which the plan does not make: it never binds",
                src,
                f"bind {claim} to the stack's PersistentVolume (spec.volumeName)",
            )
        ]
    driver = str(((pv.inputs.get("spec") or {}).get("csi") or {}).get("driver") or "")
    if not driver:
        return [_ok(obj, check, f"{claim} -> {volume} (not a CSI volume)", src)]
    installed, how, where = facts.csi_driver_installed(plan, driver)
    if installed:
        return [_ok(obj, check, f"{claim} -> {volume}, driver {driver} installed by {how}", f"{src}; {where}")]
    return [
        _fail(
            obj,
            check,
            f"{claim} -> {volume} needs CSI driver {driver}, and {how}: the volume never mounts "
            "(the pod stays ContainerCreating)",
            f"{cite('k8s-csi')}; {where}",
            f"install {driver} on the cluster ({where})",
        )
    ]


# ---------------------------------------------------------------------------------------------
# Pod Security admission.

LEVELS = ("privileged", "baseline", "restricted")
PSA_LABEL = "pod-security.kubernetes.io/enforce"
# k8s-pss, Baseline "Capabilities": added capabilities beyond these are forbidden.
BASELINE_CAPS = frozenset(
    "AUDIT_WRITE CHOWN DAC_OVERRIDE FOWNER FSETID KILL MKNOD NET_BIND_SERVICE SETFCAP SETGID SETPCAP SETUID SYS_CHROOT".split()
)
# k8s-pss, Restricted "Volume Types".
RESTRICTED_VOLUMES = frozenset(
    "configMap csi downwardAPI emptyDir ephemeral persistentVolumeClaim projected secret".split()
)


def violations(pod: Mapping[str, Any], level: str) -> list[str]:
    """What of ``pod`` the Pod Security Standard ``level`` forbids (k8s-pss), one phrase each."""
    if level == "privileged":
        return []
    out: list[str] = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            out.append(f"{key}: true")
    for vol in pod.get("volumes") or []:
        if vol.get("hostPath"):
            out.append(f"hostPath volume {vol.get('name')} ({vol['hostPath'].get('path')})")
    pod_sc = pod.get("securityContext") or {}
    for c in _containers(pod):
        sc = c.get("securityContext") or {}
        name = c.get("name")
        if sc.get("privileged"):
            out.append(f"container {name} privileged")
        added = [str(a) for a in (sc.get("capabilities") or {}).get("add") or []]
        allowed = BASELINE_CAPS if level == "baseline" else frozenset({"NET_BIND_SERVICE"})
        extra = [a for a in added if a not in allowed]
        if extra:
            out.append(f"container {name} adds {', '.join(extra)}")
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                out.append(f"container {name} hostPort {p['hostPort']}")
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp == "Unconfined":
            out.append(f"container {name} seccomp Unconfined")
        if level == "restricted":
            if sc.get("allowPrivilegeEscalation") is not False:
                out.append(f"container {name} allowPrivilegeEscalation not false")
            non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
            if non_root is not True:
                out.append(f"container {name} runAsNonRoot not true")
            if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
                out.append(f"container {name} runAsUser 0")
            if seccomp not in ("RuntimeDefault", "Localhost"):
                out.append(f"container {name} seccomp not RuntimeDefault")
            if "ALL" not in [str(d) for d in (sc.get("capabilities") or {}).get("drop") or []]:
                out.append(f"container {name} does not drop ALL")
    if level == "restricted":
        for vol in pod.get("volumes") or []:
            kinds = [k for k in vol if k != "name"]
            if kinds and kinds[0] not in RESTRICTED_VOLUMES and kinds[0] != "hostPath":
                out.append(f"{kinds[0]} volume {vol.get('name')}")
    return out


def pod_security(obj: str, ns: str, labels: Mapping[str, str], pod: Mapping[str, Any]) -> Check:
    level = labels.get(PSA_LABEL, "privileged")
    check = f"Pod Security admission of {ns} ({PSA_LABEL}={level}) admits it"
    src = f"{cite('k8s-psa')}; {cite('k8s-pss')}"
    if level not in LEVELS:
        return _fail(obj, check, f"{level!r} is not a level ({', '.join(LEVELS)})", src, f"set {PSA_LABEL} to a level")
    bad = violations(pod, level)
    if bad:
        return _fail(
            obj,
            check,
            f"{level} forbids: {'; '.join(bad)}: the API server rejects every pod of the job",
            src,
            f"label namespace {ns} {PSA_LABEL}=privileged (the GPU pods need what {level} forbids), "
            "or drop what it forbids from the pod",
        )
    why = (
        "no label: privileged (the default)"
        if PSA_LABEL not in labels
        else f"nothing the pod asks is forbidden at {level}"
    )
    return _ok(obj, check, why, src)


# ---------------------------------------------------------------------------------------------
# ResourceQuota and LimitRange.


def _container_amounts(c: Mapping[str, Any], part: str) -> dict[str, float]:
    res = c.get("resources") or {}
    out = {str(k): quantity(v) for k, v in (res.get(part) or {}).items()}
    if part == "requests":
        # A request left out defaults to the limit (k8s-resources).
        for k, v in (res.get("limits") or {}).items():
            out.setdefault(str(k), quantity(v))
    return out


def pod_amounts(pod: Mapping[str, Any], part: str) -> dict[str, float]:
    """Per resource: the pod's ``requests`` or ``limits`` (containers summed, init containers' max)."""
    total: dict[str, float] = {}
    for c in pod.get("containers") or []:
        for k, v in _container_amounts(c, part).items():
            total[k] = total.get(k, 0.0) + v
    for c in pod.get("initContainers") or []:
        for k, v in _container_amounts(c, part).items():
            total[k] = total[k] + v if c.get("restartPolicy") == "Always" else max(total.get(k, 0.0), v)
    return total


# Compute resources a quota makes every container state (k8s-quota).
COMPUTE = ("cpu", "memory")


def _in(plan: Plan, kind: str, ns: str) -> list[tuple[str, Mapping[str, Any]]]:
    return [
        (str(_meta(r.inputs).get("name") or r.name), r.inputs.get("spec") or {})
        for r in plan.of(f"{CORE}:{kind}")
        if str(_meta(r.inputs).get("namespace") or "default") == ns
    ]


def quotas(plan: Plan, obj: str, ns: str, pod: Mapping[str, Any], count: int) -> list[Check]:
    out: list[Check] = []
    req, lim = pod_amounts(pod, "requests"), pod_amounts(pod, "limits")
    # A LimitRange's defaults fill in what a container leaves out before the quota is charged.
    defaulted = {
        (part, str(res))
        for _, lr in _in(plan, "LimitRange", ns)
        for item in lr.get("limits") or []
        for part, key in (("limits", "default"), ("requests", "defaultRequest"), ("requests", "default"))
        for res in item.get(key) or {}
    }
    for name, spec in _in(plan, "ResourceQuota", ns):
        check = f"ResourceQuota {ns}/{name} holds the job's {count} pods"
        over: list[str] = []
        for key, hard in (spec.get("hard") or {}).items():
            key, cap = str(key), quantity(hard)
            if key == "pods":
                used = float(count)
                if used > cap:
                    over.append(f"{key}: the job asks {used:g}, the quota allows {cap:g}")
                continue
            part, res = (
                ("limits", key[len("limits.") :])
                if key.startswith("limits.")
                else ("requests", key.removeprefix("requests."))
            )
            if res in COMPUTE and (part, res) not in defaulted:
                # k8s-quota: with a quota on cpu or memory, a container that sets no value for it is refused.
                bare = [str(c.get("name")) for c in _containers(pod) if res not in _container_amounts(c, part)]
                if bare:
                    over.append(
                        f"{key} is limited and container(s) {', '.join(bare)} set no {res} {part} (every pod is refused)"
                    )
                    continue
            used = (lim if part == "limits" else req).get(res, 0.0) * count
            if used > cap:
                over.append(f"{key}: the job asks {used:g}, the quota allows {cap:g}")
        out.append(
            _fail(
                obj,
                check,
                "; ".join(over) + ": pods past the quota are refused and the job never gathers",
                cite("k8s-quota"),
                f"raise ResourceQuota {ns}/{name} to the job's amounts or run fewer or smaller pods",
            )
            if over
            else _ok(obj, check, "every hard limit covers the whole job", cite("k8s-quota"))
        )
    for name, spec in _in(plan, "LimitRange", ns):
        check = f"LimitRange {ns}/{name} admits the pod"
        over = []
        for item in spec.get("limits") or []:
            kind = str(item.get("type", "Container"))
            maxima = {str(k): quantity(v) for k, v in (item.get("max") or {}).items()}
            targets = (
                [
                    (str(c.get("name")), _container_amounts(c, "limits") | _container_amounts(c, "requests"))
                    for c in _containers(pod)
                ]
                if kind == "Container"
                else [("the pod", {**req, **lim})]
                if kind == "Pod"
                else []
            )
            for who, amounts in targets:
                for res, cap in maxima.items():
                    if amounts.get(res, 0.0) > cap:
                        over.append(f"{who} {res} {amounts[res]:g} over the {kind} max {cap:g}")
        out.append(
            _fail(
                obj,
                check,
                "; ".join(over) + ": the API server rejects the pod",
                cite("k8s-limitrange"),
                f"raise the max of LimitRange {ns}/{name} or ask less",
            )
            if over
            else _ok(obj, check, "every max covers the pod", cite("k8s-limitrange"))
        )
    return out
