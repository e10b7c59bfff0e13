"""Azure Managed Grafana over the stack's Azure Monitor workspace: where a person looks at the GPU
dashboard on AKS.

What Azure documents for it ("Use Azure Monitor managed service for Prometheus as data source for
Grafana using managed system identity", learn.microsoft.com/azure/azure-monitor/essentials/
prometheus-grafana, read 2026-12-07): the Grafana workspace needs its system managed identity
enabled and the Monitoring Data Reader role on the Azure Monitor workspace; linking the two
(``grafanaIntegrations.azureMonitorWorkspaceIntegrations``) adds the Prometheus data source. The
ARM shape of both, as Microsoft's own template writes them: MicrosoftDocs/azure-monitor-docs
articles/azure-monitor/containers/prometheus-metrics-multiple-workspaces.md at 6ee43cd, a
``Microsoft.Dashboard/grafana`` with ``grafanaIntegrations.azureMonitorWorkspaceIntegrations`` of
``azureMonitorWorkspaceResourceId``, and a role assignment of ``b0d8363b-8ddd-447d-831f-62ca05bff136``
(Monitoring Data Reader) to the Grafana identity's principal, scoped to the workspace. That scope is
the least the data source needs: the identity reads this workspace and nothing else of the
subscription.

pulumi-azure-native 3.29.0 ``dashboard.Grafana`` uses API version 2024-10-01 (its docstring). The
provider also has ``dashboard.Dashboard`` and ``dashboard.DashboardDefinition``
(``Microsoft.Dashboard/dashboards``, 2024-11-01-preview, and ``dashboards/definitions``,
2025-09-01-preview): Azure Monitor's own "dashboards with Grafana", a separate preview resource,
not a dashboard inside this Grafana workspace. No ARM type creates a dashboard inside the
workspace, so the dashboard is put in once the stack is up by ``gpu-cluster dashboards import``
(gpu_cluster/dashboards.py, Grafana's HTTP API with the deployer's Entra token), or by hand
(docs/day2.md): ``az grafana dashboard import --name <grafana> --resource-group <rg>
--definition dashboards/gpu-grafana-aks.json`` (``gpu-grafana-azure-slurm.json`` on Azure Slurm). The deployer is given Grafana Admin on the workspace
for that (built-in role 22926164-76b3-42b3-bc55-97df8dab3e41, the built-in roles table row "Grafana
Admin | Perform all Grafana operations, including the ability to manage data sources, create
dashboards ...", MicrosoftDocs/azure-docs built-in-roles.md, read through find_string 2026-12-07).

The stack's ``dashboard`` output (components/contract.py) is where ``gpu-cluster dashboards import`` goes:
the workspace's ``properties.endpoint``, an https address in the form
``https://<workspace>-<suffix>.<region code>.grafana.azure.com`` (REST API reference, Managed Grafana,
Grafana - Get, api-version 2024-10-01, its sample response, learn.microsoft.com/rest/api/managed-
grafana/grafana/get, read 2026-12-07), and the workspace's ARM id.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_azure_native as azure

from gpu_cluster.components.azure.common import cluster_tags
from gpu_cluster.components.spec import ClusterSpec

# The role ids above.
MONITORING_DATA_READER = "b0d8363b-8ddd-447d-831f-62ca05bff136"
GRAFANA_ADMIN = "22926164-76b3-42b3-bc55-97df8dab3e41"
# The SKU the REST API's own Grafana_Create example uses (Azure/azure-rest-api-specs example, as
# the Microsoft.Dashboard Bicep samples show it: ``sku: {name: 'Standard'}``); Standard is the tier
# Azure Monitor workspace integration is documented with.
SKU = "Standard"


def _principal(identity: azure.dashboard.outputs.ManagedServiceIdentityResponse | None) -> str:
    # The identity is system-assigned above, so Azure always answers its principal.
    if identity is None:
        raise ValueError("Azure Managed Grafana answered no identity for a SystemAssigned workspace")
    return identity.principal_id


class ManagedGrafana(pulumi.ComponentResource):
    """The Grafana workspace linked to the Azure Monitor workspace, and the roles it and the deployer need."""

    grafana: azure.dashboard.Grafana

    def __init__(
        self,
        name: str,
        *,
        spec: ClusterSpec,
        resource_group: pulumi.Input[str],
        workspace_id: pulumi.Input[str],
        subscription_id: pulumi.Input[str],
        deployer: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpu-cluster:metrics:AzureManagedGrafana", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.grafana = azure.dashboard.Grafana(
            f"{name}-workspace",
            workspace_name=spec.name,
            resource_group_name=resource_group,
            location=spec.region,
            sku=azure.dashboard.ResourceSkuArgs(name=SKU),
            # The data source signs in as this identity (the Learn page above).
            identity=azure.dashboard.ManagedServiceIdentityArgs(
                type=azure.dashboard.ManagedServiceIdentityType.SYSTEM_ASSIGNED
            ),
            properties=azure.dashboard.ManagedGrafanaPropertiesArgs(
                grafana_integrations=azure.dashboard.GrafanaIntegrationsArgs(
                    azure_monitor_workspace_integrations=[
                        azure.dashboard.AzureMonitorWorkspaceIntegrationArgs(
                            azure_monitor_workspace_resource_id=workspace_id
                        )
                    ]
                ),
                # No Grafana API keys: people sign in with Entra ID, the data source with the identity.
                api_key=azure.dashboard.ApiKey.DISABLED,
                # Reached from the deployer's browser; a private endpoint would need a network path
                # from every viewer, which the stack does not build. (Checkov at the pinned version
                # has no check of azurerm_dashboard_grafana, so no exception is listed for it.)
                public_network_access=azure.dashboard.PublicNetworkAccess.ENABLED,
            ),
            tags=cluster_tags(spec),
            opts=child,
        )

        def role(
            suffix: str, principal: pulumi.Input[str], role_id: str, scope: pulumi.Input[str], kind: str | None
        ) -> None:
            azure.authorization.RoleAssignment(
                f"{name}-{suffix}",
                principal_id=principal,
                principal_type=kind,
                role_definition_id=pulumi.Output.format(
                    "/subscriptions/{0}/providers/Microsoft.Authorization/roleDefinitions/{1}", subscription_id, role_id
                ),
                scope=scope,
                opts=child,
            )

        principal = self.grafana.identity.apply(_principal)
        role("data-reader-role", principal, MONITORING_DATA_READER, workspace_id, "ServicePrincipal")
        # The deployer may be a person or a service principal: ARM tells.
        role("deployer-grafana-admin", deployer, GRAFANA_ADMIN, self.grafana.id, None)
        self.register_outputs({"grafana": self.grafana.id})

    def dashboard(self) -> dict[str, Any]:
        """The stack's ``dashboard`` output (components/contract.py): this workspace's address and id."""
        return {"kind": "grafana", "url": self.grafana.properties.endpoint, "id": self.grafana.id}
