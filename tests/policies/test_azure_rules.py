"""The Azure rules (policies/azure.py, and lustre-protected on AMLFS), through their CrossGuard
policies, on resources declared with pulumi-azure-native's typed classes: a pass and a fail each."""

from __future__ import annotations

import pytest
from pulumi_policy import ResourceValidationPolicy

from gpu_cluster.policies.crossguard import policies
from gpu_cluster.policies.rules import rule
from tests.policies.conftest import Reports, resource_args
from tests.policies.sdk_program import Recording

POLICIES = {p.name: p for p in policies() if isinstance(p, ResourceValidationPolicy)}


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
    ("aks-network-policy", "aks-secure", None),
    ("aks-network-policy", "aks-bare", "networkPolicy is 'none'"),
    ("aks-entra-id-only", "aks-secure", None),
    ("aks-entra-id-only", "aks-bare", "aadProfile must be managed with enableAzureRBAC"),
    ("aks-entra-id-only", "aks-ok", "disableLocalAccounts is not true"),
    ("aks-monitoring", "aks-secure", None),
    ("aks-monitoring", "aks-bare", "addonProfiles.omsagent is not enabled"),
    ("aks-system-pool-critical-only", "aks-secure", None),
    ("aks-system-pool-critical-only", "aks-bare", "lacks the CriticalAddonsOnly=true:NoSchedule taint"),
    ("aks-encryption-at-host", "aks-secure", None),
    ("aks-encryption-at-host", "pool-nd", None),  # an exempt ND size, with its reason in the rule
    ("aks-encryption-at-host", "aks-bare", "enableEncryptionAtHost is not true"),
    ("aks-encryption-at-host", "pool-cpu-plain", "(Standard_D4ds_v5): enableEncryptionAtHost is not true"),
    ("azure-vm-ssh-keys-only", "vm-ok", None),
    ("azure-vm-ssh-keys-only", "vmss-ok", None),
    ("azure-vm-ssh-keys-only", "vm-password", "disablePasswordAuthentication is False, must be True"),
    ("azure-vm-ssh-keys-only", "vmss-public", "ssh.publicKeys is empty"),
    ("azure-vm-no-extensions", "vm-ok", None),
    ("azure-vm-no-extensions", "vm-password", "allowExtensionOperations is None, must be False"),
    ("azure-node-no-public-ip", "nic-ok", None),
    ("azure-node-no-public-ip", "vmss-ok", None),
    ("azure-node-no-public-ip", "nic-public", "ipConfigurations[0] (ipconfig) has a public IP address"),
    ("azure-node-no-public-ip", "vmss-public", "scale set NIC eth0 (ipconfig) gives each instance a public IP"),
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
