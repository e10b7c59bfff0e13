"""Orchestration (Slurm): Google's managed Slurm, Cluster Director
(``gcp.hypercomputecluster.Cluster``).

The cluster is given what the other pillars built: the system VPC as its one network resource
(the API takes at most one; Cluster Director attaches the machine type's GPU networks), the
Managed Lustre instance and the checkpoint bucket as existing storage, and the GPU node set
from Compute. Login nodes are private (no public IPs, OS Login): users arrive through IAP.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp
from pulumi_gcp import hypercomputecluster as hcc

from gpu_cluster.components.gcp.common import labels, short_id
from gpu_cluster.components.spec import ClusterSpec

LOGIN_MACHINE_TYPE = "n2-standard-8"
LOGIN_DISK_GB = 100
NETWORK_ID = "net"
LUSTRE_ID = "lustre"
BUCKET_ID = "checkpoints"
HOME_ID = "home"
# Cluster Director needs a Filestore instance for /home ("To specify a Filestore instance, use one
# of the following flags: --create-filestores | --filestores"; its AI/ML template creates one),
# GoogleCloudPlatform/cluster-director-mcp assets/GEMINI.md at e459bc6 (a copy of the product
# docs). The SDK's new-Filestore resource takes tier ZONAL or REGIONAL and 1024..102400 GB
# (pulumi_gcp 10.2.0 ClusterStorageResourceConfigNewFilestoreArgs / ...FileShareArgs);
# the smallest zonal instance suffices for home directories.
HOME_MOUNT = "/home"
HOME_TIER = "ZONAL"
HOME_CAPACITY_GB = 1024
HOME_SHARE = "home"
# The checkpoint bucket, mounted on every node (Cluster Director mounts a bucket storage
# resource through Cloud Storage FUSE where a node's storage config names it).
BUCKET_MOUNT = "/checkpoints"
EXTRA_MOUNTS = ((HOME_ID, HOME_MOUNT), (BUCKET_ID, BUCKET_MOUNT))


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmArgs:
    spec: ClusterSpec
    """The checked cluster description."""
    project: pulumi.Input[str]
    network_name: pulumi.Input[str]
    """The system VPC's name (its output: the cluster depends on the VPC)."""
    subnet_name: pulumi.Input[str]
    lustre_instance_id: str
    lustre: pulumi.Resource
    bucket: pulumi.Input[str]
    """Checkpoint bucket name."""
    compute_resource: hcc.ClusterComputeResourceArgs
    node_set: hcc.ClusterOrchestratorSlurmNodeSetArgs


class SlurmOrchestration(pulumi.ComponentResource):
    """Cluster Director cluster: login nodes, GPU node set, one partition, Lustre mounted."""

    cluster: gcp.hypercomputecluster.Cluster
    cluster_id: str
    login: pulumi.Output[str]

    def __init__(self, name: str, args: SlurmArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-cluster:gcp:Orchestration", name, None, opts)
        spec = args.spec
        o = spec.orchestration
        lu = spec.storage.lustre
        self.cluster_id = short_id(spec, 10)
        mounts = [
            hcc.ClusterOrchestratorSlurmLoginNodesStorageConfigArgs(id=sid, local_mount=mount)
            for sid, mount in ((LUSTRE_ID, lu.mount_point), *EXTRA_MOUNTS)
        ]
        self.cluster = gcp.hypercomputecluster.Cluster(
            f"{name}-slurm",
            cluster_id=self.cluster_id,
            location=spec.region,
            description=f"gpu-cluster {spec.name}: {spec.compute.nodes} x {spec.compute.instance_type}",
            network_resources=[
                hcc.ClusterNetworkResourceArgs(
                    id=NETWORK_ID,
                    config=hcc.ClusterNetworkResourceConfigArgs(
                        existing_network=hcc.ClusterNetworkResourceConfigExistingNetworkArgs(
                            network=pulumi.Output.format(
                                "projects/{0}/global/networks/{1}", args.project, args.network_name
                            ),
                            subnetwork=pulumi.Output.format(
                                "projects/{0}/regions/{1}/subnetworks/{2}", args.project, spec.region, args.subnet_name
                            ),
                        )
                    ),
                )
            ],
            storage_resources=[
                hcc.ClusterStorageResourceArgs(
                    id=LUSTRE_ID,
                    config=hcc.ClusterStorageResourceConfigArgs(
                        existing_lustre=hcc.ClusterStorageResourceConfigExistingLustreArgs(
                            lustre=pulumi.Output.format(
                                "projects/{0}/locations/{1}/instances/{2}",
                                args.project,
                                spec.zone,
                                args.lustre_instance_id,
                            )
                        )
                    ),
                ),
                hcc.ClusterStorageResourceArgs(
                    id=HOME_ID,
                    config=hcc.ClusterStorageResourceConfigArgs(
                        new_filestore=hcc.ClusterStorageResourceConfigNewFilestoreArgs(
                            filestore=pulumi.Output.format(
                                "projects/{0}/locations/{1}/instances/{2}-home",
                                args.project,
                                spec.zone,
                                self.cluster_id,
                            ),
                            tier=HOME_TIER,
                            file_shares=[
                                hcc.ClusterStorageResourceConfigNewFilestoreFileShareArgs(
                                    capacity_gb=str(HOME_CAPACITY_GB), file_share=HOME_SHARE
                                )
                            ],
                            description=f"gpu-cluster {spec.name} /home",
                        )
                    ),
                ),
                hcc.ClusterStorageResourceArgs(
                    id=BUCKET_ID,
                    config=hcc.ClusterStorageResourceConfigArgs(
                        existing_bucket=hcc.ClusterStorageResourceConfigExistingBucketArgs(bucket=args.bucket)
                    ),
                ),
            ],
            compute_resources=[args.compute_resource],
            orchestrator=hcc.ClusterOrchestratorArgs(
                slurm=hcc.ClusterOrchestratorSlurmArgs(
                    login_nodes=hcc.ClusterOrchestratorSlurmLoginNodesArgs(
                        count=str(o.login_nodes),
                        machine_type=LOGIN_MACHINE_TYPE,
                        zone=spec.zone,
                        enable_os_login=True,
                        enable_public_ips=False,
                        boot_disk=hcc.ClusterOrchestratorSlurmLoginNodesBootDiskArgs(
                            size_gb=str(LOGIN_DISK_GB),
                            type=pulumi.Output.format(
                                "projects/{0}/zones/{1}/diskTypes/pd-balanced", args.project, spec.zone
                            ),
                        ),
                        labels=labels(spec),
                        storage_configs=mounts,
                    ),
                    node_sets=[args.node_set],
                    partitions=[
                        hcc.ClusterOrchestratorSlurmPartitionArgs(id=o.partition, node_set_ids=[args.node_set.id])
                    ],
                )
            ),
            labels=labels(spec),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[args.lustre]),
        )
        self.login = self.cluster.orchestrator.apply(_first_login)
        self.register_outputs({"cluster_id": self.cluster_id, "login": self.login, "partition": o.partition})


def _first_login(orch: hcc.outputs.ClusterOrchestrator | None) -> str:
    try:
        instances = orch.slurm.login_nodes.instances or []  # type: ignore[union-attr]
        return str(instances[0].instance).rsplit("/", 1)[-1]
    except (AttributeError, IndexError, TypeError):
        return ""
