"""Checkov itself on what the AWS program declares: CKV_AWS_37 (EKS control-plane logging, every log
type) and CKV_AWS_21 (S3 bucket versioning).

Checkov reads Terraform plans, not Pulumi programs, so the recorded resources of the mock run are
written as a ``terraform show -json`` plan: the pulumi-aws resource becomes the Terraform resource
it wraps (pulumi-aws is generated from the Terraform provider, so the input names are the
Terraform attribute names in camelCase), and each ``aws_s3_bucket_versioning`` references its
bucket in ``configuration`` the way Terraform records an expression, which is how Checkov joins
the two. The checks are Checkov's own (the virtualenv of scripts/checkov-venv.sh).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.components.engine import OfflineRun
from gpu_cluster.components.stack_file import load_stack
from tests.checkov_venv import checkov_exe
from tests.components.aws._offline import AWS_STACKS, run

CHECKS = ("CKV_AWS_37", "CKV_AWS_21")
# pulumi-aws type token -> the Terraform resource type it is generated from.
TERRAFORM_TYPES = {
    "aws:eks/cluster:Cluster": "aws_eks_cluster",
    "aws:s3/bucket:Bucket": "aws_s3_bucket",
    "aws:s3/bucketVersioning:BucketVersioning": "aws_s3_bucket_versioning",
}


@pytest.fixture(scope="module")
def checkov() -> Path:
    return checkov_exe()


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def _values(v: Any) -> Any:
    # Terraform plans hold nested blocks as lists of objects.
    if isinstance(v, dict):
        return [{_snake(k): _values(x) for k, x in v.items()}]
    if isinstance(v, list):
        return [_values(x)[0] if isinstance(x, dict) else x for x in v]
    return v


def terraform_plan(result: OfflineRun) -> dict[str, Any]:
    planned, configured = [], []
    bucket_of_id: dict[str, str] = {}
    for res in result.resources:
        tf = TERRAFORM_TYPES.get(res.type)
        if tf is None:
            continue
        name = re.sub(r"[^A-Za-z0-9_]", "_", res.name)
        address = f"{tf}.{name}"
        values = {_snake(k): _values(v) if isinstance(v, dict) else v for k, v in res.inputs.items()}
        if tf == "aws_s3_bucket":
            bucket_of_id[f"{res.name}-id"] = address  # the mock's id for a resource (components/aws/mocks.py)
        planned.append({"address": address, "mode": "managed", "type": tf, "name": name, "values": values})
        expressions: dict[str, Any] = {}
        if tf == "aws_s3_bucket_versioning":
            target = bucket_of_id[res.inputs["bucket"]]
            expressions["bucket"] = {"references": [f"{target}.id", target]}
        configured.append({"address": address, "mode": "managed", "type": tf, "name": name, "expressions": expressions})
    return {
        "format_version": "1.2",
        "terraform_version": "1.9.0",
        "planned_values": {"root_module": {"resources": planned}},
        "configuration": {"root_module": {"resources": configured}},
    }


def scan(checkov: Path, plan: dict[str, Any], tmp: Path) -> dict[str, Any]:
    path = tmp / "plan.json"
    path.write_text(json.dumps(plan))
    proc = subprocess.run(
        [str(checkov), "-f", str(path), "--framework", "terraform_plan", "--check", ",".join(CHECKS), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
        cwd=tmp,
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]  # 1: some check failed
    out = json.loads(proc.stdout)
    return dict(out[0] if isinstance(out, list) else out)


def _ids(report: dict[str, Any], kind: str) -> set[tuple[str, str]]:
    return {(c["check_id"], c["resource"]) for c in report["results"][kind]}


def test_eks_logging_and_bucket_versioning_pass_checkov(checkov: Path, tmp_path: Path) -> None:
    plans = {stack: terraform_plan(run(stack)[0]) for stack in AWS_STACKS}
    resources = [r for p in plans.values() for r in p["planned_values"]["root_module"]["resources"]]
    plan = {**plans[AWS_STACKS[0]], "planned_values": {"root_module": {"resources": resources}}}
    plan["configuration"] = {
        "root_module": {
            "resources": [r for p in plans.values() for r in p["configuration"]["root_module"]["resources"]]
        }
    }
    report = scan(checkov, plan, tmp_path)
    passed, failed = _ids(report, "passed_checks"), _ids(report, "failed_checks")
    assert not failed, failed
    clusters = {r["address"] for r in resources if r["type"] == "aws_eks_cluster"}
    buckets = {r["address"] for r in resources if r["type"] == "aws_s3_bucket"}
    # Every EKS stack's cluster, and every stack's log and checkpoint buckets, were judged (not skipped).
    eks = [s for s in AWS_STACKS if load_stack(s, deployer_placeholder=True)[1].orchestration.kind == "eks"]
    assert len(eks) >= 2 and len(clusters) == len(eks) and len(buckets) == 2 * len(AWS_STACKS)
    assert {("CKV_AWS_37", c) for c in clusters} | {("CKV_AWS_21", b) for b in buckets} <= passed


def test_checkov_fails_the_former_log_types_and_an_unversioned_bucket(checkov: Path, tmp_path: Path) -> None:
    """The same translation, with the control plane's former three log types and the log bucket's
    versioning left out, fails both checks: the passing test above can fail."""
    plan = terraform_plan(run("aws-h100-eks")[0])
    resources = plan["planned_values"]["root_module"]["resources"]
    (cluster,) = [r for r in resources if r["type"] == "aws_eks_cluster"]
    cluster["values"]["enabled_cluster_log_types"] = ["api", "audit", "authenticator"]
    logs = [r["address"] for r in resources if r["type"] == "aws_s3_bucket" and "logs" in r["address"]]
    keep = {a.replace("aws_s3_bucket.", "aws_s3_bucket_versioning.") for a in logs}
    for section in (plan["planned_values"], plan["configuration"]):
        section["root_module"]["resources"] = [
            r for r in section["root_module"]["resources"] if r["address"] not in keep
        ]
    failed = _ids(scan(checkov, plan, tmp_path), "failed_checks")
    assert ("CKV_AWS_37", cluster["address"]) in failed
    assert {("CKV_AWS_21", a) for a in logs} <= failed


def test_eks_clusters_stay_on_standard_support() -> None:
    """EKS creates clusters with the EXTENDED upgrade policy unless told (view-upgrade-policy):
    the stack says STANDARD, so no cluster silently moves to paid extended support."""
    for stack in ("aws-h100-eks", "aws-h100-capacity-block"):
        (cluster,) = run(stack)[0].of_type("aws:eks/cluster:Cluster")
        assert cluster.inputs["upgradePolicy"] == {"supportType": "STANDARD"}
        assert cluster.inputs["enabledClusterLogTypes"] == [
            "api",
            "audit",
            "authenticator",
            "controllerManager",
            "scheduler",
        ]
