"""The stack rules, both ways a stack reaches them: as CrossGuard hands it (props plus property
dependencies, no ids) and as the offline engine records it (props whose references are the
mock engine's ids)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from pulumi_policy import StackValidationPolicy
from pulumi_policy.proxy import unknown_checking_proxy

from gpu_cluster.components.engine import OfflineRun
from gpu_cluster.policies.crossguard import policies
from gpu_cluster.policies.offline import stack_resources
from gpu_cluster.policies.rules import STACK_RULES, RuleContext, StackRule, rule
from tests.policies.conftest import Reports, stack_args
from tests.policies.sdk_program import Recording

POLICIES = {p.name: p for p in policies() if isinstance(p, StackValidationPolicy)}
ZONE_A = {"zone": "us-east-1a", "prePlaced": False}
NO_FLOW_LOGS = {"exceptions": {"flow-logs": "a two-day benchmark; the trail costs more than the run"}}

# (rule, program, resources in the stack, pack config, expected fragment or None for a pass)
CASES: list[tuple[str, str, list[str], dict[str, Any] | None, str | None]] = [
    ("s3-public-access-blocked", "aws", ["bucket-ok", "bucket-ok-pab"], None, None),
    ("s3-public-access-blocked", "aws", ["bucket-by-name", "bucket-by-name-pab"], None, None),
    (
        "s3-public-access-blocked",
        "aws",
        ["bucket-partial", "bucket-partial-pab"],
        None,
        "leaves ignorePublicAcls, restrictPublicBuckets unset or false",
    ),
    (
        "s3-public-access-blocked",
        "aws",
        ["bucket-bare", "bucket-ok-pab"],
        None,
        "'bucket-bare' has no BucketPublicAccessBlock",
    ),
    ("efa-sg-self-traffic", "aws", ["lt-ok", "sg-ok"], None, None),
    ("efa-sg-self-traffic", "aws", ["lt-split-sg", "sg-split", "sg-split-in", "sg-split-out"], None, None),
    ("efa-sg-self-traffic", "aws", ["lt-legacy-sg", "sg-legacy", "sg-legacy-in", "sg-legacy-out"], None, None),
    ("efa-sg-self-traffic", "aws", ["lt-split-sg", "sg-split", "sg-split-in"], None, "egress self rule"),
    ("efa-sg-self-traffic", "aws", ["lt-half-sg", "sg-ingress-only"], None, "egress self rule"),
    ("efa-sg-self-traffic", "aws", ["lt-ok"], None, "none of its interfaces' security groups"),
    ("efa-placement", "aws", ["lt-ok", "pg", "subnet-a"], ZONE_A, None),
    ("efa-placement", "aws", ["lt-no-group", "pg"], {"prePlaced": True}, None),
    ("efa-placement", "aws", ["lt-no-group", "pg"], ZONE_A, "has no placement.groupName"),
    ("efa-placement", "aws", ["lt-spread-group", "pg", "pg-spread"], ZONE_A, "is not a 'cluster' placement group"),
    ("efa-placement", "aws", ["lt-other-zone", "pg", "subnet-b"], ZONE_A, "in us-east-1b, not the cluster's zone"),
    ("efa-placement", "aws", ["lt-ok", "pg"], {"prePlaced": True}, "already placed"),
    ("gpu-network-mtu", "gcp", ["net-ok", "template-ok"], None, None),
    ("gpu-network-mtu", "gcp", ["net-ok"], {"instanceType": "a3-megagpu-8g"}, None),
    ("gpu-network-mtu", "gcp", ["net-default-mtu", "template-ok"], None, "MTU unset (1460), the catalog gives 8244"),
    ("gpu-network-mtu", "gcp", ["net-bad-mtu", "pool-ok"], None, "MTU 1500"),
    ("gpu-network-mtu", "gcp", ["net-ok", "template-ok"], {"instanceType": "a3-ultragpu-8g"}, "gives 8896"),
    ("gpu-network-mtu", "gcp", ["net-ok"], None, "not in the catalog"),
    ("flow-logs", "aws", ["vpc", "flow-ok"], None, None),
    ("flow-logs", "aws", ["vpc-bare"], NO_FLOW_LOGS, None),
    ("flow-logs", "aws", ["vpc-bare"], None, "VPC 'vpc-bare' has no flow log"),
    ("flow-logs", "aws", ["vpc-reject-only", "flow-reject-only"], None, "records trafficType 'REJECT', not 'ALL'"),
    ("flow-logs", "gcp", ["subnet-ok"], None, None),
    ("flow-logs", "gcp", ["subnet-bad"], None, "'subnet-bad' has no logConfig"),
    ("default-sg-closed", "aws", ["vpc", "dsg-ok"], None, None),
    ("default-sg-closed", "aws", ["vpc-bare"], None, "keeps AWS's default rules"),
    ("default-sg-closed", "aws", ["vpc-default-open", "dsg-bad"], None, "keeps rules ingress[0]"),
    ("bucket-access-logging", "aws", ["bucket-ok", "bucket-ok-logging", "bucket-logs"], None, None),
    ("bucket-access-logging", "aws", ["bucket-bare"], None, "'bucket-bare' has no BucketLogging"),
    ("bucket-access-logging", "gcp", ["gcs-ok", "gcs-logs"], None, None),
    ("bucket-access-logging", "gcp", ["gcs-bad"], None, "'gcs-bad' has no logging.logBucket"),
    ("bucket-lifecycle", "aws", ["bucket-ok", "bucket-ok-versioning", "bucket-ok-lifecycle"], None, None),
    (
        "bucket-lifecycle",
        "aws",
        ["bucket-versions-kept", "bucket-versions-kept-versioning"],
        None,
        "has no enabled lifecycle rule expiring noncurrent versions",
    ),
    ("bucket-lifecycle", "gcp", ["gcs-ok"], None, None),
    ("bucket-lifecycle", "gcp", ["gcs-bad"], None, "no Delete rule on condition.daysSinceNoncurrentTime"),
    ("kms-key-policy", "aws", ["key-ok"], None, None),
    ("kms-key-policy", "aws", ["key-separate", "key-separate-policy"], None, None),
    ("kms-key-policy", "aws", ["key-no-policy"], None, "'key-no-policy' has no key policy"),
    ("kms-key-policy", "aws", ["key-public"], None, "allows any principal ('*') without a condition"),
    ("k8s-images-by-digest", "gcp", ["ds-ok", "ds-skip"], None, None),
    ("k8s-images-by-digest", "gcp", ["chart-ds-bad"], None, None),
    ("k8s-images-by-digest", "gcp", ["ds-bad"], None, "image 'registry.k8s.io/pause:3.10' is not pinned by digest"),
    ("k8s-images-by-digest", "gcp", ["jobset-bad"], None, "spec.replicatedJobs[0].template.spec.template.spec"),
    ("k8s-workload-hardening", "gcp", ["ds-ok", "ds-skip"], None, None),
    ("k8s-workload-hardening", "gcp", ["chart-ds-bad"], None, None),
    ("k8s-workload-hardening", "gcp", ["ds-bad"], None, "privileged is true [CKV_K8S_16]"),
    ("k8s-workload-hardening", "gcp", ["ds-bad"], None, "hostNetwork is true"),
    ("k8s-workload-hardening", "gcp", ["ds-bad"], None, "automountServiceAccountToken is not false"),
    ("k8s-workload-hardening", "gcp", ["ds-skip-no-reason"], None, "privileged is true [CKV_K8S_16]"),
    ("k8s-workload-hardening", "gcp", ["jobset-bad"], None, "runs in the default namespace [CKV_K8S_21]"),
    ("k8s-chart-workloads", "gcp", ["ds-bad"], None, None),
    ("k8s-chart-workloads", "gcp", ["chart-ds-bad"], None, "(from a chart): spec.template.spec.containers[0]"),
    ("azure-storage-soft-delete", "azure", ["acct-kept", "acct-kept-blob"], None, None),
    (
        "azure-storage-soft-delete",
        "azure",
        ["acct-loose", "acct-loose-blob"],
        None,
        "deleteRetentionPolicy is not enabled",
    ),
    ("azure-storage-soft-delete", "azure", ["acct-kept"], None, "'acct-kept' has no BlobServiceProperties"),
    ("azure-audit-logs", "azure", ["aks-secure", "aks-secure-audit", "acct-kept", "acct-kept-logs"], None, None),
    ("azure-audit-logs", "azure", ["aks-bare", "aks-bare-apiserver-only"], None, "'aks-bare' sends no audit log"),
    (
        "azure-audit-logs",
        "azure",
        ["acct-loose", "acct-loose-logs"],
        None,
        "blob service sends no StorageDelete, StorageRead log",
    ),
]
IDS = [f"{c[0]}:{'+'.join(c[2])}" + (":ok" if c[4] is None else ":bad") for c in CASES]


@pytest.mark.parametrize("name,program,names,config,expected", CASES, ids=IDS)
def test_stack_rule_as_crossguard_sees_it(
    request: pytest.FixtureRequest,
    name: str,
    program: str,
    names: list[str],
    config: dict[str, Any] | None,
    expected: str | None,
) -> None:
    rec: Recording = request.getfixturevalue(f"{program}_rec")
    policy = POLICIES[name]
    assert isinstance(policy, StackValidationPolicy)
    reports = Reports()
    policy.validate(stack_args(rec, names, config), reports)
    if expected is None:
        assert reports.items == []
    else:
        assert any(expected in m for m in reports.messages), reports.messages
        urns = {rec.get(n).urn for n in names}
        assert all(urn is None or urn in urns for _, urn in reports.items)


@pytest.mark.parametrize("name,program,names,config,expected", CASES, ids=IDS)
def test_stack_rule_as_the_offline_engine_records_it(
    request: pytest.FixtureRequest,
    name: str,
    program: str,
    names: list[str],
    config: dict[str, Any] | None,
    expected: str | None,
) -> None:
    rec: Recording = request.getfixturevalue(f"{program}_rec")
    run = OfflineRun(stack="policy-test", resources=[rec.get(n) for n in names])
    findings = cast(StackRule, rule(name)).check(stack_resources(run), RuleContext.from_config(config))
    if expected is None:
        assert findings == []
    else:
        assert any(expected in m for m, _ in findings), findings


def test_every_stack_rule_has_a_pass_and_a_fail() -> None:
    for r in STACK_RULES:
        assert {c[4] is None for c in CASES if c[0] == r.name} == {True, False}, r.name


def test_stack_rules_follow_dependencies_when_ids_are_unknown(aws_rec: Recording) -> None:
    # During a preview, the ids one resource carries of another are not known yet; CrossGuard
    # sends a sentinel and raises if a policy reads it. The dependencies still say who is whose.
    from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

    args = stack_args(aws_rec, ["bucket-ok", "bucket-by-name", "bucket-ok-pab", "bucket-by-name-pab"])
    pab = next(r for r in args.resources if r.name == "bucket-ok-pab")
    pab.props = unknown_checking_proxy({**aws_rec.get("bucket-ok-pab").inputs, "bucket": UNKNOWN_STRING_VALUE})
    reports = Reports()
    POLICIES["s3-public-access-blocked"].validate(args, reports)
    assert reports.items == []


def test_manifest_findings_reads_rendered_yaml() -> None:
    # The Kubernetes rules on a manifest as the launcher renders it (no Pulumi in between).
    from gpu_cluster.policies.workloads import manifest_findings

    digest = "@sha256:" + "0" * 64
    hardened = {
        "allowPrivilegeEscalation": False,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    pod = {
        "automountServiceAccountToken": False,
        "containers": [{"name": "w", "image": f"ghcr.io/x/train:1{digest}", "securityContext": hardened}],
    }
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "v", "namespace": "gpu-jobs"},
        "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": {"spec": pod}}}}]},
    }
    assert manifest_findings(jobset) == []
    pod["containers"][0]["image"] = "ghcr.io/x/train:1"
    del pod["containers"][0]["securityContext"]["capabilities"]
    found = manifest_findings(jobset)
    assert any("not pinned by digest" in f for f in found) and any("[CKV_K8S_37]" in f for f in found)
    assert manifest_findings({"kind": "ConfigMap"}) == []


def test_new_stack_rules_run_during_a_preview_with_unknown_inputs(aws_rec: Recording) -> None:
    # A key policy or a log target built from other resources' outputs is unknown in a preview:
    # the rules count it as set instead of aborting (CrossGuard raises when an unknown is read).
    from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

    args = stack_args(aws_rec, ["key-ok", "bucket-ok", "bucket-ok-logging", "bucket-logs"])
    for res in args.resources:
        if res.name == "key-ok":
            res.props = unknown_checking_proxy({**aws_rec.get("key-ok").inputs, "policy": UNKNOWN_STRING_VALUE})
        if res.name == "bucket-ok-logging":
            res.props = unknown_checking_proxy(
                {**aws_rec.get("bucket-ok-logging").inputs, "targetBucket": UNKNOWN_STRING_VALUE}
            )
    for name in ("kms-key-policy", "bucket-access-logging"):
        reports = Reports()
        POLICIES[name].validate(args, reports)
        assert reports.items == [], name
    # An unknown policy is still a policy; no policy at all is still a finding.
    bare = stack_args(aws_rec, ["key-no-policy"])
    reports = Reports()
    POLICIES["kms-key-policy"].validate(bare, reports)
    assert any("has no key policy" in m for m in reports.messages)
