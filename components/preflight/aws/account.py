"""Where the stack goes, as this account sees it: the credentials, the zone and its ID, the instance
type offered there, and EC2's own figures for that type against the catalog's.
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from gpu_cluster.components.aws.network_rules import EKS_DISALLOWED_ZONE_IDS, control_plane_zone, node_zone_problems
from gpu_cluster.components.preflight import Context, CouldNotCheck, NotApplicable, Problem
from gpu_cluster.components.preflight.aws.clients import call


def check_identity(ctx: Context) -> list[Problem]:
    """Credentials first: without them every other check would fail the same way."""
    call("sts:GetCallerIdentity", ctx.clients.sts.get_caller_identity)
    return []


def account_zones(ctx: Context) -> dict[str, str]:
    """The region's regular zones this account has, name -> zone ID (EC2 API DescribeAvailabilityZones,
    filters zone-type availability-zone and state available; the answer's ZoneName and ZoneId)."""

    def fetch() -> dict[str, str]:
        try:
            resp = call(
                "ec2:DescribeAvailabilityZones",
                ctx.clients.ec2.describe_availability_zones,
                Filters=[
                    {"Name": "zone-type", "Values": ["availability-zone"]},
                    {"Name": "state", "Values": ["available"]},
                ],
            )
        except ClientError as exc:
            raise CouldNotCheck(f"ec2:DescribeAvailabilityZones: {exc}") from None
        return {z["ZoneName"]: z["ZoneId"] for z in resp.get("AvailabilityZones", [])}

    zones: dict[str, str] = ctx.cached("zones", fetch)
    return zones


def check_zone(ctx: Context) -> list[Problem]:
    """The zone exists in this account and is ``zone_id`` where both are given; on EKS the nodes'
    zone ID is not one EKS refuses, and a second zone EKS accepts exists (``network.
    control_plane_zone_id``, or the one the program will choose from the same answer)."""
    spec = ctx.spec
    zones = account_zones(ctx)
    eks_subnets = spec.orchestration.kind == "eks" and not spec.network.existing
    if eks_subnets:
        chosen, found = control_plane_zone(
            zones,
            region=spec.region,
            zone=spec.zone,
            zone_id=spec.zone_id,
            control_plane_zone_id=spec.network.control_plane_zone_id,
        )
    else:
        chosen, found = None, node_zone_problems(zones, region=spec.region, zone=spec.zone, zone_id=spec.zone_id)
    problems = [Problem(path, reason) for path, reason in found]
    refused = EKS_DISALLOWED_ZONE_IDS.get(spec.region, ())
    zid = zones.get(spec.zone)
    if spec.orchestration.kind == "eks" and zid in refused:
        problems.append(
            Problem(
                "zone",
                f"{spec.zone} (the GPU nodes' zone) is zone ID {zid} in this account, where EKS creates no "
                f"cluster subnet (refused IDs in {spec.region}: {', '.join(refused)}; "
                "source: docs.aws.amazon.com/eks/latest/userguide/network-reqs.html); "
                "allowed: another zone of the region",
            )
        )
    if chosen is not None:
        name = next(n for n, i in zones.items() if i == chosen)
        ctx.notes.append(f"the EKS control plane's second subnet goes to {name} ({chosen})")
    return problems


def check_offering(ctx: Context) -> list[Problem]:
    """The instance type is offered in the zone (DescribeInstanceTypeOfferings, location type
    availability-zone). A reservation or capacity block brings its own capacity: there the
    reservation's own type and zone are what count (next check)."""
    spec = ctx.spec
    if spec.compute.capacity.pre_placed:
        raise NotApplicable(f"a {spec.compute.capacity.type}: its own type and zone are checked next")
    try:
        resp = call(
            "ec2:DescribeInstanceTypeOfferings",
            ctx.clients.ec2.describe_instance_type_offerings,
            LocationType="availability-zone",
            Filters=[
                {"Name": "instance-type", "Values": [spec.compute.instance_type]},
                {"Name": "location", "Values": [spec.zone]},
            ],
        )
    except ClientError as exc:
        raise CouldNotCheck(f"ec2:DescribeInstanceTypeOfferings: {exc}") from None
    if resp.get("InstanceTypeOfferings"):
        return []
    elsewhere = call(
        "ec2:DescribeInstanceTypeOfferings",
        ctx.clients.ec2.describe_instance_type_offerings,
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": [spec.compute.instance_type]}],
    )
    zones = sorted({o["Location"] for o in elsewhere.get("InstanceTypeOfferings", [])})
    return [
        Problem(
            "zone",
            f"{spec.compute.instance_type} is not offered in {spec.zone} in this account "
            f"(allowed: {', '.join(zones) if zones else f'no zone of {spec.region}'})",
        )
    ]


def check_instance_facts(ctx: Context) -> list[Problem]:
    """What the catalog says of the type is what EC2 says (EC2 API DescribeInstanceTypes,
    InstanceTypeInfo: VCpuInfo.DefaultVCpus, NetworkInfo.MaximumNetworkCards, EfaSupported,
    EfaInfo.MaximumEfaInterfaces). The launch template gets one interface per network card and its
    EFA interfaces from the catalog (components/aws/interconnect.py), and the vCPU quota is counted
    from it: a catalog figure EC2 contradicts would fail the launch, or pass a quota it should not."""
    spec = ctx.spec
    it = spec.instance
    try:
        resp = call(
            "ec2:DescribeInstanceTypes",
            ctx.clients.ec2.describe_instance_types,
            InstanceTypes=[spec.compute.instance_type],
        )
    except ClientError as exc:
        raise CouldNotCheck(f"ec2:DescribeInstanceTypes: {exc}") from None
    found = resp.get("InstanceTypes", [])
    if not found:
        raise CouldNotCheck(f"ec2:DescribeInstanceTypes: no answer for {spec.compute.instance_type} in {spec.region}")
    info = found[0]
    net = info.get("NetworkInfo", {})
    source = f"the catalog's {it.name} entry (components/catalog.yaml, network source {it.network.source})"
    ec2_says = {
        "vCPUs": info.get("VCpuInfo", {}).get("DefaultVCpus"),
        "network cards": net.get("MaximumNetworkCards"),
        "EFA interfaces": (net.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0) if net.get("EfaSupported") else 0,
    }
    catalog_says = {
        "vCPUs": it.vcpu,
        "network cards": it.network.network_cards,
        "EFA interfaces": it.network.efa_interfaces,
    }
    problems = []
    for what, theirs in ec2_says.items():
        ours = catalog_says[what]
        if theirs is not None and ours is not None and int(theirs) != int(ours):
            problems.append(
                Problem(
                    "compute.instance_type",
                    f"EC2 says {spec.compute.instance_type} has {int(theirs)} {what} in {spec.region}, {source} "
                    f"says {ours}; the stack is built from the catalog (allowed: a catalog figure that EC2 "
                    "confirms: correct the entry and its source)",
                )
            )
    return problems
