"""Kubernetes workload rules: images by digest and hardened pod templates.

They read every pod template of a workload object (Pod, Deployment, DaemonSet, StatefulSet,
ReplicaSet, Job, CronJob, JobSet) in wire form, which for Kubernetes objects is the manifest
itself, so ``manifest_findings`` also serves rendered YAML (the launcher's JobSets).

Exceptions follow Checkov's own syntax, so one annotation serves both tools: an object or pod
template annotated ``checkov.io/skip<N>: <CKV id>=<reason>`` (Checkov docs, "Suppressing and
skipping policies", Kubernetes manifests) skips that one check here too, and only with a reason.

Objects a Helm chart renders (under ``pulumi preview`` CrossGuard sees a chart's children, whose
URNs run through ``kubernetes:helm.sh/v<N>:Chart``) are third-party, pinned by chart version:
the mandatory rules leave them to the advisory ``k8s-chart-workloads``. The offline engine never
expands a chart, so offline only the stack's own objects are seen.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from gpu_cluster.policies.core import (
    RuleContext,
    StackFinding,
    StackResource,
    _get,
    _is_false,
    _is_true,
    _items,
    _strings,
    stack_rule,
)

# Pulumi's type tokens for the workload kinds: kubernetes:<group>/<version>:<Kind> ("core" for
# the legacy group). Where the pod template sits in each kind's spec.
POD_PATHS: Mapping[str, tuple[tuple[str, ...], ...]] = {
    "Pod": (("spec",),),
    "Deployment": (("spec", "template", "spec"),),
    "DaemonSet": (("spec", "template", "spec"),),
    "StatefulSet": (("spec", "template", "spec"),),
    "ReplicaSet": (("spec", "template", "spec"),),
    "Job": (("spec", "template", "spec"),),
    "CronJob": (("spec", "jobTemplate", "spec", "template", "spec"),),
}
JOBSET_KIND = "JobSet"  # jobset.x-k8s.io: spec.replicatedJobs[].template (a Job template)
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}\Z")
_CHART = re.compile(r"kubernetes:helm\.sh/v\d+:Chart\$")
_SKIP_KEY = re.compile(r"^checkov\.io/skip\d+\Z")


def kind_of(resource_type: str) -> str | None:
    """The workload kind of a Pulumi Kubernetes type token, or None."""
    if not resource_type.startswith("kubernetes:"):
        return None
    kind = resource_type.rsplit(":", 1)[-1]
    return kind if kind in POD_PATHS or kind == JOBSET_KIND else None


def pod_templates(kind: str, obj: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any], Mapping[str, Any]]]:
    """(path, pod template metadata, pod spec) of every pod template in a workload object."""
    found: list[tuple[str, Mapping[str, Any], Mapping[str, Any]]] = []
    if kind == JOBSET_KIND:
        for i, rj in enumerate(_items(_get(obj, "spec", "replicatedJobs"))):
            tpl = _get(rj, "template", "spec", "template")
            if isinstance(tpl, Mapping) and isinstance(tpl.get("spec"), Mapping):
                raw_meta = tpl.get("metadata")
                meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
                found.append((f"spec.replicatedJobs[{i}].template.spec.template.spec", meta, tpl["spec"]))
        return found
    for path in POD_PATHS.get(kind, ()):
        spec = _get(obj, *path)
        if isinstance(spec, Mapping):
            tmeta = _get(obj, *path[:-1], "metadata") if len(path) > 1 else obj.get("metadata")
            found.append((".".join(path), tmeta if isinstance(tmeta, Mapping) else {}, spec))
    return found


def skips(*metas: Any) -> dict[str, str]:
    """Checkov skip annotations with a reason: check id -> reason."""
    out: dict[str, str] = {}
    for meta in metas:
        annotations = _get(meta, "annotations")
        if not isinstance(annotations, Mapping):
            continue
        for key, value in annotations.items():
            if _SKIP_KEY.match(str(key)) and isinstance(value, str) and "=" in value:
                check, reason = value.split("=", 1)
                if reason.strip():
                    out[check.strip()] = reason.strip()
    return out


def _containers(spec: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    return [
        (f"{key}[{i}] ({c.get('name', '?')})", c)
        for key in ("initContainers", "containers", "ephemeralContainers")
        for i, c in enumerate(_items(spec.get(key)))
    ]


def digest_findings(kind: str, obj: Mapping[str, Any]) -> list[str]:
    """CKV_K8S_43: every image pinned by digest (``repo:tag@sha256:<64 hex>`` keeps the tag for people)."""
    problems = []
    for path, meta, spec in pod_templates(kind, obj):
        if "CKV_K8S_43" in skips(obj.get("metadata"), meta):
            continue
        for where, c in _containers(spec):
            image = c.get("image")
            if not isinstance(image, str) or not _DIGEST.search(image):
                problems.append(
                    f"{path}.{where}: image {image!r} is not pinned by digest (@sha256:...); a tag "
                    "can be moved to other code"
                )
    return problems


def hardening_findings(kind: str, obj: Mapping[str, Any]) -> list[str]:
    """The pod-template settings the scanners check, each with its Checkov id (see the rule)."""
    problems: list[str] = []
    namespace = _get(obj, "metadata", "namespace")
    for path, meta, spec in pod_templates(kind, obj):
        skip = skips(obj.get("metadata"), meta)

        def bad(check: str, text: str) -> None:
            if check not in skip:
                problems.append(f"{text} [{check}]")

        if namespace in (None, "", "default"):
            bad("CKV_K8S_21", f"{path}: runs in the default namespace")
        for field, check in (("hostNetwork", "CKV_K8S_19"), ("hostPID", "CKV_K8S_17"), ("hostIPC", "CKV_K8S_18")):
            if _is_true(spec.get(field)):
                bad(check, f"{path}.{field} is true: the pod shares the node's namespace")
        if not _is_false(spec.get("automountServiceAccountToken")):
            bad("CKV_K8S_38", f"{path}.automountServiceAccountToken is not false: every container gets an API token")
        raw_ctx = spec.get("securityContext")
        pod_ctx: Mapping[str, Any] = raw_ctx if isinstance(raw_ctx, Mapping) else {}
        for where, c in _containers(spec):
            raw_sc = c.get("securityContext")
            sc: Mapping[str, Any] = raw_sc if isinstance(raw_sc, Mapping) else {}
            at = f"{path}.{where}.securityContext"
            if not sc:
                bad("CKV_K8S_30", f"{at} is unset")
            if _is_true(sc.get("privileged")):
                bad("CKV_K8S_16", f"{at}.privileged is true")
            if not _is_false(sc.get("allowPrivilegeEscalation")):
                bad("CKV_K8S_20", f"{at}.allowPrivilegeEscalation is not false")
            non_root = sc.get("runAsNonRoot", pod_ctx.get("runAsNonRoot"))
            if not _is_true(non_root):
                bad("CKV_K8S_23", f"{at}.runAsNonRoot is not true (nor the pod's)")
            drop = [d.upper() for d in _strings(_get(sc, "capabilities", "drop"))]
            if "ALL" not in drop:
                bad("CKV_K8S_37", f"{at}.capabilities.drop does not drop ALL (NET_RAW and the other defaults stay)")
            seccomp = _get(sc, "seccompProfile", "type") or _get(pod_ctx, "seccompProfile", "type")
            if seccomp not in ("RuntimeDefault", "Localhost"):
                bad(
                    "CKV_K8S_31",
                    f"{at}.seccompProfile.type is {seccomp!r} (nor set on the pod), must be "
                    "RuntimeDefault or Localhost",
                )
    return problems


def manifest_findings(manifest: Mapping[str, Any]) -> list[str]:
    """Both rules' findings for one rendered manifest (``kind`` read from the manifest itself)."""
    kind = str(manifest.get("kind", ""))
    if kind not in POD_PATHS and kind != JOBSET_KIND:
        return []
    return digest_findings(kind, manifest) + hardening_findings(kind, manifest)


