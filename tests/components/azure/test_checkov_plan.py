"""Checkov itself over both bundled Azure plans (its terraform_plan framework, the plans translated to
azurerm by tests/components/azure/checkov_plan.py): what issue 35 requires passes, every other failure
is a deliberate exception listed in policies/checkov-azure-exceptions.yaml with its reason, and every
listed exception still fails (so the file says exactly what is deliberate).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.checkov_venv import checkov_exe
from tests.components.aws._offline import run
from tests.components.azure.checkov_plan import AZURE_STACKS, results, scan, terraform_plan

ROOT = Path(__file__).resolve().parents[3]
EXCEPTIONS = ROOT / "policies" / "checkov-azure-exceptions.yaml"
# Issue 35's done-when: these pass on every cluster / account of both plans.
MUST_PASS = {
    "azurerm_kubernetes_cluster": ("CKV_AZURE_7", "CKV_AZURE_141", "CKV_AZURE_4", "CKV_AZURE_232"),
    "azurerm_storage_account": ("CKV2_AZURE_38",),
}


@pytest.fixture(scope="module")
def checkov() -> Path:
    return checkov_exe()


@pytest.fixture(scope="module")
def report(checkov: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    plan = terraform_plan(run(stack)[0] for stack in AZURE_STACKS)
    return scan(checkov, plan, tmp_path_factory.mktemp("checkov-azure"))


def _exceptions() -> list[dict[str, str]]:
    entries = (yaml.safe_load(EXCEPTIONS.read_text()) or {}).get("exceptions") or []
    for i, e in enumerate(entries):
        for key in ("id", "kind", "reason"):
            assert isinstance(e.get(key), str) and e[key].strip(), f"{EXCEPTIONS.name} exceptions[{i}].{key}: missing"
    return list(entries)


def test_what_the_issue_requires_passes_on_both_plans(report: dict[str, Any]) -> None:
    passed, failed = results(report, "passed_checks"), results(report, "failed_checks")
    resources = {(r.split(".")[0], r) for _, r in passed | failed}
    for kind, ids in MUST_PASS.items():
        mine = [r for k, r in resources if k == kind]
        assert len(mine) == len(AZURE_STACKS), (kind, mine)  # judged on both plans, not skipped
        for cid in ids:
            assert {(cid, r) for r in mine} <= passed, (cid, {(c, r) for c, r in failed if c == cid})


def test_every_failure_is_a_listed_exception_and_every_exception_still_fails(report: dict[str, Any]) -> None:
    failed = {(cid, res.split(".")[0]) for cid, res in results(report, "failed_checks")}
    listed = {(e["id"], e["kind"]) for e in _exceptions()}
    assert failed - listed == set(), f"not deliberate (fix, or list with a reason): {sorted(failed - listed)}"
    assert listed - failed == set(), f"listed but no longer failing (remove): {sorted(listed - failed)}"


def test_checkov_fails_a_cluster_without_the_settings(checkov: Path, tmp_path: Path) -> None:
    """The same translation of a cluster with local accounts on, no network policy, no monitoring and
    an untainted system pool fails the four checks: the passing test above can fail."""
    plan = terraform_plan([run("azure-h100-aks")[0]])
    (cluster,) = [
        r for r in plan["planned_values"]["root_module"]["resources"] if r["type"] == "azurerm_kubernetes_cluster"
    ]
    values = cluster["values"]
    values["local_account_disabled"] = False
    values["network_profile"][0].pop("network_policy")
    values.pop("oms_agent")
    values["default_node_pool"][0]["only_critical_addons_enabled"] = False
    failed = results(scan(checkov, plan, tmp_path), "failed_checks")
    for cid in MUST_PASS["azurerm_kubernetes_cluster"]:
        assert (cid, cluster["address"]) in failed, cid
