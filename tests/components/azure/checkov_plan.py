"""What the Azure program declares, as a Terraform plan Checkov reads (``terraform show -json``).

Checkov has no Pulumi framework and its Azure checks read azurerm resources, so each recorded
azure-native resource (the ARM API's own property names, camelCase) becomes the azurerm resource
that manages the same ARM object, with the azurerm argument that writes the same ARM property.
The argument names are hashicorp/terraform-provider-azurerm's, read in its resource pages
(``website/docs/r/<resource>.html.markdown`` at 00378cf). Where azurerm splits one ARM object
into several resources (a subnet's NSG and NAT gateway associations) or folds several into one
(a storage account's blob service properties, its ``blob_properties`` block), the translation
does the same, so Checkov's graph checks see the connections azurerm would give them: a
reference in ``configuration`` the way Terraform records an expression (as the AWS translation,
tests/components/aws/test_checkov_plan.py, does for bucket versioning).

Unknown ARM properties are dropped, never guessed at: a check whose attribute the translation does
not write sees the azurerm default, which is what a property the program leaves unset gets too.

``python -m tests.components.azure.checkov_plan`` prints every Azure check's result over the
bundled Azure stacks (the figures in the issue-35 note, and the Slurm stack's).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from gpu_cluster.components.engine import OfflineRun, Recorded
from tests.components.azure.checkov_compute import COMPUTE

AZURE_STACKS = ("azure-h100-aks", "azure-mi300x-aks", "azure-h100-slurm")
CRITICAL_ADDONS_TAINT = "CriticalAddonsOnly=true:NoSchedule"

Values = dict[str, Any]


def _block(v: Mapping[str, Any] | None) -> list[Values]:
    """A nested block as Terraform's plan holds it: a list of one object (empty when absent)."""
    return [dict(v)] if v else []


def _drop_none(d: Values) -> Values:
    return {k: v for k, v in d.items() if v is not None and v != []}


def _pool_common(p: Mapping[str, Any]) -> Values:
    """Arguments a cluster's default_node_pool and a separate node pool share (kubernetes_cluster
    and kubernetes_cluster_node_pool pages): ARM agent pool property -> azurerm argument."""
    up = p.get("upgradeSettings") or {}
    return _drop_none(
        {
            "name": p.get("name") or p.get("agentPoolName"),
            "vm_size": p.get("vmSize"),
            "node_count": p.get("count"),
            "zones": p.get("availabilityZones"),
            "vnet_subnet_id": p.get("vnetSubnetID"),
            "node_public_ip_enabled": p.get("enableNodePublicIP"),
            "host_encryption_enabled": p.get("enableEncryptionAtHost"),
            "os_disk_type": p.get("osDiskType"),
            "os_disk_size_gb": p.get("osDiskSizeGB"),
            "os_sku": p.get("osSKU"),
            "max_pods": int(p["maxPods"]) if p.get("maxPods") is not None else None,
            "node_labels": p.get("nodeLabels"),
            "upgrade_settings": _block(
                _drop_none(
                    {
                        "max_surge": up.get("maxSurge"),
                        "max_unavailable": up.get("maxUnavailable"),
                        "drain_timeout_in_minutes": up.get("drainTimeoutInMinutes"),
                        "node_soak_duration_in_minutes": up.get("nodeSoakDurationInMinutes"),
                    }
                )
            ),
        }
    )


