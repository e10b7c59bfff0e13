"""Orchestration (GKE): a private, zonal GKE cluster with multi-networking, and the in-cluster
parts GPU training needs: GKE Network objects for each GPU NIC, the fabric's NCCL plugin
installer, a PersistentVolume for Managed Lustre and the JobSet controller. The validation job
is no resource: ``python -m gpu_cluster.workloads.validate submit STACK`` runs it from the outputs.

The in-cluster part goes through the cluster's API, so the machine that runs ``pulumi up``
must reach it: the endpoint is public but authorised only for ``orchestration.deployer_cidrs``
and the cluster's own range, as cluster-toolkit's GKE blueprints do (examples/gke-a3-megagpu/
gke-a3-megagpu.yaml at 01a7a3ed: ``enable_private_endpoint: false``, ``master_authorized_networks``
holding ``authorized_cidr``, "the IP of the machine calling terraform", and
``gcp_public_cidrs_access_enabled: false``). With ``orchestration.endpoint:
private`` the endpoint is private and the in-cluster part is left to a program run from
inside the VPC (docs/stacks.md, "A private cluster").

Security defaults follow the checks FACTS.md names: private nodes, an endpoint restricted to
authorised networks (CKV_GCP_25/18/64, with CKV_GCP_18 deliberately relaxed to public-with-
authorised-networks so the deployer can reach it); shielded nodes (CKV_GCP_71);
Workload Identity (CKV_GCP_69) and Binary Authorization (CKV_GCP_66), each beside its value below;
intranode visibility (CKV_GCP_61) is left off, with the reason beside it. Dataplane V2 (ADVANCED_DATAPATH) is what multi-networking needs
(cloud.google.com/kubernetes-engine/docs/how-to/setup-multinetwork-support-for-pods) and it
enforces NetworkPolicy itself, so the legacy Calico ``network_policy`` block is left unset
(GKE refuses both together).

The Kubernetes provider is built from the cluster's endpoint and CA with ``Output.format``; no
resource is created inside an ``apply``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Sequence

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from gpu_cluster.components.gcp.common import GKE_ACCELERATOR, AddressPlan, labels
from gpu_cluster.components.gcp.interconnect import NicName, NicNetwork
from gpu_cluster.components.gcp.dashboard import gke_dashboard
from gpu_cluster.components.gcp.metrics import monitoring_config, pushgateway_pod_monitoring
from gpu_cluster.components.gcp.compute import NODE_ROLES
from gpu_cluster.components.gcp.workload_identity import bucket_volume, checkpoint_claim_name, workload_account

# Re-exported: components/gcp/cluster.py names it in the stack output scheduler.namespace.
from gpu_cluster.components.k8s.addons import JOB_NAMESPACE as JOB_NAMESPACE, job_namespace, jobset
from gpu_cluster.components.k8s.gke import NodeNetwork, gke_networks, lustre_volume
from gpu_cluster.components.k8s.gke_installers import (
    NEEDS_DEVICE_INJECTOR,
    installer_ref,
    nccl_installer,
    nri_device_injector,
)
from gpu_cluster.components.k8s.kueue import LOCAL_QUEUE, Quota, kueue
from gpu_cluster.components.k8s.metrics import pushgateway
from gpu_cluster.components.gcp.rules import GKE_RELEASE_CHANNEL, queued_provisioning
from gpu_cluster.components.spec import ClusterSpec

RELEASE_CHANNEL = GKE_RELEASE_CHANNEL
# The Lustre and checkpoint claims and the Workload Identity service account live in JOB_NAMESPACE
# (components/k8s/addons.py), where the jobs run: a pod mounts only claims of its own namespace and
# runs only as a service account of its own namespace.
# Auto-upgrades stay on (security patches of the control plane), but no minor version and no
# node upgrade lands while the cluster trains: cluster-toolkit examples/gke-a3-ultragpu/
# gke-a3-ultragpu.yaml at 1047080 sets exactly this exclusion on the REGULAR channel, and
# modules/scheduler/gke-cluster/variables.tf its daily window default (09:00 GMT).
MAINTENANCE_WINDOW = "09:00"
MAINTENANCE_EXCLUSION = (
    "no-minor-or-node-upgrades-indefinite",
    "2025-12-01T00:00:00Z",
    "NO_MINOR_OR_NODE_UPGRADES",
    "UNTIL_END_OF_SUPPORT",
)
# The CPU pool where the JobSet controller and other add-ons run, never waiting for GPU nodes
# (cluster-toolkit modules/scheduler/gke-cluster/variables.tf at 1047080: system pool "system",
# e2-standard-4, 100 GB, autoscaling 2..10; the A3 Ultra example clears its default taint so
# add-on charts schedule there without tolerations).
SYSTEM_POOL_NAME, SYSTEM_MACHINE_TYPE, SYSTEM_DISK_GB, SYSTEM_NODES = "system", "e2-standard-4", 100, (2, 10)


@dataclass(frozen=True, slots=True, kw_only=True)
class GkeArgs:
    spec: ClusterSpec
    """The checked cluster description."""
    project: pulumi.Input[str]
    plan: AddressPlan
    network: pulumi.Input[str]
    """System VPC id."""
    subnet: pulumi.Input[str]
    """System subnet id (has the pods and services secondary ranges)."""
    nics: list[NicNetwork]
    """Additional node networks (from Interconnect)."""
    lustre_instance_id: str
    lustre_mount_point: pulumi.Input[str]
    """Managed Lustre's ``<ip>@tcp:/<fs>``."""
    lustre_filesystem: str
    lustre: pulumi.Resource
    """The instance, so the PersistentVolume waits for it."""
    bucket: pulumi.Input[str]
    """Checkpoint bucket name (mounted through the GCS FUSE CSI driver)."""


