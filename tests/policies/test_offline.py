"""The offline check: the pack's rules over what the offline engine records for real stacks."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_cluster.components import plan
from gpu_cluster import plan as plan_command
from gpu_cluster.components.engine import OfflineRun, Recorded, run_offline
from gpu_cluster.components.spec import bundled_stacks, load_stack, read_stack_file
from gpu_cluster.policies import offline
from gpu_cluster.policies.rules import ALL_RULES, AWS_LAUNCH_TEMPLATES, RuleContext
from tests.policies.pending import pending
from tests.policies.sdk_program import Recording

_RUNS: dict[str, OfflineRun] = {}


def bundled_run(stack: str) -> OfflineRun:
    """Each bundled stack's program runs once per session (it takes seconds)."""
    if stack not in _RUNS:
        name, raw = read_stack_file(stack)
        _RUNS[stack] = run_offline(name, raw)
    return _RUNS[stack]


@pytest.mark.parametrize("stack", bundled_stacks())
def test_bundled_stack_mandatory_findings_are_only_the_pending_ones(stack: str) -> None:
    # No mandatory finding beyond the ones tests/policies/pending.py lists with their fixer, and
    # each of those still there (a fixed one must leave the list).
    violations = offline.check_run(bundled_run(stack), load_stack(stack, deployer_placeholder=True)[1])
    found = {v.rule for v in violations if v.mandatory}
    unexpected = [
        f"{v.rule} {v.resource_type} {v.resource_name}: {v.message}"
        for v in violations
        if v.mandatory and v.rule not in pending(stack)
    ]
    assert unexpected == []
    assert found == pending(stack), f"fixed, remove from tests/policies/pending.py: {sorted(pending(stack) - found)}"


@pytest.mark.parametrize("stack", bundled_stacks())
def test_bundled_stack_is_governed(stack: str) -> None:
    # The rules must see the stack's real resources: a rule written against a type token the
    # components never register would pass everything and check nothing.
    run = bundled_run(stack)
    governed = {t for r in ALL_RULES for t in getattr(r, "resource_types", ())}
    seen = {r.type for r in run.resources} & governed
    spec = load_stack(stack, deployer_placeholder=True)[1]
    must = (
        {
            "aws:ec2/launchTemplate:LaunchTemplate",
            "aws:ec2/securityGroup:SecurityGroup",
            "aws:fsx/lustreFileSystem:LustreFileSystem",
        }
        if spec.cloud == "aws"
        else {
            "azure-native:storagecache:AmlFilesystem",
            "azure-native:network:NetworkSecurityGroup",
            "azure-native:storage:StorageAccount",
        }
        | (
            {"azure-native:compute:VirtualMachineScaleSet", "azure-native:compute:VirtualMachine"}
            if spec.orchestration.kind == "slurm"
            else {"azure-native:containerservice:ManagedCluster"}
        )
        if spec.cloud == "azure"
        else {"gcp:lustre/instance:Instance", "gcp:compute/firewall:Firewall", "gcp:storage/bucket:Bucket"}
    )
    assert must <= seen, f"{stack}: no {sorted(must - seen)} among {sorted({r.type for r in run.resources})}"


def _break_imds(run: OfflineRun) -> tuple[OfflineRun, Recorded]:
    """The run with its first launch template allowing IMDSv1."""
    index = next(i for i, r in enumerate(run.resources) if r.type in AWS_LAUNCH_TEMPLATES)
    lt = run.resources[index]
    inputs = json.loads(json.dumps(lt.inputs))
    target = inputs.get("launchTemplateData", inputs)
    # Only the tokens break: the hop limit is set to the rule's 1, whatever the stack has today.
    target.setdefault("metadataOptions", {}).update(httpTokens="optional", httpPutResponseHopLimit=1)
    broken = dataclasses.replace(lt, inputs=inputs)
    resources = list(run.resources)
    resources[index] = broken
    return OfflineRun(stack=run.stack, resources=resources, outputs=run.outputs, invokes=run.invokes), broken