def kubernetes_cluster(inputs: Mapping[str, Any]) -> Values:
    pools = list(inputs.get("agentPoolProfiles") or [])
    system = next((p for p in pools if p.get("mode") == "System"), pools[0] if pools else {})
    taints = list(system.get("nodeTaints") or [])
    default_pool = _pool_common(system)
    # "only_critical_addons_enabled - Enabling this option will taint default node pool with
    # CriticalAddonsOnly=true:NoSchedule taint" (kubernetes_cluster page): the same ARM taint.
    default_pool["only_critical_addons_enabled"] = CRITICAL_ADDONS_TAINT in taints
    default_pool["type"] = system.get("type")
    access = inputs.get("apiServerAccessProfile") or {}
    net = inputs.get("networkProfile") or {}
    addons = inputs.get("addonProfiles") or {}
    oms = addons.get("omsagent") or {}
    kv = addons.get("azureKeyvaultSecretsProvider") or {}
    aad = inputs.get("aadProfile") or {}
    auto = inputs.get("autoUpgradeProfile") or {}
    sec = inputs.get("securityProfile") or {}
    return _drop_none(
        {
            "name": inputs.get("resourceName") or inputs.get("name"),
            "location": inputs.get("location"),
            "dns_prefix": inputs.get("dnsPrefix"),
            "kubernetes_version": inputs.get("kubernetesVersion"),
            "sku_tier": (inputs.get("sku") or {}).get("tier"),
            "default_node_pool": [default_pool],
            "private_cluster_enabled": bool(access.get("enablePrivateCluster")),
            "api_server_access_profile": _block(_drop_none({"authorized_ip_ranges": access.get("authorizedIPRanges")})),
            "role_based_access_control_enabled": inputs.get("enableRBAC"),
            "local_account_disabled": inputs.get("disableLocalAccounts"),
            "azure_active_directory_role_based_access_control": _block(
                _drop_none(
                    {
                        "azure_rbac_enabled": aad.get("enableAzureRBAC"),
                        "admin_group_object_ids": aad.get("adminGroupObjectIDs"),
                        "tenant_id": aad.get("tenantID"),
                    }
                )
                if aad
                else None
            ),
            "network_profile": _block(
                _drop_none(
                    {
                        "network_plugin": net.get("networkPlugin"),
                        "network_plugin_mode": net.get("networkPluginMode"),
                        "network_policy": net.get("networkPolicy"),
                        "network_data_plane": net.get("networkDataplane"),
                        "pod_cidr": net.get("podCidr"),
                        "service_cidr": net.get("serviceCidr"),
                        "dns_service_ip": net.get("dnsServiceIP"),
                        "outbound_type": net.get("outboundType"),
                    }
                )
            ),
            # addonProfiles.omsagent is what azurerm's oms_agent block writes.
            "oms_agent": _block(
                {"log_analytics_workspace_id": (oms.get("config") or {}).get("logAnalyticsWorkspaceResourceID")}
                if oms.get("enabled")
                else None
            ),
            "azure_policy_enabled": bool((addons.get("azurepolicy") or {}).get("enabled")),
            "key_vault_secrets_provider": _block(
                {"secret_rotation_enabled": (kv.get("config") or {}).get("enableSecretRotation") == "true"}
                if kv.get("enabled")
                else None
            ),
            # Omitted, azurerm writes "none" (kubernetes_cluster page, automatic_upgrade_channel).
            "automatic_upgrade_channel": auto.get("upgradeChannel") or "none",
            "node_os_upgrade_channel": auto.get("nodeOSUpgradeChannel"),
            "disk_encryption_set_id": inputs.get("diskEncryptionSetID"),
            "oidc_issuer_enabled": (inputs.get("oidcIssuerProfile") or {}).get("enabled"),
            "workload_identity_enabled": (sec.get("workloadIdentity") or {}).get("enabled"),
        }
    )


def node_pool(inputs: Mapping[str, Any]) -> Values:
    v = _pool_common(inputs)
    v.update(
        _drop_none(
            {
                "mode": inputs.get("mode"),
                "node_taints": inputs.get("nodeTaints"),
                "priority": inputs.get("scaleSetPriority"),
                "capacity_reservation_group_id": inputs.get("capacityReservationGroupID"),
                "gpu_driver": (inputs.get("gpuProfile") or {}).get("driver"),
            }
        )
    )
    return v


