"""Azure rules: network security groups, the checkpoint storage account, AKS's API and nodes.

Each mirrors the Checkov checks named in its ``ids`` (bridgecrewio/checkov at 03d5fda,
``checkov/arm/checks/resource`` and ``checkov/terraform/checks/**/azure``; the mapping is
../shared/reference/AZURE.md §6). Checkov has no Pulumi framework, so the ids anchor the rules,
they are not run.
"""

from __future__ import annotations

from policies.core import Props, RuleContext, _get, _is_open, _is_true, _items, _strings, resource_rule

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
