"""The job's image through an ECR pull-through cache (``orchestration.pull_through_cache: true``, EKS).

Every GPU node pulls the job's image when its pod starts. The default image is AWS's DLC on ECR
Public (catalog ``fabrics.efa.image``), which the nodes reach anonymously through the NAT gateway,
one address for all of them: "For unauthenticated customers, Amazon ECR Public supports up to 500GB
of data per month. This is the max amount of data supported and isn't adjustable" (Amazon ECR Public
user guide, "Amazon ECR Public service quotas", public-service-quotas.html, read 2026-12). A
pull-through cache rule makes the account's private registry fetch the image once and serve every
node after that ("Sync an upstream registry with an Amazon ECR private registry", ECR user guide
pull-through-cache.html: ECR Public needs no authentication).

* the rule: upstream ``public.ecr.aws``, a repository prefix of this stack's own (a rule's prefix is
  unique in the account's registry of the region; CreatePullThroughCacheRule: 2 to 30 characters of
  ``(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*``, ECR API reference);
* the nodes' role may create the cached repositories under that prefix and import into them
  (``ecr:CreateRepository``, ``ecr:BatchImportUpstreamImage``: ECR user guide pull-through-cache-iam,
  "needed to use pull through cache rules", beside the pull permissions the nodes already have,
  AmazonEC2ContainerRegistryReadOnly in compute.py);
* pods pull ``<account>.dkr.ecr.<region>.amazonaws.com/<prefix>/<repository>:<tag>`` (ECR user
  guide pull-through-cache-working-pulling, "For Amazon ECR Public"): the stack output
  ``scheduler.mirrors`` maps ``public.ecr.aws`` to that prefix and the launcher rewrites the image.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from gpu_cluster.components.aws.common import ECR_PUBLIC, cache_prefix, partition

UPSTREAM = ECR_PUBLIC


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageCacheArgs:
    stack_name: str
    region: str
    node_role_name: pulumi.Input[str]
    """The GPU nodes' role: it pulls, so it fills the cache on the first pull."""


def create_image_cache(name: str, args: ImageCacheArgs, opts: pulumi.ResourceOptions) -> pulumi.Output[str]:
    """The rule and the nodes' permission to fill it, as children of ``opts``'s parent (the EKS
    orchestration pillar: the cache is how its pods get their image). Returns the mirror,
    ``<account>.dkr.ecr.<region>.amazonaws.com/<prefix>``: what replaces ``public.ecr.aws``."""
    prefix = cache_prefix(args.stack_name)
    rule = aws.ecr.PullThroughCacheRule(
        f"{name}-ecr-public",
        ecr_repository_prefix=prefix,
        upstream_registry_url=UPSTREAM,
        opts=opts,
    )
    repositories = pulumi.Output.format(
        "arn:{0}:ecr:{1}:{2}:repository/{3}/*", partition(args.region), args.region, rule.registry_id, prefix
    )
    aws.iam.RolePolicy(
        f"{name}-ecr-public-fill",
        role=args.node_role_name,
        policy=repositories.apply(
            lambda arn: json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Sid": "PullThroughCache",
                            "Effect": "Allow",
                            "Action": ["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"],
                            "Resource": arn,
                        }
                    ],
                },
                sort_keys=True,
            )
        ),
        opts=opts,
    )
    # China's registries end in amazonaws.com.cn, as the EKS registries of versions.py do.
    host = "amazonaws.com.cn" if args.region.startswith("cn-") else "amazonaws.com"
    return pulumi.Output.format("{0}.dkr.ecr.{1}.{2}/{3}", rule.registry_id, args.region, host, prefix)
