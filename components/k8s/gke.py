"""GKE-only in-cluster parts: multi-network objects and the Managed Lustre volume (the NCCL
plugin installers and the NRI device injector are in ``gke_installers``). Everything goes through
the provider the caller passes in ``opts``.

GKE multi-networking needs, per additional NIC, a ``GKENetworkParamSet`` (the VPC, subnet and
device mode) and a ``Network`` that names it (networking.gke.io/v1; GKE
"Set up multi-network support for Pods" and "Maximize GPU network bandwidth"). These are CRDs
with no typed SDK, so their spec is data; the field names are GKE's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pulumi
import pulumi_kubernetes as k8s

LUSTRE_CSI_DRIVER = "lustre.csi.storage.gke.io"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeNetwork:
    """One additional node NIC as GKE multi-networking sees it."""

    name: str
    """Name of the Network and GKENetworkParamSet objects (vpc1.., gvnic-1, rdma-0..)."""
    vpc: pulumi.Input[str]
    """The VPC's name: the Network resource's output in the cluster stack, a name in the private layer."""
    subnet: pulumi.Input[str]
    device_mode: Literal["NetDevice", "RDMA"]
    """RDMA for RoCE NICs; NetDevice for every other additional NIC (TCPX/TCPXO GPU NICs and the
    second gVNIC of A3 Ultra/A4), as cluster-toolkit's gke-cluster module does at 1047080
    (main.tf: ``device_mode = ... "RDMA" : "NetDevice"``; templates/network-object.yaml.tftpl:
    ``type: Device`` for all)."""


def gke_networks(
    name: str, networks: list[NodeNetwork], labels: dict[str, str], opts: pulumi.ResourceOptions
) -> list[pulumi.Resource]:
    made: list[pulumi.Resource] = []
    for n in networks:
        params: dict[str, object] = {"vpc": n.vpc, "vpcSubnet": n.subnet, "deviceMode": n.device_mode}
        pset = k8s.apiextensions.CustomResource(
            f"{name}-{n.name}-params",
            api_version="networking.gke.io/v1",
            kind="GKENetworkParamSet",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=n.name, labels=labels),
            spec=params,
            opts=opts,
        )
        network = k8s.apiextensions.CustomResource(
            f"{name}-{n.name}-network",
            api_version="networking.gke.io/v1",
            kind="Network",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=n.name, labels=labels),
            spec={
                "type": "Device",
                "parametersRef": {"group": "networking.gke.io", "kind": "GKENetworkParamSet", "name": n.name},
            },
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[pset])),
        )
        made += [pset, network]
    return made


def lustre_volume(
    name: str,
    *,
    volume_handle: pulumi.Input[str],
    ip: pulumi.Input[str],
    filesystem: pulumi.Input[str],
    size_gib: int,
    labels: dict[str, str],
    opts: pulumi.ResourceOptions,
    namespace: str,
    claim_name: str | None = None,
) -> k8s.core.v1.PersistentVolumeClaim:
    """A statically provisioned PV for the existing Managed Lustre instance and its claim
    (both named ``claim_name``, default ``<name>-lustre``), the claim in ``namespace``: the jobs'
    (a pod mounts only claims of its own namespace)."""
    pv_name = claim_name or f"{name}-lustre"
    pv = k8s.core.v1.PersistentVolume(
        f"{name}-lustre-pv",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=pv_name, labels=labels),
        spec=k8s.core.v1.PersistentVolumeSpecArgs(
            storage_class_name="",
            capacity={"storage": f"{size_gib}Gi"},
            access_modes=["ReadWriteMany"],
            # Retain: deleting the claim must never reach the file system.
            persistent_volume_reclaim_policy="Retain",
            volume_mode="Filesystem",
            csi=k8s.core.v1.CSIPersistentVolumeSourceArgs(
                driver=LUSTRE_CSI_DRIVER,
                volume_handle=volume_handle,
                volume_attributes={"ip": ip, "filesystem": filesystem},
            ),
        ),
        opts=opts,
    )
    return k8s.core.v1.PersistentVolumeClaim(
        f"{name}-lustre-pvc",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=pv_name, namespace=namespace, labels=labels),
        spec=k8s.core.v1.PersistentVolumeClaimSpecArgs(
            storage_class_name="",
            volume_name=pv_name,
            access_modes=["ReadWriteMany"],
            resources=k8s.core.v1.VolumeResourceRequirementsArgs(requests={"storage": f"{size_gib}Gi"}),
        ),
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[pv])),
    )
