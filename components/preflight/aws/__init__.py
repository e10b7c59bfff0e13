"""AWS preflight checks, made with boto3 and the deployer's credentials.

boto3 honours the standard ``AWS_ENDPOINT_URL`` (and ``AWS_ENDPOINT_URL_<SERVICE>``), so the
same code runs against moto's server in the tests. Each check reads one or two documented API
answers and says, at the spec's config path, what the account would refuse. One module a
question: :mod:`.clients` (how a call is made and its failures read), :mod:`.account` (credentials,
zone, the instance type there), :mod:`.region` (node image, EKS versions, PCS), :mod:`.capacity`
(reservation, placement group), :mod:`.quotas`, :mod:`.buckets`; :func:`checks` is their order.
"""

from __future__ import annotations

from gpu_cluster.components.preflight import Check, deployer_ranges
from gpu_cluster.components.preflight.aws.account import (
    account_zones,
    check_identity,
    check_instance_facts,
    check_offering,
    check_zone,
)
from gpu_cluster.components.preflight.aws.buckets import check_buckets
from gpu_cluster.components.preflight.aws.capacity import (
    USABLE_STATES,
    check_capacity,
    check_placement,
    planned_placement_group,
)
from gpu_cluster.components.preflight.aws.clients import AwsClients, call
from gpu_cluster.components.preflight.aws.image_cache import check_cache_prefix
from gpu_cluster.components.preflight.aws.keys import check_ssh_key
from gpu_cluster.components.preflight.aws.quotas import (
    QUOTA_EKS_NODES_PER_GROUP,
    QUOTA_ON_DEMAND_P,
    QUOTA_ON_DEMAND_STANDARD,
    QUOTA_SPOT_P,
    check_quotas,
    check_standard_quota,
    largest_node_group,
)
from gpu_cluster.components.preflight.aws.region import check_eks_versions, check_node_image, check_pcs_available

__all__ = [
    "QUOTA_EKS_NODES_PER_GROUP",
    "QUOTA_ON_DEMAND_P",
    "QUOTA_ON_DEMAND_STANDARD",
    "QUOTA_SPOT_P",
    "USABLE_STATES",
    "AwsClients",
    "account_zones",
    "call",
    "check_buckets",
    "check_cache_prefix",
    "check_capacity",
    "check_eks_versions",
    "check_identity",
    "check_instance_facts",
    "check_node_image",
    "check_offering",
    "check_pcs_available",
    "check_placement",
    "check_quotas",
    "check_ssh_key",
    "check_standard_quota",
    "check_zone",
    "checks",
    "largest_node_group",
    "planned_placement_group",
]


def checks(checkip_url: str | None) -> list[Check]:
    return [
        Check("AWS credentials", check_identity),
        Check("zone and its EKS zone ID", check_zone),
        Check("instance type offered in the zone", check_offering),
        Check("instance type's vCPUs, network cards and EFA interfaces", check_instance_facts),
        Check("node image in the region", check_node_image),
        Check("EKS Kubernetes and add-on versions in the region", check_eks_versions),
        Check("AWS PCS in the region", check_pcs_available),
        Check("login nodes' SSH key pair", check_ssh_key),
        Check("ECR pull-through cache prefix", check_cache_prefix),
        Check("capacity reservation / block", check_capacity),
        Check("placement group and reservation", check_placement),
        Check("service quotas", check_quotas),
        Check("standard vCPU quota for the system or login nodes", check_standard_quota),
        Check("S3 buckets", check_buckets),
        Check("deployer ranges", lambda ctx: deployer_ranges(ctx, checkip_url)),
    ]
