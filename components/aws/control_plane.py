"""What an EKS control plane has around it: the log group it writes to, and the kubeconfig that reaches it.

The log group (``orchestration.cluster_name``, components/spec_eks.py). EKS sends the control
plane's logs to one group per cluster, named ``/aws/eks/<cluster-name>/cluster`` (EKS user guide
"control-plane-logs", "View cluster control plane logs", step 2: "The log group name format is
/aws/eks/my-cluster/cluster"; awsdocs/amazon-eks-user-guide latest/ug/observability/
control-plane-logs.adoc at 2ef9e38), and makes that group itself when it is missing, with no
retention and no key of the stack's. Declared here first, with the stack's retention and a key of
its own, the cluster finds it and writes there; terraform-aws-modules/terraform-aws-eks declares the
same group by the same name before its cluster (cluster.tf, ``aws_cloudwatch_log_group.this``).

A group that exists already (a running cluster's, made by EKS) is imported by its name, the id
pulumi-aws imports a log group by (``pulumi import aws:cloudwatch/logGroup:LogGroup example yada``:
the LogGroup docstring, pulumi-aws 7.51.1). The engine then sets the retention and the key on it in
the same ``pulumi up``: since pulumi 3.174.0 an import whose inputs differ from the resource
"can now import and then update a resource in a single deployment" (pulumi/pulumi CHANGELOG,
3.174.0, #19339; this project pins pulumi 3.272.0).

The group holds the control plane's audit trail, so it is protected like the stack's log bucket
(docs/teardown.md), and so is its key: without the key the logs cannot be read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

import pulumi
import pulumi_aws as aws

from gpu_cluster.components.aws.common import partition
from gpu_cluster.components.aws.keys import DELETION_WINDOW_DAYS, root_statement
from gpu_cluster.components.spec_eks import log_group_name

# The retention values CloudWatch Logs accepts, in days (CloudWatch Logs API PutRetentionPolicy,
# retentionInDays: "Possible values are: 1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545,
# 731, 1096, 1827, 2192, 2557, 2922, 3288, and 3653", botocore 1.43.117 data/logs/2014-03-28/
# service-2.json; the same list on pulumi-aws 7.51.1 LogGroup.retention_in_days).
RETENTION_DAYS = (
    1,
    3,
    5,
    7,
    14,
    30,
    60,
    90,
    120,
    150,
    180,
    365,
    400,
    545,
    731,
    1096,
    1827,
    2192,
    2557,
    2922,
    3288,
    3653,
)
# What CloudWatch Logs may do with the group's key: the actions of the key policy statement in
# CloudWatch Logs user guide "Encrypt log data in CloudWatch Logs using AWS KMS", Step 2 (docs.aws.amazon.com/
# AmazonCloudWatch/latest/logs/encrypt-log-data-kms.html, read 2026-12-07), to the regional service
# principal. The page's own statement was read here only through copies of it; the condition is
# narrowed to this one group's ARN by the encryption context the page names
# (kms:EncryptionContext:aws:logs:arn, "the ARN of the log group as the value for that key").
LOGS_KEY_ACTIONS = ("kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*")


def retention_days(asked: int) -> int:
    """The shortest retention CloudWatch Logs accepts that keeps the logs at least ``asked`` days
    (``security.log_retention_days``, 1 to 3653)."""
    return next(d for d in RETENTION_DAYS if d >= asked)


def logs_key_policy(region: str, account: str, group: str) -> str:
    """AWS's default key policy (components/aws/keys.py) plus CloudWatch Logs' use of the key for
    ``group`` only."""
    part = partition(region)
    group_arn = f"arn:{part}:logs:{region}:{account}:log-group:{group}"
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Id": "key-default-1",
            "Statement": [
                root_statement(part, account),
                {
                    "Sid": "CloudWatchLogsForTheControlPlaneGroup",
                    "Effect": "Allow",
                    "Principal": {"Service": f"logs.{region}.amazonaws.com"},
                    "Action": list(LOGS_KEY_ACTIONS),
                    "Resource": "*",
                    "Condition": {"ArnEquals": {"kms:EncryptionContext:aws:logs:arn": group_arn}},
                },
            ],
        },
        sort_keys=True,
    )


@dataclass(kw_only=True, frozen=True, slots=True)
class ControlPlaneLogArgs:
    cluster_name: str
    """The cluster's name (orchestration.cluster_name): the group is named after it."""
    region: str
    retention_days: int
    """security.log_retention_days; rounded up to a value CloudWatch Logs accepts."""
    adopt: bool = False
    """Import the group EKS already made (orchestration.adopt_log_group)."""
    tags: Mapping[str, str] = field(default_factory=dict)


def control_plane_log_group(
    name: str, args: ControlPlaneLogArgs, opts: pulumi.ResourceOptions
) -> aws.cloudwatch.LogGroup:
    """The control plane's log group and its key; the cluster waits for the group (depends_on)."""
    group = log_group_name(args.cluster_name)
    account = aws.get_caller_identity_output(opts=pulumi.InvokeOutputOptions(parent=opts.parent)).account_id
    protected = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(protect=True))
    key = aws.kms.Key(
        f"{name}-key",
        description=f"EKS control plane logs of {args.cluster_name} ({group})",
        enable_key_rotation=True,
        deletion_window_in_days=DELETION_WINDOW_DAYS,
        policy=account.apply(lambda acct: logs_key_policy(args.region, acct, group)),
        tags=dict(args.tags),
        opts=protected,
    )
    return aws.cloudwatch.LogGroup(
        name,
        name=group,
        retention_in_days=retention_days(args.retention_days),
        kms_key_id=key.arn,
        tags=dict(args.tags),
        opts=pulumi.ResourceOptions.merge(protected, pulumi.ResourceOptions(import_=group if args.adopt else None)),
    )


def kubeconfig(
    cluster_name: pulumi.Input[str], endpoint: pulumi.Input[str], ca_data: pulumi.Input[str], region: str
) -> pulumi.Output[str]:
    """A kubeconfig that authenticates with ``aws eks get-token`` (no long-lived secret)."""

    def render(values: list[Any]) -> str:
        name, server, ca = values
        return json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": ca}}],
                "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
                "current-context": name,
                "users": [
                    {
                        "name": name,
                        "user": {
                            "exec": {
                                "apiVersion": "client.authentication.k8s.io/v1beta1",
                                "command": "aws",
                                "args": [
                                    "eks",
                                    "get-token",
                                    "--region",
                                    region,
                                    "--cluster-name",
                                    name,
                                    "--output",
                                    "json",
                                ],
                            }
                        },
                    }
                ],
            },
            sort_keys=True,
        )

    return pulumi.Output.all(cluster_name, endpoint, ca_data).apply(render)
