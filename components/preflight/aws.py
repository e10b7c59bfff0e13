"""AWS preflight checks, made with boto3 and the deployer's credentials.

boto3 honours the standard ``AWS_ENDPOINT_URL`` (and ``AWS_ENDPOINT_URL_<SERVICE>``), so the
same code runs against moto's server in the tests. Each check reads one or two documented API
answers and says, at the spec's config path, what the account would refuse.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any, Callable

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
)
from botocore.parsers import ResponseParserError

from components.aws.network_rules import EKS_DISALLOWED_ZONE_IDS, control_plane_zone, node_zone_problems
from components.preflight import Check, Context, CouldNotCheck, Fatal, NotApplicable, Problem, deployer_ranges

# Service Quotas codes. Each is looked up by code and its QuotaName is compared with the name
# below, so a wrong code is "could not check", never a wrong verdict. Names: "Running On-Demand
# P instances" and "All P Spot Instance Requests", both in vCPUs (EC2 User Guide, "On-Demand
# Instance quotas" and "Spot Instance quotas", using-spot-limits); "Nodes per managed node group",
# default 450 (EKS User Guide "service-quotas", listed by `aws service-quotas
# list-aws-default-service-quotas --service-code eks`). The codes were read 2026-12 in public
# ListAWSDefaultServiceQuotas dumps and in tools that call GetServiceQuota with them.
QUOTA_ON_DEMAND_P = ("ec2", "L-417A185B", "Running On-Demand P instances")
QUOTA_SPOT_P = ("ec2", "L-7212CCBC", "All P Spot Instance Requests")
QUOTA_EKS_NODES_PER_GROUP = ("eks", "L-BD136A63", "Nodes per managed node group")
# The standard families' On-Demand vCPU quota, which the EKS system nodes (c5) and the PCS login
# nodes (m6i) count against (EC2 User Guide, "On-Demand Instance quotas"). Code and name verified
# 2026-12-01 against the AWS CLI User Guide, "Service Quotas examples using AWS CLI"
# (docs.aws.amazon.com/cli/latest/userguide/cli_service-quotas_code_examples.html): its
# get-aws-default-service-quota example answers QuotaCode L-1216C47A, QuotaName "Running On-Demand
# Standard (A, C, D, H, I, M, R, T, Z) instances", usage metric Class Standard/OnDemand, Resource vCPU.
# L-7212CCBC "All P Spot Instance Requests" matches a recorded ListServiceQuotas table
# (geyang/jaynes-starter-kit 02_ec2_docker_guide/setup/spot_limit.md at 0e7994c). L-417A185B was not
# found on an AWS page; the name comparison keeps a wrong code from giving a wrong verdict.
QUOTA_ON_DEMAND_STANDARD = ("ec2", "L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances")

# Reservation states a launch can use now or later (EC2 API CapacityReservation.State; the enum
# in botocore's ec2 2016-11-15 model: active, scheduled, expired, cancelled, pending, failed, ...).
USABLE_STATES = ("active", "scheduled")

_CREDENTIAL_ERRORS = {
    "AuthFailure",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "ExpiredToken",
    "ExpiredTokenException",
    "SignatureDoesNotMatch",
    "InvalidAccessKeyId",
}
_ACCESS_ERRORS = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"}


@dataclass(frozen=True, slots=True)
class AwsClients:
    sts: Any
    ec2: Any
    s3: Any
    quotas: Any
    ssm: Any = None
    """Systems Manager: the public EKS image parameter (None: that question is not asked)."""
    eks: Any = None
    """EKS: the Kubernetes and add-on versions offered in the region (None: could not check)."""
    pcs: Any = None
    """AWS PCS: whether the service answers in the region (None: could not check)."""

    @classmethod
    def from_environment(cls, region: str) -> AwsClients:
        """Clients from the standard chain (env, profile, SSO, instance role) and endpoints
        (``AWS_ENDPOINT_URL``); one attempt each, so an unreachable endpoint says so quickly."""
        cfg = Config(
            region_name=region, retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=5, read_timeout=20
        )
        session = boto3.session.Session(region_name=region)
        return cls(
            sts=session.client("sts", config=cfg),
            ec2=session.client("ec2", config=cfg),
            s3=session.client("s3", config=cfg),
            quotas=session.client("service-quotas", config=cfg),
            ssm=session.client("ssm", config=cfg),
            eks=session.client("eks", config=cfg),
            pcs=session.client("pcs", config=cfg),
        )


def call(what: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
    """One API call; credentials and reachability problems become :class:`Fatal`, a missing
    permission :class:`CouldNotCheck`, and other client errors are left to the caller."""
    try:
        return fn(**kwargs)
    except (NoCredentialsError, PartialCredentialsError):
        raise Fatal(
            "no AWS credentials found (set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
            "or run `aws sso login`)"
        ) from None
    except (EndpointConnectionError, ConnectTimeoutError) as exc:
        raise Fatal(f"AWS endpoint unreachable: {exc}") from None
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in _CREDENTIAL_ERRORS:
            raise Fatal(f"AWS refused the credentials ({code}) on {what}") from None
        if code in _ACCESS_ERRORS:
            raise CouldNotCheck(f"{what}: access denied to these credentials ({code})") from None
        raise
    except (BotoCoreError, ResponseParserError) as exc:
        raise CouldNotCheck(f"{what}: the endpoint's answer could not be read: {str(exc).splitlines()[0]}") from None


# ---------------------------------------------------------------------------------------------


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


def check_node_image(ctx: Context) -> list[Problem]:
    """The node image the program will use exists in the region: on EKS the public SSM parameter of
    the recommended NVIDIA release for the Kubernetes version (SSM GetParameter; EKS user guide
    retrieve-ami-id), on PCS the sample AMI the program looks up (EC2 DescribeImages, owner amazon,
    the same name filter, x86_64) or the pinned AMI (DescribeImages ImageIds). A pinned EKS release
    is a version string: EKS checks it at the node group's creation, not asked here."""
    spec = ctx.spec
    if spec.orchestration.kind == "eks":
        if spec.compute.image is not None:
            raise NotApplicable(f"release {spec.compute.image} pinned: EKS checks it when the node group is made")
        if ctx.clients.ssm is None:
            raise CouldNotCheck("no Systems Manager client")
        from components.aws.compute import eks_release_parameter

        name = eks_release_parameter(spec.orchestration.kubernetes_version)
        try:
            call("ssm:GetParameter", ctx.clients.ssm.get_parameter, Name=name)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ParameterNotFound":
                raise CouldNotCheck(f"ssm:GetParameter {name}: {exc}") from None
            return [
                Problem(
                    "orchestration.kubernetes_version",
                    f"{spec.region} has no EKS AL2023 NVIDIA image for Kubernetes {spec.orchestration.kubernetes_version} "
                    f"(SSM parameter {name} not found) (allowed: a version EKS publishes that image for here, "
                    "or pin compute.image to a release)",
                )
            ]
        return []
    from components.aws.compute import pcs_ami_name_filter

    if spec.compute.image is not None:
        query: dict[str, Any] = {"ImageIds": [spec.compute.image]}
    else:
        query = {
            "Owners": ["amazon"],
            "Filters": [
                {"Name": "name", "Values": [pcs_ami_name_filter()]},
                {"Name": "architecture", "Values": ["x86_64"]},
            ],
        }
    try:
        resp = call("ec2:DescribeImages", ctx.clients.ec2.describe_images, **query)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code", "").startswith("InvalidAMIID"):
            resp = {"Images": []}
        else:
            raise CouldNotCheck(f"ec2:DescribeImages: {exc}") from None
    images = [i for i in resp.get("Images", []) if i.get("State", "available") == "available"]
    if images:
        newest = max(images, key=lambda i: str(i.get("CreationDate", "")))
        ctx.notes.append(f"node image in {spec.region}: {newest.get('ImageId')} ({newest.get('Name', '?')})")
        return []
    if spec.compute.image is not None:
        return [
            Problem(
                "compute.image",
                f"{spec.compute.image} is no available image in {spec.region} (allowed: an AMI id of this region)",
            )
        ]
    return [
        Problem(
            "compute.image",
            f"no AWS PCS sample image {pcs_ami_name_filter()} (owner amazon, x86_64) in {spec.region}; the program "
            "would find none (allowed: pin compute.image to an AMI built for PCS in this region, e.g. with "
            "aws-hpc-recipes dlami_for_pcs_imagebuilder)",
        )
    ]