def storage_account(inputs: Mapping[str, Any], blob: Mapping[str, Any] | None) -> Values:
    tier, _, replication = str((inputs.get("sku") or {}).get("name", "")).partition("_")
    rules = inputs.get("networkRuleSet") or {}
    blob = blob or {}
    retention = blob.get("deleteRetentionPolicy") or {}
    containers = blob.get("containerDeleteRetentionPolicy") or {}
    return _drop_none(
        {
            "name": inputs.get("accountName"),
            "location": inputs.get("location"),
            "account_kind": inputs.get("kind"),
            "account_tier": tier or None,
            "account_replication_type": replication or None,
            "https_traffic_only_enabled": inputs.get("enableHttpsTrafficOnly"),
            "min_tls_version": inputs.get("minimumTlsVersion"),
            "allow_nested_items_to_be_public": inputs.get("allowBlobPublicAccess"),
            "shared_access_key_enabled": inputs.get("allowSharedKeyAccess"),
            "public_network_access_enabled": inputs.get("publicNetworkAccess", "Enabled") != "Disabled",
            "local_user_enabled": inputs.get("isLocalUserEnabled"),
            "network_rules": _block(
                _drop_none(
                    {
                        "default_action": rules.get("defaultAction"),
                        "bypass": [b.strip() for b in str(rules.get("bypass", "")).split(",") if b.strip()],
                        "virtual_network_subnet_ids": [
                            r.get("virtualNetworkResourceId") for r in rules.get("virtualNetworkRules") or []
                        ],
                        "ip_rules": [r.get("iPAddressOrRange") for r in rules.get("ipRules") or []],
                    }
                )
                if rules
                else None
            ),
            # blobServices/default, azurerm's blob_properties block.
            "blob_properties": _block(
                _drop_none(
                    {
                        "versioning_enabled": blob.get("isVersioningEnabled"),
                        "delete_retention_policy": _block(
                            {"days": retention.get("days")} if retention.get("enabled") else None
                        ),
                        "container_delete_retention_policy": _block(
                            {"days": containers.get("days")} if containers.get("enabled") else None
                        ),
                    }
                )
                if blob
                else None
            ),
        }
    )


def storage_container(inputs: Mapping[str, Any]) -> Values:
    access = {"None": "private", "Blob": "blob", "Container": "container"}
    return {
        "name": inputs.get("containerName"),
        "storage_account_name": inputs.get("accountName"),
        "container_access_type": access.get(str(inputs.get("publicAccess", "None")), "private"),
    }


def _rule(r: Mapping[str, Any]) -> Values:
    return _drop_none(
        {
            "name": r.get("name"),
            "priority": int(r["priority"]) if r.get("priority") is not None else None,
            "direction": r.get("direction"),
            "access": r.get("access"),
            "protocol": {"*": "*"}.get(str(r.get("protocol")), r.get("protocol")),
            "source_port_range": r.get("sourcePortRange"),
            "destination_port_range": r.get("destinationPortRange"),
            "destination_port_ranges": r.get("destinationPortRanges"),
            "source_address_prefix": r.get("sourceAddressPrefix"),
            "destination_address_prefix": r.get("destinationAddressPrefix"),
        }
    )


def network_security_group(inputs: Mapping[str, Any]) -> Values:
    return {
        "name": inputs.get("name"),
        "location": inputs.get("location"),
        "security_rule": [_rule(r) for r in inputs.get("securityRules") or []],
    }


def subnet(inputs: Mapping[str, Any]) -> Values:
    return _drop_none(
        {
            "name": inputs.get("name"),
            "virtual_network_name": inputs.get("virtualNetworkName"),
            "address_prefixes": [inputs["addressPrefix"]] if inputs.get("addressPrefix") else None,
            "service_endpoints": [e.get("service") for e in inputs.get("serviceEndpoints") or []],
            "default_outbound_access_enabled": inputs.get("defaultOutboundAccess"),
        }
    )


