"""What the EKS GPU node groups register with and the values of the charts that run on them: the
registration taint (issue 41, I6) on each GPU group, and the device plugins' and DCGM exporter's
tolerations of it.

EKS applies a managed node group's ``taints`` to the nodes it launches, takes them on a new or an
existing group (``UpdateNodegroupConfig``), and "if taints that were created using a managed node
group are removed manually from a node, then Amazon EKS doesn't add the taints back to the node.
This is true even if the taints are specified in the managed node group configuration" (EKS user
guide, node-taints-managed-node-groups, awsdocs/amazon-eks-user-guide
latest/ug/nodes/node-taints-managed-node-groups.adoc at 2ef9e38, the note list). So a node the
validation passed and untainted stays untainted, and every node the group launches later (a
replacement, a scale-up, EKS's own node repair) registers tainted. The API spells the effect
``NO_SCHEDULE`` (EKS API reference, Taint: valid values NO_SCHEDULE | NO_EXECUTE |
PREFER_NO_SCHEDULE; key 1-63 characters, value 0-63).

What else lands on a GPU node and tolerates it without a value of ours: the FSx CSI add-on's node
plugin (its chart's ``node.tolerateAllTaints: true``, kubernetes-sigs/aws-fsx-csi-driver
charts/aws-fsx-csi-driver/values.yaml at 05bcb51; the managed add-on's own manifest is not public).
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi_aws as aws

from gpu_cluster.components.aws.versions import NVIDIA_PLUGIN_IMAGE, efa_plugin_image, efa_plugin_repository
from gpu_cluster.components.contract import UNVALIDATED_TAINT_KEY, UNVALIDATED_TAINT_VALUE
from gpu_cluster.components.image_pins import chart_image
from gpu_cluster.components.k8s.registration import chart_defaults, toleration, with_toleration

# The EKS API's spelling of NoSchedule (EKS API reference, Taint).
NO_SCHEDULE = "NO_SCHEDULE"


def registration_taints() -> list[aws.eks.NodeGroupTaintArgs]:
    """The GPU node group's taints: ours, which only a passed validation removes from a node."""
    return [aws.eks.NodeGroupTaintArgs(key=UNVALIDATED_TAINT_KEY, value=UNVALIDATED_TAINT_VALUE, effect=NO_SCHEDULE)]


def nvidia_plugin_values(pins: Mapping[str, str]) -> dict[str, object]:
    """The NVIDIA chart's values: its image by the stack's pin of NVIDIA_PLUGIN_IMAGE, when there is
    one (repository and tag@digest: the chart writes repository:tag); its default tolerations and
    ours (a value replaces the chart's list, values.yaml ``tolerations``)."""
    image = chart_image(NVIDIA_PLUGIN_IMAGE, pins)
    tolerations = with_toleration(chart_defaults("nvidia-device-plugin", "nvidia-device-plugin"))
    return {**({"image": image} if image else {}), "tolerations": tolerations}


def efa_plugin_values(instance_type: str, region: str, pins: Mapping[str, str]) -> dict[str, object]:
    """The EFA chart's values: our instance type among those it runs on, its image from the
    region's EKS registry, by the stack's pin of that image's tag when there is one, and our
    toleration (the chart's template adds ``tolerations`` to its own CriticalAddonsOnly one)."""
    image = chart_image(efa_plugin_image(region), pins) or {"repository": efa_plugin_repository(region)}
    return {
        "supportedInstanceLabels": {"keys": ["node.kubernetes.io/instance-type"], "values": [instance_type]},
        "image": image,
        "tolerations": [toleration()],
    }
