"""The EKS control plane's log group is the stack's: named as EKS writes it, with the stack's
retention and a key of its own, made before the cluster; a stack without ``cluster_name`` keeps
Pulumi's generated name and EKS's own group (issue 43)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpu_cluster.components.aws.control_plane import RETENTION_DAYS, retention_days
from gpu_cluster.components.aws.mocks import ACCOUNT
from gpu_cluster.components.plan_caveats import caveats
from gpu_cluster.components.spec import SpecError, parse_spec
from gpu_cluster.components.spec_eks import log_group_name
from tests.components.aws._offline import in_pillar, one, raw_stack, run

EKS = "aws:eks/cluster:Cluster"
LOG_GROUP = "aws:cloudwatch/logGroup:LogGroup"
KEY = "aws:kms/key:Key"
EKS_STACKS = ("aws-h100-eks", "aws-h100-capacity-block", "aws-b200-capacity-block")


@pytest.mark.parametrize("stack", EKS_STACKS)
def test_the_log_group_is_the_one_the_cluster_writes_to_and_comes_first(stack: str) -> None:
    result, spec = run(stack)
    cluster = one(result, EKS, "-orchestration-eks")
    group = one(result, LOG_GROUP, "-orchestration-control-plane-logs")
    # The name the stack file gives is the cluster's, and the group is EKS's format for it
    # (EKS user guide control-plane-logs: /aws/eks/<cluster-name>/cluster).
    assert spec.orchestration.cluster_name and cluster.inputs["name"] == spec.orchestration.cluster_name
    assert group.inputs["name"] == f"/aws/eks/{cluster.inputs['name']}/cluster"
    # The cluster waits for the group, so EKS never makes one of its own first.
    assert group.urn in cluster.dependencies
    # The stack's retention (365 by default, a value CloudWatch accepts as it is) and key.
    assert group.inputs["retentionInDays"] == spec.security.log_retention_days == 365
    key = one(result, KEY, "-orchestration-control-plane-logs-key")
    assert group.inputs["kmsKeyId"].endswith(key.name) and key.urn in group.dependencies
    assert key.inputs["enableKeyRotation"] is True
    # Both hold the audit trail: protected, in the orchestration pillar, and the group is created, not imported.
    assert group.protect and key.protect and group.import_id == ""
    assert {r.name for r in in_pillar(result, "Orchestration", LOG_GROUP)} == {group.name}
    # CloudWatch Logs may use the key for this group only (the encryption context is the group's ARN).
    policy = json.loads(key.inputs["policy"])
    (logs,) = [s for s in policy["Statement"] if s.get("Principal", {}).get("Service", "").startswith("logs.")]
    assert logs["Principal"]["Service"] == f"logs.{spec.region}.amazonaws.com"
    arn = f"arn:aws:logs:{spec.region}:{ACCOUNT}:log-group:{group.inputs['name']}"
    assert logs["Condition"] == {"ArnEquals": {"kms:EncryptionContext:aws:logs:arn": arn}}
    (root,) = [s for s in policy["Statement"] if "AWS" in s.get("Principal", {})]
    assert root["Principal"]["AWS"] == f"arn:aws:iam::{ACCOUNT}:root" and root["Action"] == "kms:*"
    assert not [c for c in caveats(spec, result.outputs) if c.topic == "logs"]


def _unnamed(raw: dict[str, Any]) -> None:
    del raw["orchestration"]["cluster_name"]


def test_a_stack_without_cluster_name_keeps_its_generated_name_and_eks_its_group() -> None:
    """A stack made before cluster_name existed: same resource, no name input (the mock answers with
    the logical name where Pulumi would generate one), no group, no key, and the plan says why."""
    named, _ = run("aws-h100-eks")
    result, spec = run("aws-h100-eks", _unnamed)
    cluster, before = one(result, EKS, "-orchestration-eks"), one(named, EKS, "-orchestration-eks")
    assert cluster.urn == before.urn and cluster.inputs["name"] == cluster.name
    assert not result.of_type(LOG_GROUP)
    assert not [k for k in result.of_type(KEY) if "control-plane-logs" in k.name]
    assert not [d for d in cluster.dependencies if "control-plane-logs" in d]
    (note,) = [c.text for c in caveats(spec, result.outputs) if c.topic == "logs"]
    assert "no orchestration.cluster_name" in note and "adopt_log_group: true" in note
    # The PCS stack has no EKS control plane, and no such caveat.
    pcs, pcs_spec = run("aws-h200-slurm")
    assert not pcs.of_type(LOG_GROUP) and not [c for c in caveats(pcs_spec, pcs.outputs) if c.topic == "logs"]


def test_a_running_cluster_adopts_the_group_eks_made() -> None:
    def adopt(raw: dict[str, Any]) -> None:
        raw["orchestration"].update(cluster_name="h100-eks-orchestration-eks-1a2b3c4", adopt_log_group=True)

    result, _ = run("aws-h100-eks", adopt)
    group = one(result, LOG_GROUP, "-orchestration-control-plane-logs")
    # Imported by its name (pulumi-aws imports a log group by name), then given the stack's retention and key.
    assert group.import_id == group.inputs["name"] == "/aws/eks/h100-eks-orchestration-eks-1a2b3c4/cluster"
    assert group.inputs["retentionInDays"] == 365 and group.inputs["kmsKeyId"]
    assert one(result, EKS, "-orchestration-eks").inputs["name"] == "h100-eks-orchestration-eks-1a2b3c4"


def test_retention_is_never_shorter_than_asked_and_always_one_cloudwatch_takes() -> None:
    assert [retention_days(d) for d in (1, 2, 365, 366, 1000, 3653)] == [1, 3, 365, 400, 1096, 3653]
    assert all(retention_days(d) in RETENTION_DAYS and retention_days(d) >= d for d in range(1, 3654))

    def hundred(raw: dict[str, Any]) -> None:
        raw["security"] = {"log_retention_days": 100}

    result, _ = run("aws-h100-eks", hundred)
    assert one(result, LOG_GROUP, "-orchestration-control-plane-logs").inputs["retentionInDays"] == 120
    assert log_group_name("c1") == "/aws/eks/c1/cluster"


@pytest.mark.parametrize(
    ("stack", "edit", "path", "words"),
    [
        ("aws-h100-eks", {"cluster_name": "-starts-with-a-hyphen"}, "orchestration.cluster_name", "malformed"),
        ("aws-h100-eks", {"cluster_name": "a" * 101}, "orchestration.cluster_name", "malformed"),
        ("aws-h100-eks", {"cluster_name": None, "adopt_log_group": True}, "orchestration.adopt_log_group", "needs"),
        ("aws-h100-eks", {"adopt_log_group": "yes"}, "orchestration.adopt_log_group", "true or false"),
        ("aws-h200-slurm", {"cluster_name": "c1"}, "orchestration.cluster_name", "only applies to eks on aws"),
    ],
)
def test_the_spec_refuses_what_eks_would(stack: str, edit: dict[str, Any], path: str, words: str) -> None:
    _, raw = raw_stack(stack)
    raw["orchestration"].update(edit)
    with pytest.raises(SpecError) as info:
        parse_spec(raw, deployer_placeholder=True)
    assert [r for p, r in info.value.problems if p == path and words in r], info.value.problems
