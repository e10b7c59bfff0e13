"""KMS keys the stack creates, each with its own key policy (CKV2_AWS_64) and yearly rotation (CKV_AWS_7).

The key policy is the one AWS documents as its default for keys created through the API: one
statement, "Enable IAM User Permissions", that gives the owning account (``arn:<partition>:iam::
<account>:root``) ``kms:*`` on the key, so that IAM policies decide who may use it and the key
can never become unmanageable (AWS KMS developer guide, "Default key policy", section "Allows
access to the AWS account and enables IAM policies", docs.aws.amazon.com/kms/latest/developerguide/
key-policy-default.html, read 2026-12-01). In a key policy ``"Resource": "*"`` means this key.
Writing it out, rather than leaving it to AWS, makes the policy part of the stack: it is
reviewed, diffed and checked by the pack like any other input.

The account and partition come from the ARN of a resource the stack already created in that
account (ARN format ``arn:partition:service:region:account-id:...``, IAM user guide "IAM
identifiers"), so no provider invoke is needed, and the offline engine sees the same policy.
"""

from __future__ import annotations

import json
from typing import Mapping

import pulumi
import pulumi_aws as aws

# The longest window KMS allows (7..30 days, ScheduleKeyDeletion API reference): a key deleted
# by mistake can be restored for a month, and with it every backup encrypted under it.
DELETION_WINDOW_DAYS = 30


def account_of(arn: str) -> tuple[str, str]:
    """(partition, account id) of an ARN."""
    parts = arn.split(":")
    if len(parts) < 6 or parts[0] != "arn" or not parts[4].isdigit():
        raise ValueError(f"not an ARN with an account: {arn!r}")
    return parts[1], parts[4]


def root_statement(part: str, account: str) -> dict[str, object]:
    """The default key policy's one statement: the owning account's root may do ``kms:*``, so IAM
    policies decide who uses the key (the module's docstring has the source)."""
    return {
        "Sid": "Enable IAM User Permissions",
        "Effect": "Allow",
        "Principal": {"AWS": f"arn:{part}:iam::{account}:root"},
        "Action": "kms:*",
        "Resource": "*",
    }


def root_key_policy(arn_in_account: pulumi.Input[str]) -> pulumi.Output[str]:
    """AWS's default key policy for the account that owns ``arn_in_account``, as JSON."""

    def render(arn: str) -> str:
        part, account = account_of(arn)
        return json.dumps(
            {
                "Version": "2012-10-17",
                "Id": "key-default-1",
                "Statement": [root_statement(part, account)],
            },
            sort_keys=True,
        )

    return pulumi.Output.from_input(arn_in_account).apply(render)


def lustre_key(
    name: str, arn_in_account: pulumi.Input[str], tags: Mapping[str, str], opts: pulumi.ResourceOptions
) -> aws.kms.Key:
    """The customer-managed key FSx for Lustre encrypts with when the stack names none (CKV_AWS_190).

    FSx uses a persistent file system's key through KMS grants made on the caller's behalf (FSx
    for Lustre user guide, "Encrypting data at rest", section "How Amazon FSx for Lustre uses AWS
    KMS", docs.aws.amazon.com/fsx/latest/LustreGuide/encryption-at-rest.html): the deployer's IAM
    permissions on the key, which the root statement lets IAM give, are all it needs. A
    customer-managed key costs $1 a month plus requests (aws.amazon.com/kms/pricing).
    """
    return aws.kms.Key(
        f"{name}-lustre-key",
        description=f"FSx for Lustre encryption at rest of {name}",
        enable_key_rotation=True,
        deletion_window_in_days=DELETION_WINDOW_DAYS,
        policy=root_key_policy(arn_in_account),
        tags=dict(tags),
        # The file system's data is readable only while this key exists: it is as stateful as
        # the file system, so it is protected the same way (STYLE.md 5).
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(protect=True)),
    )
