"""AWS rules on a whole, typed cluster description, each beside the page it follows.

``check(spec, raw)`` returns ``(config path, reason)`` problems, as ``gpu_cluster.components.spec`` reports
them; ``parse_spec`` calls it once the generic rules pass. The field rules below it (region and
zone names, reservation ids, bucket names, Lustre sizes, the export path, tags, the node image)
are called by the generic reader while it reads each field, so their problems come with the
others in one pass; each returns a reason, or None for a good value. Pure: no Pulumi, no network.

What needs the account is left to the online preflight (``python -m gpu_cluster.components.preflight STACK``):
whether the reservation or capacity block exists, is active or scheduled, matches type, zone and
count, and in which placement group an ODCR was made; the zone *ID* behind the stack's zone name
(names map to different IDs in every account, and EKS refuses control-plane subnets in some IDs,
``EKS_DISALLOWED_ZONE_IDS``); whether the type is offered in that zone ID (the catalog's
``zone_ids`` per region, where it has them); whether the data bucket exists in the region.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Mapping

from gpu_cluster.components.aws import eks_sizing
from gpu_cluster.components.aws.network_rules import EKS_DISALLOWED_ZONE_IDS, existing_network
from gpu_cluster.components.aws.versions import (
    EKS_KUBERNETES_VERSION,
    EKS_REGISTRIES,
    EKS_STANDARD_SUPPORT_END,
    EKS_UNAVAILABLE,
)
from gpu_cluster.components.lustre_tiers import lustre_tiers

if TYPE_CHECKING:
    from gpu_cluster.components.spec_model import ClusterSpec

# EC2 placement group names: up to 255 ASCII characters (EC2 API CreatePlacementGroup, GroupName);
# held here to printable characters without spaces, which every console-made name is.
_PLACEMENT_GROUP = re.compile(r"^[\x21-\x7e]{1,255}\Z")


# AWS PCS controller sizes and the compute nodes each manages (PCS API reference, Cluster data type,
# size: "SMALL: 32 compute nodes and 256 jobs, MEDIUM: 512 ... 8192 jobs, LARGE: 2048 ... 16,384 jobs";
# docs.aws.amazon.com/pcs/latest/APIReference/API_Cluster.html, read 2026-12-01). Login nodes are PCS
# compute node group instances too, so they count.
PCS_SIZES: Mapping[str, int] = {"SMALL": 32, "MEDIUM": 512, "LARGE": 2048}
PCS_DEFAULT_SIZE = "SMALL"


def pcs_size(spec: ClusterSpec) -> str:
    """The PCS size the stack creates: the one it names, else SMALL (never derived from the count)."""
    return spec.orchestration.size or PCS_DEFAULT_SIZE


def check(spec: ClusterSpec, raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    problems += _placement_group(spec)
    problems += _zone_id(spec)
    problems += _control_plane_zone_id(spec)
    problems += existing_network(spec)
    if spec.orchestration.kind == "slurm":
        problems += _pcs_size(spec)
    if spec.orchestration.kind == "eks":
        problems += _eks_version(spec)
        problems += _eks_registry(spec)
        if not spec.network.existing:  # the caller's subnets are not carved from network.cidr
            problems += _eks_addresses(spec)
    return problems


# Zone IDs are "<region code>-az<n>", the region code being the region's parts shortened, as the
# zone IDs in the catalog's SkyPilot table show (use1, use2, usw1, usw2, apne1, aps1, apse3, cac1,
# euc1, eun1, eus2, euw2, mec1 for us-east-1 ... me-central-1). The GovCloud form (usgw1) is the
# same rule, not read from a table.
_DIRECTIONS = {
    "east": "e",
    "west": "w",
    "north": "n",
    "south": "s",
    "central": "c",
    "northeast": "ne",
    "northwest": "nw",
    "southeast": "se",
    "southwest": "sw",
}


def zone_id_prefix(region: str) -> str | None:
    """``us-east-1`` -> ``use1``, ``us-gov-west-1`` -> ``usgw1``; None for a region of another shape."""
    parts = region.split("-")
    gov = len(parts) == 4 and parts[1] == "gov"
    geo, direction, number = (parts[0] + "g", parts[2], parts[3]) if gov else (parts + ["", "", ""])[:3]
    if direction not in _DIRECTIONS or not number.isdigit():
        return None
    return f"{geo}{_DIRECTIONS[direction]}{number}"


def _control_plane_zone_id(spec: ClusterSpec) -> list[tuple[str, str]]:
    """``network.control_plane_zone_id``: EKS only; a zone ID of the region, not one EKS refuses,
    not the nodes' own (whether the account has it is the preflight's and ``pulumi up``'s)."""
    zid = spec.network.control_plane_zone_id
    path = "network.control_plane_zone_id"
    if zid is None:
        return []
    if spec.orchestration.kind != "eks":
        return [(path, f"only applies to eks (kind is {spec.orchestration.kind}: one zone, no control-plane subnet)")]
    prefix = zone_id_prefix(spec.region)
    if prefix is None or not re.fullmatch(re.escape(prefix) + r"-az[0-9]+", zid):
        example = f"{prefix}-az1" if prefix else "use1-az1"
        return [(path, f"{zid!r} is not a zone ID of region {spec.region!r} (allowed: an ID such as {example})")]
    refused = EKS_DISALLOWED_ZONE_IDS.get(spec.region, ())
    if zid in refused:
        return [
            (
                path,
                f'EKS refuses cluster subnets in {zid} (EKS user guide "network-reqs"; refused in '
                f"{spec.region}: {', '.join(refused)}); allowed: another zone ID of {spec.region}, or leave it "
                "unset and the stack picks one EKS accepts",
            )
        ]
    if zid == spec.zone_id:
        return [(path, f"{zid} is the nodes' zone (zone_id); EKS needs a second zone (allowed: another zone ID)")]
    return []


