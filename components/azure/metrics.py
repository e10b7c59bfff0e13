"""GPU metrics on AKS: Azure Monitor managed service for Prometheus, the store and the path.

What AKS documents for GPU metrics ("Monitor GPU metrics from NVIDIA DCGM exporter with Azure
Managed Prometheus", MicrosoftDocs/azure-aks-docs articles/aks/monitor-gpu-metrics.md at 00435f9):
a DCGM exporter on the GPU nodes, Azure Managed Prometheus on the cluster, and a scrape of the
exporter. The exporter here is the GPU Operator's own (components/k8s/aks.py deploys it with the
operator, on every GPU node; the operator's DaemonSet tolerates the pool's taint through
``daemonsets.tolerations``), so nothing of ours is scheduled for it.

The store and the path, as Azure's own onboarding template creates them (Azure/prometheus-collector
AddonBicepTemplate/FullAzureMonitorMetricsProfile.bicep at 4729fae, with
nested_azuremonitormetrics_dcra_clusterResourceId.bicep at 2c87103 and
nested_azuremonitormetrics_profile_clusterResourceId.bicep at 14922b9):

* an Azure Monitor workspace, where the metrics are kept: up to 18 months, priced by ingestion
  and query with no storage charge (learn.microsoft.com/azure/azure-monitor/metrics/
  prometheus-metrics-overview, read 2026-12-07), so there is no retention to set;
* a data collection endpoint (``kind: Linux``) and a data collection rule from the
  ``prometheusForwarder`` source, stream ``Microsoft-PrometheusMetrics``, to the workspace as a
  ``monitoringAccounts`` destination;
* the rule's association with the cluster, and the cluster's ``azureMonitorProfile.metrics``
  enabled (``azure_monitor_profile`` below, set on the cluster by orchestration_aks.py), which
  deploys the ama-metrics agent. The agent writes with the cluster's own managed identity through
  the association; no role is granted for it here.

The DCGM scrape itself is a Kubernetes object (components/k8s/metrics.py).
"""

from __future__ import annotations

import pulumi
import pulumi_azure_native as azure

from gpu_cluster.components.azure.common import cluster_tags
from gpu_cluster.components.spec import ClusterSpec

PROMETHEUS_STREAM = "Microsoft-PrometheusMetrics"
# The template's names for the source and the destination inside the rule.
PROMETHEUS_SOURCE = "PrometheusDataSource"
MONITORING_ACCOUNT = "MonitoringAccount1"
# The template names the endpoint and rule MSProm-<workspace region>-<cluster> and the association
# MSProm-<cluster region>-<cluster>; Azure's ARO-HCP metrics module takes the first 44 characters
# (Azure/ARO-HCP dev-infrastructure/modules/metrics/datacollection.bicep, ``take(..., 44)``).
NAME_LIMIT = 44


def msprom_name(spec: ClusterSpec) -> str:
    return f"MSProm-{spec.region}-{spec.name}"[:NAME_LIMIT]


def azure_monitor_profile() -> azure.containerservice.ManagedClusterAzureMonitorProfileArgs:
    """The cluster's managed Prometheus add-on on (the template's ``azureMonitorProfile.metrics
    .enabled: true``); kube-state-metrics keeps its default label and annotation allow-lists."""
    return azure.containerservice.ManagedClusterAzureMonitorProfileArgs(
        metrics=azure.containerservice.ManagedClusterAzureMonitorProfileMetricsArgs(enabled=True)
    )


def _sources(*, remote_write: bool) -> azure.monitor.DataCollectionRuleDataSourcesArgs:
    """The rule's data sources. A cluster's agent forwards through the ``prometheusForwarder`` source
    (the onboarding template above). A rule that only takes remote writes (the Slurm stack's nodes,
    with no cluster) has none: Azure's template for "custom Data collection endpoint(DCE) and custom
    Data collection rule(DCR) for an existing Azure monitor workspace to ingest Prometheus metrics",
    the one its remote-write pages link for more rules (Azure/prometheus-collector
    ``Azure-ARM-templates/Prometheus-RemoteWrite-DCR-artifacts/CustomDCR.json`` at 446f94b:
    ``"dataSources": {}``, a ``monitoringAccounts`` destination and one data flow of
    ``Microsoft-PrometheusMetrics``; its README.md at ecd5eb0 builds the remote-write address from
    the endpoint's metrics ingestion URL and the rule's immutable id)."""
    if remote_write:
        return azure.monitor.DataCollectionRuleDataSourcesArgs()
    return azure.monitor.DataCollectionRuleDataSourcesArgs(
        prometheus_forwarder=[
            azure.monitor.PrometheusForwarderDataSourceArgs(
                name=PROMETHEUS_SOURCE, streams=[PROMETHEUS_STREAM], label_include_filter={}
            )
        ]
    )


class ManagedPrometheus(pulumi.ComponentResource):
    """The Azure Monitor workspace and the rule that carries the cluster's Prometheus metrics to it."""

    workspace: azure.monitor.AzureMonitorWorkspace
    endpoint: azure.monitor.DataCollectionEndpoint
    rule: azure.monitor.DataCollectionRule

    def __init__(
        self,
        name: str,
        *,
        spec: ClusterSpec,
        resource_group: pulumi.Input[str],
        cluster_id: pulumi.Input[str] | None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpu-cluster:metrics:AzureManagedPrometheus", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = cluster_tags(spec)
        self.workspace = azure.monitor.AzureMonitorWorkspace(
            f"{name}-workspace",
            azure_monitor_workspace_name=spec.name,
            resource_group_name=resource_group,
            location=spec.region,
            tags=tags,
            opts=child,
        )
        self.endpoint = endpoint = azure.monitor.DataCollectionEndpoint(
            f"{name}-endpoint",
            data_collection_endpoint_name=msprom_name(spec),
            resource_group_name=resource_group,
            location=spec.region,
            kind="Linux",
            tags=tags,
            opts=child,
        )
        self.rule = azure.monitor.DataCollectionRule(
            f"{name}-rule",
            data_collection_rule_name=msprom_name(spec),
            resource_group_name=resource_group,
            location=spec.region,
            kind="Linux",
            data_collection_endpoint_id=endpoint.id,
            description="The cluster's Prometheus metrics into its Azure Monitor workspace",
            data_sources=_sources(remote_write=cluster_id is None),
            destinations=azure.monitor.DataCollectionRuleDestinationsArgs(
                monitoring_accounts=[
                    azure.monitor.MonitoringAccountDestinationArgs(
                        name=MONITORING_ACCOUNT, account_resource_id=self.workspace.id
                    )
                ]
            ),
            data_flows=[azure.monitor.DataFlowArgs(streams=[PROMETHEUS_STREAM], destinations=[MONITORING_ACCOUNT])],
            tags=tags,
            opts=child,
        )
        # No cluster on the Slurm stack: its nodes remote-write to the rule (components/azure/slurm_metrics.py).
        if cluster_id is not None:
            self._associate(name, spec, cluster_id)
        self.register_outputs({"workspace": self.workspace.id})

    def _associate(self, name: str, spec: ClusterSpec, cluster_id: pulumi.Input[str]) -> None:
        azure.monitor.DataCollectionRuleAssociation(
            f"{name}-association",
            resource_uri=cluster_id,
            association_name=msprom_name(spec),
            data_collection_rule_id=self.rule.id,
            description="Managed Prometheus of the cluster: without it the cluster's metrics stop",
            opts=pulumi.ResourceOptions(parent=self),
        )