def check_eks_versions(ctx: Context) -> list[Problem]:
    """EKS offers the stack's Kubernetes version in the region (EKS API DescribeClusterVersions:
    clusterVersions[].clusterVersion and versionStatus STANDARD_SUPPORT | EXTENDED_SUPPORT |
    UNSUPPORTED; EKS user guide kubernetes-versions: a version past standard support costs the
    extended-support price), and each managed add-on the stack installs has a version for it
    (DescribeAddonVersions with kubernetesVersion: addons[].addonVersions[].compatibilities[].
    clusterVersion). The add-ons are unpinned (components/aws/versions.py), so EKS picks the
    version marked defaultVersion for the cluster's version; one with none would fail CreateAddon."""
    spec = ctx.spec
    if spec.orchestration.kind != "eks":
        raise NotApplicable("not an EKS stack")
    if ctx.clients.eks is None:
        raise CouldNotCheck("no EKS client")
    from components.aws.versions import FSX_CSI_ADDON, POD_IDENTITY_ADDON, VPC_CNI_ADDON

    version = spec.orchestration.kubernetes_version
    eks = ctx.clients.eks
    try:
        resp = call(
            "eks:DescribeClusterVersions",
            eks.describe_cluster_versions,
            clusterType="eks",
            clusterVersions=[version],
            includeAll=True,
        )
    except ClientError as exc:
        raise CouldNotCheck(f"eks:DescribeClusterVersions: {exc}") from None
    found = [v for v in resp.get("clusterVersions", []) if v.get("clusterVersion") == version]
    status = str(found[0].get("versionStatus") or found[0].get("status") or "").upper() if found else ""
    if not found or status in ("UNSUPPORTED",):
        offered = call("eks:DescribeClusterVersions", eks.describe_cluster_versions, clusterType="eks")
        names = sorted(
            {str(v.get("clusterVersion")) for v in offered.get("clusterVersions", []) if v.get("clusterVersion")},
            key=lambda v: tuple(int(x) for x in v.split(".")),
        )
        return [
            Problem(
                "orchestration.kubernetes_version",
                f"EKS {'offers no' if not found else 'no longer supports'} Kubernetes {version} in {spec.region} "
                f"(eks:DescribeClusterVersions) (allowed: {', '.join(names) if names else 'a version EKS offers here'})",
            )
        ]
    if status in ("EXTENDED_SUPPORT", "EXTENDED-SUPPORT"):
        end = found[0].get("endOfExtendedSupportDate")
        ctx.notes.append(
            f"EKS {version} is in extended support in {spec.region}"
            + (f" until {_when(end)}" if end else "")
            + ": the control plane pays the extended-support price per hour (EKS user guide kubernetes-versions)"
        )
    problems: list[Problem] = []
    for addon in (VPC_CNI_ADDON, POD_IDENTITY_ADDON, FSX_CSI_ADDON):
        try:
            answer = call(
                f"eks:DescribeAddonVersions {addon}",
                eks.describe_addon_versions,
                kubernetesVersion=version,
                addonName=addon,
            )
        except ClientError as exc:
            raise CouldNotCheck(f"eks:DescribeAddonVersions {addon}: {exc}") from None
        compatible = [
            av.get("addonVersion")
            for a in answer.get("addons", [])
            if a.get("addonName") == addon
            for av in a.get("addonVersions", [])
            if any(c.get("clusterVersion") == version for c in av.get("compatibilities", []))
        ]
        if not compatible:
            problems.append(
                Problem(
                    "orchestration.kubernetes_version",
                    f"EKS has no {addon} add-on version for Kubernetes {version} in {spec.region} "
                    "(eks:DescribeAddonVersions); the stack installs it (allowed: a version the add-on supports here)",
                )
            )
    return problems


