"""orchestration.pull_through_cache (EKS): the job's image from ECR Public through an ECR pull-through
cache of the account, and the plan naming ECR Public's anonymous cap where the stack does not ask."""

from __future__ import annotations

import json
import re

import pytest

from gpu_cluster.components.aws.common import cache_prefix
from gpu_cluster.components.contract import read_outputs
from gpu_cluster.components.image_pins import mirrored
from gpu_cluster.components.plan_caveats import caveats
from gpu_cluster.components.spec import SpecError, parse_spec
from tests.components.aws._offline import one, raw_stack, run

# ECR API CreatePullThroughCacheRule, ecrRepositoryPrefix: 2 to 30 characters of this pattern.
PREFIX = re.compile(r"(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*")


@pytest.mark.parametrize("name", ["h100-block", "A Very Long Stack_Name--With Symbols 2026", "x", "--"])
def test_the_prefix_is_one_the_rule_takes(name: str) -> None:
    prefix = cache_prefix(name)
    assert 2 <= len(prefix) <= 30 and PREFIX.fullmatch(prefix) and prefix.endswith("-ecr-public")


def test_the_capacity_block_stack_pulls_its_image_through_the_cache() -> None:
    result, spec = run("aws-h100-capacity-block")
    assert spec.orchestration.pull_through_cache
    rule = one(result, "aws:ecr/pullThroughCacheRule:PullThroughCacheRule", "-image-cache-ecr-public").inputs
    # ECR user guide pull-through-cache-creating-rule: ECR Public's upstream URL, no credentials.
    assert (rule["ecrRepositoryPrefix"], rule["upstreamRegistryUrl"]) == ("h100-block-ecr-public", "public.ecr.aws")
    assert "credentialArn" not in rule
    # The nodes' role fills it (pull-through-cache-iam), on this prefix's repositories only.
    fill = one(result, "aws:iam/rolePolicy:RolePolicy", "-image-cache-ecr-public-fill").inputs
    node_role = one(result, "aws:iam/role:Role", "-compute-node")
    assert fill["role"] == node_role.inputs["name"]
    [stmt] = json.loads(fill["policy"])["Statement"]
    assert stmt["Action"] == ["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"]
    assert stmt["Resource"] == "arn:aws:ecr:us-east-1:123456789012:repository/h100-block-ecr-public/*"
    mirror = "123456789012.dkr.ecr.us-east-1.amazonaws.com/h100-block-ecr-public"
    assert result.outputs["scheduler"]["mirrors"] == {"public.ecr.aws": mirror}
    outs = read_outputs(result.outputs)
    assert outs.scheduler.mirrors == {"public.ecr.aws": mirror}
    # The rendered job's pods pull it there (ECR user guide pull-through-cache-working-pulling, "For
    # Amazon ECR Public": <account>.dkr.ecr.<region>.amazonaws.com/<prefix>/<repository>:<tag>).
    from tests.launch.test_render_stacks import args as job_args
    from gpu_cluster.workloads.launch import validation as vjob
    from gpu_cluster.workloads.validate import commands

    r = commands.render_run(outs, job_args(image=None), "20261201t070000z-ab12")
    assert r.jobset is not None
    pod = r.jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    upstream = vjob.default_image("efa")
    assert upstream.startswith("public.ecr.aws/deep-learning-containers/pytorch:")
    assert {c["image"] for c in pod["containers"]} == {f"{mirror}/{upstream.split('/', 1)[1]}"}


def test_mirrored_keeps_tag_and_digest_and_leaves_other_registries() -> None:
    m = {"public.ecr.aws": "1.dkr.ecr.r.amazonaws.com/p"}
    d = "sha256:" + "a" * 64
    assert mirrored(f"public.ecr.aws/a/b:t@{d}", m) == f"1.dkr.ecr.r.amazonaws.com/p/a/b:t@{d}"
    assert mirrored("nvcr.io/nvidia/pytorch:25.12-py3", m) == "nvcr.io/nvidia/pytorch:25.12-py3"
    assert mirrored("pytorch", m) == "pytorch"


def test_the_plan_names_the_anonymous_cap_until_the_stack_asks_for_the_cache() -> None:
    _, raw = raw_stack("aws-h100-eks")
    spec = parse_spec(raw, deployer_placeholder=True)
    [text] = [c.text for c in caveats(spec, {}) if c.topic == "pulls"]
    assert "up to 500 GB a month, not adjustable" in text and "public-service-quotas.html" in text
    assert "to each of the 4 nodes" in text and "orchestration.pull_through_cache: true" in text
    raw["orchestration"]["pull_through_cache"] = True
    [text] = [c.text for c in caveats(parse_spec(raw, deployer_placeholder=True), {}) if c.topic == "pulls"]
    assert "pull-through cache" in text and "500 GB" not in text


def test_the_cache_is_for_eks_only() -> None:
    _, raw = raw_stack("aws-h200-slurm")
    raw["orchestration"]["pull_through_cache"] = True
    with pytest.raises(SpecError) as info:
        parse_spec(raw, deployer_placeholder=True)
    assert ("orchestration.pull_through_cache", "only applies to eks (kind is slurm, cloud aws)") in info.value.problems