def _extra_standard_nics(nics: Sequence[NicNetwork]) -> bool:
    """Whether a node has a standard (gVNIC) NIC beyond the first, in a VPC of its own: every
    additional NIC but the RoCE ones (which Lustre's driver never uses) is one."""
    return any(n.role != "rdma" for n in nics)


def _device_mode(nic: NicNetwork | NicName) -> Literal["NetDevice", "RDMA"]:
    # cluster-toolkit gke-cluster main.tf at 1047080: RDMA for RoCE NICs, NetDevice for the rest
    # (the second gVNIC of A3 Ultra/A4 included).
    return "RDMA" if nic.role == "rdma" else "NetDevice"


class GkeOrchestration(pulumi.ComponentResource):
    """Private GKE cluster with multi-networking, plus its GPU add-ons."""

    cluster: gcp.container.Cluster
    provider: k8s.Provider
    private_endpoint: bool
    kubeconfig: pulumi.Output[str]
    lustre_claim_name: str
    system_pool: gcp.container.NodePool
    workload_account: gcp.serviceaccount.Account
    checkpoint_claim_name: str

    def __init__(self, name: str, args: GkeArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-cluster:gcp:Orchestration", name, None, opts)
        self._name = name
        spec = args.spec
        o = spec.orchestration
        self.private_endpoint = o.endpoint == "private"
        # The cluster's own range always (runners, bastions, the private program); the
        # deployers' ranges when the endpoint is public (cluster-toolkit gke-a3-megagpu.yaml,
        # master_authorized_networks with the deployer's authorized_cidr).
        cidrs = [*o.api_access_cidrs, args.plan.cluster]
        self.cluster = gcp.container.Cluster(
            f"{name}-gke",
            name=spec.name,
            location=spec.zone,
            network=args.network,
            subnetwork=args.subnet,
            remove_default_node_pool=True,
            initial_node_count=1,
            min_master_version=o.kubernetes_version,
            release_channel=gcp.container.ClusterReleaseChannelArgs(channel=RELEASE_CHANNEL),
            maintenance_policy=gcp.container.ClusterMaintenancePolicyArgs(
                daily_maintenance_window=gcp.container.ClusterMaintenancePolicyDailyMaintenanceWindowArgs(
                    start_time=MAINTENANCE_WINDOW
                ),
                maintenance_exclusions=[
                    gcp.container.ClusterMaintenancePolicyMaintenanceExclusionArgs(
                        exclusion_name=MAINTENANCE_EXCLUSION[0],
                        start_time=MAINTENANCE_EXCLUSION[1],
                        exclusion_options=gcp.container.ClusterMaintenancePolicyMaintenanceExclusionExclusionOptionsArgs(
                            scope=MAINTENANCE_EXCLUSION[2], end_time_behavior=MAINTENANCE_EXCLUSION[3]
                        ),
                    )
                ],
            ),
            networking_mode="VPC_NATIVE",
            ip_allocation_policy=gcp.container.ClusterIpAllocationPolicyArgs(
                cluster_secondary_range_name="pods", services_secondary_range_name="services"
            ),
            private_cluster_config=gcp.container.ClusterPrivateClusterConfigArgs(
                enable_private_nodes=True,
                enable_private_endpoint=self.private_endpoint,
                master_global_access_config=gcp.container.ClusterPrivateClusterConfigMasterGlobalAccessConfigArgs(
                    enabled=True
                ),
            ),
            master_authorized_networks_config=gcp.container.ClusterMasterAuthorizedNetworksConfigArgs(
                cidr_blocks=[
                    gcp.container.ClusterMasterAuthorizedNetworksConfigCidrBlockArgs(
                        cidr_block=c, display_name=f"allowed-{i}"
                    )
                    for i, c in enumerate(cidrs)
                ],
                gcp_public_cidrs_access_enabled=False,
            ),
            enable_shielded_nodes=True,
            # CKV_GCP_66. Admission is checked against the project's singleton Binary Authorization
            # policy, which until its owner tightens it is "evaluationMode: ALWAYS_ALLOW" (cloud.google
            # .com/binary-authorization/docs/configuring-policy-cli, read 2026-12-01: the exported
            # default policy), so the installers and jobs are admitted and the owner holds the gate.
            binary_authorization=gcp.container.ClusterBinaryAuthorizationArgs(
                evaluation_mode="PROJECT_SINGLETON_POLICY_ENFORCE"
            ),
            # Intranode visibility off, a deliberate exception to CKV_GCP_61. The intranode-visibility
            # page (cloud.google.com/kubernetes-engine/docs/how-to/intranode-visibility, read 2026-12)
            # covers Dataplane V2 (netd redirects, eBPF-native from 1.36.0-gke.3302000) but not
            # multi-network Pods, and the multi-network pages (setup-multinetwork-support-for-pods,
            # about-multinetwork-support-for-pods) do not name it among what works with them; no
            # reference GPU cluster turns it on with multi-networking (cluster-toolkit at 1047080 sets
            # it nowhere: gke-a3-megagpu, gke-a3-ultragpu, gke-a4). Without a source that the two work
            # together, the path of every pod's primary traffic is not changed on a guess. What it
            # would add is flow logs and firewall rules for traffic between pods of one node; the
            # job's pods are one per node, and their NetworkPolicy is enforced by Dataplane V2.
            enable_intranode_visibility=False,
            workload_identity_config=gcp.container.ClusterWorkloadIdentityConfigArgs(
                workload_pool=pulumi.Output.format("{0}.svc.id.goog", args.project)
            ),
            datapath_provider="ADVANCED_DATAPATH",
            enable_multi_networking=True,
            addons_config=gcp.container.ClusterAddonsConfigArgs(
                # Lustre on its default port 988 (no enable_legacy_lustre_port, deprecated: only
                # for instances made with gke_support_enabled, which storage.py no longer sets).
                # Multi-NIC off: from 1.35.2-gke.1842000 the driver spreads Lustre over every
                # standard NIC and needs them all in one VPC; our nodes' extra gVNICs (A3 Ultra/A4's
                # second gVNIC, A3 High/Mega's GPU NICs) each sit in a VPC of their own
                # (docs.cloud.google.com/managed-lustre/docs/lustre-csi-driver-existing-instance,
                # "Multi-NIC support" and "Lustre communication ports", read 2026-12-01).
                lustre_csi_driver_config=gcp.container.ClusterAddonsConfigLustreCsiDriverConfigArgs(
                    enabled=True, disable_multi_nic=_extra_standard_nics(args.nics) or None
                ),
                gcs_fuse_csi_driver_config=gcp.container.ClusterAddonsConfigGcsFuseCsiDriverConfigArgs(enabled=True),
            ),
            # GKE's managed DCGM metrics into Managed Service for Prometheus (components/gcp/metrics.py).
            monitoring_config=monitoring_config(),
            resource_labels=labels(spec),
            # pulumi-gcp 10.2.0 container.Cluster: "Deleting this cluster via terraform destroy or
            # pulumi up will only succeed if this field is false in the Terraform state" (the SDK's
            # ClusterArgs docstring, read 2026-12-01). On by default; teardown sets it false first.
            deletion_protection=spec.orchestration.deletion_protection,
            opts=pulumi.ResourceOptions(parent=self),
        )
        # Its GPU dashboard in Cloud Monitoring, over the DCGM metrics above (components/gcp/dashboard.py).
        self.dashboard = gke_dashboard(name, spec, args.project, self)
        self.kubeconfig = self._kubeconfig(spec)
        self.system_pool = self._create_system_pool(name, spec, args)
        self.workload_account = workload_account(
            name,
            spec,
            project=args.project,
            bucket=args.bucket,
            namespace=JOB_NAMESPACE,
            opts=pulumi.ResourceOptions(parent=self),
        )
        # lustre_volume names its claim "<name>-lustre"; jobs mount it by that name.
        self.lustre_claim_name = lustre_claim_name(name)
        self.checkpoint_claim_name = checkpoint_claim_name(name)
        if o.in_cluster:
            self.provider = k8s.Provider(
                f"{name}-k8s",
                kubeconfig=self.kubeconfig,
                opts=pulumi.ResourceOptions(parent=self),
            )
            self._create_addons(name, args)
        self.register_outputs(
            {
                "cluster": self.cluster.name,
                "endpoint": self.cluster.endpoint,
                "private_endpoint": self.private_endpoint,
            }
        )

    def _create_system_pool(self, name: str, spec: ClusterSpec, args: GkeArgs) -> gcp.container.NodePool:
        account = gcp.serviceaccount.Account(
            f"{name}-system-nodes",
            account_id=spec.name[:20].rstrip("-") + "-sys-nodes",
            display_name=f"gpu-cluster {spec.name} system nodes",
            project=args.project,
            opts=pulumi.ResourceOptions(parent=self),
        )
        for role in NODE_ROLES:
            gcp.projects.IAMMember(
                f"{name}-system-nodes-{role.rsplit('.', 1)[-1].lower()}",
                project=args.project,
                role=role,
                member=pulumi.Output.format("serviceAccount:{0}", account.email),
                opts=pulumi.ResourceOptions(parent=self),
            )
        return gcp.container.NodePool(
            f"{name}-system",
            name=SYSTEM_POOL_NAME,
            cluster=self.cluster.id,
            location=spec.zone,
            node_locations=[spec.zone],
            autoscaling=gcp.container.NodePoolAutoscalingArgs(
                total_min_node_count=SYSTEM_NODES[0], total_max_node_count=SYSTEM_NODES[1]
            ),
            management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=SYSTEM_MACHINE_TYPE,
                disk_size_gb=SYSTEM_DISK_GB,
                image_type="COS_CONTAINERD",
                gvnic=gcp.container.NodePoolNodeConfigGvnicArgs(enabled=True),
                shielded_instance_config=gcp.container.NodePoolNodeConfigShieldedInstanceConfigArgs(
                    enable_secure_boot=True, enable_integrity_monitoring=True
                ),
                workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
                    mode="GKE_METADATA"
                ),
                service_account=account.email,
                oauth_scopes=["https://www.googleapis.com/auth/cloud-platform"],
                resource_labels=labels(spec),
                labels={"gpu-cluster/role": "system"},
            ),
            network_config=gcp.container.NodePoolNetworkConfigArgs(enable_private_nodes=True),
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _kubeconfig(self, spec: ClusterSpec) -> pulumi.Output[str]:
        # gke-gcloud-auth-plugin mints short-lived tokens; nothing secret is stored in state.
        template = (
            "apiVersion: v1\nkind: Config\ncurrent-context: gke\n"
            "clusters:\n- name: gke\n  cluster:\n    server: https://{0}\n    certificate-authority-data: {1}\n"
            "contexts:\n- name: gke\n  context:\n    cluster: gke\n    user: gke\n"
            "users:\n- name: gke\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n"
            "      command: gke-gcloud-auth-plugin\n      provideClusterInfo: true\n"
        )
        return pulumi.Output.format(
            template,
            self.cluster.endpoint,
            self.cluster.master_auth.apply(lambda m: m.cluster_ca_certificate if m else ""),
        )

    def _create_addons(self, name: str, args: GkeArgs) -> None:
        # Everything in the cluster waits for the system pool: the JobSet chart's wait would
        # otherwise time out with only (possibly zero) GPU nodes to schedule on.
        create_in_cluster_layer(
            name,
            GkeLayerArgs(
                spec=args.spec,
                networks=node_networks(args.nics),
                claim_name=self.lustre_claim_name,
                volume_handle=pulumi.Output.format(
                    "{0}/{1}/{2}", args.project, args.spec.zone, args.lustre_instance_id
                ),
                lustre_address=args.lustre_mount_point,
                filesystem=args.lustre_filesystem,
                after=[args.lustre],
                bucket=args.bucket,
                checkpoint_claim=self.checkpoint_claim_name,
                workload_account=self.workload_account.email,
            ),
            pulumi.ResourceOptions(parent=self, provider=self.provider, depends_on=[self.system_pool]),
        )


