"""What every GCP component shares: the project, the labels, and the address plan.

Nothing here creates a resource. The address plan is pure arithmetic on the spec's CIDR, so the
network, the GKE cluster and the firewall rules agree on every range without passing strings
around, and the tests can compute the same ranges.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from gpu_cluster.components.spec import ClusterSpec

# The catalog's fabric decides which NCCL transport a node uses; GKE names the GPU model
# separately from the machine type (cloud.google.com/kubernetes-engine/docs/how-to/gpus,
# "accelerator types"). These are names, not figures, so they live next to the code that uses them.
GKE_ACCELERATOR = {
    "a3-highgpu-8g": "nvidia-h100-80gb",
    "a3-megagpu-8g": "nvidia-h100-mega-80gb",
    "a3-ultragpu-8g": "nvidia-h200-141gb",
    "a4-highgpu-8g": "nvidia-b200",
}
# Google's IAP TCP forwarding range: the only source allowed to reach SSH on private nodes
# (cloud.google.com/iap/docs/using-tcp-forwarding).
IAP_RANGE = "35.235.240.0/20"


def project() -> pulumi.Output[str]:
    """The stack's project: config ``gcp:project`` when set (no invoke), else the provider's."""
    configured = pulumi.Config("gcp").get("project")
    if configured:
        return pulumi.Output.from_input(configured)
    return gcp.organizations.get_client_config_output().project


def labels(spec: ClusterSpec, **extra: str) -> dict[str, str]:
    """Labels for every resource that takes them: the cluster's own, then the user's tags."""
    base = {"gpu-cluster": spec.name, "managed-by": "pulumi"}
    base.update(extra)
    base.update(spec.tags)
    return base


def short_id(spec: ClusterSpec, limit: int, suffix: str = "") -> str:
    """An id for APIs that take only letters and digits (Lustre filesystem, Cluster Director)."""
    stem = re.sub(r"[^a-z0-9]", "", spec.name.lower())
    stem = stem[: max(1, limit - len(suffix))] or "gpu"
    return (stem + suffix)[:limit]


@dataclass(frozen=True, slots=True, kw_only=True)
class AddressPlan:
    """Every range the cluster owns, carved from ``spec.network.cidr`` and a GPU pool."""

    cluster: str
    """The spec's CIDR: the only source the system VPC's firewall admits."""
    nodes: str
    """System subnet (node primary addresses, login nodes)."""
    services: str
    """GKE services secondary range."""
    psa: str
    """Private service access range peered to Google (Managed Lustre servers live here)."""
    pods: str
    """GKE pods secondary range."""
    gpu_subnets: tuple[str, ...]
    """One range per additional NIC subnet (second gVNIC and GPU NICs), from a pool outside ``cluster``."""


def address_plan(spec: ClusterSpec, extra_subnets: int) -> AddressPlan:
    net = ipaddress.ip_network(spec.network.cidr)
    quarters = list(net.subnets(prefixlen_diff=2))
    eighths = list(net.subnets(prefixlen_diff=3))
    halves = list(net.subnets(prefixlen_diff=1))
    # GPU NIC subnets sit outside the cluster range so GKE's pod and node ranges never overlap
    # them; the first private pool that does not collide with the spec's CIDR is used.
    pools = (ipaddress.ip_network("192.168.0.0/16"), ipaddress.ip_network("172.16.0.0/12"))
    pool = next(p for p in pools if not p.overlaps(net))
    gpu = [str(s) for s in pool.subnets(new_prefix=20)][:extra_subnets]
    return AddressPlan(
        cluster=str(net),
        nodes=str(quarters[0]),
        services=str(eighths[2]),
        psa=str(eighths[3]),
        pods=str(halves[1]),
        gpu_subnets=tuple(gpu),
    )
