"""Storage: Azure Managed Lustre on its own subnet, a checkpoint container, and the stack's log
workspace (audit.py), where the control plane, Container insights and the checkpoint account's
blob service send their logs.

Storage builds no network (cluster-toolkit module guidelines): it takes the Lustre subnet and
the node subnets as inputs, and exposes the same mount description every cloud does. Both
stateful resources are protected: ``pulumi destroy`` stops at them until the protection is
lifted on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import pulumi
import pulumi_azure_native as azure

from gpu_cluster.components.azure import audit
from gpu_cluster.components.azure.common import cluster_tags, storage_account_name
from gpu_cluster.components.spec import ClusterSpec

# "Start time of a 30-minute weekly maintenance window"; Saturday 23:00 UTC is the window CCWS
# gives its file system (Azure/cyclecloud-slurm-workspace bicep/amlfs.bicep at bc0fc1b).
MAINTENANCE_DAY = azure.storagecache.MaintenanceDayOfWeekType.SATURDAY
MAINTENANCE_TIME_UTC = "23:00"
# AMLFS's file system name is always lustrefs (client_info.mount_command,
# "mount -t lustre <mgs>@tcp:/lustrefs ...", AZURE.md §3.3); clients mount with
# noatime,flock (amlfs docs client mount, AZURE.md §3.3).
FSNAME = "lustrefs"
MOUNT_OPTIONS = "noatime,flock"


@dataclass(frozen=True, slots=True, kw_only=True)
class StorageArgs:
    spec: ClusterSpec
    resource_group: pulumi.Input[str]
    lustre_subnet: pulumi.Input[str]
    node_subnets: Sequence[pulumi.Input[str]]
    """Subnets whose nodes may reach the checkpoint account (its firewall admits only them)."""


class Storage(pulumi.ComponentResource):
    logs: azure.operationalinsights.Workspace
    lustre: azure.storagecache.AmlFilesystem
    account: azure.storage.StorageAccount
    blob_service: azure.storage.BlobServiceProperties
    container: azure.storage.BlobContainer
    mount: dict[str, Any]

    def __init__(self, name: str, args: StorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-cluster:azure:Storage", name, None, opts)
        spec = args.spec
        tags = cluster_tags(spec)
        lu = spec.storage.lustre
        self.logs = audit.workspace(f"{name}-logs", spec, args.resource_group, pulumi.ResourceOptions(parent=self))
        self.lustre = azure.storagecache.AmlFilesystem(
            f"{name}-lustre",
            resource_group_name=args.resource_group,
            location=spec.region,
            # One zone, the nodes' (the API takes a single element, AZURE.md §3.2).
            zones=[spec.zone],
            # The SKU is named by its throughput per TiB; the spec checked size against the
            # SKU's minimum and increment (components/azure/rules.py, catalog lustre.azure).
            sku=azure.storagecache.SkuNameArgs(name=f"AMLFS-Durable-Premium-{lu.throughput_mbps_per_tib}"),
            storage_capacity_ti_b=lu.size_gib / 1024,
            filesystem_subnet=args.lustre_subnet,
            maintenance_window=azure.storagecache.AmlFilesystemMaintenanceWindowArgs(
                day_of_week=MAINTENANCE_DAY, time_of_day_utc=MAINTENANCE_TIME_UTC
            ),
            tags=tags,
            # The file system holds the datasets and checkpoints: never deleted by an update.
            opts=pulumi.ResourceOptions(parent=self, protect=True),
        )
        self.account = azure.storage.StorageAccount(
            f"{name}-account",
            account_name=storage_account_name(spec, pulumi.get_stack()),
            resource_group_name=args.resource_group,
            location=spec.region,
            kind="StorageV2",
            sku=azure.storage.SkuArgs(name="Standard_LRS"),
            # HTTPS only, TLS 1.2, no public blobs, no shared keys (Checkov CKV_AZURE_3,
            # CKV_AZURE_44, CKV_AZURE_190, CKV2_AZURE_40): identities only. Blob integration
            # with Lustre, which needs shared keys on, is not built (rules.py refuses it).
            enable_https_traffic_only=True,
            minimum_tls_version="TLS1_2",
            allow_blob_public_access=False,
            allow_shared_key_access=False,
            # Default deny, admitting the cluster's subnets (Checkov CKV_AZURE_35).
            network_rule_set=azure.storage.NetworkRuleSetArgs(
                default_action=azure.storage.DefaultAction.DENY,
                bypass="AzureServices",
                virtual_network_rules=[
                    azure.storage.VirtualNetworkRuleArgs(virtual_network_resource_id=s) for s in args.node_subnets
                ],
            ),
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, protect=True),
        )
        # Soft delete of blobs and of containers (Checkov CKV2_AZURE_38): a deleted or overwritten
        # checkpoint is kept security.checkpoint_noncurrent_days (1-365, pulumi-azure-native 3.29.0
        # DeleteRetentionPolicyArgs.days; the spec refuses more on azure), as noncurrent versions are
        # on AWS and GCP (learn.microsoft.com/azure/storage/blobs/soft-delete-blob-overview: an
        # overwrite keeps a soft-deleted snapshot of the old data).
        days = spec.security.checkpoint_noncurrent_days
        self.blob_service = azure.storage.BlobServiceProperties(
            f"{name}-blob-service",
            account_name=self.account.name,
            resource_group_name=args.resource_group,
            blob_services_name="default",
            delete_retention_policy=azure.storage.DeleteRetentionPolicyArgs(enabled=True, days=days),
            container_delete_retention_policy=azure.storage.DeleteRetentionPolicyArgs(enabled=True, days=days),
            opts=pulumi.ResourceOptions(parent=self),
        )
        # Every read, write and delete of the account's blobs, to the workspace (audit.py).
        audit.diagnostic_setting(
            f"{name}-blob-logs",
            target=pulumi.Output.concat(self.account.id, "/blobServices/default"),
            workspace_id=self.logs.id,
            categories=audit.BLOB_LOG_CATEGORIES,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.blob_service]),
        )
        self.container = azure.storage.BlobContainer(
            f"{name}-checkpoints",
            account_name=self.account.name,
            resource_group_name=args.resource_group,
            container_name=spec.storage.bucket_name or "checkpoints",
            public_access=azure.storage.PublicAccess.NONE,
            opts=pulumi.ResourceOptions(parent=self, protect=True),
        )
        mgs = self.lustre.client_info.apply(lambda c: c.mgs_address if c is not None else None)
        self.mount = {
            "type": "lustre",
            "mount_point": lu.mount_point,
            "dns_name": mgs,
            "mount_name": FSNAME,
            "mount_command": pulumi.Output.format(
                "sudo mkdir -p {0} && sudo mount -t lustre -o {1} {2}@tcp:/{3} {0}",
                lu.mount_point,
                MOUNT_OPTIONS,
                mgs,
                FSNAME,
            ),
            "volume_handle": self.lustre.id,
        }
        self.register_outputs({"file_system": self.lustre.id, "container": self.container.name})
