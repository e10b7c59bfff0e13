"""Checkov itself over the eight bundled AWS and GCP plans (its terraform_plan framework, the plans
translated by tests/components/checkov_cloud_plan.py), as tests/components/azure/test_checkov_plan.py
does for Azure: every failure is a deliberate exception listed in policies/checkov-cloud-exceptions.yaml
with its reason and on a resource its `match` names, and every listed exception still fails.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.checkov_venv import checkov_exe
from tests.components.aws._offline import run
from tests.components.checkov_cloud_plan import AWS_GCP_STACKS, failures, scan, terraform_plan, unmapped

ROOT = Path(__file__).resolve().parents[2]
EXCEPTIONS = ROOT / "policies" / "checkov-cloud-exceptions.yaml"


@pytest.fixture(scope="module")
def checkov() -> Path:
    return checkov_exe()


@pytest.fixture(scope="module")
def report(checkov: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    runs = [run(stack)[0] for stack in AWS_GCP_STACKS]
    assert unmapped(runs) == set(), "AWS/GCP resource types the translation does not know (add them)"
    return scan(checkov, terraform_plan(runs), tmp_path_factory.mktemp("checkov-cloud"))


def _exceptions() -> list[dict[str, str]]:
    entries = (yaml.safe_load(EXCEPTIONS.read_text()) or {}).get("exceptions") or []
    for i, e in enumerate(entries):
        for key in ("id", "kind", "match", "reason"):
            assert isinstance(e.get(key), str) and e[key].strip(), f"{EXCEPTIONS.name} exceptions[{i}].{key}: missing"
    return list(entries)


def test_every_aws_and_gcp_type_was_judged(report: dict[str, Any]) -> None:
    """The scan saw the clusters, pools, buckets and subnets of both clouds (a scan that judged
    nothing would list no failures and pass the test below)."""
    judged = {c["resource"].split(".")[0] for c in report["results"]["passed_checks"]}
    assert {
        "aws_eks_cluster",
        "aws_s3_bucket",
        "aws_launch_template",
        "aws_security_group",
        "google_container_cluster",
        "google_container_node_pool",
        "google_storage_bucket",
        "google_compute_subnetwork",
    } <= judged


def test_every_failure_is_a_listed_exception_and_every_exception_still_fails(report: dict[str, Any]) -> None:
    found = failures(report)
    entries = {(e["id"], e["kind"]): e for e in _exceptions()}
    unlisted = sorted(
        f"{cid} {address}"
        for cid, kind, address in found
        if (cid, kind) not in entries or not re.search(entries[(cid, kind)]["match"], address)
    )
    assert not unlisted, f"not deliberate (fix, or list with a reason in {EXCEPTIONS.name}): {unlisted}"
    stale = sorted(set(entries) - {(cid, kind) for cid, kind, _ in found})
    assert not stale, f"listed but no longer failing (remove): {stale}"


def test_a_new_failure_outside_an_entrys_match_is_reported(checkov: Path, tmp_path: Path) -> None:
    """The primary subnet without Private Google Access fails CKV_GCP_74 on a resource the entry's
    match does not cover: the listing above does not absorb it."""
    plan = terraform_plan([run("gcp-h100-gke")[0]])
    (subnet,) = [
        r
        for r in plan["planned_values"]["root_module"]["resources"]
        if r["type"] == "google_compute_subnetwork" and r["address"].endswith("_network_subnet")
    ]
    subnet["values"]["private_ip_google_access"] = False
    found = failures(scan(checkov, plan, tmp_path))
    assert ("CKV_GCP_74", "google_compute_subnetwork", subnet["address"]) in found
    (entry,) = [e for e in _exceptions() if e["id"] == "CKV_GCP_74"]
    assert not re.search(entry["match"], subnet["address"])