AWS_STACKS = [s for s in bundled_stacks() if load_stack(s, deployer_placeholder=True)[1].cloud == "aws"]


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_broken_launch_template_is_reported_with_its_ids(stack: str) -> None:
    run, broken = _break_imds(bundled_run(stack))
    violations = offline.check_run(run, load_stack(stack, deployer_placeholder=True)[1])
    hits = [v for v in violations if v.rule == "imdsv2-required" and v.resource_name == broken.name]
    assert len(hits) == 1 and hits[0].mandatory
    assert "httpTokens is 'optional'" in hits[0].message
    assert {"CKV_AWS_79", "AVD-AWS-0130"} <= set(hits[0].ids)
    text = io.StringIO()
    offline.render(violations, text)
    assert "FAIL imdsv2-required (CKV_AWS_79, CKV_AWS_341, AVD-AWS-0028, AVD-AWS-0130)" in text.getvalue()
    assert broken.name in text.getvalue()


def test_plan_policy_flag(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    clean = next(s for s in bundled_stacks() if not pending(s))
    monkeypatch.setattr(plan, "run_offline", lambda name, raw: bundled_run(clean))
    out = tmp_path / "plan.json"
    assert plan_command.main([clean, "--policy", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "\nPolicy (" in printed and "0 mandatory" in printed
    assert isinstance(json.loads(out.read_text())["policy"], list)

    # An AWS stack with one launch template allowing IMDSv1: exit 3, the rule named with its IDs.
    stack = AWS_STACKS[0]
    monkeypatch.setattr(plan, "run_offline", lambda name, raw: _break_imds(bundled_run(stack))[0])
    assert plan_command.main([stack, "--policy"]) == 3
    captured = capsys.readouterr()
    assert "FAIL imdsv2-required (CKV_AWS_79" in captured.out
    assert "violate mandatory policies" in captured.err


def test_sdk_declared_resources_through_the_offline_check(aws_rec: Recording) -> None:
    # Hand-built run: the typed-SDK test resources, checked as the plan checks a stack.
    spec = load_stack("aws-h100-eks", deployer_placeholder=True)[1]  # on-demand in us-east-1a, like the test resources
    violations = offline.check_run(aws_rec.run, spec)
    found = {(v.rule, v.resource_name) for v in violations}
    for expected in [
        ("imdsv2-required", "lt-imdsv1"),
        ("ebs-encrypted", "lt-unencrypted"),
        ("no-public-ip-nodes", "lt-public"),
        ("no-open-ingress", "sg-bad"),
        ("eks-endpoint-restricted", "eks-bad"),
        ("lustre-protected", "fsx-bad"),
        ("s3-public-access-blocked", "bucket-bare"),
        ("efa-sg-self-traffic", "lt-half-sg"),
    ]:
        assert expected in found, expected
    clean = {v.rule for v in violations if v.resource_name in ("lt-ok", "sg-ok", "fsx-ok", "bucket-ok")}
    assert clean == set()


def test_context_from_spec_and_pack_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for stack in bundled_stacks():
        spec = load_stack(stack, deployer_placeholder=True)[1]
        ctx = offline.context_from_spec(spec)
        assert ctx.pre_placed == spec.compute.capacity.pre_placed
        assert ctx.zone == spec.zone and ctx.instance_type == spec.compute.instance_type
        assert RuleContext.from_config(ctx.to_config()) == ctx
        if spec.orchestration.kind == "slurm":
            assert ctx.api_access_cidrs is None
        else:
            assert ctx.api_access_cidrs == spec.orchestration.api_access_cidrs
    # The pack's config is for a real `pulumi preview`, so it needs the deployer's address:
    # a bundled Kubernetes stack as shipped is refused, one that names its deployers is not.
    assert offline.main(["aws-h100-eks", "--pack-config", "-"]) == 2
    assert "deployer_cidrs" in capsys.readouterr().err
    _, raw = read_stack_file("aws-h100-eks")
    raw["orchestration"]["deployer_cidrs"] = ["203.0.114.7/32"]
    mine = tmp_path / "Pulumi.mine.yaml"
    mine.write_text(yaml.safe_dump({"config": {"gpu-cluster:cluster": raw}}))
    assert offline.main([str(mine), "--pack-config", "-"]) == 0
    cfg: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert set(cfg) == {r.name for r in ALL_RULES}
    assert cfg["eks-endpoint-restricted"]["apiAccessCidrs"] == ["203.0.114.7/32"]


def test_offline_cli_reports_a_bad_stack_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text("config:\n  gpu-cluster:cluster:\n    cloud: azure\n")
    assert offline.main([str(bad)]) == 2
    assert "gpu-cluster:" in capsys.readouterr().err
