"""The ECR pull-through cache's repository prefix (``orchestration.pull_through_cache``).

The stack creates the rule (components/aws/image_cache.py) under a prefix of its own
(components/aws/common.py cache_prefix). A rule's prefix is unique in the account's registry of the
region, so CreatePullThroughCacheRule refuses a prefix a rule already holds
(PullThroughCacheRuleAlreadyExistsException, ECR API reference). ecr:DescribePullThroughCacheRules
by that prefix says whether one does: a rule with another upstream is a conflict the first
``pulumi up`` would hit; one with the same upstream is this stack's own on an update, or a left-over
that a new stack's create would hit, which the note says.
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from gpu_cluster.components.aws.common import ECR_PUBLIC, cache_prefix
from gpu_cluster.components.preflight import Context, CouldNotCheck, NotApplicable, Problem
from gpu_cluster.components.preflight.aws.clients import call

# ECR API reference, DescribePullThroughCacheRules errors: no rule holds the prefix.
RULE_NOT_FOUND = "PullThroughCacheRuleNotFoundException"


def check_cache_prefix(ctx: Context) -> list[Problem]:
    if not ctx.spec.orchestration.pull_through_cache:
        raise NotApplicable("no orchestration.pull_through_cache")
    if ctx.clients.ecr is None:
        raise CouldNotCheck("no ECR client: the pull-through cache prefix was not looked up")
    prefix = cache_prefix(ctx.spec.name)
    try:
        resp = call(
            "ecr:DescribePullThroughCacheRules",
            ctx.clients.ecr.describe_pull_through_cache_rules,
            ecrRepositoryPrefixes=[prefix],
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code", "") == RULE_NOT_FOUND:
            return []
        raise CouldNotCheck(f"ecr:DescribePullThroughCacheRules: {exc}") from None
    rules = [r for r in resp.get("pullThroughCacheRules", []) if r.get("ecrRepositoryPrefix") == prefix]
    if not rules:
        return []
    upstream = str(rules[0].get("upstreamRegistryUrl", ""))
    if upstream != ECR_PUBLIC:
        return [
            Problem(
                "orchestration.pull_through_cache",
                f"the stack's cache prefix {prefix!r} is already held in {ctx.spec.region} by a rule for {upstream!r}; "
                f"allowed: a stack name whose prefix no rule holds, or delete that rule (prefixes are unique per "
                "registry and region)",
            )
        ]
    ctx.notes.append(
        f"pull-through cache prefix {prefix!r} already has a rule for {ECR_PUBLIC} in {ctx.spec.region}: this "
        "stack's own on an update; a new stack's first `pulumi up` would be refused (delete the rule first)"
    )
    return []