def _zone_id(spec: ClusterSpec) -> list[tuple[str, str]]:
    """What can be checked offline about the zone: only with its ID (zone names map to different
    IDs in every account; without an ID the preflight maps the name and checks the same)."""
    zid = spec.zone_id
    if zid is None:
        return []
    prefix = zone_id_prefix(spec.region)
    if prefix is None or not re.fullmatch(re.escape(prefix) + r"-az[0-9]+", zid):
        example = f"{prefix}-az1" if prefix else "use1-az1"
        return [
            (
                "zone_id",
                f"{zid!r} is not a zone ID of region {spec.region!r} (allowed: an ID such as {example}, "
                "as `aws ec2 describe-availability-zones` lists it; local zones are not supported)",
            )
        ]
    problems: list[tuple[str, str]] = []
    refused = EKS_DISALLOWED_ZONE_IDS.get(spec.region, ())
    if spec.orchestration.kind == "eks" and zid in refused:
        # The node subnet is one of the control plane's subnets (network.py).
        problems.append(
            (
                "zone_id",
                f'EKS refuses cluster subnets in {zid} (EKS user guide "network-reqs", '
                f"subnet requirements for clusters); allowed: another zone of {spec.region}",
            )
        )
    offered = spec.instance.zone_ids.get(spec.region)
    if offered and zid not in offered:
        problems.append(
            (
                "zone_id",
                f"{spec.compute.instance_type} is not offered in {zid} (allowed: "
                f"{', '.join(offered)}; source: the catalog's zone_ids, SkyPilot's EC2 "
                "offerings table)",
            )
        )
    return problems


def capacity_note(spec: ClusterSpec) -> str | None:
    """What the plan says of a capacity block: when its GPU nodes appear. None for other capacity.

    EKS: the node group is created with its desired size whether or not the block has started; its
    Auto Scaling group's launches fail until the block is active and then it scales up to that size
    (EKS user guide capacity-blocks-mng, at 0a7189e). PCS: the group's minimum is 0 (it may be made
    while the block is only scheduled; its maximum must not exceed the block: AWS PCS user guide
    capacity-blocks-configure-cng), so every node is dynamic capacity, which PCS launches for waiting
    jobs and releases once idle (AWS PCS user guide scaling-job-level: "the instances between the
    minimum and maximum counts ... AWS PCS reviews waiting jobs, launches Amazon EC2 instances to
    satisfy them, and scales dynamic capacity back down as jobs finish and instances become idle";
    "A job runs only after all required nodes are available")."""
    cap = spec.compute.capacity
    if cap.type != "capacity-block":
        return None
    n = spec.compute.nodes
    how = (
        f"the managed node group is created now with desired size {n}; until the block starts its launches "
        f"fail (EKS expects this), and from the start EKS scales it to {n} by itself"
        if spec.orchestration.kind == "eks"
        else f"the PCS node group is created now with 0 to {n} instances, all dynamic: once the block is active, "
        f"PCS launches them when a job waits for them (the validation job asks for all {n}, and starts only when "
        "all have joined) and releases them when they fall idle, so each job pays their boot"
    )
    upgrade = (
        " A new compute.image (or launch template) is not rolled onto a block's nodes: EKS upgrades a block's "
        "group only at desired size 0 (capacity-blocks-mng), so the group is deleted, then made again at the new "
        "image (`gpu-cluster plan NEW --from OLD` names it); running jobs end."
        if spec.orchestration.kind == "eks"
        else ""
    )
    when = "appear when the block starts" if spec.orchestration.kind == "eks" else "appear when a job asks for them"
    return (
        f"capacity block {cap.id}: the {n} GPU nodes {when}, not at `pulumi up`: {how}. "
        "The block's start and end: `python -m gpu_cluster.components.preflight STACK` (DescribeCapacityReservations)."
        + upgrade
    )


