"""The AWS audit trail: the stack's log bucket, VPC flow logs into it, S3 access logs of the
checkpoint bucket, the checkpoint bucket's lifecycle, and the VPC's default security group emptied.

Called from Network (``network_audit``: log bucket, flow log, default group) and Storage
(``checkpoint_audit``: access logging and lifecycle of the checkpoint bucket), as children of
those components, so the plan lists them under their pillars.

One log bucket takes both kinds of logs, under two prefixes:

* ``flow-logs/``: VPC flow logs of ALL traffic, delivered by ``delivery.logs.amazonaws.com``
  straight to S3. No IAM role is needed for an S3 destination (``DeliverLogsPermissionArn`` is
  required only for CloudWatch Logs and cross-account Firehose: EC2 API reference,
  CreateFlowLogs); the bucket policy grants the delivery service exactly the statements the
  CloudWatch Logs user guide gives ("Logs sent to Amazon S3": AWSLogDeliveryWrite with
  ``s3:x-amz-acl = bucket-owner-full-control``, AWSLogDeliveryAclCheck, both conditioned on
  ``aws:SourceAccount`` and ``aws:SourceArn = arn:<p>:logs:<region>:<account>:*``).
  Written by the stack, so AWS does not append them behind Pulumi's back.
* ``access-logs/``: S3 server access logs, delivered by ``logging.s3.amazonaws.com`` with the
  bucket-policy grant the S3 user guide prefers over ACLs ("Enabling Amazon S3 server access
  logging", permissions for log delivery: ``s3:PutObject`` on the prefix, conditioned on
  ``aws:SourceAccount``); ACLs are off (BucketOwnerEnforced), so the policy is the only grant.

The log bucket itself is not access-logged (S3 advises against logging a log bucket: its own
deliveries would be logged forever) and is encrypted with SSE-S3: that is the encryption S3
documents for server access log targets, while whether SSE-KMS works there is disputed
(aws/aws-cdk#23513, #24789). Logs expire after ``security.log_retention_days``.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import pulumi
import pulumi_aws as aws

from gpu_cluster.components.aws.keys import account_of
from gpu_cluster.components.spec_security import SecuritySpec

FLOW_LOG_PREFIX = "flow-logs/"
ACCESS_LOG_PREFIX = "access-logs/"
# EC2 CreateFlowLogs MaxAggregationInterval: 60 or 600 seconds (default 600). The longer one:
# fewer records for the long-lived NCCL connections of a training job.
FLOW_LOG_AGGREGATION_S = 600
# Our choice: a week is ample for any upload still in progress; older parts only cost storage.
ABORT_INCOMPLETE_UPLOAD_DAYS = 7


def log_bucket_policy(bucket_arn: str, vpc_arn: str, region: str, flow_logs: bool) -> str:
    """The log bucket's policy: TLS only, access-log delivery, and flow-log delivery when on."""
    part, account = account_of(vpc_arn)
    source_account = {"aws:SourceAccount": account}
    statements: list[dict[str, Any]] = [
        {
            # AWS Foundational Security Best Practices S3.5: requests must use TLS.
            "Sid": "DenyInsecureTransport",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:*",
            "Resource": [bucket_arn, f"{bucket_arn}/*"],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        },
        {
            "Sid": "S3ServerAccessLogsPolicy",
            "Effect": "Allow",
            "Principal": {"Service": "logging.s3.amazonaws.com"},
            "Action": "s3:PutObject",
            "Resource": f"{bucket_arn}/{ACCESS_LOG_PREFIX}*",
            "Condition": {"StringEquals": source_account},
        },
    ]
    if flow_logs:
        logs_arn = {"aws:SourceArn": f"arn:{part}:logs:{region}:{account}:*"}
        statements += [
            {
                "Sid": "AWSLogDeliveryWrite",
                "Effect": "Allow",
                "Principal": {"Service": "delivery.logs.amazonaws.com"},
                "Action": "s3:PutObject",
                "Resource": f"{bucket_arn}/{FLOW_LOG_PREFIX}AWSLogs/{account}/*",
                "Condition": {
                    "StringEquals": {"s3:x-amz-acl": "bucket-owner-full-control", **source_account},
                    "ArnLike": logs_arn,
                },
            },
            {
                "Sid": "AWSLogDeliveryAclCheck",
                "Effect": "Allow",
                "Principal": {"Service": "delivery.logs.amazonaws.com"},
                "Action": ["s3:GetBucketAcl", "s3:ListBucket"],
                "Resource": bucket_arn,
                "Condition": {"StringEquals": source_account, "ArnLike": logs_arn},
            },
        ]
    return json.dumps({"Version": "2012-10-17", "Statement": statements}, sort_keys=True)


