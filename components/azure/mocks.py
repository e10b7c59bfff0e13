"""Offline answers for the Azure program (see components/engine.py).

INVOKES answers only the functions the program is known to call, in camelCase, shaped like
the provider's answers; anything else fails the offline run. COMPUTED fills what Azure
computes on create (ARM names and ids, the Lustre MGS address, identities' principal ids).
"""

from __future__ import annotations

import hashlib

import base64
from typing import Any, Callable, Mapping

SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
TENANT = "11111111-1111-1111-1111-111111111111"
MOCK_MGS = "10.0.64.4"
# What AKS returns for an Entra ID cluster: a kubelogin exec with its device-code login, the AKS
# server application and the Azure CLI's public client (Azure/kubelogin docs/book/src/concepts/aks.md:
# "a public client 80faf920-1908-4b52-b5ef-a8e7bedfc67a ... to access an AAD resource
# 6dae42f8-4368-4678-94ff-3960e28e3630").
AKS_SERVER_ID = "6dae42f8-4368-4678-94ff-3960e28e3630"
MOCK_KUBECONFIG = f"""apiVersion: v1
kind: Config
clusters:
- name: offline
  cluster: {{server: "https://offline-dns.hcp.eastus.azmk8s.io:443", certificate-authority-data: TU9DSw==}}
contexts:
- name: offline
  context: {{cluster: offline, user: clusterUser_offline}}
current-context: offline
users:
- name: clusterUser_offline
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: kubelogin
      args: [get-token, --environment, AzurePublicCloud, --server-id, {AKS_SERVER_ID},
             --client-id, 80faf920-1908-4b52-b5ef-a8e7bedfc67a, --tenant-id, {TENANT}, --login, devicecode]
"""


def _client_config(args: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "clientId": "offline-client",
        "objectId": "offline-object",
        "subscriptionId": SUBSCRIPTION,
        "tenantId": TENANT,
    }


def _user_credentials(args: Mapping[str, Any]) -> dict[str, Any]:
    for key in ("resourceGroupName", "resourceName"):
        if not args.get(key):
            raise KeyError(f"offline mock: listManagedClusterUserCredentials without {key}")
    # The API returns each kubeconfig base64-encoded; the SDK types it as a string.
    return {"kubeconfigs": [{"name": "clusterUser", "value": base64.b64encode(MOCK_KUBECONFIG.encode()).decode()}]}


INVOKES: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "azure-native:authorization:getClientConfig": _client_config,
    "azure-native:containerservice:listManagedClusterUserCredentials": _user_credentials,
}


