"""Azure rules: network security groups, the checkpoint storage account, AKS's API, nodes, network
policy, identity, logging and pools.

Each mirrors the Checkov checks named in its ``ids`` (bridgecrewio/checkov at 03d5fda,
``checkov/arm/checks/resource`` and ``checkov/terraform/checks/**/azure``; the mapping is
../shared/reference/AZURE.md §6). Checkov has no Pulumi framework, so the ids anchor the rules;
Checkov itself runs over the plans translated to azurerm (tests/components/azure/checkov_plan.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpu_cluster.policies.core import (
    Props,
    RuleContext,
    StackFinding,
    StackResource,
    _get,
    _is_open,
    _is_true,
    _items,
    _refers_to,
    _strings,
    resource_rule,
    stack_rule,
)

AZURE_NSG = "azure-native:network:NetworkSecurityGroup"
AZURE_SECURITY_RULE = "azure-native:network:SecurityRule"
AZURE_STORAGE_ACCOUNT = "azure-native:storage:StorageAccount"
AZURE_AKS = "azure-native:containerservice:ManagedCluster"
AZURE_AKS_POOL = "azure-native:containerservice:AgentPool"
AZURE_LUSTRE = "azure-native:storagecache:AmlFilesystem"

# Source prefixes that mean "anyone": the Internet service tag, Any/*, and any /0.
_ANYONE = ("*", "internet", "any")


def _from_anyone(rule: Props) -> list[str]:
    sources = [*_strings(rule.get("sourceAddressPrefix")), *_strings(rule.get("sourceAddressPrefixes"))]
    return [s for s in sources if s.strip().lower() in _ANYONE or _is_open(s)]


@resource_rule(
    name="azure-nsg-no-internet-ingress",
    description="No network security group rule allows inbound traffic from the internet (Internet, *, a /0): "
    "not SSH, RDP, HTTP or UDP, nor anything else",
    enforcement="mandatory",
    ids=("CKV_AZURE_9", "CKV_AZURE_10", "CKV_AZURE_77", "CKV_AZURE_160"),
    anchor="Checkov CKV_AZURE_9/10/77/160",
    resource_types=(AZURE_NSG, AZURE_SECURITY_RULE),
)
def check_nsg_ingress(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    rules = _items(props.get("securityRules")) if resource_type == AZURE_NSG else [props]
    out = []
    for i, r in enumerate(rules):
        if str(r.get("access", "")).lower() == "allow" and str(r.get("direction", "")).lower() == "inbound":
            anyone = _from_anyone(r)
            if anyone:
                where = (
                    f"securityRules[{i}] ({r.get('name')})"
                    if resource_type == AZURE_NSG
                    else f"security rule {r.get('securityRuleName') or r.get('name') or '(unnamed)'}"
                )
                out.append(f"{where} allows inbound from {', '.join(anyone)}")
    return out


@resource_rule(
    name="azure-storage-private",
    description="Storage accounts take HTTPS only at TLS 1.2, allow no public blobs and no shared keys, and deny "
    "network access by default",
    enforcement="mandatory",
    ids=("CKV_AZURE_3", "CKV_AZURE_44", "CKV_AZURE_190", "CKV_AZURE_35", "CKV2_AZURE_40"),
    anchor="Checkov CKV_AZURE_3/44/190/35, CKV2_AZURE_40",
    resource_types=(AZURE_STORAGE_ACCOUNT,),
)
def check_storage_private(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    out = []
    if props.get("enableHttpsTrafficOnly") is False:
        out.append("enableHttpsTrafficOnly is False")
    if props.get("minimumTlsVersion") != "TLS1_2":
        out.append(f"minimumTlsVersion is {props.get('minimumTlsVersion')!r}, allowed 'TLS1_2'")
    if props.get("allowBlobPublicAccess") is not False:
        out.append(f"allowBlobPublicAccess is {props.get('allowBlobPublicAccess')!r}, must be False")
    if props.get("allowSharedKeyAccess") is not False:
        out.append(f"allowSharedKeyAccess is {props.get('allowSharedKeyAccess')!r}, must be False")
    action = _get(props, "networkRuleSet", "defaultAction")
    if action != "Deny":
        out.append(f"networkRuleSet.defaultAction is {action!r}, must be 'Deny'")
    return out


@resource_rule(
    name="aks-api-restricted",
    description="The AKS API is private or admits only authorized ranges, none of them the whole internet, "
    "and only the config's deployer_cidrs",
    enforcement="mandatory",
    ids=("CKV_AZURE_6", "CKV_AZURE_115"),
    anchor="Checkov CKV_AZURE_6/115",
    resource_types=(AZURE_AKS,),
)
def check_aks_api(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    access = props.get("apiServerAccessProfile") or {}
    if _is_true(access.get("enablePrivateCluster")):
        return []
    ranges = _strings(access.get("authorizedIPRanges"))
    if not ranges:
        return ["apiServerAccessProfile.authorizedIPRanges is empty on a public API: anyone may reach it"]
    out = [f"apiServerAccessProfile.authorizedIPRanges admits {r}" for r in ranges if _is_open(r)]
    if ctx.api_access_cidrs is not None:
        # Besides the deployers: the cluster's own egress addresses, one host each, which the nodes
        # come from (api-server-authorized-ip-ranges.md:45). Under `pulumi preview` a new NAT address
        # is not known yet (the value is unknown there, so it is not listed); on a later update the
        # pack config's egressAddresses names it.
        own = {f"{a}/32" for a in ctx.egress_addresses or ()}
        extra = [r for r in ranges if r not in ctx.api_access_cidrs and not _is_open(r) and r not in own]
        if extra:
            out.append(
                f"apiServerAccessProfile.authorizedIPRanges {extra} are not among the config's deployer_cidrs "
                f"{list(ctx.api_access_cidrs)}"
            )
    return out


@resource_rule(
    name="aks-no-node-public-ip",
    description="AKS node pools give their nodes no public address",
    enforcement="mandatory",
    ids=("CKV_AZURE_143",),
    anchor="Checkov CKV_AZURE_143",
    resource_types=(AZURE_AKS, AZURE_AKS_POOL),
)
def check_aks_node_ip(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    pools = _items(props.get("agentPoolProfiles")) if resource_type == AZURE_AKS else [props]
    return [
        f"node pool {p.get('name') or p.get('agentPoolName')!r}: enableNodePublicIP is true"
        for p in pools
        if _is_true(p.get("enableNodePublicIP"))
    ]


# ---------------------------------------------------------------------------------------------
# Issue 35: what Checkov's Azure checks ask of the cluster and the checkpoint account (the mapping is
# checkov/terraform/checks/resource/azure/AKS*.py and graph_checks/azure/*.json at Checkov 3.3.30,
# read 2026-12; tests/components/azure/checkov_plan.py runs Checkov itself over the plans).

AZURE_BLOB_SERVICE = "azure-native:storage:BlobServiceProperties"
AZURE_DIAGNOSTIC_SETTING = "azure-native:monitor:DiagnosticSetting"
# The system pool's taint that keeps everything but critical add-ons off it (AKS use-system-pools.md:70).
CRITICAL_ADDONS_TAINT = "CriticalAddonsOnly=true:NoSchedule"
# Network policy engines AKS offers (use-network-policies.md:40-46); "none" enforces nothing.
NETWORK_POLICY_ENGINES = ("cilium", "azure", "calico")
# The audit categories of AKS's control-plane logs (monitor-aks.md:137): either keeps every write.
AKS_AUDIT_CATEGORIES = ("kube-audit", "kube-audit-admin")
BLOB_ACCESS_CATEGORIES = ("StorageRead", "StorageWrite", "StorageDelete")
# Node sizes whose pools may go without encryption at host, each with why (the exception Checkov's
# CKV_AZURE_227 is listed with in policies/checkov-azure-exceptions.yaml): the ND sizes' pages
# list no encryption-at-host support and AKS takes it only where the size's SKU says so.
ENCRYPTION_AT_HOST_EXEMPT = {
    size: "the ND size pages list no encryption-at-host support (AKS enable-host-encryption.md:33: only "
    "sizes whose SKU has EncryptionAtHostSupported)"
    for size in ("Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5", "Standard_ND96isr_MI300X_v5")
}


def _system_pools(props: Props) -> list[Props]:
    pools = _items(props.get("agentPoolProfiles"))
    return [p for p in pools if str(p.get("mode", "")).lower() == "system"] or pools[:1]


@resource_rule(
    name="aks-network-policy",
    description="The AKS cluster runs a network policy engine (Cilium, Azure NPM or Calico), so Kubernetes "
    "NetworkPolicies are enforced",
    enforcement="mandatory",
    ids=("CKV_AZURE_7",),
    anchor="Checkov CKV_AZURE_7",
    resource_types=(AZURE_AKS,),
)
def check_aks_network_policy(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    engine = str(_get(props, "networkProfile", "networkPolicy") or "none").lower()
    if engine in NETWORK_POLICY_ENGINES:
        return []
    return [
        f"networkProfile.networkPolicy is {engine!r}: NetworkPolicies are not enforced "
        f"(allowed: {', '.join(NETWORK_POLICY_ENGINES)})"
    ]


@resource_rule(
    name="aks-entra-id-only",
    description="AKS local accounts are off and access goes through Microsoft Entra ID with Azure RBAC "
    "(local accounts are a non-auditable backdoor, local-accounts.md:16)",
    enforcement="mandatory",
    ids=("CKV_AZURE_141",),
    anchor="Checkov CKV_AZURE_141",
    resource_types=(AZURE_AKS,),
)
def check_aks_entra_id(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    out = []
    if not _is_true(props.get("disableLocalAccounts")):
        out.append("disableLocalAccounts is not true: the cluster's local admin credentials stay available")
    aad = props.get("aadProfile") or {}
    if not (_is_true(aad.get("managed")) and _is_true(aad.get("enableAzureRBAC"))):
        out.append("aadProfile must be managed with enableAzureRBAC (local accounts off needs Entra ID)")
    return out


@resource_rule(
    name="aks-monitoring",
    description="AKS sends container logs and metrics to a Log Analytics workspace (the omsagent add-on, "
    "Container insights)",
    enforcement="mandatory",
    ids=("CKV_AZURE_4",),
    anchor="Checkov CKV_AZURE_4",
    resource_types=(AZURE_AKS,),
)
def check_aks_monitoring(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    oms = _get(props, "addonProfiles", "omsagent") or {}
    if _is_true(oms.get("enabled")) and (oms.get("config") or {}).get("logAnalyticsWorkspaceResourceID"):
        return []
    return ["addonProfiles.omsagent is not enabled with a logAnalyticsWorkspaceResourceID"]


@resource_rule(
    name="aks-system-pool-critical-only",
    description="The AKS system pool is tainted CriticalAddonsOnly=true:NoSchedule, so only critical add-ons run there",
    enforcement="mandatory",
    ids=("CKV_AZURE_232",),
    anchor="Checkov CKV_AZURE_232",
    resource_types=(AZURE_AKS,),
)
def check_aks_system_pool(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    return [
        f"system pool {p.get('name')!r} lacks the {CRITICAL_ADDONS_TAINT} taint"
        for p in _system_pools(props)
        if CRITICAL_ADDONS_TAINT not in _strings(p.get("nodeTaints"))
    ]


@resource_rule(
    name="aks-encryption-at-host",
    description="AKS node pools encrypt temp disks and OS disk caches on the host, except on the sizes "
    "ENCRYPTION_AT_HOST_EXEMPT names with their reason",
    enforcement="mandatory",
    ids=("CKV_AZURE_227",),
    anchor="Checkov CKV_AZURE_227",
    resource_types=(AZURE_AKS, AZURE_AKS_POOL),
)
def check_aks_encryption_at_host(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    pools = _items(props.get("agentPoolProfiles")) if resource_type == AZURE_AKS else [props]
    return [
        f"node pool {p.get('name') or p.get('agentPoolName')!r} ({p.get('vmSize')}): enableEncryptionAtHost is not true"
        for p in pools
        if not _is_true(p.get("enableEncryptionAtHost")) and p.get("vmSize") not in ENCRYPTION_AT_HOST_EXEMPT
    ]


def _account_children(
    resources: Sequence[StackResource], kind: str, account: StackResource, prop: str
) -> list[StackResource]:
    name = account.props.get("accountName")
    aliases = (name,) if isinstance(name, str) else ()
    return [r for r in resources if r.type == kind and _refers_to(r, prop, account, *aliases)]


@stack_rule(
    name="azure-storage-soft-delete",
    description="Every storage account's blob service keeps deleted blobs and containers for a retention period "
    "(soft delete)",
    enforcement="mandatory",
    ids=("CKV2_AZURE_38",),
    anchor="Checkov CKV2_AZURE_38",
)
def check_storage_soft_delete(resources: Sequence[StackResource], ctx: RuleContext) -> list[StackFinding]:
    findings: list[StackFinding] = []
    for acct in (r for r in resources if r.type == AZURE_STORAGE_ACCOUNT):
        services = _account_children(resources, AZURE_BLOB_SERVICE, acct, "accountName")
        if not services:
            findings.append((f"storage account {acct.name!r} has no BlobServiceProperties: no soft delete", acct.urn))
        for svc in services:
            for policy in ("deleteRetentionPolicy", "containerDeleteRetentionPolicy"):
                p = svc.props.get(policy) or {}
                if not (_is_true(p.get("enabled")) and int(p.get("days") or 0) > 0):
                    findings.append((f"{svc.name}: {policy} is not enabled with a number of days", svc.urn))
    return findings


@stack_rule(
    name="azure-audit-logs",
    description="Every AKS cluster sends its control-plane audit log, and every storage account its blob reads, "
    "writes and deletes, to a workspace through a diagnostic setting",
    enforcement="mandatory",
    ids=("CKV_AZURE_4", "CKV2_AZURE_21"),
    anchor="Checkov CKV_AZURE_4, CKV2_AZURE_21 (whose Log Analytics storage-insights form needs the account's "
    "shared key, which azure-storage-private forbids)",
)
def check_azure_audit_logs(resources: Sequence[StackResource], ctx: RuleContext) -> list[StackFinding]:
    settings = [r for r in resources if r.type == AZURE_DIAGNOSTIC_SETTING]

    def categories(target: StackResource, suffix: str = "") -> set[str]:
        out: set[str] = set()
        for s in settings:
            uri = s.props.get("resourceUri")
            mine = (
                (target.urn in s.refs.get("resourceUri", ()))
                if s.refs.get("resourceUri")
                else (isinstance(uri, str) and bool(target.id) and uri == f"{target.id}{suffix}")
            )
            if mine and s.props.get("workspaceId"):
                out |= {str(lg.get("category")) for lg in _items(s.props.get("logs")) if _is_true(lg.get("enabled"))}
        return out

    findings: list[StackFinding] = []
    for aks in (r for r in resources if r.type == AZURE_AKS):
        if not categories(aks) & set(AKS_AUDIT_CATEGORIES):
            findings.append(
                (
                    f"AKS cluster {aks.name!r} sends no audit log ({' or '.join(AKS_AUDIT_CATEGORIES)}) to a workspace",
                    aks.urn,
                )
            )
    for acct in (r for r in resources if r.type == AZURE_STORAGE_ACCOUNT):
        missing = set(BLOB_ACCESS_CATEGORIES) - categories(acct, "/blobServices/default")
        if missing:
            findings.append(
                (
                    f"storage account {acct.name!r}: its blob service sends no {', '.join(sorted(missing))} log to a workspace",
                    acct.urn,
                )
            )
    return findings
