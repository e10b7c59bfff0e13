"""The Azure rules (policies/azure.py, and lustre-protected on AMLFS), through their CrossGuard
policies, on resources declared with pulumi-azure-native's typed classes: a pass and a fail each."""

from __future__ import annotations

import pulumi
import pulumi_azure_native as azure
import pytest
from pulumi_policy import ResourceValidationPolicy

from policies.crossguard import policies
from policies.rules import rule
from tests.policies.conftest import Reports, resource_args
from tests.policies.sdk_program import Recording, record

POLICIES = {p.name: p for p in policies() if isinstance(p, ResourceValidationPolicy)}


def _rule(name: str, access: str, source: str, port: str = "22") -> azure.network.SecurityRuleArgs:
    return azure.network.SecurityRuleArgs(
        name=name,
        access=access,
        direction="Inbound",
        protocol="Tcp",
        priority=100,
        source_address_prefix=source,
        source_port_range="*",
        destination_address_prefix="*",
        destination_port_range=port,
    )


def azure_program() -> None:
    rg = "rg"
    azure.network.NetworkSecurityGroup(
        "nsg-ok",
        resource_group_name=rg,
        security_rules=[_rule("vnet", "Allow", "10.0.0.0/16"), _rule("deny", "Deny", "Internet")],
    )
    azure.network.NetworkSecurityGroup(
        "nsg-ssh-internet", resource_group_name=rg, security_rules=[_rule("ssh", "Allow", "Internet")]
    )
    azure.network.NetworkSecurityGroup(
        "nsg-rdp-any", resource_group_name=rg, security_rules=[_rule("rdp", "Allow", "*", "3389")]
    )
    azure.network.SecurityRule(
        "rule-open",
        resource_group_name=rg,
        network_security_group_name="n",
        access="Allow",
        direction="Inbound",
        protocol="Udp",
        priority=200,
        source_address_prefix="0.0.0.0/0",
        destination_port_range="*",
    )
    private = dict(
        resource_group_name=rg,
        kind="StorageV2",
        sku=azure.storage.SkuArgs(name="Standard_LRS"),
        enable_https_traffic_only=True,
        minimum_tls_version="TLS1_2",
        allow_blob_public_access=False,
        allow_shared_key_access=False,
        network_rule_set=azure.storage.NetworkRuleSetArgs(default_action=azure.storage.DefaultAction.DENY),
    )
    azure.storage.StorageAccount("acct-ok", **private)  # type: ignore[arg-type]
    azure.storage.StorageAccount(
        "acct-open",
        resource_group_name=rg,
        kind="StorageV2",
        sku=azure.storage.SkuArgs(name="Standard_LRS"),
        allow_blob_public_access=True,
        minimum_tls_version="TLS1_0",
    )
    pool = azure.containerservice.ManagedClusterAgentPoolProfileArgs(
        name="system", mode="System", enable_node_public_ip=False
    )
    azure.containerservice.ManagedCluster(
        "aks-ok",
        resource_group_name=rg,
        agent_pool_profiles=[pool],
        api_server_access_profile=azure.containerservice.ManagedClusterAPIServerAccessProfileArgs(
            authorized_ip_ranges=["203.0.114.7/32"]
        ),
    )
    azure.containerservice.ManagedCluster(
        "aks-private",
        resource_group_name=rg,
        agent_pool_profiles=[pool],
        api_server_access_profile=azure.containerservice.ManagedClusterAPIServerAccessProfileArgs(
            enable_private_cluster=True
        ),
    )
    azure.containerservice.ManagedCluster(
        "aks-open",
        resource_group_name=rg,
        agent_pool_profiles=[
            azure.containerservice.ManagedClusterAgentPoolProfileArgs(name="system", enable_node_public_ip=True)
        ],
        api_server_access_profile=azure.containerservice.ManagedClusterAPIServerAccessProfileArgs(
            authorized_ip_ranges=["0.0.0.0/0"]
        ),
    )
    azure.containerservice.ManagedCluster("aks-no-ranges", resource_group_name=rg, agent_pool_profiles=[pool])
    azure.containerservice.AgentPool("pool-ok", resource_group_name=rg, resource_name_="c", enable_node_public_ip=False)
    azure.containerservice.AgentPool(
        "pool-public", resource_group_name=rg, resource_name_="c", enable_node_public_ip=True
    )
    lustre = dict(
        resource_group_name=rg,
        filesystem_subnet="s",
        storage_capacity_ti_b=16,
        maintenance_window=azure.storagecache.AmlFilesystemMaintenanceWindowArgs(
            day_of_week=azure.storagecache.MaintenanceDayOfWeekType.SATURDAY, time_of_day_utc="23:00"
        ),
    )
    azure.storagecache.AmlFilesystem("amlfs-ok", opts=pulumi.ResourceOptions(protect=True), **lustre)  # type: ignore[arg-type]
    azure.storagecache.AmlFilesystem("amlfs-bad", **lustre)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def azure_rec() -> Recording:
    return record(azure_program)


