"""In-cluster add-ons shared by EKS and GKE, installed through pulumi-kubernetes.

Charts go through ``helm.v4.Chart``: it renders in the Kubernetes provider itself, so no
local ``helm`` binary is needed (``helm.v3.Chart`` shells out to one), and each chart stays
one resource in the offline plan. Versions are pinned so that a ``pulumi up`` months later
installs what was tested.
"""

from __future__ import annotations

from typing import Mapping

import pulumi
import pulumi_kubernetes as k8s

from gpu_cluster.components.image_pins import chart_image

# JobSet: the controller the validation job's launcher submits to (kubernetes-sigs/jobset;
# chart published with each release at registry.k8s.io/jobset/charts/jobset). 0.12.0 is the
# latest release (tag v0.12.0, f22e565, 2026-05-08; charts/jobset/README.md at 08dfbdf,
# 2026-08-18: `helm install ... oci://registry.k8s.io/jobset/charts/jobset --version 0.12.0`).
# The AWS pins (EKS, charts, Slurm) are in components/aws/versions.py.
JOBSET_CHART = "oci://registry.k8s.io/jobset/charts/jobset"
JOBSET_VERSION = "0.12.0"
JOBSET_NAMESPACE = "jobset-system"
# The controller image the chart runs: registry.k8s.io/jobset/jobset at the release's tag (the
# project's promoted image, kubernetes/k8s.io registry.k8s.io/images/k8s-staging-jobset/images.yaml;
# NVIDIA/aicr docs/user/container-images.md at 005da13 lists registry.k8s.io/jobset/jobset:v0.11.0
# for its 0.11 chart). No public source read here gives the digest of v0.12.0 (the promoter manifest
# stored stops at v0.8.2), so it is pulled by tag unless the stack pins it (components/image_pins.py).
# The chart writes the image as "{{ .Values.image.repository }}:{{ .Values.image.tag | default
# .Chart.AppVersion }}" (charts/jobset/templates/controller/deployment.yaml line 45 at v0.12.0,
# f22e565), so a pin goes in as repository and tag@digest. The published chart's values name that
# image: the release packaging rewrites the git values' staging repository to registry.k8s.io/jobset
# with the tag and pullPolicy IfNotPresent (hack/helm-chart-package.sh lines 32 and 48 at v0.12.0).
JOBSET_IMAGE = f"registry.k8s.io/jobset/jobset:v{JOBSET_VERSION}"

# The namespace the workload pods (the validation job and user jobs) run in, with the claims they
# mount (a pod mounts only claims of its own namespace), not `default` (Checkov CKV_K8S_21).
JOB_NAMESPACE = "gpu-jobs"
# Pod Security Admission labels (kubernetes.io/docs/concepts/security/pod-security-admission, v1.35:
# pod-security.kubernetes.io/<enforce|audit|warn>: <privileged|baseline|restricted>, and
# <mode>-version). The job pods need more than `baseline` allows on every fabric
# (kubernetes.io/docs/concepts/security/pod-security-standards, v1.35, Baseline: "HostPath volumes
# must be forbidden"; added capabilities limited to AUDIT_WRITE, CHOWN, DAC_OVERRIDE, FOWNER, FSETID,
# KILL, MKNOD, NET_BIND_SERVICE, SETFCAP, SETGID, SETPCAP, SETUID, SYS_CHROOT):
# * TCPX/TCPXO/gIB pods mount the installer's host directories (and the receive-datapath sidecar
#   /sys and /proc/sys) as hostPath volumes, and the TCPX/TCPXO sidecar adds NET_ADMIN;
# * EFA pods add IPC_LOCK (memory registration past the memlock limit; catalog fabrics.efa.pod).
# So `enforce` is `privileged`, stated rather than left to the cluster's default (a cluster-wide
# AdmissionConfiguration default of baseline would otherwise reject every job), and `audit` and
# `warn` are `baseline`: what goes beyond it is recorded in the audit log and shown to whoever
# applies a pod by hand. Nothing in the pods is `privileged: true` (workloads/launch/pod.py).
JOB_POD_SECURITY = {
    "pod-security.kubernetes.io/enforce": "privileged",
    "pod-security.kubernetes.io/audit": "baseline",
    "pod-security.kubernetes.io/audit-version": "latest",
    "pod-security.kubernetes.io/warn": "baseline",
    "pod-security.kubernetes.io/warn-version": "latest",
}


def job_namespace(
    name: str, opts: pulumi.ResourceOptions, labels: Mapping[str, str] | None = None
) -> k8s.core.v1.Namespace:
    """The jobs' namespace with its Pod Security labels; what is created in it depends on it."""
    return k8s.core.v1.Namespace(
        f"{name}-jobs-ns",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=JOB_NAMESPACE, labels={**dict(labels or {}), **JOB_POD_SECURITY}),
        opts=opts,
    )


def jobset(
    name: str,
    opts: pulumi.ResourceOptions,
    node_selector: Mapping[str, str] | None = None,
    pins: Mapping[str, str] | None = None,
) -> pulumi.Resource:
    """The JobSet controller and its CRD in their own namespace; returns the chart.

    ``opts`` carries the parent and the cluster's Kubernetes provider. ``node_selector`` pins
    the controller to a node pool (the chart's ``controller.nodeSelector`` value, charts/jobset/
    values.yaml and templates/controller/deployment.yaml at v0.12.0), e.g. a CPU system pool
    that exists before any GPU node does. ``pins``: the stack's image pins; where one names
    :data:`JOBSET_IMAGE`, the controller is pulled by that digest.
    """
    # helm.v4.Chart never creates its namespace (unlike `helm install --create-namespace`).
    namespace = k8s.core.v1.Namespace(
        f"{name}-ns",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=JOBSET_NAMESPACE),
        opts=opts,
    )
    return k8s.helm.v4.Chart(
        name,
        chart=JOBSET_CHART,
        version=JOBSET_VERSION,
        namespace=JOBSET_NAMESPACE,
        values=jobset_values(node_selector, pins) or None,
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[namespace])),
    )


def jobset_values(node_selector: Mapping[str, str] | None, pins: Mapping[str, str] | None) -> dict[str, object]:
    """The chart values we set: the controller's node pool, and its image where the stack pins it
    (``IfNotPresent``: a digest never changes, so the kubelet need not ask the registry again)."""
    values: dict[str, object] = {}
    if node_selector:
        values["controller"] = {"nodeSelector": dict(node_selector)}
    image = chart_image(JOBSET_IMAGE, pins or {})
    if image:
        values["image"] = {**image, "pullPolicy": "IfNotPresent"}
    return values
