"""The AWS cluster as a whole: outputs, pillars, tags, scale invariance, strict invokes."""

from __future__ import annotations

import inspect
from collections import Counter
from typing import Any

import pulumi_aws as aws
import pytest

from gpu_cluster.components.aws import mocks as aws_mocks
from gpu_cluster.components.aws.eks_sizing import node_group_sizes
from gpu_cluster.components.cluster import PILLARS
from gpu_cluster.components.contract import OUTPUT_KEYS, read_outputs
from tests.components.aws._offline import AWS_STACKS, pillar_of, run

# Resource types whose provider schema has no tags; every other AWS resource must carry them.
UNTAGGABLE = {
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": aws.iam.RolePolicyAttachment,
    "aws:iam/rolePolicy:RolePolicy": aws.iam.RolePolicy,
    "aws:ec2/route:Route": aws.ec2.Route,
    "aws:ec2/routeTableAssociation:RouteTableAssociation": aws.ec2.RouteTableAssociation,
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": aws.s3.BucketPublicAccessBlock,
    "aws:s3/bucketVersioning:BucketVersioning": aws.s3.BucketVersioning,
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": aws.s3.BucketServerSideEncryptionConfiguration,
    "aws:s3/bucketLogging:BucketLogging": aws.s3.BucketLogging,
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration": aws.s3.BucketLifecycleConfiguration,
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls": aws.s3.BucketOwnershipControls,
    "aws:s3/bucketPolicy:BucketPolicy": aws.s3.BucketPolicy,
    "aws:ecr/pullThroughCacheRule:PullThroughCacheRule": aws.ecr.PullThroughCacheRule,
}


def test_untaggable_list_is_true() -> None:
    for token, cls in UNTAGGABLE.items():
        assert "tags" not in inspect.signature(cls._internal_init).parameters, token


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_outputs(stack: str) -> None:
    result, spec = run(stack)
    out = result.outputs
    assert set(out) == set(OUTPUT_KEYS)
    assert (out["cloud"], out["region"], out["zone"]) == ("aws", spec.region, spec.zone)
    assert out["orchestrator"] == spec.orchestration.kind
    assert (out["instance_type"], out["nodes"]) == (spec.compute.instance_type, spec.compute.nodes)
    assert out["gpus_per_node"] == spec.instance.accelerator.count == 8
    assert out["fabric"]["type"] == "efa" and out["fabric"]["mtu"] == 9001
    assert out["fabric"]["interfaces_per_node"] == spec.instance.network.efa_interfaces
    expected_access = (
        {"api_endpoint", "kubeconfig_command", "kubeconfig"}
        if spec.orchestration.kind == "eks"
        else {"cluster_id", "login", "ssh_command"}
    )
    assert set(out["access"]) == expected_access
    assert all(isinstance(v, str) and v for v in out["access"].values())
    assert out["cluster_name"] == spec.name
    # What the validation command reads: the outputs parse into the typed contract.
    typed = read_outputs(out)
    assert (typed.nodes, typed.mount.mount_point) == (spec.compute.nodes, spec.storage.lustre.mount_point)
    assert typed.scheduler.kind == ("slurm" if spec.orchestration.kind == "slurm" else "kubernetes")
    # The Amazon Managed Grafana workspace: its endpoint as an https address, its id for the token.
    ws = result.one("aws:grafana/workspace:Workspace")
    endpoint = aws_mocks.COMPUTED[ws.type](ws.name, ws.inputs)["endpoint"]
    assert typed.dashboard is not None and typed.dashboard.kind == "grafana"
    assert (typed.dashboard.url, typed.dashboard.id) == (f"https://{endpoint}", ws.id)


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_every_resource_sits_in_one_pillar_and_is_tagged(stack: str) -> None:
    result, spec = run(stack)
    pillars = {r.type.rsplit(":", 1)[1] for r in result.resources if r.type.startswith("gpu-cluster:aws:")}
    assert pillars == set(PILLARS)
    expected_tags = {**spec.tags, "gpu-cluster": spec.name}
    for r in result.resources:
        if r.type.startswith(("gpu-cluster:", "pulumi:providers:")):
            continue
        assert pillar_of(result, r) in PILLARS, f"{r.type} {r.name} is outside the pillars"
        if r.type.startswith(("aws:", "aws-native:")) and r.type not in UNTAGGABLE:
            tags = r.inputs.get("tags")
            assert tags is not None, f"{r.type} {r.name} has no tags"
            assert {k: tags.get(k) for k in expected_tags} == expected_tags, f"{r.type} {r.name}: {tags}"
    # The spec's region reaches the providers; nothing depends on the stack's aws:region.
    providers = [r for r in result.resources if r.type.startswith("pulumi:providers:aws")]
    assert providers and all(p.inputs["region"] == spec.region for p in providers)


def test_spec_cannot_relabel_the_cluster_tag() -> None:
    def edit(raw: dict[str, Any]) -> None:
        raw["tags"]["gpu-cluster"] = "someone-else"

    result, spec = run("aws-h200-slurm", edit)
    vpc = result.of_type("aws:ec2/vpc:Vpc")[0]
    assert vpc.inputs["tags"]["gpu-cluster"] == spec.name == "h200-slurm"


@pytest.mark.parametrize("stack", ["aws-h100-eks", "aws-h200-slurm"])
def test_resource_count_does_not_grow_with_nodes(stack: str) -> None:
    def nodes(n: int) -> Any:
        def edit(raw: dict[str, Any]) -> None:
            raw["compute"]["nodes"] = n
            if stack.endswith("slurm"):
                raw["orchestration"]["size"] = "LARGE"  # PCS's size is the stack's, never derived

        return edit

    small, _ = run(stack, nodes(2))
    large, _ = run(stack, nodes(1024))
    # Only the EKS GPU node groups multiply: one per 450 nodes (the default "Nodes per managed
    # node group" quota), plus the one system group.
    group = "aws:eks/nodeGroup:NodeGroup"
    extra = Counter({group: len(node_group_sizes(1024)) - 1}) if stack.endswith("eks") else Counter()
    assert Counter(r.type for r in large.resources) == Counter(r.type for r in small.resources) + extra
    assert large.outputs["nodes"] == 1024


def test_unknown_invoke_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(aws_mocks.INVOKES, "aws:ssm/getParameter:getParameter")
    with pytest.raises(Exception, match="aws:ssm/getParameter:getParameter.*declare it"):
        run("aws-h100-eks", lambda raw: None)
