"""Checkov itself over the bundled Azure plans (its terraform_plan framework, the plans translated to
azurerm by tests/components/azure/checkov_plan.py): what each kind of stack requires passes (issue 35's
checks on an AKS cluster; SSH keys only and no public address on a Slurm stack's VMs), every other
failure is a deliberate exception listed in policies/checkov-azure-exceptions.yaml with its reason (and,
where an entry has one, on a resource its `match` names), and every listed exception still fails (so
the file says exactly what is deliberate).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import re

import pytest
import yaml

from tests.checkov_venv import checkov_exe
from tests.components.aws._offline import run
from tests.components.azure.checkov_plan import AZURE_STACKS, results, scan, terraform_plan, unmapped

ROOT = Path(__file__).resolve().parents[3]
EXCEPTIONS = ROOT / "policies" / "checkov-azure-exceptions.yaml"
# Per orchestration kind, what passes on every resource of the type in each stack of that kind. AKS:
# issue 35's done-when. Slurm: SSH keys only and no public address on any VM, as
# components/azure/orchestration_slurm.py promises (CKV_AZURE_1/49/149/178, CKV_AZURE_119), and no
# extension operations on the login node (CKV_AZURE_50).
MUST_PASS = {
    "aks": {
        "azurerm_kubernetes_cluster": ("CKV_AZURE_7", "CKV_AZURE_141", "CKV_AZURE_4", "CKV_AZURE_232"),
        "azurerm_storage_account": ("CKV2_AZURE_38",),
    },
    "slurm": {
        "azurerm_linux_virtual_machine_scale_set": ("CKV_AZURE_49", "CKV_AZURE_149", "CKV_AZURE_178"),
        "azurerm_linux_virtual_machine": ("CKV_AZURE_1", "CKV_AZURE_149", "CKV_AZURE_178", "CKV_AZURE_50"),
        "azurerm_network_interface": ("CKV_AZURE_119",),
        "azurerm_storage_account": ("CKV2_AZURE_38",),
    },
}
# azure-native types of the AKS stacks' monitoring and maintenance that no translation covers yet (so
# Checkov does not judge them); a type not listed here fails the scan's fixture instead of going unseen.
NOT_TRANSLATED = {
    "azure-native:containerservice:MaintenanceConfiguration",
    "azure-native:monitor:AzureMonitorWorkspace",
    "azure-native:monitor:DataCollectionEndpoint",
    "azure-native:monitor:DataCollectionRule",
    "azure-native:monitor:DataCollectionRuleAssociation",
}


@pytest.fixture(scope="module")
def checkov() -> Path:
    return checkov_exe()


@pytest.fixture(scope="module")
def report(checkov: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    runs = [run(stack)[0] for stack in AZURE_STACKS]
    assert unmapped(runs) <= NOT_TRANSLATED, "Azure resource types the translation does not know (add them)"
    return scan(checkov, terraform_plan(runs), tmp_path_factory.mktemp("checkov-azure"))


def _exceptions() -> list[dict[str, str]]:
    entries = (yaml.safe_load(EXCEPTIONS.read_text()) or {}).get("exceptions") or []
    for i, e in enumerate(entries):
        for key in ("id", "kind", "reason"):
            assert isinstance(e.get(key), str) and e[key].strip(), f"{EXCEPTIONS.name} exceptions[{i}].{key}: missing"
    return list(entries)


def _of_stack(stack: str, address: str) -> bool:
    """A bundled Azure stack's cluster is named as the stack without its cloud; resources start with it."""
    return address.split(".", 1)[1].startswith(stack.removeprefix("azure-").replace("-", "_") + "_")


def test_what_each_kind_of_stack_requires_passes(report: dict[str, Any]) -> None:
    passed, failed = results(report, "passed_checks"), results(report, "failed_checks")
    judged = {r for _, r in passed | failed}
    for stack in AZURE_STACKS:
        kind = run(stack)[1].orchestration.kind
        for tf, ids in MUST_PASS[kind].items():
            mine = [r for r in judged if r.split(".")[0] == tf and _of_stack(stack, r)]
            assert mine, (stack, tf)  # judged on this plan, not skipped
            for cid in ids:
                assert {(cid, r) for r in mine} <= passed, (stack, cid, {(c, r) for c, r in failed if c == cid})


def test_every_failure_is_a_listed_exception_and_every_exception_still_fails(report: dict[str, Any]) -> None:
    found = results(report, "failed_checks")
    entries = {(e["id"], e["kind"]): e for e in _exceptions()}
    unlisted = sorted(
        f"{cid} {res}"
        for cid, res in found
        if (cid, res.split(".")[0]) not in entries
        or not re.search(entries[(cid, res.split(".")[0])].get("match", ""), res)
    )
    assert not unlisted, f"not deliberate (fix, or list with a reason): {unlisted}"
    stale = sorted(set(entries) - {(cid, res.split(".")[0]) for cid, res in found})
    assert not stale, f"listed but no longer failing (remove): {stale}"


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
    for cid in MUST_PASS["aks"]["azurerm_kubernetes_cluster"]:
        assert (cid, cluster["address"]) in failed, cid


def test_checkov_fails_slurm_vms_without_the_settings(checkov: Path, tmp_path: Path) -> None:
    """The Slurm stack's VMs with passwords allowed and no SSH key, extension operations on, and the
    controller's NIC joined to a public address fail the checks the passing test holds them to."""
    plan = terraform_plan([run("azure-h100-slurm")[0]])
    planned = {r["type"]: r for r in plan["planned_values"]["root_module"]["resources"]}
    configured = {r["type"]: r for r in plan["configuration"]["root_module"]["resources"]}
    for tf in ("azurerm_linux_virtual_machine_scale_set", "azurerm_linux_virtual_machine"):
        planned[tf]["values"]["disable_password_authentication"] = False
        planned[tf]["values"].pop("admin_ssh_key")
    planned["azurerm_linux_virtual_machine"]["values"]["allow_extension_operations"] = True
    nic, ip = planned["azurerm_network_interface"], planned["azurerm_public_ip"]["address"]
    nic["values"]["ip_configuration"][0]["public_ip_address_id"] = f"{ip}-id"
    configured["azurerm_network_interface"]["expressions"]["ip_configuration"] = {"references": [f"{ip}.id", ip]}
    failed = results(scan(checkov, plan, tmp_path), "failed_checks")
    for tf in ("azurerm_linux_virtual_machine_scale_set", "azurerm_linux_virtual_machine", "azurerm_network_interface"):
        for cid in MUST_PASS["slurm"][tf]:
            assert (cid, planned[tf]["address"]) in failed, (tf, cid)