def network_audit(
    name: str,
    vpc_id: pulumi.Input[str],
    vpc_arn: pulumi.Input[str],
    region: str,
    security: SecuritySpec,
    tags: Mapping[str, str],
    parent: pulumi.Resource,
    owned: bool = True,
) -> aws.s3.Bucket:
    """The log bucket, the VPC's flow log into it, and the default security group emptied.

    ``owned=False`` (the caller's VPC): the log bucket only. The caller's VPC keeps its own
    flow logs and default group; adopting that group would strip every rule it has."""
    child = pulumi.ResourceOptions(parent=parent)
    flow_logs = security.flow_logs and owned
    # CKV2_AWS_12: Pulumi adopts the VPC's default group and removes every rule it has when no
    # ingress/egress is given (pulumi-aws ec2.DefaultSecurityGroup docs): anything launched
    # into it by default then reaches nothing.
    if owned:
        aws.ec2.DefaultSecurityGroup(
            f"{name}-default-sg", vpc_id=vpc_id, tags={**dict(tags), "Name": f"{name}-default"}, opts=child
        )
    bucket = aws.s3.Bucket(
        f"{name}-logs",
        force_destroy=False,
        tags=dict(tags),
        # The audit trail outlives a mistaken destroy like the checkpoints do (STYLE.md 5).
        opts=pulumi.ResourceOptions(parent=parent, protect=True),
    )
    # Versioning (CKV_AWS_21: bridgecrewio/checkov S3Versioning, read 2026-12-01): an overwritten or
    # deleted log object stays recoverable. The lifecycle below expires noncurrent versions on the
    # same retention as current ones, so versioning does not keep logs longer than asked.
    aws.s3.BucketVersioning(
        f"{name}-logs",
        bucket=bucket.id,
        versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(status="Enabled"),
        opts=child,
    )
    pab = aws.s3.BucketPublicAccessBlock(
        f"{name}-logs",
        bucket=bucket.id,
        block_public_acls=True,
        block_public_policy=True,
        ignore_public_acls=True,
        restrict_public_buckets=True,
        opts=child,
    )
    ownership = aws.s3.BucketOwnershipControls(
        f"{name}-logs",
        bucket=bucket.id,
        rule=aws.s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"),
        opts=child,
    )
    aws.s3.BucketServerSideEncryptionConfiguration(
        f"{name}-logs",
        bucket=bucket.id,
        rules=[
            aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                apply_server_side_encryption_by_default=(
                    aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                        sse_algorithm="AES256"
                    )
                )
            )
        ],
        opts=child,
    )
    aws.s3.BucketLifecycleConfiguration(
        f"{name}-logs",
        bucket=bucket.id,
        rules=[
            aws.s3.BucketLifecycleConfigurationRuleArgs(
                id="expire-logs",
                status="Enabled",
                filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=""),
                expiration=aws.s3.BucketLifecycleConfigurationRuleExpirationArgs(days=security.log_retention_days),
                noncurrent_version_expiration=aws.s3.BucketLifecycleConfigurationRuleNoncurrentVersionExpirationArgs(
                    noncurrent_days=security.log_retention_days
                ),
                abort_incomplete_multipart_upload=aws.s3.BucketLifecycleConfigurationRuleAbortIncompleteMultipartUploadArgs(
                    days_after_initiation=ABORT_INCOMPLETE_UPLOAD_DAYS
                ),
            )
        ],
        opts=child,
    )
    policy = aws.s3.BucketPolicy(
        f"{name}-logs",
        bucket=bucket.id,
        policy=pulumi.Output.all(bucket.arn, vpc_arn).apply(lambda a: log_bucket_policy(a[0], a[1], region, flow_logs)),
        # The public access block first: a policy put while it is still open could be refused later.
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[pab, ownership]),
    )
    if flow_logs:
        aws.ec2.FlowLog(
            f"{name}-flow-log",
            vpc_id=vpc_id,
            traffic_type="ALL",
            log_destination_type="s3",
            log_destination=pulumi.Output.concat(bucket.arn, "/", FLOW_LOG_PREFIX),
            max_aggregation_interval=FLOW_LOG_AGGREGATION_S,
            # No log_format: AWS's default record format, the version 2 fields (VPC user guide,
            # "Flow log records", default format), plain text under AWSLogs/<account>/vpcflowlogs/.
            tags={**dict(tags), "Name": f"{name}-flow-log"},
            # The delivery grant must exist before the first delivery.
            opts=pulumi.ResourceOptions(parent=parent, depends_on=[policy]),
        )
    return bucket


def checkpoint_audit(
    name: str, bucket: aws.s3.Bucket, log_bucket: pulumi.Input[str], noncurrent_days: int, parent: pulumi.Resource
) -> None:
    """Access logging (CKV_AWS_18) and a lifecycle (CKV2_AWS_61, CKV_AWS_300) on the checkpoint bucket."""
    child = pulumi.ResourceOptions(parent=parent)
    aws.s3.BucketLogging(
        f"{name}-checkpoints",
        bucket=bucket.id,
        target_bucket=log_bucket,
        target_prefix=f"{ACCESS_LOG_PREFIX}{name}-checkpoints/",
        opts=child,
    )
    aws.s3.BucketLifecycleConfiguration(
        f"{name}-checkpoints",
        bucket=bucket.id,
        rules=[
            aws.s3.BucketLifecycleConfigurationRuleArgs(
                id="expire-noncurrent-checkpoints",
                status="Enabled",
                filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=""),
                # Versioning keeps an overwritten checkpoint recoverable; this bounds for how long.
                noncurrent_version_expiration=aws.s3.BucketLifecycleConfigurationRuleNoncurrentVersionExpirationArgs(
                    noncurrent_days=noncurrent_days
                ),
                abort_incomplete_multipart_upload=aws.s3.BucketLifecycleConfigurationRuleAbortIncompleteMultipartUploadArgs(
                    days_after_initiation=ABORT_INCOMPLETE_UPLOAD_DAYS
                ),
            )
        ],
        opts=child,
    )