def _named(provider: str, key: str | None = None) -> Callable[[str, Mapping[str, Any]], dict[str, Any]]:
    """azure-native auto-names a resource given no name: the logical name plus a suffix."""

    def computed(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        given = inputs.get(key) if key else None
        resolved = given or f"{name}0a1b2c3"
        # No "type" key: on some resources (AgentPool) it is an input the state must keep.
        return {"name": resolved, "azureApiVersion": "mock"}

    return computed


def _lustre(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **_named("Microsoft.StorageCache/amlFilesystems")(name, inputs),
        "clientInfo": {
            "mgsAddress": MOCK_MGS,
            "mountCommand": f"sudo mount -t lustre -o noatime,flock {MOCK_MGS}@tcp:/lustrefs /lustre/lustrefs",
            "lustreVersion": "2.15.7",
            "containerStorageInterface": {},
        },
        "health": {"state": "Available"},
        "throughputProvisionedMBps": float(inputs.get("storageCapacityTiB", 0)) * 125,
    }


def _identity(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **_named("Microsoft.ManagedIdentity/userAssignedIdentities")(name, inputs),
        "principalId": "22222222-2222-2222-2222-222222222222",
        "clientId": "33333333-3333-3333-3333-333333333333",
        "tenantId": TENANT,
    }


def _identities(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The identity block as Azure answers it: the input lists the identities' ids, the response
    maps each id to its principal and client ids."""
    ident = dict(inputs.get("identity") or {})
    ids = ident.get("userAssignedIdentities") or []
    if ids:
        ident["userAssignedIdentities"] = {
            str(i): {
                "principalId": "22222222-2222-2222-2222-222222222222",
                "clientId": "33333333-3333-3333-3333-333333333333",
            }
            for i in ids
        }
    return {"identity": ident} if ident else {}


def _public_ip(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """A static public IP gets its address at creation: one of RFC 5737's documentation range
    203.0.113.0/24 (TEST-NET-3), fixed by the name, so a plan never shows a routable address."""
    last = 1 + sum(name.encode()) % 254
    return {**_named("Microsoft.Network/publicIPAddresses")(name, inputs), "ipAddress": f"203.0.113.{last}"}


def _grafana(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """A Grafana workspace with its system-assigned identity's principal, as ARM answers it."""
    ident = {
        **dict(inputs.get("identity") or {}),
        "principalId": "44444444-4444-4444-4444-444444444444",
        "tenantId": TENANT,
    }
    named = _named("Microsoft.Dashboard/grafana", "workspaceName")(name, inputs)
    # properties.endpoint in the form of the REST reference's Grafana_Get sample (api-version 2024-10-01):
    # https://<workspace>-<16 letters>.<region code>.grafana.azure.com.
    properties = {
        **dict(inputs.get("properties") or {}),
        "endpoint": f"https://{str(named['name']).lower()}-abcdefghijklmnop.wus.grafana.azure.com",
    }
    return {**named, "identity": ident, "properties": properties}


def _endpoint(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """A data collection endpoint with its metrics ingestion URL, in the form Azure answers it
    (``<name>-<suffix>.<region>-1.metrics.ingest.monitor.azure.com``: MicrosoftDocs azure-monitor-docs
    prometheus-remote-write.md at 004a44e, its example URLs)."""
    given = str(inputs.get("dataCollectionEndpointName") or name).lower()
    region = str(inputs.get("location") or "eastus")
    return {
        **_named("Microsoft.Insights/dataCollectionEndpoints", "dataCollectionEndpointName")(name, inputs),
        "metricsIngestion": {"endpoint": f"https://{given}-0a1b.{region}-1.metrics.ingest.monitor.azure.com"},
    }


def _rule(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """A data collection rule with its immutable id (``dcr-`` and 32 hex digits, as the same page's
    examples), fixed by the name."""
    digest = hashlib.sha256(name.encode()).hexdigest()[:32]
    return {
        **_named("Microsoft.Insights/dataCollectionRules", "dataCollectionRuleName")(name, inputs),
        "immutableId": f"dcr-{digest}",
    }


# The issuer's form: https://{region}.oic.prod-aks.azure.com/{tenant_id}/{uuid}
# (azure-aks-docs workload-identity-deploy-cluster.md at 968f31b).
MOCK_OIDC_ISSUER = f"https://eastus.oic.prod-aks.azure.com/{TENANT}/00000000-0000-0000-0000-00000000000a/"
MOCK_PRINCIPAL_ID = "22222222-2222-2222-2222-222222222222"
MOCK_CLIENT_ID = "33333333-3333-3333-3333-333333333333"


def _aks(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **_named("Microsoft.ContainerService/managedClusters", "resourceName")(name, inputs),
        **_identities(inputs),
        "fqdn": f"{inputs.get('dnsPrefix', name)}-offline.hcp.eastus.azmk8s.io",
        "oidcIssuerProfile": {**dict(inputs.get("oidcIssuerProfile") or {}), "issuerURL": MOCK_OIDC_ISSUER},
        "provisioningState": "Succeeded",
    }


COMPUTED: dict[str, Callable[[str, Mapping[str, Any]], dict[str, Any]]] = {
    "azure-native:resources:ResourceGroup": _named("Microsoft.Resources/resourceGroups", "resourceGroupName"),
    "azure-native:network:VirtualNetwork": _named("Microsoft.Network/virtualNetworks", "virtualNetworkName"),
    "azure-native:network:Subnet": _named("Microsoft.Network/virtualNetworks/subnets", "subnetName"),
    "azure-native:network:NetworkSecurityGroup": _named("Microsoft.Network/networkSecurityGroups"),
    "azure-native:network:NatGateway": _named("Microsoft.Network/natGateways"),
    "azure-native:network:PublicIPAddress": _public_ip,
    "azure-native:storagecache:AmlFilesystem": _lustre,
    "azure-native:storage:StorageAccount": _named("Microsoft.Storage/storageAccounts", "accountName"),
    "azure-native:storage:BlobContainer": _named(
        "Microsoft.Storage/storageAccounts/blobServices/containers", "containerName"
    ),
    "azure-native:managedidentity:UserAssignedIdentity": _identity,
    "azure-native:managedidentity:FederatedIdentityCredential": _named(
        "Microsoft.ManagedIdentity/userAssignedIdentities/federatedIdentityCredentials",
        "federatedIdentityCredentialResourceName",
    ),
    "azure-native:containerservice:ManagedCluster": _aks,
    "azure-native:dashboard:Grafana": _grafana,
    "azure-native:containerservice:AgentPool": _named(
        "Microsoft.ContainerService/managedClusters/agentPools", "agentPoolName"
    ),
    "azure-native:operationalinsights:Workspace": _named("Microsoft.OperationalInsights/workspaces", "workspaceName"),
    "azure-native:monitor:DiagnosticSetting": _named("Microsoft.Insights/diagnosticSettings"),
    "azure-native:monitor:DataCollectionRule": _rule,
    "azure-native:monitor:DataCollectionEndpoint": _endpoint,
    "azure-native:monitor:DataCollectionRuleAssociation": _named(
        "Microsoft.Insights/dataCollectionRuleAssociations", "associationName"
    ),
    "azure-native:containerservice:MaintenanceConfiguration": _named(
        "Microsoft.ContainerService/managedClusters/maintenanceConfigurations", "configName"
    ),
    "azure-native:storage:BlobServiceProperties": _named("Microsoft.Storage/storageAccounts/blobServices"),
    # A scale set's user-assigned identities come back keyed by id, as for AKS (components/azure/slurm_metrics.py).
    "azure-native:compute:VirtualMachineScaleSet": lambda name, inputs: {
        **_named("Microsoft.Compute/virtualMachineScaleSets", "vmScaleSetName")(name, inputs),
        **_identities(inputs),
    },
    "azure-native:compute:VirtualMachine": _named("Microsoft.Compute/virtualMachines", "vmName"),
    "azure-native:network:NetworkInterface": _named("Microsoft.Network/networkInterfaces", "networkInterfaceName"),
    "azure-native:network:BastionHost": _named("Microsoft.Network/bastionHosts", "bastionHostName"),
}
