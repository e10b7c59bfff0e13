"""GKE-only in-cluster parts: multi-network objects, the NCCL net-plugin installer, and the
Managed Lustre volume. Everything goes through the provider the caller passes in ``opts``.

GKE multi-networking needs, per additional NIC, a ``GKENetworkParamSet`` (the VPC and subnet,
and for GPU NICs the device mode) and a ``Network`` that names it (networking.gke.io/v1; GKE
"Set up multi-network support for Pods" and "Maximize GPU network bandwidth"). These are CRDs
with no typed SDK, so their spec is data; the field names are GKE's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pulumi
import pulumi_kubernetes as k8s

# NCCL net plugins for each GCP fabric. Installer images from GoogleCloudPlatform/
# container-engine-accelerators (gpudirect-tcpx and gpudirect-tcpxo release notes) and, for
# gIB, the version cluster-toolkit's a3-ultragpu-8g blueprint pins (nccl_gib_version v1.1.0).
@dataclass(frozen=True, slots=True, kw_only=True)
class Installer:
    name: str
    image: str
    host_path: str
    """Where on the node the plugin lands (GKE's nvidia or gib directory)."""
    mount_path: str
    args: tuple[str, ...]


# Host and container paths and arguments follow Google's installer manifests
# (gpudirect-tcpx/nccl-tcpx-installer.yaml, gpudirect-tcpxo/nccl-tcpxo-installer.yaml,
# gpudirect-rdma/nccl-rdma-installer.yaml in container-engine-accelerators).
NCCL_INSTALLERS: dict[str, Installer] = {
    "tcpx": Installer(name="nccl-tcpx-installer",
                      image="us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/nccl-plugin-gpudirecttcpx-dev:v3.1.12",
                      host_path="/home/kubernetes/bin/nvidia/lib64", mount_path="/usr/local/nvidia/lib64",
                      args=("install", "--install-nccl")),
    "tcpxo": Installer(name="nccl-tcpxo-installer",
                       image="us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/nccl-plugin-gpudirecttcpx-dev:v1.0.14",
                       host_path="/home/kubernetes/bin/nvidia", mount_path="/usr/local/nvidia",
                       args=("install", "--install-nccl")),
    "rdma": Installer(name="nccl-rdma-installer",
                      image="us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:v1.1.0",
                      host_path="/home/kubernetes/bin/gib", mount_path="/target/usr/local/gib",
                      args=("install",)),
}
LUSTRE_CSI_DRIVER = "lustre.csi.storage.gke.io"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeNetwork:
    """One additional node NIC as GKE multi-networking sees it."""

    name: str
    """Name of the Network and GKENetworkParamSet objects (vpc1.., gvnic-1, rdma-0..)."""
    vpc: str
    subnet: str
    device_mode: Literal["NetDevice", "RDMA"] | None
    """NetDevice for TCPX/TCPXO GPU NICs, RDMA for RoCE NICs, None for a plain gVNIC (L3)."""


def gke_networks(name: str, networks: list[NodeNetwork], labels: dict[str, str], opts: pulumi.ResourceOptions) -> list[pulumi.Resource]:
    made: list[pulumi.Resource] = []
    for n in networks:
        params: dict[str, object] = {"vpc": n.vpc, "vpcSubnet": n.subnet}
        if n.device_mode is not None:
            params["deviceMode"] = n.device_mode
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
                "type": "Device" if n.device_mode is not None else "L3",
                "parametersRef": {"group": "networking.gke.io", "kind": "GKENetworkParamSet", "name": n.name},
            },
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[pset])),
        )
        made += [pset, network]
    return made


def nccl_installer(name: str, fabric: str, accelerator: str, labels: dict[str, str], opts: pulumi.ResourceOptions) -> k8s.apps.v1.DaemonSet:
    """DaemonSet that copies the fabric's NCCL net plugin onto every GPU node's host path."""
    inst = NCCL_INSTALLERS[fabric]
    ds_name = inst.name
    match = {"name": ds_name}
    return k8s.apps.v1.DaemonSet(
        f"{name}-{ds_name}",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=ds_name, namespace="kube-system", labels={**labels, **match}),
        spec=k8s.apps.v1.DaemonSetSpecArgs(
            selector=k8s.meta.v1.LabelSelectorArgs(match_labels=match),
            update_strategy=k8s.apps.v1.DaemonSetUpdateStrategyArgs(type="RollingUpdate"),
            template=k8s.core.v1.PodTemplateSpecArgs(
                metadata=k8s.meta.v1.ObjectMetaArgs(labels=match),
                spec=k8s.core.v1.PodSpecArgs(
                    priority_class_name="system-node-critical",
                    host_network=True,
                    node_selector={"cloud.google.com/gke-accelerator": accelerator},
                    tolerations=[k8s.core.v1.TolerationArgs(operator="Exists")],
                    volumes=[
                        k8s.core.v1.VolumeArgs(name="library-dir-host",
                                               host_path=k8s.core.v1.HostPathVolumeSourceArgs(path=inst.host_path)),
                    ],
                    init_containers=[k8s.core.v1.ContainerArgs(
                        name=ds_name,
                        image=inst.image,
                        command=["/scripts/container_entry.sh"],
                        args=list(inst.args),
                        security_context=k8s.core.v1.SecurityContextArgs(privileged=True),
                        volume_mounts=[k8s.core.v1.VolumeMountArgs(name="library-dir-host", mount_path=inst.mount_path)],
                        resources=k8s.core.v1.ResourceRequirementsArgs(requests={"cpu": "150m"}),
                    )],
                    containers=[k8s.core.v1.ContainerArgs(name="pause", image="registry.k8s.io/pause:3.10")],
                ),
            ),
        ),
        opts=opts,
    )


def lustre_volume(name: str, *, volume_handle: pulumi.Input[str], ip: pulumi.Input[str], filesystem: pulumi.Input[str],
                  size_gib: int, labels: dict[str, str], opts: pulumi.ResourceOptions,
                  claim_name: str | None = None) -> k8s.core.v1.PersistentVolumeClaim:
    """A statically provisioned PV for the existing Managed Lustre instance and its claim
    (both named ``claim_name``, default ``<name>-lustre``)."""
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
        metadata=k8s.meta.v1.ObjectMetaArgs(name=pv_name, namespace="default", labels=labels),
        spec=k8s.core.v1.PersistentVolumeClaimSpecArgs(
            storage_class_name="",
            volume_name=pv_name,
            access_modes=["ReadWriteMany"],
            resources=k8s.core.v1.VolumeResourceRequirementsArgs(requests={"storage": f"{size_gib}Gi"}),
        ),
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[pv])),
    )
