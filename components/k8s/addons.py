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

# JobSet: the controller the validation job's launcher submits to (kubernetes-sigs/jobset;
# chart published with each release at registry.k8s.io/jobset/charts/jobset). 0.12.0 is the
# latest release (tag v0.12.0, f22e565, 2026-05-08; charts/jobset/README.md at 08dfbdf,
# 2026-08-18: `helm install ... oci://registry.k8s.io/jobset/charts/jobset --version 0.12.0`).
# The AWS pins (EKS, charts, Slurm) are in components/aws/versions.py.
JOBSET_CHART = "oci://registry.k8s.io/jobset/charts/jobset"
JOBSET_VERSION = "0.12.0"
JOBSET_NAMESPACE = "jobset-system"

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


def jobset(name: str, opts: pulumi.ResourceOptions, node_selector: Mapping[str, str] | None = None) -> pulumi.Resource:
    """The JobSet controller and its CRD in their own namespace; returns the chart.

    ``opts`` carries the parent and the cluster's Kubernetes provider. ``node_selector`` pins
    the controller to a node pool (the chart's ``controller.nodeSelector`` value, charts/jobset/
    values.yaml and templates/controller/deployment.yaml at v0.12.0), e.g. a CPU system pool
    that exists before any GPU node does.
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
        values={"controller": {"nodeSelector": dict(node_selector)}} if node_selector else None,
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[namespace])),
    )
