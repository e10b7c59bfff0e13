"""AWS rules on a whole, typed cluster description, each beside the page it follows.

``check(spec, raw)`` returns ``(config path, reason)`` problems, as ``components.spec`` reports
them; ``parse_spec`` calls it once the generic rules pass. Pure: no Pulumi, no network.

What needs the account is left to the online preflight (``python -m components.preflight STACK``):
whether the reservation or capacity block exists, is active or scheduled, matches type, zone and
count, and in which placement group an ODCR was made; the zone *ID* behind the stack's zone name
(names map to different IDs in every account, and EKS refuses control-plane subnets in some IDs,
``EKS_DISALLOWED_ZONE_IDS``); whether the type is offered in that zone ID (the catalog's
``zone_ids`` per region, where it has them); whether the data bucket exists in the region.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Mapping

from components.aws import eks_sizing
from components.aws.versions import EKS_STANDARD_SUPPORT_END, EKS_UNAVAILABLE

if TYPE_CHECKING:
    from components.spec import ClusterSpec

# Zone IDs in which EKS refuses a cluster's subnets (EKS user guide "network-reqs", "Subnet
# requirements for clusters": us-east-1 use1-az3, us-west-1 usw1-az2, ca-central-1 cac1-az3;
# awsdocs/amazon-eks-user-guide latest/ug/networking/network-reqs.adoc at 4d52b4d). Which zone name
# is which ID depends on the account, so only the preflight can apply this table.
EKS_DISALLOWED_ZONE_IDS: Mapping[str, tuple[str, ...]] = {
    "us-east-1": ("use1-az3",),
    "us-west-1": ("usw1-az2",),
    "ca-central-1": ("cac1-az3",),
}

# EC2 placement group names: up to 255 ASCII characters (EC2 API CreatePlacementGroup, GroupName);
# held here to printable characters without spaces, which every console-made name is.
_PLACEMENT_GROUP = re.compile(r"^[\x21-\x7e]{1,255}\Z")


def check(spec: ClusterSpec, raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    problems += _placement_group(spec)
    if spec.orchestration.kind == "eks":
        problems += _eks_version(spec)
        problems += _eks_addresses(spec)
    return problems


def _placement_group(spec: ClusterSpec) -> list[tuple[str, str]]:
    """An ODCR created in a cluster placement group matches only instances launched into that
    group, and one created without a group matches only instances launched outside any group
    (aws/aws-parallelcluster cli/src/pcluster/validators/ec2_validators.py
    PlacementGroupCapacityReservationValidator, 451cc53: a group that no ODCR targets is an error,
    no group with only group-bound ODCRs is an error). So the spec says which, and the stack
    launches accordingly; the preflight compares it with the reservation itself."""
    cap = spec.compute.capacity
    path = "compute.capacity.placement_group"
    if cap.placement_group is None:
        return []
    if cap.type == "capacity-block":
        return [(path, "a capacity block is placed by AWS and its instances launch into no placement group "
                       "(allowed: only with type reservation, for an ODCR made in a cluster placement group)")]
    if cap.type != "reservation":
        return [(path, f"only applies to a reservation (type is {cap.type}); for {cap.type} capacity the stack "
                       "creates its own cluster placement group (interconnect.placement)")]
    if not _PLACEMENT_GROUP.match(cap.placement_group):
        return [(path, f"{cap.placement_group!r} is not a placement group name (allowed: 1-255 printable ASCII "
                       "characters, no spaces)")]
    return []


def _eks_version(spec: ClusterSpec) -> list[tuple[str, str]]:
    version = spec.orchestration.kubernetes_version
    if version in EKS_UNAVAILABLE:
        supported = ", ".join(sorted(EKS_STANDARD_SUPPORT_END, reverse=True))
        return [("orchestration.kubernetes_version",
                 f"{version!r} is past the end of EKS extended support and can no longer be created "
                 f"(allowed: {supported}; source: docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html)")]
    return []


def _eks_addresses(spec: ClusterSpec) -> list[tuple[str, str]]:
    """Every pod on EKS takes an address of the node subnet (VPC CNI); a range too small for the
    node count fails only when nodes stop getting pod addresses, long after `pulumi up`."""
    nodes = spec.compute.nodes
    need = eks_sizing.node_subnet_addresses_needed(nodes)
    have = eks_sizing.node_subnet_size(spec.network.cidr)
    if need <= have:
        return []
    fits = eks_sizing.smallest_vpc_prefix(nodes)
    allowed = (f"a range of /{fits} or larger, e.g. 10.0.0.0/{fits}" if fits is not None
               else "fewer nodes: even a /16 is too small")
    return [("network.cidr",
             f"{spec.network.cidr!r} leaves a node subnet of {have} addresses; {nodes} EKS nodes with "
             f"{eks_sizing.ADDRESSES_PER_GPU_NODE} addresses each (node, VPC CNI MINIMUM_IP_TARGET "
             f"{eks_sizing.CNI_MINIMUM_IP_TARGET}, WARM_IP_TARGET {eks_sizing.CNI_WARM_IP_TARGET}) and the "
             f"system nodes need {need} (allowed: {allowed})")]
