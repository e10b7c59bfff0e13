"""Small facts every Azure pillar shares: tags, the address plan, the node image per size.

Pure: no Pulumi. Every figure a cloud receives is cited beside it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass

from components.azure.rules import AKS_DNS_SERVICE_IP, AKS_POD_CIDR, AKS_SERVICE_CIDR
from components.spec import ClusterSpec

__all__ = [
    "AKS_DNS_SERVICE_IP",
    "AKS_POD_CIDR",
    "AKS_SERVICE_CIDR",
    "AddressPlan",
    "HpcImage",
    "address_plan",
    "cluster_tags",
    "hpc_image",
    "storage_account_name",
]

CLUSTER_TAG = "gpu-cluster"


def cluster_tags(spec: ClusterSpec) -> dict[str, str]:
    """The spec's tags plus the cluster's own name tag (written last: a stack cannot relabel
    its resources as another cluster's), merged into every resource."""
    return {**dict(spec.tags), CLUSTER_TAG: spec.name}


@dataclass(frozen=True, slots=True, kw_only=True)
class AddressPlan:
    vnet: str
    nodes: str
    """GPU nodes (the scale set, or the AKS GPU pool)."""
    lustre: str
    """Managed Lustre's own subnet: one file system per subnet, never shared (amlfs-prerequisites.md
    at f1e86c5); a /24 covers up to 196 TiB in Learn's table and is what the API docstring asks
    for ("at least a /24", pulumi-azure-native AmlFilesystemArgs.filesystem_subnet)."""
    system: str
    """The AKS system pool, or the Slurm controller and login nodes."""


def address_plan(spec: ClusterSpec) -> AddressPlan:
    """The VNet carved in order: nodes (a quarter of the VNet), then a /24 for Lustre, then a /24
    for the system nodes; a /20 VNet leaves 1024 addresses for the nodes."""
    vnet = ipaddress.IPv4Network(spec.network.cidr)
    nodes = next(vnet.subnets(new_prefix=vnet.prefixlen + 2))
    after = ipaddress.IPv4Network(f"{nodes.broadcast_address + 1}/24")
    system = ipaddress.IPv4Network(f"{after.broadcast_address + 1}/24")
    assert after.subnet_of(vnet) and system.subnet_of(vnet)
    return AddressPlan(vnet=str(vnet), nodes=str(nodes), lustre=str(after), system=str(system))


@dataclass(frozen=True, slots=True, kw_only=True)
class HpcImage:
    publisher: str
    offer: str
    sku: str
    version: str


def hpc_image(spec: ClusterSpec) -> HpcImage:
    """The Azure HPC image for the size: Ubuntu 22.04 HPC for NVIDIA, its ROCm variant for AMD
    (Azure/azhpc-images README.md at 8e9d055: microsoft-dsvm:ubuntu-hpc:2204:latest and
    microsoft-dsvm:ubuntu-hpc:2204-rocm:latest; they carry OFED, HPC-X, NCCL/RCCL and the
    Lustre client). "latest" as the README gives it: no version list was read to pin one."""
    rocm = spec.instance.software.gpu_runtime == "rocm"
    return HpcImage(
        publisher="microsoft-dsvm", offer="ubuntu-hpc", sku="2204-rocm" if rocm else "2204", version="latest"
    )


def storage_account_name(spec: ClusterSpec, stack: str) -> str:
    """Storage account names are global, 3-24 lower-case letters and digits (the Azure storage
    naming rules, learn.microsoft.com/azure/storage/common/storage-account-overview, not re-read
    this session): the cluster name's letters and digits plus a hash of the stack, so two stacks
    of one name do not collide."""
    digest = hashlib.sha256(f"{stack}/{spec.name}".encode()).hexdigest()[:8]
    return (re.sub(r"[^a-z0-9]", "", spec.name)[:16] + digest)[:24]
