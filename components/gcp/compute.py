"""Compute: the GPU nodes a job spans, on the spec's capacity.

* GKE: one node pool on the catalog's machine type, attached to every additional network the
  Interconnect built, GPUs and gVNIC from the catalog, compact placement when the spec says so.
* Slurm (Cluster Director): the compute resource and node set the managed cluster creates; the
  component holds their typed Args and creates no cloud resource itself.

Capacity: a specific reservation (already placed, so no placement policy); DWS flex-start (GKE
``flex_start`` with autoscaling from zero, as GKE's flex-start guide asks; Cluster Director
``new_flex_start_instances``); spot. On-demand, which GCP does not offer for these machine types,
is refused by ``gpu_cluster.components.gcp.rules`` before the program runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp
from pulumi_gcp import hypercomputecluster as hcc

from gpu_cluster.components.contract import UNVALIDATED_TAINT_KEY, UNVALIDATED_TAINT_VALUE
from gpu_cluster.components.gcp.common import GKE_ACCELERATOR, labels
from gpu_cluster.components.gcp.interconnect import NicNetwork
from gpu_cluster.components.gcp.rules import queued_provisioning
from gpu_cluster.components.gcp.slurm_metrics import startup_script
from gpu_cluster.components.spec import ClusterSpec

# DWS flex-start VMs run at most seven days (cloud.google.com/compute/docs/instances/flex-start-vms).
FLEX_START_MAX_DURATION = "604800s"
RESERVATION_KEY = "compute.googleapis.com/reservation-name"
# GKE installs the driver it pairs with the setting: the API takes DEFAULT ("Default" GPU driver in
# COS and Ubuntu), LATEST ("Latest" GPU driver in COS) or INSTALLATION_DISABLED (GKE API
# GPUDriverInstallationConfig.GPUDriverVersion, read 2026-12-01), so a driver number cannot be named.
# LATEST, because the job's image is built on CUDA 13.1 (NGC PyTorch 25.12), which needs a driver
# >= 580 (NVIDIA CUDA minor version compatibility, Table 1), and the pod's command bypasses NGC's
# entrypoint, so no forward-compatibility library can stand in: LATEST installs a driver above
# 580.65 (rapidsai/deployment PR 659, 2026-02-05), while GKE's default driver was seen at
# 535.274.02 (rapidsai/deployment issue 656, 2026-02-04). GKE's own per-version driver table was
# not found in the sources read here. The cost: the driver moves with GKE's "latest" rather than the
# node version alone; the maintenance exclusion (orchestration_gke.py) holds the nodes while a
# cluster trains. The liveness driver check (components/liveness/driver.py) holds the pool to it.
GPU_DRIVER = "LATEST"


def holds_new_nodes(spec: ClusterSpec) -> bool:
    """Whether the GPU pool registers its nodes with the registration taint (issue 41, I6): a pool
    of a fixed size (a reservation, spot) does. GKE puts a pool's taints on every node it adds,
    keeps them across a node's restart or replacement and through autoscaling ("Control scheduling
    with node taints", cloud.google.com/kubernetes-engine/docs/how-to/node-taints, "Advantages of
    setting node taints in GKE", read 2026-12-07), and changes them on an existing pool without
    re-creating it (update-existing-nodepools, read 2026-12-07). A flex-start pool does not: it
    scales from zero for the pods that wait, and whether GKE's autoscaler adds a node for a pod that
    does not tolerate the pool's taint was not read in a source here; a user's job could then wait
    for ever. What lands on a GPU node before its validation tolerates it without a value of ours:
    GKE's GPU device plugin (the liveness model's GKE platform fact), the NCCL installers
    (components/k8s/gke_installers.py, ``operator: Exists``), and the managed CSI node plugins of
    Lustre and Cloud Storage (``tolerations: - operator: Exists``, GoogleCloudPlatform/
    lustre-csi-driver deploy/base/node/node.yaml at 8183e98, gcs-fuse-csi-driver
    deploy/base/node/node.yaml at f8d07ed; GKE's own build of them is not public)."""
    return spec.compute.capacity.type != "flex-start"


def registration_taints(spec: ClusterSpec) -> list[gcp.container.NodePoolNodeConfigTaintArgs]:
    """The GPU pool's taints of ours: the registration taint where :func:`holds_new_nodes`."""
    if not holds_new_nodes(spec):
        return []
    # pulumi-gcp spells the effect NO_SCHEDULE (NodePoolNodeConfigTaintArgs.effect).
    return [
        gcp.container.NodePoolNodeConfigTaintArgs(
            key=UNVALIDATED_TAINT_KEY, value=UNVALIDATED_TAINT_VALUE, effect="NO_SCHEDULE"
        )
    ]


# Least privilege for GKE nodes instead of the Compute Engine default account (which holds
# Editor): GKE's node role plus pulling images (GKE hardening guide, "use least privilege
# service accounts for your nodes").
NODE_ROLES = ("roles/container.defaultNodeServiceAccount", "roles/artifactregistry.reader")


def boot_disk_type(spec: ClusterSpec) -> str:
    # A3 Ultra and A4 boot only from Hyperdisk (cloud.google.com/compute/docs/accelerator-optimized-machines,
    # "supported disk types"); A3 High/Mega take Persistent Disk.
    return "hyperdisk-balanced" if spec.instance.network.fabric == "rdma" else "pd-ssd"


@dataclass(frozen=True, slots=True, kw_only=True)
class ComputeArgs:
    spec: ClusterSpec
    """The checked cluster description."""
    project: pulumi.Input[str]
    """Project id (reservation paths, disk type paths)."""
    cluster: pulumi.Input[str] | None = None
    """GKE: the cluster's id; None for Slurm."""
    nics: list[NicNetwork] = field(default_factory=list)
    """Additional node networks, in NIC order."""
    placement: pulumi.Input[str] | None = None
    """Compact placement policy name, or None."""
    lustre_storage_id: str = "lustre"
    """Slurm: the Cluster Director storage resource id mounted on every node."""
    extra_storage: tuple[tuple[str, str], ...] = ()
    """Slurm: further (storage resource id, local mount) pairs on every node (/home, the bucket)."""


class Compute(pulumi.ComponentResource):
    """GPU node pool (GKE) or GPU node set (Cluster Director)."""

    node_pool: gcp.container.NodePool | None
    node_pool_name: str
    compute_resource: hcc.ClusterComputeResourceArgs | None
    node_set: hcc.ClusterOrchestratorSlurmNodeSetArgs | None

    def __init__(self, name: str, args: ComputeArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-cluster:gcp:Compute", name, None, opts)
        spec = args.spec
        self.node_pool = None
        self.compute_resource = None
        self.node_set = None
        self.node_pool_name = f"{spec.name}-gpu"
        if spec.orchestration.kind == "gke":
            if args.cluster is None:
                raise ValueError("Compute for GKE needs the cluster id")
            self.node_pool = self._create_node_pool(name, spec, args)
        else:
            self._describe_node_set(spec, args)
        self.register_outputs(
            {
                "instance_type": spec.compute.instance_type,
                "nodes": spec.compute.nodes,
                "capacity": spec.compute.capacity.type,
                "node_pool": self.node_pool.name if self.node_pool else None,
            }
        )

    def _create_node_identity(
        self, name: str, spec: ClusterSpec, project: pulumi.Input[str]
    ) -> gcp.serviceaccount.Account:
        account = gcp.serviceaccount.Account(
            f"{name}-nodes",
            account_id=spec.name[:20].rstrip("-") + "-gpu-nodes",
            display_name=f"gpu-cluster {spec.name} GPU nodes",
            project=project,
            opts=pulumi.ResourceOptions(parent=self),
        )
        for role in NODE_ROLES:
            gcp.projects.IAMMember(
                f"{name}-nodes-{role.rsplit('.', 1)[-1].lower()}",
                project=project,
                role=role,
                member=pulumi.Output.format("serviceAccount:{0}", account.email),
                opts=pulumi.ResourceOptions(parent=self),
            )
        return account

    def _create_node_pool(self, name: str, spec: ClusterSpec, args: ComputeArgs) -> gcp.container.NodePool:
        account = self._create_node_identity(name, spec, args.project)
        cap = spec.compute.capacity
        inst = spec.instance
        affinity = gcp.container.NodePoolNodeConfigReservationAffinityArgs(consume_reservation_type="NO_RESERVATION")
        if cap.type == "reservation":
            affinity = gcp.container.NodePoolNodeConfigReservationAffinityArgs(
                consume_reservation_type="SPECIFIC_RESERVATION", key=RESERVATION_KEY, values=[cap.id or ""]
            )
        flex = cap.type == "flex-start"
        is_queued = queued_provisioning(cap.type, spec.compute.nodes)
        node_config = gcp.container.NodePoolNodeConfigArgs(
            machine_type=spec.compute.instance_type,
            guest_accelerators=[
                gcp.container.NodePoolNodeConfigGuestAcceleratorArgs(
                    type=GKE_ACCELERATOR[spec.compute.instance_type],
                    count=inst.accelerator.count,
                    gpu_driver_installation_config=gcp.container.NodePoolNodeConfigGuestAcceleratorGpuDriverInstallationConfigArgs(
                        gpu_driver_version=GPU_DRIVER
                    ),
                )
            ],
            gvnic=gcp.container.NodePoolNodeConfigGvnicArgs(enabled=True),
            disk_size_gb=spec.compute.root_volume_gib,
            disk_type=boot_disk_type(spec),
            image_type="COS_CONTAINERD",
            reservation_affinity=affinity,
            spot=True if cap.type == "spot" else None,
            flex_start=True if flex else None,
            # A queued pool's nodes live as long as their ProvisioningRequest asks: cluster-toolkit's
            # queued flex-start example sets no max_run_duration on the pool (examples/gke-consumption-
            # options/dws-flex-start-queued-provisioning/gke-a3-ultragpu.yaml at 1047080: flex-start and
            # queued provisioning only) and puts provreq.kueue.x-k8s.io/maxRunDurationSeconds on the
            # JobSet (nccl-jobset-example.yaml line 23), which Kueue copies into the ProvisioningRequest
            # (kueue v0.17.8 site/content/en/docs/concepts/admission_check/provisioning_request.md:162).
            # So the duration goes there (components/gcp/cluster.py, scheduler.job_annotations).
            max_run_duration=FLEX_START_MAX_DURATION if flex and not is_queued else None,
            shielded_instance_config=gcp.container.NodePoolNodeConfigShieldedInstanceConfigArgs(
                enable_secure_boot=True, enable_integrity_monitoring=True
            ),
            workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA"),
            service_account=account.email,
            # Access is decided by the account's IAM roles; the scope only has to allow it.
            oauth_scopes=["https://www.googleapis.com/auth/cloud-platform"],
            resource_labels=labels(spec),
            labels={"gpu-cluster/role": "gpu"},
            # Out of work until a validation passes each node (holds_new_nodes).
            taints=registration_taints(spec) or None,
        )
        network_config = gcp.container.NodePoolNetworkConfigArgs(
            enable_private_nodes=True,
            additional_node_network_configs=[
                # The resources' outputs, not their names: the pool depends on each VPC and subnet,
                # so `pulumi destroy` removes the nodes before the networks they sit on.
                gcp.container.NodePoolNetworkConfigAdditionalNodeNetworkConfigArgs(
                    network=n.network.name, subnetwork=n.subnet.name
                )
                for n in args.nics
            ],
        )
        placement = None
        if args.placement is not None:
            placement = gcp.container.NodePoolPlacementPolicyArgs(type="COMPACT", policy_name=args.placement)
        # Flex-start capacity arrives when DWS finds it: the pool scales up from zero
        # (GKE flex-start guide: autoscaling, location policy ANY, no auto-repair).
        autoscaling = None
        management = gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True)
        if flex:
            autoscaling = gcp.container.NodePoolAutoscalingArgs(
                total_min_node_count=0, total_max_node_count=spec.compute.nodes, location_policy="ANY"
            )
            management = gcp.container.NodePoolManagementArgs(auto_repair=False, auto_upgrade=True)
        # Multi-node flex-start is queued: GKE creates the nodes of a ProvisioningRequest all at
        # once, and only through one (cloud.google.com/kubernetes-engine/docs/how-to/
        # provisioningrequest: `--flex-start --enable-queued-provisioning`; cluster-toolkit
        # modules/compute/gke-node-pool/main.tf at 1047080: queued_provisioning { enabled = true },
        # with NO_RESERVATION affinity, no spot, autoscaling from 0 and no COMPACT policy, which
        # this pool already has). Kueue makes the requests (components/k8s/kueue.py).
        queued = gcp.container.NodePoolQueuedProvisioningArgs(enabled=True) if is_queued else None
        return gcp.container.NodePool(
            f"{name}-pool",
            queued_provisioning=queued,
            name=self.node_pool_name,
            cluster=args.cluster,
            location=spec.zone,
            node_locations=[spec.zone],
            node_count=None if flex else spec.compute.nodes,
            initial_node_count=0 if flex else None,
            autoscaling=autoscaling,
            management=management,
            node_config=node_config,
            network_config=network_config,
            placement_policy=placement,
            # Node count drifts with repairs and DWS; a diff on it would recreate GPU nodes.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["nodeCount"] if flex else None),
        )

    def _describe_node_set(self, spec: ClusterSpec, args: ComputeArgs) -> None:
        cap = spec.compute.capacity
        mt, zone = spec.compute.instance_type, spec.zone
        cfg: hcc.ClusterComputeResourceConfigArgs
        if cap.type == "reservation":
            cfg = hcc.ClusterComputeResourceConfigArgs(
                new_reserved_instances=hcc.ClusterComputeResourceConfigNewReservedInstancesArgs(
                    reservation=pulumi.Output.format(
                        "projects/{0}/zones/{1}/reservations/{2}", args.project, zone, cap.id
                    )
                )
            )
        elif cap.type == "flex-start":
            cfg = hcc.ClusterComputeResourceConfigArgs(
                new_flex_start_instances=hcc.ClusterComputeResourceConfigNewFlexStartInstancesArgs(
                    machine_type=mt, zone=zone, max_duration=FLEX_START_MAX_DURATION
                )
            )
        elif cap.type == "spot":
            cfg = hcc.ClusterComputeResourceConfigArgs(
                new_spot_instances=hcc.ClusterComputeResourceConfigNewSpotInstancesArgs(
                    machine_type=mt, zone=zone, termination_action="DELETE"
                )
            )
        else:
            # gpu_cluster.components.gcp.rules refuses it first: Cluster Director runs on-demand N2 only.
            raise ValueError(f"compute.capacity.type: {cap.type!r} is not offered by Cluster Director for {mt}")
        self.compute_resource = hcc.ClusterComputeResourceArgs(id="gpu", config=cfg)
        self.node_set = hcc.ClusterOrchestratorSlurmNodeSetArgs(
            id="gpu",
            compute_id="gpu",
            static_node_count=str(spec.compute.nodes),
            compute_instance=hcc.ClusterOrchestratorSlurmNodeSetComputeInstanceArgs(
                boot_disk=hcc.ClusterOrchestratorSlurmNodeSetComputeInstanceBootDiskArgs(
                    size_gb=str(spec.compute.root_volume_gib),
                    type=pulumi.Output.format(
                        "projects/{0}/zones/{1}/diskTypes/{2}", args.project, zone, boot_disk_type(spec)
                    ),
                ),
                labels=labels(spec),
                # GPU metrics: DCGM and the Ops Agent's DCGM receiver (components/gcp/slurm_metrics.py).
                startup_script=startup_script(),
            ),
            storage_configs=[
                hcc.ClusterOrchestratorSlurmNodeSetStorageConfigArgs(
                    id=args.lustre_storage_id, local_mount=spec.storage.lustre.mount_point
                )
            ]
            + [
                hcc.ClusterOrchestratorSlurmNodeSetStorageConfigArgs(id=sid, local_mount=mount)
                for sid, mount in args.extra_storage
            ],
        )
