"""What the cluster needs of an existing VPC that can be checked offline (``network.vpc_id``).

Checked here: the ids' form and, on EKS, that the control plane has a subnet besides the node
subnet. Left to ``pulumi up`` (and the caller): that the node subnet is in ``zone`` and in that
VPC, that the VPC has DNS support and hostnames on (FSx is mounted by DNS name; the EKS private
endpoint resolves only with both), and that the node subnet has a route out (the nodes pull
images and reach the EKS and S3 endpoints). Pure: no Pulumi, no network.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from gpu_cluster.components.spec_model import ClusterSpec

# Zone IDs in which EKS refuses a cluster's subnets (EKS user guide "network-reqs", "Subnet
# requirements for clusters": us-east-1 use1-az3, us-west-1 usw1-az2, ca-central-1 cac1-az3;
# awsdocs/amazon-eks-user-guide latest/ug/networking/network-reqs.adoc at 4d52b4d, re-read at 101184e
# 2026-12-01: the same three). Which zone name
# is which ID depends on the account: the spec applies it to the IDs it names, the preflight and
# the program (control_plane_zone) to the account's own answer.
EKS_DISALLOWED_ZONE_IDS: Mapping[str, tuple[str, ...]] = {
    "us-east-1": ("use1-az3",),
    "us-west-1": ("usw1-az2",),
    "ca-central-1": ("cac1-az3",),
}

# EC2 resource ids: the type's prefix, then 8 (before 2016) or 17 lower-case hex digits
# (EC2 user guide "Resource IDs", docs.aws.amazon.com/AWSEC2/latest/UserGuide/resource-ids.html,
# read 2026-12; the same 8/17 in the EC2 API reference, ModifyIdFormat).
_VPC_ID = re.compile(r"^vpc-([0-9a-f]{8}|[0-9a-f]{17})\Z")
_SUBNET_ID = re.compile(r"^subnet-([0-9a-f]{8}|[0-9a-f]{17})\Z")


def existing_network(spec: ClusterSpec) -> list[tuple[str, str]]:
    from gpu_cluster.components.spec_model import DEPLOY_TIME_ID

    net = spec.network
    if not net.existing:
        return []
    problems: list[tuple[str, str]] = []

    def form(path: str, value: str | None, pattern: re.Pattern[str], example: str) -> None:
        if value is not None and value != DEPLOY_TIME_ID and not pattern.match(value):
            problems.append((path, f"{value!r} is malformed (allowed: an id such as {example})"))

    form("network.vpc_id", net.vpc_id, _VPC_ID, "vpc-0123456789abcdef0")
    form("network.node_subnet_id", net.node_subnet_id, _SUBNET_ID, "subnet-0123456789abcdef0")
    for i, sid in enumerate(net.control_plane_subnet_ids):
        form(f"network.control_plane_subnet_ids[{i}]", sid, _SUBNET_ID, "subnet-0123456789abcdef0")
    if spec.orchestration.kind == "eks":
        others = [s for s in net.control_plane_subnet_ids if s != net.node_subnet_id or s == DEPLOY_TIME_ID]
        if not others:
            # EKS user guide "network-reqs", subnet requirements: the cluster's subnets in at least
            # two Availability Zones (awsdocs/amazon-eks-user-guide latest/ug/networking/network-reqs.adoc at 4d52b4d).
            problems.append(
                (
                    "network.control_plane_subnet_ids",
                    "EKS needs the cluster's subnets in at least two zones: give at least one subnet of "
                    f"another zone than {spec.zone} besides the node subnet (allowed: a list of subnet ids)",
                )
            )
    elif net.control_plane_subnet_ids:
        problems.append(("network.control_plane_subnet_ids", "only applies to eks (kind is slurm)"))
    return problems


def node_zone_problems(
    zones: Mapping[str, str], *, region: str, zone: str, zone_id: str | None
) -> list[tuple[str, str]]:
    """``zone`` is one of the account's zones (``zones``: name -> zone ID, as DescribeAvailabilityZones
    answers), and is ``zone_id`` where the stack names both."""
    listed = ", ".join(f"{n} ({i})" for n, i in sorted(zones.items()))
    node_id = zones.get(zone)
    if node_id is None:
        return [
            (
                "zone",
                f"{zone!r} is not a zone this account has in {region} (allowed: {listed or 'none listed'}; "
                f"`aws ec2 describe-availability-zones --region {region}`)",
            )
        ]
    if zone_id is not None and node_id != zone_id:
        named = next((n for n, i in zones.items() if i == zone_id), None)
        return [
            (
                "zone_id",
                f"{zone} is zone ID {node_id} in this account, not {zone_id} (allowed: zone_id {node_id}, or "
                + (
                    f"zone {named}, which is {zone_id} here)"
                    if named
                    else f"another zone: {zone_id} is not in this account)"
                ),
            )
        ]
    return []


def control_plane_zone(
    zones: Mapping[str, str],
    *,
    region: str,
    zone: str,
    zone_id: str | None,
    control_plane_zone_id: str | None,
) -> tuple[str | None, list[tuple[str, str]]]:
    """The zone ID of the EKS control plane's second subnet, chosen from the account's zones, and
    what is wrong with the stack's zones there.

    ``zones`` maps each zone name of the region to its zone ID as DescribeAvailabilityZones answers
    for this account (in the oldest regions names map to different IDs in every account; "AZ IDs",
    docs.aws.amazon.com/global-infrastructure/latest/regions/az-ids.html, read 2026-12-01). The program (at
    ``pulumi up``) and the preflight call this with the same answer, so they choose the same zone.

    * ``zone`` must be one of the account's zones, and be ``zone_id`` when the stack names both;
    * ``control_plane_zone_id``, when given, must be one of the account's zone IDs, not the
      nodes' zone and not one EKS refuses; otherwise the first zone by name that is neither is
      chosen (EKS refuses subnets in ``EKS_DISALLOWED_ZONE_IDS``: EKS user guide "network-reqs").
    """
    problems = node_zone_problems(zones, region=region, zone=zone, zone_id=zone_id)
    listed = ", ".join(f"{n} ({i})" for n, i in sorted(zones.items()))
    node_id = zones.get(zone)
    nodes_id = zone_id or node_id
    refused = EKS_DISALLOWED_ZONE_IDS.get(region, ())
    if control_plane_zone_id is not None:
        if control_plane_zone_id not in zones.values():
            problems.append(
                (
                    "network.control_plane_zone_id",
                    f"{control_plane_zone_id} is not a zone ID this account has in {region} (allowed: {listed})",
                )
            )
            return None, problems
        return control_plane_zone_id, problems
    eligible = sorted((n, i) for n, i in zones.items() if n != zone and i != nodes_id and i not in refused)
    if not eligible:
        problems.append(
            (
                "network.control_plane_zone_id",
                f"EKS needs the cluster's subnets in two zones, and {region} has no zone besides {zone} "
                f"({nodes_id or 'unknown ID'}) that EKS accepts in this account (zones: {listed or 'none'}; "
                f"EKS refuses {', '.join(refused) or 'none here'}: EKS user guide network-reqs); allowed: "
                "another region, or an existing network (network.vpc_id) with a control-plane subnet",
            )
        )
        return None, problems
    return eligible[0][1], problems