def _plain(names: Mapping[str, str]) -> Callable[[Mapping[str, Any]], Values]:
    def tr(inputs: Mapping[str, Any]) -> Values:
        return _drop_none({tf: inputs.get(arm) for arm, tf in names.items()})

    return tr


# azure-native type token -> (azurerm resource type, translation).
SIMPLE: dict[str, tuple[str, Callable[[Mapping[str, Any]], Values]]] = {
    "azure-native:containerservice:ManagedCluster": ("azurerm_kubernetes_cluster", kubernetes_cluster),
    "azure-native:containerservice:AgentPool": ("azurerm_kubernetes_cluster_node_pool", node_pool),
    "azure-native:storage:BlobContainer": ("azurerm_storage_container", storage_container),
    "azure-native:network:NetworkSecurityGroup": ("azurerm_network_security_group", network_security_group),
    "azure-native:network:Subnet": ("azurerm_subnet", subnet),
    "azure-native:resources:ResourceGroup": (
        "azurerm_resource_group",
        _plain({"name": "name", "location": "location"}),
    ),
    "azure-native:network:VirtualNetwork": (
        "azurerm_virtual_network",
        lambda i: {
            "name": i.get("name"),
            "address_space": list((i.get("addressSpace") or {}).get("addressPrefixes") or []),
        },
    ),
    "azure-native:network:PublicIPAddress": (
        "azurerm_public_ip",
        lambda i: _drop_none(
            {
                "name": i.get("name"),
                "allocation_method": i.get("publicIPAllocationMethod"),
                "sku": (i.get("sku") or {}).get("name"),
                "zones": i.get("zones"),
            }
        ),
    ),
    "azure-native:network:NatGateway": (
        "azurerm_nat_gateway",
        lambda i: _drop_none(
            {"name": i.get("name"), "sku_name": (i.get("sku") or {}).get("name"), "zones": i.get("zones")}
        ),
    ),
    "azure-native:storagecache:AmlFilesystem": (
        "azurerm_managed_lustre_file_system",
        lambda i: _drop_none(
            {
                "name": i.get("name"),
                "sku_name": (i.get("sku") or {}).get("name"),
                "storage_capacity_in_tb": i.get("storageCapacityTiB"),
                "subnet_id": i.get("filesystemSubnet"),
                "zones": i.get("zones"),
            }
        ),
    ),
    "azure-native:managedidentity:UserAssignedIdentity": ("azurerm_user_assigned_identity", _plain({"name": "name"})),
    "azure-native:authorization:RoleAssignment": (
        "azurerm_role_assignment",
        _plain({"scope": "scope", "roleDefinitionId": "role_definition_id", "principalId": "principal_id"}),
    ),
    # Checkov (the pin in requirements-checkov.txt) has no check of azurerm_dashboard_grafana; it is
    # translated so a future check judges it, with the attributes azurerm names the same settings.
    "azure-native:dashboard:Grafana": (
        "azurerm_dashboard_grafana",
        lambda i: _drop_none(
            {
                "name": i.get("workspaceName"),
                "sku": (i.get("sku") or {}).get("name"),
                "api_key_enabled": ((i.get("properties") or {}).get("apiKey") == "Enabled"),
                "public_network_access_enabled": ((i.get("properties") or {}).get("publicNetworkAccess") != "Disabled"),
                "identity": [{"type": (i.get("identity") or {}).get("type")}],
                "azure_monitor_workspace_integrations": [
                    {"resource_id": w.get("azureMonitorWorkspaceResourceId")}
                    for w in ((i.get("properties") or {}).get("grafanaIntegrations") or {}).get(
                        "azureMonitorWorkspaceIntegrations"
                    )
                    or []
                ],
            }
        ),
    ),
    "azure-native:operationalinsights:Workspace": (
        "azurerm_log_analytics_workspace",
        lambda i: _drop_none(
            {
                "name": i.get("workspaceName") or i.get("name"),
                "sku": (i.get("sku") or {}).get("name"),
                "retention_in_days": int(i["retentionInDays"]) if i.get("retentionInDays") is not None else None,
            }
        ),
    ),
    "azure-native:monitor:DiagnosticSetting": (
        "azurerm_monitor_diagnostic_setting",
        lambda i: _drop_none(
            {
                "name": i.get("name"),
                "target_resource_id": i.get("resourceUri"),
                "log_analytics_workspace_id": i.get("workspaceId"),
                "enabled_log": [
                    _drop_none({"category": lg.get("category"), "category_group": lg.get("categoryGroup")})
                    for lg in i.get("logs") or []
                    if lg.get("enabled")
                ],
            }
        ),
    ),
}
SIMPLE.update(COMPUTE)  # the Slurm stack's VMs, scale set, NIC and Bastion (checkov_compute.py)
BLOB_SERVICE = "azure-native:storage:BlobServiceProperties"
STORAGE_ACCOUNT = "azure-native:storage:StorageAccount"