def _workloads(resources: Sequence[StackResource], charted: bool) -> list[tuple[StackResource, str]]:
    out = []
    for r in resources:
        kind = kind_of(r.type)
        if kind is not None and bool(_CHART.search(r.urn)) == charted:
            out.append((r, kind))
    return out


@stack_rule(
    name="k8s-images-by-digest",
    description="Every container image of a Kubernetes workload the stack writes (pod templates of Pods, "
    "Deployments, DaemonSets, StatefulSets, Jobs, CronJobs, JobSets) is pinned by digest; a tag may "
    "stay beside it (repo:tag@sha256:...). Exceptions: a checkov.io/skip annotation with a reason",
    enforcement="mandatory",
    ids=("CKV_K8S_43",),
    anchor="Checkov CKV_K8S_43",
)
def check_images_by_digest(resources: Sequence[StackResource], ctx: RuleContext) -> list[StackFinding]:
    return [
        (f"{kind} {r.name!r}: {m}", r.urn)
        for r, kind in _workloads(resources, charted=False)
        for m in digest_findings(kind, r.props)
    ]


@stack_rule(
    name="k8s-workload-hardening",
    description="Every pod template of a Kubernetes workload the stack writes runs outside the default "
    "namespace, without the node's network/PID/IPC namespaces, without a mounted service-account "
    "token, and each container with a securityContext: not privileged, no privilege escalation, "
    "non-root, all capabilities dropped, seccomp RuntimeDefault. Each finding names its Checkov id; "
    "a checkov.io/skip annotation with a reason waives that one check. NetworkPolicy coverage "
    "(CKV2_K8S_6) is not checked here: the stack's own workloads are node daemons on the host network",
    enforcement="mandatory",
    ids=(
        "CKV_K8S_16",
        "CKV_K8S_17",
        "CKV_K8S_18",
        "CKV_K8S_19",
        "CKV_K8S_20",
        "CKV_K8S_21",
        "CKV_K8S_23",
        "CKV_K8S_28",
        "CKV_K8S_30",
        "CKV_K8S_31",
        "CKV_K8S_37",
        "CKV_K8S_38",
        "KSV001",
        "KSV003",
        "KSV008",
        "KSV009",
        "KSV010",
        "KSV012",
        "KSV017",
        "KSV030",
        "KSV036",
        "KSV110",
    ),
    anchor="Checkov CKV_K8S_16-38, Trivy KSV001-110",
)
def check_workload_hardening(resources: Sequence[StackResource], ctx: RuleContext) -> list[StackFinding]:
    return [
        (f"{kind} {r.name!r}: {m}", r.urn)
        for r, kind in _workloads(resources, charted=False)
        for m in hardening_findings(kind, r.props)
    ]


@stack_rule(
    name="k8s-chart-workloads",
    description="The same image-digest and hardening checks on the workloads a pinned Helm chart renders (seen "
    "only under pulumi preview, where CrossGuard sees a chart's children); advisory: the chart's "
    "maintainers own those templates and device plugins need host access",
    enforcement="advisory",
    ids=(),
    anchor="Checkov CKV_K8S_16-43 on third-party charts",
)
def check_chart_workloads(resources: Sequence[StackResource], ctx: RuleContext) -> list[StackFinding]:
    return [
        (f"{kind} {r.name!r} (from a chart): {m}", r.urn)
        for r, kind in _workloads(resources, charted=True)
        for m in digest_findings(kind, r.props) + hardening_findings(kind, r.props)
    ]