def node_networks(nics: Sequence[NicNetwork | NicName]) -> list[NodeNetwork]:
    """The GKE Network objects the node pool's additional NICs need (also a stack output)."""
    # From the cluster stack's own resources the names are their outputs, so the objects depend
    # on the VPCs and subnets (destroy removes them first); the private layer has only names.
    return [
        NodeNetwork(
            name=n.k8s_name,
            vpc=n.network.name if isinstance(n, NicNetwork) else n.vpc,
            subnet=n.subnet.name if isinstance(n, NicNetwork) else n.subnet,
            device_mode=_device_mode(n),
        )
        for n in nics
    ]


def lustre_claim_name(orchestration_component: str) -> str:
    """The Lustre claim's name: ``lustre_volume`` names it after the Orchestration component."""
    return f"{orchestration_component}-lustre"


@dataclass(frozen=True, slots=True, kw_only=True)
class GkeLayerArgs:
    """What the in-cluster layer of a GKE cluster needs, whichever program deploys it."""

    spec: ClusterSpec
    networks: list[NodeNetwork]
    claim_name: str
    """The Lustre claim's name (the stack output scheduler.lustre_claim)."""
    volume_handle: pulumi.Input[str]
    """``<project>/<zone>/<instance>`` (the stack output mount.volume_handle)."""
    lustre_address: pulumi.Input[str]
    """Managed Lustre's ``<ip>@tcp:/<fs>`` (the stack output mount.dns_name)."""
    filesystem: pulumi.Input[str]
    bucket: pulumi.Input[str]
    """Checkpoint bucket name."""
    checkpoint_claim: str
    workload_account: pulumi.Input[str]
    """Email of the Google account bound to the jobs' Kubernetes service account."""
    after: list[pulumi.Resource] = field(default_factory=list)


