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
from components.aws.network_rules import existing_network
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
    problems += _zone_id(spec)
    problems += existing_network(spec)
    if spec.orchestration.kind == "eks":
        problems += _eks_version(spec)
        if not spec.network.existing:  # the caller's subnets are not carved from network.cidr
            problems += _eks_addresses(spec)
    return problems


# Zone IDs are "<region code>-az<n>", the region code being the region's parts shortened, as the
# zone IDs in the catalog's SkyPilot table show (use1, use2, usw1, usw2, apne1, aps1, apse3, cac1,
# euc1, eun1, eus2, euw2, mec1 for us-east-1 ... me-central-1). The GovCloud form (usgw1) is the
# same rule, not read from a table.
_DIRECTIONS = {"east": "e", "west": "w", "north": "n", "south": "s", "central": "c",
               "northeast": "ne", "northwest": "nw", "southeast": "se", "southwest": "sw"}


def zone_id_prefix(region: str) -> str | None:
    """``us-east-1`` -> ``use1``, ``us-gov-west-1`` -> ``usgw1``; None for a region of another shape."""
    parts = region.split("-")
    gov = len(parts) == 4 and parts[1] == "gov"
    geo, direction, number = (parts[0] + "g", parts[2], parts[3]) if gov else (parts + ["", "", ""])[:3]
    if direction not in _DIRECTIONS or not number.isdigit():
        return None
    return f"{geo}{_DIRECTIONS[direction]}{number}"


def _zone_id(spec: ClusterSpec) -> list[tuple[str, str]]:
    """What can be checked offline about the zone: only with its ID (zone names map to different
    IDs in every account; without an ID the preflight maps the name and checks the same)."""
    zid = spec.zone_id
    if zid is None:
        return []
    prefix = zone_id_prefix(spec.region)
    if prefix is None or not re.fullmatch(re.escape(prefix) + r"-az[0-9]+", zid):
        example = f"{prefix}-az1" if prefix else "use1-az1"
        return [("zone_id", f"{zid!r} is not a zone ID of region {spec.region!r} (allowed: an ID such as {example}, "
                            "as `aws ec2 describe-availability-zones` lists it; local zones are not supported)")]
    problems: list[tuple[str, str]] = []
    refused = EKS_DISALLOWED_ZONE_IDS.get(spec.region, ())
    if spec.orchestration.kind == "eks" and zid in refused:
        # The node subnet is one of the control plane's subnets (network.py).
        problems.append(("zone_id", f"EKS refuses cluster subnets in {zid} (EKS user guide \"network-reqs\", "
                                    f"subnet requirements for clusters); allowed: another zone of {spec.region}"))
    offered = spec.instance.zone_ids.get(spec.region)
    if offered and zid not in offered:
        problems.append(("zone_id", f"{spec.compute.instance_type} is not offered in {zid} (allowed: "
                                    f"{', '.join(offered)}; source: the catalog's zone_ids, SkyPilot's EC2 "
                                    "offerings table)"))
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