def _pcs_size(spec: ClusterSpec) -> list[tuple[str, str]]:
    """More instances than the size manages are refused; the fix (a larger size) is named with what
    it costs on a live cluster: pulumi-aws-native 1.84.0 declares pcs.Cluster's ``size`` replace-on-
    change (pulumi_aws_native/pcs/cluster.py, replace_on_changes ["name", "networking", "size"]), and
    the queue and node groups, whose ``clusterId`` is replace-on-change too, go with it."""
    o = spec.orchestration
    size = pcs_size(spec)
    instances = spec.compute.nodes + o.login_nodes
    if instances <= PCS_SIZES[size]:
        return []
    fits = next(s for s, n in PCS_SIZES.items() if n >= instances) if instances <= PCS_SIZES["LARGE"] else None
    named = "" if o.size else "unset, so "
    return [
        (
            "orchestration.size",
            f"{named}{size}, which manages up to {PCS_SIZES[size]} instances; {spec.compute.nodes} GPU and "
            f"{o.login_nodes} login nodes are {instances} (PCS API reference, Cluster.size). PCS cannot resize a "
            "cluster: a new size replaces it, with its queue and node groups (running jobs are lost) "
            + (
                f"(allowed: orchestration.size: {fits}, which on a live cluster accepts that replacement, or at "
                f"most {PCS_SIZES[size]} instances)"
                if fits
                else f"(allowed: at most {PCS_SIZES['LARGE']} instances)"
            ),
        )
    ]


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
        return [
            (
                path,
                "a capacity block is placed by AWS and its instances launch into no placement group "
                "(allowed: only with type reservation, for an ODCR made in a cluster placement group)",
            )
        ]
    if cap.type != "reservation":
        return [
            (
                path,
                f"only applies to a reservation (type is {cap.type}); for {cap.type} capacity the stack "
                "creates its own cluster placement group (interconnect.placement)",
            )
        ]
    if not _PLACEMENT_GROUP.match(cap.placement_group):
        return [
            (
                path,
                f"{cap.placement_group!r} is not a placement group name (allowed: 1-255 printable ASCII "
                "characters, no spaces)",
            )
        ]
    return []


def _eks_version(spec: ClusterSpec) -> list[tuple[str, str]]:
    version = spec.orchestration.kubernetes_version
    if version in EKS_UNAVAILABLE:
        supported = ", ".join(sorted(EKS_STANDARD_SUPPORT_END, reverse=True))
        return [
            (
                "orchestration.kubernetes_version",
                f"{version!r} is past the end of EKS extended support and can no longer be created "
                f"(allowed: {supported}; source: docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html)",
            )
        ]
    return []


def _eks_registry(spec: ClusterSpec) -> list[tuple[str, str]]:
    """The EFA device plugin's image is pulled from the region's EKS registry (versions.EKS_REGISTRIES,
    from the EKS user guide's add-ons-images table); a region without a recorded one is refused."""
    if spec.region in EKS_REGISTRIES:
        return []
    return [
        (
            "region",
            f"{spec.region!r} has no EKS image registry recorded for the EFA device plugin (the EKS user guide's "
            "'View Amazon container image registries for Amazon EKS add-ons' table; ap-east-2's row names "
            f"another region's host) (allowed: {', '.join(sorted(EKS_REGISTRIES))})",
        )
    ]


