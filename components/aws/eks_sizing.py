"""How many EKS managed node groups a node count needs, and how many addresses their pods take.

Pure arithmetic (no Pulumi): the EKS orchestration builds its node groups from it and the AWS
spec rules (components/aws/rules.py) refuse, before any resource exists, a stack whose node
count or address range EKS would refuse or run out of.
"""

from __future__ import annotations

import ipaddress

# EKS service quotas (AWS General Reference, "Amazon Elastic Kubernetes Service endpoints and
# quotas", docs.aws.amazon.com/general/latest/gr/eks.html#limits_eks, read 2026-12): "Nodes per
# managed node group" 450 and "Managed node groups per cluster" 30, both adjustable on request.
# The program stays inside the defaults: an account with a raised quota still gets groups that
# any account accepts.
NODES_PER_MANAGED_NODE_GROUP = 450
MANAGED_NODE_GROUPS_PER_CLUSTER = 30

# The CPU node group for controllers and add-ons (awsome-distributed-training
# 1.architectures/4.amazon-eks/eks-g4dn-vpc.yaml, 7217859, 2026-02-21: a "sys" managed node group
# of c5.2xlarge beside the GPU group; README: "A system nodegroup is used to run pods like
# kube-dns, kubeflow training operator, etc."). Two nodes, so that CoreDNS's two replicas and the
# controllers survive the replacement of one.
SYSTEM_INSTANCE_TYPE = "c5.2xlarge"
SYSTEM_NODES = 2
SYSTEM_ROOT_GIB = 100

# VPC CNI address targets (aws/amazon-vpc-cni-k8s README, b521883, 2026-08-20, "WARM_IP_TARGET",
# "MINIMUM_IP_TARGET"): with MINIMUM_IP_TARGET set, WARM_ENI_TARGET (by default one whole spare
# ENI, ~50 addresses on a p5) is ignored; the README's pattern is a floor sized to the expected pod
# density plus a small WARM_IP_TARGET ("MINIMUM_IP_TARGET is for pre-scaling, WARM_IP_TARGET is for
# dynamic scaling"). A GPU node runs one training pod and a few DaemonSet pods that are not in the
# host network (the NVIDIA and EFA device plugins); the rest (CNI, kube-proxy, Pod Identity agent,
# FSx CSI node) use the host's address.
CNI_MINIMUM_IP_TARGET = 8
CNI_WARM_IP_TARGET = 2
# Addresses a node takes from the subnet: its own primary address, the floor, the spare ones.
ADDRESSES_PER_GPU_NODE = 1 + CNI_MINIMUM_IP_TARGET + CNI_WARM_IP_TARGET
# System nodes carry more pods (CoreDNS, the FSx CSI and JobSet controllers, webhooks): room for 29.
ADDRESSES_PER_SYSTEM_NODE = 32
# Addresses not on nodes: 5 AWS reserves in every subnet (Amazon VPC user guide, "Subnet CIDR
# blocks"); 16 for the EKS control plane's network interfaces (EKS user guide "network-reqs":
# "at least six IP addresses ... we recommend at least 16"); the FSx file servers' interfaces and
# the VPC endpoint get a headroom of 64 (not a published figure).
OTHER_ADDRESSES = 5 + 16 + 64


def node_group_sizes(nodes: int) -> list[int]:
    """GPU nodes split into the fewest managed node groups the default quota admits, as evenly
    as possible (1024 -> 342, 341, 341), so that no group is a straggler of a few nodes."""
    if nodes < 1:
        raise ValueError(f"compute.nodes: {nodes} (allowed: 1 or more)")
    groups = -(-nodes // NODES_PER_MANAGED_NODE_GROUP)
    base, extra = divmod(nodes, groups)
    return [base + 1 if i < extra else base for i in range(groups)]


def max_gpu_nodes() -> int:
    """The most GPU nodes one cluster holds within the default quotas (the system group is one)."""
    return (MANAGED_NODE_GROUPS_PER_CLUSTER - 1) * NODES_PER_MANAGED_NODE_GROUP


def node_subnet_addresses_needed(gpu_nodes: int, system_nodes: int = SYSTEM_NODES) -> int:
    return gpu_nodes * ADDRESSES_PER_GPU_NODE + system_nodes * ADDRESSES_PER_SYSTEM_NODE + OTHER_ADDRESSES


def smallest_vpc_prefix(gpu_nodes: int) -> int | None:
    """The longest VPC prefix (/16../20) whose node subnet (its first half) holds the cluster,
    or None when even a /16 is too small."""
    need = node_subnet_addresses_needed(gpu_nodes)
    for prefix in range(20, 15, -1):
        if 2 ** (32 - (prefix + 1)) >= need:
            return prefix
    return None


def node_subnet_size(vpc_cidr: str) -> int:
    """Addresses in the node subnet: the first half of the VPC range (network.subnet_plan)."""
    return int(ipaddress.IPv4Network(vpc_cidr).num_addresses // 2)