def unmapped(runs: Iterable[OfflineRun]) -> set[str]:
    """The azure-native resource types the runs declare that the translation does not know."""
    known = set(SIMPLE) | {BLOB_SERVICE, STORAGE_ACCOUNT}
    return {r.type for run in runs for r in run.resources if r.type.startswith("azure-native:")} - known


def _address(tf: str, name: str) -> str:
    return f"{tf}.{re.sub(r'[^A-Za-z0-9_]', '_', name)}"


def _strings(v: Any) -> Iterable[str]:
    if isinstance(v, str):
        yield v
    elif isinstance(v, Mapping):
        for x in v.values():
            yield from _strings(x)
    elif isinstance(v, list):
        for x in v:
            yield from _strings(x)


def terraform_plan(runs: Iterable[OfflineRun]) -> dict[str, Any]:
    """One plan holding every run's translated resources (addresses carry the stack's resource names)."""
    planned: list[Values] = []
    configured: list[Values] = []

    def add(tf: str, name: str, values: Values, refs: Mapping[str, str]) -> str:
        address = _address(tf, name)
        planned.append(
            {"address": address, "mode": "managed", "type": tf, "name": address.split(".", 1)[1], "values": values}
        )
        configured.append(
            {
                "address": address,
                "mode": "managed",
                "type": tf,
                "name": address.split(".", 1)[1],
                "expressions": {attr: {"references": [f"{target}.id", target]} for attr, target in refs.items()},
            }
        )
        return address

    for run in runs:
        # Mock ids (components/azure/mocks.py: "<name>-id") and names -> the translated address, so
        # an input that names another resource becomes a reference, as in a Terraform configuration.
        address_of: dict[str, str] = {}
        for res in run.resources:
            tf = SIMPLE.get(res.type, ("azurerm_storage_account",) if res.type == STORAGE_ACCOUNT else (None,))[0]
            if tf is None:
                continue
            address_of[res.id or f"{res.name}-id"] = _address(tf, res.name)
            if res.type == STORAGE_ACCOUNT and res.inputs.get("accountName"):
                address_of[res.inputs["accountName"]] = _address(tf, res.name)
        blob_of = {r.inputs.get("accountName"): r.inputs for r in run.of_type(BLOB_SERVICE)}

        def refs(values: Mapping[str, Any], own: str) -> dict[str, str]:
            out = {}
            for attr, v in values.items():
                for s in _strings(v):
                    if s in address_of and address_of[s] != own:
                        out[attr] = address_of[s]
                        break
            return out

        for res in run.resources:
            if res.type == STORAGE_ACCOUNT:
                values = storage_account(res.inputs, blob_of.get(res.inputs.get("accountName")))
                own = _address("azurerm_storage_account", res.name)
                add("azurerm_storage_account", res.name, values, refs(values, own))
                continue
            if res.type not in SIMPLE:
                continue
            tf, tr = SIMPLE[res.type]
            values = tr(res.inputs)
            own = _address(tf, res.name)
            add(tf, res.name, values, refs(values, own))
            if res.type == "azure-native:network:Subnet":
                # azurerm writes a subnet's NSG and NAT gateway through association resources.
                for key, assoc, attr in (
                    (
                        "networkSecurityGroup",
                        "azurerm_subnet_network_security_group_association",
                        "network_security_group_id",
                    ),
                    ("natGateway", "azurerm_subnet_nat_gateway_association", "nat_gateway_id"),
                ):
                    target = (res.inputs.get(key) or {}).get("id")
                    if target in address_of:
                        add(
                            assoc,
                            f"{res.name}-{key}",
                            {attr: target, "subnet_id": res.id},
                            {"subnet_id": own, attr: address_of[target]},
                        )
    return {
        "format_version": "1.2",
        "terraform_version": "1.9.0",
        "planned_values": {"root_module": {"resources": planned}},
        "configuration": {"root_module": {"resources": configured}},
    }


