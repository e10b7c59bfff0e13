"""The login nodes' SSH key pair: ``orchestration.ssh_key_name`` names an EC2 key pair of the region."""

from __future__ import annotations

from botocore.exceptions import ClientError

from gpu_cluster.components.preflight import Context, CouldNotCheck, NotApplicable, Problem
from gpu_cluster.components.preflight.aws.clients import call

# EC2 API reference, "Error codes for the Amazon EC2 API": the key pair named does not exist.
KEY_NOT_FOUND = "InvalidKeyPair.NotFound"


def check_ssh_key(ctx: Context) -> list[Problem]:
    """The key pair exists in the stack's region (ec2:DescribeKeyPairs by name): EC2 refuses a
    launch template's KeyName that names none, so the login nodes would never launch."""
    name = ctx.spec.orchestration.ssh_key_name
    if not name:
        raise NotApplicable("no orchestration.ssh_key_name")
    try:
        resp = call("ec2:DescribeKeyPairs", ctx.clients.ec2.describe_key_pairs, KeyNames=[name])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code", "") == KEY_NOT_FOUND:
            return [
                Problem(
                    "orchestration.ssh_key_name",
                    f"key pair {name!r} does not exist in {ctx.spec.region}; allowed: the name of an EC2 key pair "
                    f"of the region (aws ec2 create-key-pair --key-name {name}), or leave ssh_key_name out "
                    "for a Session Manager shell only",
                )
            ]
        raise CouldNotCheck(f"ec2:DescribeKeyPairs: {exc}") from None
    if not [k for k in resp.get("KeyPairs", []) if k.get("KeyName") == name]:
        raise CouldNotCheck(f"ec2:DescribeKeyPairs answered no key pair named {name!r} and no error")
    return []