def create_in_cluster_layer(name: str, args: GkeLayerArgs, k8s_opts: pulumi.ResourceOptions) -> None:
    """Network objects, the NCCL plugin installer (and the NRI device injector for TCPX/TCPXO), the
    Lustre volume and claim, the checkpoint bucket's volume, the JobSet controller, the Pushgateway and
    its PodMonitoring: through the Kubernetes provider in ``k8s_opts``."""
    spec = args.spec
    lab = labels(spec)
    fabric = spec.instance.network.fabric
    accelerator = GKE_ACCELERATOR[spec.compute.instance_type]
    gke_networks(name, args.networks, lab, k8s_opts)
    namespace = job_namespace(name, k8s_opts, lab)
    in_namespace = pulumi.ResourceOptions.merge(k8s_opts, pulumi.ResourceOptions(depends_on=[namespace]))
    # By digest only: without one (a fabric whose installer digest no published reference gives,
    # and a stack that names none, which only the offline plan lets through) no installer is
    # planned, and the plan says so (components/plan_caveats.py).
    installer = installer_ref(fabric, spec.orchestration.installer_image, spec.images)
    if installer is not None:
        nccl_installer(name, fabric, accelerator, lab, k8s_opts, installer)
    if fabric in NEEDS_DEVICE_INJECTOR:
        nri_device_injector(name, accelerator, lab, k8s_opts)
    lustre_volume(
        name,
        volume_handle=args.volume_handle,
        ip=pulumi.Output.from_input(args.lustre_address).apply(lambda m: (m or "").split("@")[0]),
        filesystem=args.filesystem,
        size_gib=spec.storage.lustre.size_gib,
        labels=lab,
        claim_name=args.claim_name,
        namespace=JOB_NAMESPACE,
        opts=pulumi.ResourceOptions.merge(in_namespace, pulumi.ResourceOptions(depends_on=list(args.after))),
    )
    bucket_volume(
        name,
        bucket=args.bucket,
        claim_name=args.checkpoint_claim,
        namespace=JOB_NAMESPACE,
        account_email=args.workload_account,
        labels=lab,
        opts=in_namespace,
    )
    jobset(f"{name}-jobset", k8s_opts, pins=spec.images)
    # The validation's figures: the judge pushes them to the Pushgateway on the system pool, which
    # managed collection scrapes by a PodMonitoring (components/gcp/metrics.py).
    system_pool = {"cloud.google.com/gke-nodepool": SYSTEM_POOL_NAME}
    pushgateway(name, node_selector=system_pool, pins=spec.images, opts=k8s_opts)
    pushgateway_pod_monitoring(name, labels=lab, opts=k8s_opts)
    if queued_provisioning(spec.compute.capacity.type, spec.compute.nodes):
        inst = spec.instance
        nodes = spec.compute.nodes
        kueue(
            f"{name}-kueue",
            quota=Quota(
                gpus=inst.accelerator.count * nodes,
                cpus=inst.vcpu * nodes,
                memory_gib=int(inst.host_memory_gib) * nodes,
            ),
            job_namespace=JOB_NAMESPACE,
            node_selector=system_pool,
            labels=lab,
            opts=k8s_opts,
            namespace_ready=namespace,
            pins=spec.images,
        )


def job_queue(spec: ClusterSpec) -> str | None:
    """The Kueue LocalQueue jobs are submitted through (the stack output scheduler.queue), or None
    where the pool is not queued (gpu_cluster.components.gcp.rules.queued_provisioning)."""
    return LOCAL_QUEUE if queued_provisioning(spec.compute.capacity.type, spec.compute.nodes) else None
