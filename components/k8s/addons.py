"""In-cluster add-ons shared by EKS and GKE, installed through pulumi-kubernetes.

Charts go through ``helm.v4.Chart``: it renders in the Kubernetes provider itself, so no
local ``helm`` binary is needed (``helm.v3.Chart`` shells out to one), and each chart stays
one resource in the offline plan. Versions are pinned so that a ``pulumi up`` months later
installs what was tested.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

# JobSet: the controller the validation job's launcher submits to (kubernetes-sigs/jobset;
# chart published with each release at registry.k8s.io/jobset/charts/jobset).
JOBSET_CHART = "oci://registry.k8s.io/jobset/charts/jobset"
JOBSET_VERSION = "0.10.1"
JOBSET_NAMESPACE = "jobset-system"


def jobset(name: str, opts: pulumi.ResourceOptions) -> pulumi.Resource:
    """The JobSet controller and its CRD in their own namespace; returns the chart.

    ``opts`` carries the parent and the cluster's Kubernetes provider.
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
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[namespace])),
    )
