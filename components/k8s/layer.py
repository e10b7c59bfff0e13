"""The in-cluster layer of a private cluster, deployed by a second program from inside the VPC.

A cluster with ``orchestration.endpoint: private`` has an API that only the VPC reaches, so
the stack that builds it cannot also install what runs inside it. A second stack of this same
project, run from a machine inside the VPC (a bastion, a CI runner in the subnet), does:

    # stacks/Pulumi.<name>-layer.yaml
    config:
      gpu-cluster:layer: in-cluster
      gpu-cluster:cluster_stack: <org>/gpu-cluster/<name>     # the cluster stack
      gpu-cluster:cluster: { ...the same cluster object... }

It reads the cluster stack's outputs through a ``StackReference`` (kubeconfig, the file
system's volume handle and address, the GKE Network objects, the claim name) and creates the
same objects the public stack creates in the same ``pulumi up``, with the same code
(``create_in_cluster_layer`` of each cloud).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from gpu_cluster.components.spec import ClusterSpec

LAYER_KEY = "layer"
LAYER_IN_CLUSTER = "in-cluster"
STACK_KEY = "cluster_stack"


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerArgs:
    spec: ClusterSpec
    """The cluster object, the same as the cluster stack's."""
    outputs: pulumi.Output[Any]
    """The cluster stack's outputs (``StackReference.outputs``)."""


def _get(outputs: pulumi.Output[Any], *path: str) -> pulumi.Output[Any]:
    def pick(o: Any) -> Any:
        for key in path:
            if not isinstance(o, dict) or key not in o:
                raise ValueError(
                    f"the cluster stack has no output {'.'.join(path)}: is it a gpu-cluster stack "
                    "of this version, and up?"
                )
            o = o[key]
        return o

    return outputs.apply(pick)


class InClusterLayer(pulumi.ComponentResource):
    """Device plugins, CSI volume, network objects and the JobSet controller of one cluster."""

    def __init__(self, name: str, args: LayerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-cluster:k8s:InClusterLayer", name, None, opts)
        spec, outs = args.spec, args.outputs
        if spec.orchestration.kind not in ("eks", "gke", "aks"):
            raise ValueError(
                f"orchestration.kind: {spec.orchestration.kind!r} has no in-cluster layer (allowed: eks, gke, aks)"
            )
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=pulumi.Output.secret(_get(outs, "access", "kubeconfig")),
            opts=pulumi.ResourceOptions(parent=self),
        )
        k8s_opts = pulumi.ResourceOptions(parent=self, provider=self.provider)
        if spec.cloud == "aws":
            from gpu_cluster.components.aws import orchestration_eks as eks

            eks.create_in_cluster_layer(
                name,
                eks.EksLayerArgs(
                    instance_type=spec.compute.instance_type,
                    region=spec.region,
                    volume_handle=_get(outs, "mount", "volume_handle"),
                    dns_name=_get(outs, "mount", "dns_name"),
                    mount_name=_get(outs, "mount", "mount_name"),
                    size_gib=spec.storage.lustre.size_gib,
                    image_pins=spec.images,
                ),
                k8s_opts,
            )
        elif spec.cloud == "azure":
            # Reachable once a private AKS cluster is built (components/azure/rules.py refuses it now).
            from gpu_cluster.components.cloud_sdk import require_cloud_sdk

            require_cloud_sdk("azure")
            from gpu_cluster.components.azure import orchestration_aks as aks

            aks.create_in_cluster_layer(
                name,
                aks.AksLayerArgs(
                    spec=spec,
                    volume_handle=_get(outs, "mount", "volume_handle"),
                    mgs_address=_get(outs, "mount", "dns_name"),
                ),
                k8s_opts,
            )
        else:
            from gpu_cluster.components.gcp.common import address_plan
            from gpu_cluster.components.gcp.interconnect import nic_names, nic_count
            from gpu_cluster.components.gcp import orchestration_gke as gke
            from gpu_cluster.components.gcp.workload_identity import checkpoint_claim_name

            # The Network objects need their names while the program is built, not as Outputs:
            # they come from the spec, by the same function the cluster stack named the VPCs with.
            networks = gke.node_networks(nic_names(spec, address_plan(spec, nic_count(spec))))
            gke.create_in_cluster_layer(
                name,
                gke.GkeLayerArgs(
                    spec=spec,
                    networks=networks,
                    claim_name=gke.lustre_claim_name(f"{spec.name}-orchestration"),
                    volume_handle=_get(outs, "mount", "volume_handle"),
                    lustre_address=_get(outs, "mount", "dns_name"),
                    filesystem=_get(outs, "mount", "mount_name"),
                    bucket=_get(outs, "bucket"),
                    checkpoint_claim=checkpoint_claim_name(f"{spec.name}-orchestration"),
                    workload_account=_get(outs, "scheduler", "workload_account"),
                ),
                k8s_opts,
            )
        self.register_outputs({})