def check_pcs_available(ctx: Context) -> list[Problem]:
    """AWS PCS answers in the region (PCS API ListClusters) and no other cluster is being created there.
    PCS is in fewer regions than EC2 (AWS General Reference, "AWS Parallel Computing Service endpoints
    and quotas", read 2026-12-01): with STS already answered, an endpoint that does not resolve here
    means the service is not offered. The per-cluster limits that matter here (instances per size)
    are the spec's (components/aws/rules.py); the PCS quotas page's other quotas were not read."""
    spec = ctx.spec
    if spec.orchestration.kind != "slurm":
        raise NotApplicable("not a PCS stack")
    if ctx.clients.pcs is None:
        raise CouldNotCheck("no AWS PCS client")
    clusters: list[dict[str, Any]] = []
    try:
        token: str | None = None
        while True:
            page = ctx.clients.pcs.list_clusters(**({"nextToken": token} if token else {}))
            clusters += page.get("clusters", [])
            token = page.get("nextToken")
            if not token:
                break
    except EndpointConnectionError:
        return [
            Problem(
                "region",
                f"AWS PCS does not answer in {spec.region} (no endpoint pcs.{spec.region}.amazonaws.com) "
                "(allowed: a region on the PCS endpoints page, docs.aws.amazon.com/general/latest/gr/pcs.html)",
            )
        ]
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in _ACCESS_ERRORS:
            raise CouldNotCheck(f"pcs:ListClusters: access denied to these credentials ({code})") from None
        if code in _CREDENTIAL_ERRORS:
            raise Fatal(f"AWS refused the credentials ({code}) on pcs:ListClusters") from None
        raise CouldNotCheck(f"pcs:ListClusters: {exc}") from None
    except (BotoCoreError, ResponseParserError) as exc:
        raise CouldNotCheck(f"pcs:ListClusters: {str(exc).splitlines()[0]}") from None
    # "There can only be 1 cluster in a Creating state per AWS Region per AWS account. CreateCluster
    # fails with a ServiceQuotaExceededException if there is already a cluster in a Creating state"
    # (PCS API reference, CreateCluster, read 2026-12-01; ListClusters' status enum has CREATING).
    creating = sorted(str(c.get("name")) for c in clusters if c.get("status") == "CREATING")
    if creating:
        return [
            Problem(
                "orchestration.kind",
                f"PCS cluster {', '.join(creating)} is being created in {spec.region}, and PCS creates one "
                "cluster at a time per region and account (CreateCluster would fail with "
                "ServiceQuotaExceededException) (allowed: run `pulumi up` once it is ACTIVE)",
            )
        ]
    return []


