"""Small facts every AWS pillar shares: tags, partitions, policy ARNs, IAM trust documents.

Policy documents are built with ``json.dumps`` rather than ``aws.iam.get_policy_document``:
an invoke would need a mock answer and a provider round trip for what is plain data.
"""

from __future__ import annotations

import json
import re
from typing import Mapping

from gpu_cluster.components.spec import ClusterSpec

CLUSTER_TAG = "gpu-cluster"


def cluster_tags(spec: ClusterSpec) -> dict[str, str]:
    """The spec's tags plus the cluster's own name tag, merged into every resource.

    The cluster tag is written last so that a stack cannot relabel its resources as
    another cluster's (cost reports and clean-up scripts select on it).
    """
    return {**dict(spec.tags), CLUSTER_TAG: spec.name}


def with_name(tags: Mapping[str, str], name: str) -> dict[str, str]:
    """Tags plus ``Name``, which the EC2 console shows for VPCs, subnets and gateways."""
    return {**dict(tags), "Name": name}


def partition(region: str) -> str:
    """The ARN partition of a region; the spec admits commercial, GovCloud and China regions."""
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    if region.startswith("cn-"):
        return "aws-cn"
    return "aws"


def managed_policy_arn(region: str, policy: str) -> str:
    return f"arn:{partition(region)}:iam::aws:policy/{policy}"


def assume_role_policy(service: str) -> str:
    """Trust policy letting one AWS service principal assume a role."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
        },
        sort_keys=True,
    )


# ECR Public's registry host, and the prefix of this stack's pull-through cache of it
# (components/aws/image_cache.py); plain data, so the plan's caveats name it without Pulumi.
ECR_PUBLIC = "public.ecr.aws"
_PREFIX_PART = re.compile(r"[^a-z0-9]+")


def cache_prefix(stack_name: str) -> str:
    """This stack's repository prefix: ``<name>-ecr-public`` in the grammar of a pull-through cache
    rule's prefix (ECR API CreatePullThroughCacheRule: 2 to 30 characters,
    ``(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*``), the name cut, never the suffix."""
    base = _PREFIX_PART.sub("-", stack_name.lower()).strip("-") or "gpuc"
    return f"{base[:19].rstrip('-')}-ecr-public"
