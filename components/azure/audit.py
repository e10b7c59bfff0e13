"""The Azure audit trail: one Log Analytics workspace, and the diagnostic settings that send to it.

* The workspace (``operationalinsights.Workspace``, pay-per-GB ``PerGB2018``) keeps what it is sent
  for ``security.log_retention_days``, at most 730 days: the longest interactive retention a
  workspace takes (``LOG_ANALYTICS_MAX_DAYS``; the spec refuses more on azure).
* AKS control-plane logs are resource logs, collected only once a diagnostic setting routes them
  (MicrosoftDocs/azure-aks-docs articles/aks/monitor-aks.md:111 at fb060ab). The categories are the
  page's own list (line 137) less ``kube-audit``, whose get/list events cost the most; its
  ``kube-audit-admin`` keeps every write (lines 116-119), less the cluster autoscaler's, which this
  cluster does not enable, and less the disk, file and snapshot CSI controllers': AKS runs those
  drivers by default (csi-storage-drivers.md:26), but no volume of the stack uses them (its
  volumes are Managed Lustre's, a CSI driver of its own in kube-system). Resource-specific tables (AKSAudit, AKSAuditAdmin,
  AKSControlPlane; line 124) rather than AzureDiagnostics.
* The checkpoint account's blob service logs its reads, writes and deletes to the same workspace
  (``StorageRead``, ``StorageWrite``, ``StorageDelete``: the blob service's resource log categories,
  learn.microsoft.com/azure/storage/blobs/monitor-blob-storage-reference).
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_azure_native as azure

from gpu_cluster.components.azure.common import cluster_tags
from gpu_cluster.components.azure.rules import LOG_ANALYTICS_MAX_DAYS, LOG_ANALYTICS_MIN_DAYS
from gpu_cluster.components.spec import ClusterSpec

# Interactive retention of a Log Analytics workspace: 30 to 730 days (Azure Monitor, "Manage data
# retention in a Log Analytics workspace", learn.microsoft.com/azure/azure-monitor/logs/
# data-retention-configure); longer needs table-level long-term retention, which this stack does not
# set. The spec refuses other values on azure (rules.py), so nothing is clamped silently.
AKS_LOG_CATEGORIES = (
    "kube-apiserver",
    "kube-audit-admin",
    "kube-controller-manager",
    "kube-scheduler",
    "cloud-controller-manager",
    "guard",
)
BLOB_LOG_CATEGORIES = ("StorageRead", "StorageWrite", "StorageDelete")


def workspace(
    name: str, spec: ClusterSpec, resource_group: pulumi.Input[str], opts: pulumi.ResourceOptions
) -> azure.operationalinsights.Workspace:
    """The stack's Log Analytics workspace, kept ``security.log_retention_days`` (30..730)."""
    days = spec.security.log_retention_days
    assert LOG_ANALYTICS_MIN_DAYS <= days <= LOG_ANALYTICS_MAX_DAYS  # refused by the spec otherwise
    return azure.operationalinsights.Workspace(
        name,
        resource_group_name=resource_group,
        location=spec.region,
        sku=azure.operationalinsights.WorkspaceSkuArgs(name=azure.operationalinsights.WorkspaceSkuNameEnum.PER_GB2018),
        retention_in_days=days,
        tags=cluster_tags(spec),
        opts=opts,
    )


def diagnostic_setting(
    name: str,
    *,
    target: pulumi.Input[str],
    workspace_id: pulumi.Input[str],
    categories: Sequence[str],
    opts: pulumi.ResourceOptions,
) -> azure.monitor.DiagnosticSetting:
    """Route ``target``'s resource logs of ``categories`` to the workspace, resource-specific tables."""
    return azure.monitor.DiagnosticSetting(
        name,
        name="to-log-analytics",
        resource_uri=target,
        workspace_id=workspace_id,
        log_analytics_destination_type="Dedicated",
        logs=[azure.monitor.DiagnosticsLogSettingsArgs(category=c, enabled=True) for c in categories],
        opts=opts,
    )