def _reservation(ctx: Context) -> dict[str, Any] | None:
    """The stack's capacity reservation (ODCR or capacity block) as EC2 describes it, or None."""
    cid = ctx.spec.compute.capacity.id

    def fetch() -> dict[str, Any] | None:
        try:
            resp = call(
                "ec2:DescribeCapacityReservations",
                ctx.clients.ec2.describe_capacity_reservations,
                CapacityReservationIds=[cid],
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code", "").startswith("InvalidCapacityReservationId"):
                return None
            raise CouldNotCheck(f"ec2:DescribeCapacityReservations: {exc}") from None
        found = resp.get("CapacityReservations", [])
        return found[0] if found else None

    result: dict[str, Any] | None = ctx.cached("reservation", fetch)
    return result


def _zone_id_of(ctx: Context, zone: str) -> str | None:
    """The zone's ID from the zone check's answer when it ran (None otherwise: no second call)."""
    zones = ctx.cache.get("zones")
    return zones.get(zone) if isinstance(zones, dict) else None


def _when(value: Any) -> str:
    return (
        value.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        if isinstance(value, dt.datetime)
        else str(value)
    )


def check_capacity(ctx: Context, now: dt.datetime | None = None) -> list[Problem]:
    """The reservation or block exists, is active or scheduled, and matches the stack's type,
    zone and node count; when it starts and ends goes in the notes."""
    spec = ctx.spec
    cap = spec.compute.capacity
    if not cap.pre_placed:
        raise NotApplicable(f"{cap.type} capacity")
    now = now or dt.datetime.now(dt.timezone.utc)
    cr = _reservation(ctx)
    kind = "capacity block" if cap.type == "capacity-block" else "capacity reservation"
    if cr is None:
        return [
            Problem(
                "compute.capacity.id",
                f"{cap.id} is no {kind} this account can see in {spec.region} "
                "(allowed: an id from `aws ec2 describe-capacity-reservations`)",
            )
        ]
    problems: list[Problem] = []
    rtype = cr.get("ReservationType", "default")
    want = "capacity-block" if cap.type == "capacity-block" else "default"
    if rtype != want:
        problems.append(
            Problem(
                "compute.capacity.type",
                f"{cap.id} is a {'capacity block' if rtype == 'capacity-block' else 'capacity reservation (ODCR)'}, "
                f"not a {kind} (allowed: {'capacity-block' if rtype == 'capacity-block' else 'reservation'})",
            )
        )
    state = cr.get("State", "")
    if state not in USABLE_STATES:
        problems.append(Problem("compute.capacity.id", f"{cap.id} is {state!r} (allowed: {', '.join(USABLE_STATES)})"))
    if cr.get("InstanceType") != spec.compute.instance_type:
        problems.append(
            Problem(
                "compute.instance_type",
                f"{spec.compute.instance_type} does not match {cap.id}, which "
                f"reserves {cr.get('InstanceType')} (allowed: {cr.get('InstanceType')})",
            )
        )
    # By zone ID where the stack's is known (subnets are placed by ID; names differ per account).
    node_id = spec.zone_id or _zone_id_of(ctx, spec.zone)
    rid = cr.get("AvailabilityZoneId")
    if (rid != node_id) if (rid and node_id) else (cr.get("AvailabilityZone") != spec.zone):
        problems.append(
            Problem(
                "zone",
                f"{spec.zone}"
                + (f" (zone ID {node_id})" if node_id else "")
                + f" does not match {cap.id}, which is in {cr.get('AvailabilityZone')} "
                f"(zone ID {cr.get('AvailabilityZoneId', '?')}; allowed: {cr.get('AvailabilityZone')}"
                + (f", zone_id {rid})" if spec.zone_id and rid else ")"),
            )
        )
    total, free = int(cr.get("TotalInstanceCount", 0)), int(cr.get("AvailableInstanceCount", 0))
    if total < spec.compute.nodes:
        problems.append(
            Problem(
                "compute.nodes",
                f"{spec.compute.nodes} nodes do not fit {cap.id}, which holds {total} instances (allowed: 1..{total})",
            )
        )
    elif state == "active" and free < spec.compute.nodes:
        problems.append(
            Problem(
                "compute.nodes",
                f"{spec.compute.nodes} nodes do not fit {cap.id}: {total - free} of its "
                f"{total} instances are in use by other launches, {free} free (allowed: 1..{free})",
            )
        )
    start, end = cr.get("StartDate"), cr.get("EndDate")
    if state == "scheduled" and isinstance(start, dt.datetime):
        ctx.notes.append(
            f"{cap.id} ({kind}) is scheduled: it starts {_when(start)}"
            + (f" and ends {_when(end)}" if end else "")
            + "; the GPU nodes launch only from its start: the stack can be created now, and the nodes "
            "appear then (EKS scales its node group up by itself, PCS launches them)"
        )
    elif end is not None:
        left = end - now if isinstance(end, dt.datetime) else None
        hours = f" ({left.total_seconds() / 3600:.0f} h from now)" if left is not None else ""
        ctx.notes.append(
            f"{cap.id} ({kind}) is {state}"
            + (f" since {_when(start)}" if start else "")
            + f"; it ends {_when(end)}{hours}"
        )
    else:
        ctx.notes.append(f"{cap.id} ({kind}) is {state}, with no end date")
    return problems


def planned_placement_group(ctx: Context) -> str | None:
    """The placement group the stack launches into: ``None`` for none. ``compute.capacity.
    placement_group`` names the group an ODCR was made in (the stack then launches into it and
    creates none); otherwise the stack creates its own group when ``interconnect.placement``."""
    if ctx.spec.compute.capacity.placement_group:
        return ctx.spec.compute.capacity.placement_group
    return "<the stack's own group>" if ctx.spec.interconnect.placement else None


def _group_name(arn: str | None) -> str | None:
    return arn.rsplit("/", 1)[-1] if arn else None


def check_placement(ctx: Context) -> list[Problem]:
    """The placement group and the reservation must agree. ParallelCluster's
    PlacementGroupCapacityReservationValidator (aws/aws-parallelcluster
    cli/src/pcluster/validators/ec2_validators.py at 451cc53, 2024-10-24): an ODCR made in a
    placement group matches only launches into that group (error otherwise), and a launch with
    no group needs an ODCR made without one; an ODCR without a group under a chosen group is
    a warning (insufficient capacity outside the reservation's placement)."""
    spec = ctx.spec
    if not spec.compute.capacity.pre_placed:
        raise NotApplicable(f"{spec.compute.capacity.type} capacity")
    cr = _reservation(ctx)
    if cr is None:
        return []  # the capacity check has said it is missing
    odcr_group = _group_name(cr.get("PlacementGroupArn"))
    chosen = planned_placement_group(ctx)
    cid = spec.compute.capacity.id
    if odcr_group and chosen is None:
        return [
            Problem(
                "compute.capacity.placement_group",
                f"{cid} was made in cluster placement group {odcr_group!r}; it matches only launches into "
                "that group, and this stack launches into none, so no node would use the reservation "
                f"(allowed: placement_group: {odcr_group})",
            )
        ]
    if odcr_group and chosen is not None and chosen != odcr_group:
        return [
            Problem(
                "compute.capacity.placement_group",
                f"{cid} was made in placement group {odcr_group!r}, but the stack launches into {chosen}; "
                f"only launches into {odcr_group!r} match it (allowed: placement_group: {odcr_group})",
            )
        ]
    if not odcr_group and chosen is not None:
        ctx.notes.append(
            f"{cid} has no placement group but the stack uses one: launches may fail for capacity "
            "outside the reservation's placement (ParallelCluster warns the same)"
        )
    return []


def _quota(ctx: Context, quota: tuple[str, str, str]) -> float:
    service, code, name = quota
    try:
        resp = call(
            f"service-quotas:GetServiceQuota {service}/{code}",
            ctx.clients.quotas.get_service_quota,
            ServiceCode=service,
            QuotaCode=code,
        )
    except ClientError as exc:
        raise CouldNotCheck(f"service quota {service}/{code} ({name}): {exc}") from None
    q = resp.get("Quota", {})
    if q.get("QuotaName") != name:
        raise CouldNotCheck(
            f"service quota {service}/{code} is named {q.get('QuotaName')!r}, not {name!r}; "
            "the code in components/preflight/aws.py needs correcting"
        )
    return float(q.get("Value", 0.0))


def check_quotas(ctx: Context) -> list[Problem]:
    """The vCPU quota of the capacity the nodes launch as (On-Demand or Spot P instances), and on
    EKS the nodes-per-managed-node-group quota. Instances in a reservation or capacity block
    use capacity already reserved, so no vCPU quota is asked for them."""
    spec = ctx.spec
    problems: list[Problem] = []
    cap = spec.compute.capacity.type
    vcpus = spec.compute.nodes * spec.instance.vcpu
    if cap in ("on-demand", "spot") and re.match(r"^p\d", spec.compute.instance_type):
        quota = QUOTA_ON_DEMAND_P if cap == "on-demand" else QUOTA_SPOT_P
        limit = _quota(ctx, quota)
        if limit < vcpus:
            problems.append(
                Problem(
                    "compute.nodes",
                    f"{spec.compute.nodes} x {spec.compute.instance_type} need {vcpus} vCPUs "
                    f"but the quota {quota[2]!r} ({quota[1]}) is {limit:.0f} in {spec.region}, "
                    "before any running instance counts against it (allowed: "
                    f"at most {int(limit) // spec.instance.vcpu} nodes, or request an increase)",
                )
            )
    if spec.orchestration.kind == "eks":
        limit = _quota(ctx, QUOTA_EKS_NODES_PER_GROUP)
        largest = largest_node_group(ctx)
        if limit < largest:
            problems.append(
                Problem(
                    "compute.nodes",
                    f"a managed node group of {largest} nodes exceeds the EKS quota "
                    f"{QUOTA_EKS_NODES_PER_GROUP[2]!r} ({QUOTA_EKS_NODES_PER_GROUP[1]}) "
                    f"of {limit:.0f} (allowed: up to {limit:.0f} per group, or request an increase)",
                )
            )
    return problems


def _small_nodes(ctx: Context) -> tuple[str, int] | None:
    """The on-demand non-GPU nodes the stack launches: EKS's system group, PCS's login nodes."""
    spec = ctx.spec
    if spec.orchestration.kind == "eks":
        from components.aws.eks_sizing import SYSTEM_INSTANCE_TYPE, SYSTEM_NODES

        return SYSTEM_INSTANCE_TYPE, SYSTEM_NODES
    if spec.orchestration.login_nodes > 0:
        from components.aws.orchestration_pcs import LOGIN_INSTANCE_TYPE

        return LOGIN_INSTANCE_TYPE, spec.orchestration.login_nodes
    return None


def check_standard_quota(ctx: Context) -> list[Problem]:
    """The system (EKS) or login (PCS) nodes fit the standard families' On-Demand vCPU quota. Their
    vCPUs are EC2's answer (DescribeInstanceTypes VCpuInfo.DefaultVCpus), not a number kept here."""
    small = _small_nodes(ctx)
    if small is None:
        raise NotApplicable("no login nodes")
    itype, count = small
    try:
        resp = call("ec2:DescribeInstanceTypes", ctx.clients.ec2.describe_instance_types, InstanceTypes=[itype])
    except ClientError as exc:
        raise CouldNotCheck(f"ec2:DescribeInstanceTypes {itype}: {exc}") from None
    found = resp.get("InstanceTypes", [])
    if not found:
        raise CouldNotCheck(f"ec2:DescribeInstanceTypes: no answer for {itype} in {ctx.spec.region}")
    vcpus = count * int(found[0].get("VCpuInfo", {}).get("DefaultVCpus", 0))
    limit = _quota(ctx, QUOTA_ON_DEMAND_STANDARD)
    if limit >= vcpus:
        return []
    role = "EKS system nodes" if ctx.spec.orchestration.kind == "eks" else "PCS login nodes (orchestration.login_nodes)"
    return [
        Problem(
            "orchestration.login_nodes" if ctx.spec.orchestration.kind == "slurm" else "orchestration.kind",
            f"the {count} {role}, {itype}, need {vcpus} vCPUs but the quota {QUOTA_ON_DEMAND_STANDARD[2]!r} "
            f"({QUOTA_ON_DEMAND_STANDARD[1]}) is {limit:.0f} in {ctx.spec.region}, before any running instance "
            "counts against it (allowed: request an increase"
            + (", or fewer login nodes)" if ctx.spec.orchestration.kind == "slurm" else ")"),
        )
    ]


def largest_node_group(ctx: Context) -> int:
    """The largest EKS managed node group the program makes (it splits the GPU nodes into groups
    of at most 450: components.aws.eks_sizing)."""
    from components.aws.eks_sizing import node_group_sizes

    return max(node_group_sizes(ctx.spec.compute.nodes))


def _bucket_of(path: str) -> str:
    return path[len("s3://") :].split("/", 1)[0]


def _bucket_region(ctx: Context, bucket: str) -> tuple[int, str | None]:
    """(HTTP status of HeadBucket, the bucket's region). S3 names the region in the
    ``x-amz-bucket-region`` header even on a 403 or a redirect."""
    try:
        resp = call("s3:HeadBucket", ctx.clients.s3.head_bucket, Bucket=bucket)
        headers = resp.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        return 200, headers.get("x-amz-bucket-region")
    except ClientError as exc:
        meta = exc.response.get("ResponseMetadata", {})
        status = int(meta.get("HTTPStatusCode", 0))
        return status, meta.get("HTTPHeaders", {}).get("x-amz-bucket-region")


def check_buckets(ctx: Context) -> list[Problem]:
    """The data bucket (``storage.lustre.import_path``) exists, these credentials reach it and it
    is in the stack's region (issue 13 asks for this; the nodes reach S3 through the VPC's S3
    gateway endpoint, which serves its own region only; whether FSx also refuses a data
    repository association across regions was not re-read at its page here); a named checkpoint
    bucket does not exist yet (S3 names are global)."""
    spec = ctx.spec
    problems: list[Problem] = []
    lu = spec.storage.lustre
    if not lu.import_path and not spec.storage.bucket_name:
        raise NotApplicable("no import_path, and the checkpoint bucket's name is generated")
    if lu.import_path:
        bucket = _bucket_of(lu.import_path)
        status, region = _bucket_region(ctx, bucket)
        if status == 404:
            problems.append(
                Problem(
                    "storage.lustre.import_path",
                    f"bucket {bucket!r} does not exist (allowed: an "
                    f"existing bucket in {spec.region} that holds the data)",
                )
            )
        elif status == 403:
            problems.append(
                Problem(
                    "storage.lustre.import_path",
                    f"bucket {bucket!r} exists but these credentials may not "
                    "read it (another account's bucket, or a missing "
                    "s3:ListBucket permission)",
                )
            )
        elif status not in (200, 301):
            raise CouldNotCheck(f"s3:HeadBucket {bucket}: HTTP {status}")
        if status in (200, 301, 403) and region and region != spec.region:
            problems.append(
                Problem(
                    "storage.lustre.import_path",
                    f"bucket {bucket!r} is in {region}, not the stack's "
                    f"region {spec.region} (allowed: a bucket in {spec.region})",
                )
            )
    if spec.storage.bucket_name:
        status, region = _bucket_region(ctx, spec.storage.bucket_name)
        if status in (200, 301, 403):
            owner = "this account" if status == 200 else "another account (or a region these credentials cannot read)"
            problems.append(
                Problem(
                    "storage.bucket_name",
                    f"bucket {spec.storage.bucket_name!r} already exists "
                    f"({owner}, {region or 'region unknown'}); the stack creates it "
                    "(allowed: an unused name)",
                )
            )
    return problems


def checks(checkip_url: str | None) -> list[Check]:
    return [
        Check("AWS credentials", check_identity),
        Check("zone and its EKS zone ID", check_zone),
        Check("instance type offered in the zone", check_offering),
        Check("instance type's vCPUs, network cards and EFA interfaces", check_instance_facts),
        Check("node image in the region", check_node_image),
        Check("EKS Kubernetes and add-on versions in the region", check_eks_versions),
        Check("AWS PCS in the region", check_pcs_available),
        Check("capacity reservation / block", check_capacity),
        Check("placement group and reservation", check_placement),
        Check("service quotas", check_quotas),
        Check("standard vCPU quota for the system or login nodes", check_standard_quota),
        Check("S3 buckets", check_buckets),
        Check("deployer ranges", lambda ctx: deployer_ranges(ctx, checkip_url)),
    ]