def scan(checkov: Path, plan: Mapping[str, Any], tmp: Path) -> dict[str, Any]:
    """Checkov's terraform_plan framework over ``plan``; its JSON report."""
    path = tmp / "plan.json"
    path.write_text(json.dumps(plan))
    proc = subprocess.run(
        [str(checkov), "-f", str(path), "--framework", "terraform_plan", "-o", "json", "--compact"],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
        cwd=tmp,
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]  # 1: some check failed
    out = json.loads(proc.stdout) if proc.stdout.strip() else {}
    report = out[0] if isinstance(out, list) else out
    report.setdefault("results", {}).setdefault("failed_checks", [])
    report["results"].setdefault("passed_checks", [])
    return dict(report)


def results(report: Mapping[str, Any], kind: str) -> set[tuple[str, str]]:
    """(check id, resource address) of Checkov's Azure checks, ``kind`` passed_checks or failed_checks."""
    return {
        (c["check_id"], c["resource"])
        for c in report["results"][kind]
        if c["check_id"].startswith(("CKV_AZURE_", "CKV2_AZURE_"))
    }


def summary(report: Mapping[str, Any], stacks: Iterable[str]) -> list[str]:
    """Per stack, the Azure checks that failed (each with the resources) and the count that passed."""
    lines = []
    for stack in stacks:
        # A bundled Azure stack's cluster is named as the stack without its cloud (azure-h100-aks ->
        # h100-aks), and every resource name starts with it.
        prefix = stack.removeprefix("azure-") + "-"
        mine = lambda rows: sorted((c, r) for c, r in rows if r.split(".", 1)[1].startswith(prefix.replace("-", "_")))  # noqa: E731
        failed, passed = mine(results(report, "failed_checks")), mine(results(report, "passed_checks"))
        ids = sorted({c for c, _ in failed}, key=lambda c: (c.startswith("CKV2"), int(c.rsplit("_", 1)[1])))
        lines.append(f"{stack}: {len(passed)} passed, {len(failed)} failed ({len(ids)} checks)")
        for cid in ids:
            where = sorted(r for c, r in failed if c == cid)
            lines.append(f"  FAIL {cid:<14} {', '.join(where)}")
    return lines


def main() -> int:
    import tempfile

    from tests.checkov_venv import checkov_exe
    from tests.components.aws._offline import run

    runs = [run(stack)[0] for stack in AZURE_STACKS]
    print("unmapped:", sorted(unmapped(runs)))
    plan = terraform_plan(runs)
    with tempfile.TemporaryDirectory() as tmp:
        report = scan(checkov_exe(), plan, Path(tmp))
    print("\n".join(summary(report, AZURE_STACKS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["AZURE_STACKS", "Recorded", "results", "scan", "summary", "terraform_plan", "unmapped"]