def _eks_addresses(spec: ClusterSpec) -> list[tuple[str, str]]:
    """Every pod on EKS takes an address of the node subnet (VPC CNI); a range too small for the
    node count fails only when nodes stop getting pod addresses, long after `pulumi up`."""
    nodes = spec.compute.nodes
    need = eks_sizing.node_subnet_addresses_needed(nodes)
    have = eks_sizing.node_subnet_size(spec.network.cidr)
    if need <= have:
        return []
    fits = eks_sizing.smallest_vpc_prefix(nodes)
    allowed = (
        f"a range of /{fits} or larger, e.g. 10.0.0.0/{fits}"
        if fits is not None
        else "fewer nodes: even a /16 is too small"
    )
    return [
        (
            "network.cidr",
            f"{spec.network.cidr!r} leaves a node subnet of {have} addresses; {nodes} EKS nodes with "
            f"{eks_sizing.ADDRESSES_PER_GPU_NODE} addresses each (node, VPC CNI MINIMUM_IP_TARGET "
            f"{eks_sizing.CNI_MINIMUM_IP_TARGET}, WARM_IP_TARGET {eks_sizing.CNI_WARM_IP_TARGET}) and the "
            f"system nodes need {need} (allowed: {allowed})",
        )
    ]


# ---------------------------------------------------------------------------------------------
# Field rules, called by the generic reader (components/spec_parse.py) as it reads each field.

REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d\Z")
REGION_HINT = "an AWS region such as us-east-1"
# S3 bucket names: 3-63 lower-case letters, digits, '.' and '-', starting and ending with a letter
# or digit (S3 user guide, "General purpose bucket naming rules").
BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\Z")
OBJECT_STORE_SCHEME = "s3://"
RESERVATION_WHAT = "capacity reservation id (cr-...)"
# EC2 capacity reservation ids: cr- and 8 or 17 hex digits (EC2 API, CapacityReservationId).
_RESERVATION = re.compile(r"^cr-[0-9a-f]{8}([0-9a-f]{9})?\Z")
DEFAULT_KUBERNETES_VERSION = EKS_KUBERNETES_VERSION
"""The EKS pin of components/aws/versions.py (in standard support)."""
# EKS AMI release versions are "<kubernetes major.minor.patch>-<YYYYMMDD>" (the value of the
# SSM parameter .../recommended/release_version, and of the node group's releaseVersion;
# EKS user guide, "Retrieve recommended Amazon Linux AMI IDs", read 2026-11).
_EKS_RELEASE = re.compile(r"^1\.[0-9]{2}\.[0-9]{1,3}-20[0-9]{6}\Z")
_AMI_ID = re.compile(r"^ami-([0-9a-f]{8}|[0-9a-f]{17})\Z")


def zone_in_region(region: str, zone: str) -> bool:
    return re.fullmatch(re.escape(region) + r"[a-z]", zone) is not None


def zone_example(region: str) -> str:
    return f"{region}a"


def reservation_id(cid: str) -> str | None:
    if not _RESERVATION.match(cid):
        return f"{cid!r} is not a capacity reservation id (allowed: cr- and 8 or 17 hex digits)"
    return None


def lustre_size(size: int, tput: int | None) -> str | None:
    """FSx PERSISTENT_2 SSD sizes do not depend on the throughput (the catalog repeats them per
    tier); with a throughput that is not offered, the smallest tier's sizes are checked."""
    tiers = lustre_tiers("aws")
    tier = tiers.tiers.get(tput) if tput is not None else None
    tier = tier or tiers.tiers[tiers.throughputs[0]]
    if tier.size_ok(size):
        return None
    return (
        f"{size} GiB is not a PERSISTENT_2 size (allowed: {tier.first}, or a multiple of {tier.step} up to {tier.max})"
    )


def export_path(import_path: str | None, export: str) -> str | None:
    """One FSx data repository association links one S3 prefix both ways (an export without an
    import path is the generic rule's)."""
    if import_path is None or export == import_path:
        return None
    return (
        f"{export!r} differs from import_path {import_path!r}; an FSx data repository association imports "
        "from and exports to the same S3 prefix (allowed: the import path)"
    )


def tag(key: str, value: str) -> str | None:
    if len(key) > 128 or len(value) > 256 or key.lower().startswith("aws:"):
        return "AWS tag keys are at most 128 characters, values 256, and 'aws:' is reserved"
    return None


def node_image(raw: object, kind: str | None) -> str | None:
    from gpu_cluster.components.spec_reader import short

    pattern, example = (
        (_EKS_RELEASE, "an EKS AL2023 NVIDIA release such as 1.33.5-20251120")
        if kind == "eks"
        else (_AMI_ID, "an AMI id such as ami-0123456789abcdef0")
    )
    if not isinstance(raw, str) or not pattern.match(raw):
        return f"{short(raw)} is not a node image for {kind} (allowed: {example})"
    return None
