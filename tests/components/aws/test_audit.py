"""The AWS audit trail: log bucket, flow logs, access logs, lifecycle, emptied default group, key policies."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpu_cluster.components.aws.audit import log_bucket_policy
from gpu_cluster.components.aws.keys import account_of
from gpu_cluster.components.spec_security import SecuritySpec
from gpu_cluster.policies import offline
from tests.components.aws._offline import AWS_STACKS, in_pillar, one, run

ACCOUNT = "123456789012"  # components/aws/mocks.py


def _statements(policy: str) -> dict[str, dict[str, Any]]:
    return {s["Sid"]: s for s in json.loads(policy)["Statement"]}


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_flow_log_into_the_log_bucket(stack: str) -> None:
    result, spec = run(stack)
    vpc = one(result, "aws:ec2/vpc:Vpc", "-network-vpc")
    bucket = one(result, "aws:s3/bucket:Bucket", "-network-logs")
    assert bucket.protect is True and bucket.inputs["forceDestroy"] is False
    (flow,) = in_pillar(result, "Network", "aws:ec2/flowLog:FlowLog")
    f = flow.inputs
    assert f["vpcId"] == vpc.name + "-id" and f["trafficType"] == "ALL"
    assert f["logDestinationType"] == "s3" and f["logDestination"] == bucket.inputs["arn"] + "/flow-logs/"
    assert f["maxAggregationInterval"] == 600 and "iamRoleArn" not in f  # no role for an S3 destination
    sid = _statements(one(result, "aws:s3/bucketPolicy:BucketPolicy", "-network-logs").inputs["policy"])
    write = sid["AWSLogDeliveryWrite"]
    assert write["Principal"] == {"Service": "delivery.logs.amazonaws.com"} and write["Action"] == "s3:PutObject"
    assert write["Resource"] == f"{bucket.inputs['arn']}/flow-logs/AWSLogs/{ACCOUNT}/*"
    assert write["Condition"]["StringEquals"] == {
        "s3:x-amz-acl": "bucket-owner-full-control",
        "aws:SourceAccount": ACCOUNT,
    }
    assert write["Condition"]["ArnLike"] == {"aws:SourceArn": f"arn:aws:logs:{spec.region}:{ACCOUNT}:*"}
    assert set(sid["AWSLogDeliveryAclCheck"]["Action"]) == {"s3:GetBucketAcl", "s3:ListBucket"}
    assert sid["DenyInsecureTransport"]["Effect"] == "Deny"
    lifecycle = one(result, "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration", "-network-logs")
    assert lifecycle.inputs["rules"][0]["expiration"]["days"] == spec.security.log_retention_days == 365
    sse = one(
        result,
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
        "-network-logs",
    )
    assert sse.inputs["rules"][0]["applyServerSideEncryptionByDefault"]["sseAlgorithm"] == "AES256"
    owner = one(result, "aws:s3/bucketOwnershipControls:BucketOwnershipControls", "-network-logs")
    assert owner.inputs["rule"]["objectOwnership"] == "BucketOwnerEnforced"


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_default_security_group_is_emptied(stack: str) -> None:
    result, _ = run(stack)
    dsg = one(result, "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup", "-network-default-sg").inputs
    assert dsg["vpcId"] == one(result, "aws:ec2/vpc:Vpc", "-network-vpc").name + "-id"
    assert not dsg.get("ingress") and not dsg.get("egress")


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_checkpoint_bucket_logs_and_expires_old_versions(stack: str) -> None:
    result, _ = run(stack)
    bucket_id = one(result, "aws:s3/bucket:Bucket", "-storage-checkpoints").name + "-id"
    logs_id = one(result, "aws:s3/bucket:Bucket", "-network-logs").name + "-id"
    logging = one(result, "aws:s3/bucketLogging:BucketLogging", "-storage-checkpoints").inputs
    assert logging["bucket"] == bucket_id and logging["targetBucket"] == logs_id
    assert logging["targetPrefix"].startswith("access-logs/")
    (rule,) = one(
        result, "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration", "-storage-checkpoints"
    ).inputs["rules"]
    assert rule["status"] == "Enabled" and rule["noncurrentVersionExpiration"]["noncurrentDays"] == 30
    assert rule["abortIncompleteMultipartUpload"]["daysAfterInitiation"] == 7
    sid = _statements(one(result, "aws:s3/bucketPolicy:BucketPolicy", "-network-logs").inputs["policy"])
    access = sid["S3ServerAccessLogsPolicy"]
    assert access["Principal"] == {"Service": "logging.s3.amazonaws.com"}
    assert access["Resource"].endswith("/access-logs/*")
    assert access["Condition"] == {"StringEquals": {"aws:SourceAccount": ACCOUNT}}


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_every_key_has_its_policy(stack: str) -> None:
    result, _ = run(stack)
    keys = result.of_type("aws:kms/key:Key")
    assert keys
    for key in keys:
        doc = json.loads(key.inputs["policy"])
        (st,) = doc["Statement"]
        assert st == {
            "Sid": "Enable IAM User Permissions",
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
            "Action": "kms:*",
            "Resource": "*",
        }
        assert key.inputs["enableKeyRotation"] is True and key.inputs["deletionWindowInDays"] == 30


def test_flow_logs_off_with_a_reason() -> None:
    def edit(raw: dict[str, Any]) -> None:
        raw["security"] = {
            "flow_logs": False,
            "log_retention_days": 90,
            "checkpoint_noncurrent_days": 7,
            "exceptions": {"flow-logs": "two-day benchmark cluster, torn down after the run"},
        }

    result, spec = run("aws-h100-eks", edit)
    assert result.of_type("aws:ec2/flowLog:FlowLog") == []
    sid = _statements(one(result, "aws:s3/bucketPolicy:BucketPolicy", "-network-logs").inputs["policy"])
    assert set(sid) == {"DenyInsecureTransport", "S3ServerAccessLogsPolicy"}
    assert (
        one(result, "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration", "-network-logs").inputs[
            "rules"
        ][0]["expiration"]["days"]
        == 90
    )
    assert (
        one(result, "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration", "-storage-checkpoints").inputs[
            "rules"
        ][0]["noncurrentVersionExpiration"]["noncurrentDays"]
        == 7
    )
    # The pack reads the exception from the spec: no flow-logs finding, and the Policy section says why.
    violations = offline.check_run(result, spec)
    assert not [v for v in violations if v.rule == "flow-logs"]


def test_without_the_exception_the_pack_catches_missing_flow_logs() -> None:
    def edit(raw: dict[str, Any]) -> None:
        raw["security"] = {"flow_logs": False, "exceptions": {"flow-logs": "two-day benchmark cluster"}}

    result, _ = run("aws-h100-eks", edit)
    # The same resources, judged with the spec of a stack that gives no reason (the shipped one:
    # a ClusterSpec comes only from parse_spec, which refuses flow_logs: false without it).
    _, plain = run("aws-h100-eks")
    assert plain.security == SecuritySpec()
    judged = offline.check_run(result, plain)
    hits = [v for v in judged if v.rule == "flow-logs"]
    assert len(hits) == 1 and hits[0].mandatory and "has no flow log" in hits[0].message


def test_account_of_reads_partition_and_account() -> None:
    assert account_of("arn:aws-us-gov:ec2:us-gov-west-1:111122223333:vpc/vpc-1") == ("aws-us-gov", "111122223333")
    with pytest.raises(ValueError, match="not an ARN"):
        account_of("arn:aws:s3:::bucket")
    policy = json.loads(
        log_bucket_policy("arn:aws-cn:s3:::b", "arn:aws-cn:ec2:cn-north-1:111122223333:vpc/v", "cn-north-1", True)
    )
    arns = {s["Sid"]: s.get("Condition", {}).get("ArnLike") for s in policy["Statement"]}
    assert arns["AWSLogDeliveryWrite"] == {"aws:SourceArn": "arn:aws-cn:logs:cn-north-1:111122223333:*"}