# (rule, resource[@deployer], expected fragment of a message, or None for a pass); "@deployer" runs
# the rule under a pack config whose deployer_cidrs (apiAccessCidrs) are that deployer's.
AZURE_CASES: list[tuple[str, str, str | None]] = [
    ("azure-nsg-no-internet-ingress", "nsg-ok", None),
    ("azure-nsg-no-internet-ingress", "nsg-ssh-internet", "securityRules[0] (ssh) allows inbound from Internet"),
    ("azure-nsg-no-internet-ingress", "nsg-rdp-any", "allows inbound from *"),
    ("azure-nsg-no-internet-ingress", "rule-open", "allows inbound from 0.0.0.0/0"),
    ("azure-storage-private", "acct-ok", None),
    ("azure-storage-private", "acct-open", "allowBlobPublicAccess is True"),
    ("azure-storage-private", "acct-open", "minimumTlsVersion is 'TLS1_0'"),
    ("azure-storage-private", "acct-open", "networkRuleSet.defaultAction is None"),
    ("aks-api-restricted", "aks-ok", None),
    ("aks-api-restricted", "aks-private", None),
    ("aks-api-restricted", "aks-open", "admits 0.0.0.0/0"),
    ("aks-api-restricted", "aks-no-ranges", "authorizedIPRanges is empty"),
    ("aks-api-restricted", "aks-ok@other-deployer", "not among the config's deployer_cidrs"),
    ("aks-api-restricted", "aks-ok@this-deployer", None),
    ("aks-no-node-public-ip", "aks-ok", None),
    ("aks-no-node-public-ip", "pool-ok", None),
    ("aks-no-node-public-ip", "aks-open", "node pool 'system': enableNodePublicIP is true"),
    ("aks-no-node-public-ip", "pool-public", "enableNodePublicIP is true"),
    ("lustre-protected", "amlfs-ok", None),
    ("lustre-protected", "amlfs-bad", "not protected"),
]


@pytest.mark.parametrize(("name", "resource", "expected"), AZURE_CASES, ids=[f"{c[0]}:{c[1]}" for c in AZURE_CASES])
def test_azure_rule(azure_rec: Recording, name: str, resource: str, expected: str | None) -> None:
    resource, _, deployer = resource.partition("@")
    config = (
        {"apiAccessCidrs": [{"other-deployer": "198.51.100.9/32", "this-deployer": "203.0.114.7/32"}[deployer]]}
        if deployer
        else None
    )
    reports = Reports()
    assert POLICIES[name].validate(resource_args(azure_rec.get(resource), config), reports) is None
    if expected is None:
        assert reports.messages == []
    else:
        assert any(expected in m for m in reports.messages), reports.messages
        for check_id in rule(name).ids:
            assert all(check_id in m for m in reports.messages)
