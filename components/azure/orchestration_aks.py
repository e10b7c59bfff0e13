"""Orchestration on AKS: the cluster with a CPU system pool, and the GPU pool on the ND size.

The GPU pool is a scale-set pool (the Virtual Machines pool type has no InfiniBand,
virtual-machines-node-pools.md at fb060ab) with the GPU driver left to the operators
(``gpu_profile.driver: None``: NVIDIA's GPU Operator and Network Operator, or AMD's GPU
operator, which AKS requires for MI300X; use-nvidia-gpu.md, use-amd-gpus.md at fb060ab).
The operators themselves, the Managed Lustre CSI driver with the file system's volume and JobSet
are the in-cluster layer (``create_in_cluster_layer``, parts in components/k8s/aks.py), deployed
through the cluster's API by the same ``pulumi up``. The subscription feature ``Microsoft.ContainerService/AKSInfinibandSupport``
must be Registered for ND v5 pools (use-amd-gpus.md); it is subscription-wide, so the program
does not flip it: a preflight is to check it.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_azure_native as azure
import pulumi_kubernetes as k8s

from components.azure.common import AKS_DNS_SERVICE_IP, AKS_POD_CIDR, AKS_SERVICE_CIDR, cluster_tags
from components.k8s import aks as layer
from components.k8s.addons import job_namespace, jobset
from components.spec import ClusterSpec

# Pool names: lower-case letters and digits, starting with a letter, 1-12 characters on Linux
# (create-node-pools.md at fb060ab).
GPU_POOL = "gpu"
SYSTEM_POOL = "system"
# Taint on the GPU pool, the GPU Operator page's example (nvidia-gpu-operator.md at fb060ab);
# only pods that tolerate it land there.
GPU_TAINT_KEY = "sku"
GPU_TAINT = f"{GPU_TAINT_KEY}=gpu:NoSchedule"
# AKS taints every Spot pool kubernetes.azure.com/scalesetpriority=spot:NoSchedule itself
# (spot-node-pool.md:41 at fb060ab): on a spot GPU pool the operators' DaemonSets and the jobs
# must tolerate it too, or nothing lands there.
SPOT_TAINT_KEY = "kubernetes.azure.com/scalesetpriority"


def gpu_taint_keys(spec: ClusterSpec) -> list[str]:
    """Every taint key the GPU pool's nodes carry: ours, and AKS's own on a Spot pool."""
    return [GPU_TAINT_KEY, *([SPOT_TAINT_KEY] if spec.compute.capacity.type == "spot" else [])]


# Network Contributor (built-in role): the cluster's identity manages the node subnets and
# the NAT gateway of a VNet it did not create. The same id in AKS BYO-subnet bicep samples
# (find_string, read 2026-12-01); the built-in roles page was not re-read this session.
NETWORK_CONTRIBUTOR = "4d97b98b-1d4f-4787-a291-c67834d212e7"
# AKS labels each node with its pool (agentpool=<name>; ai-infrastructure-on-azure deploy-aks.sh at
# a01b073 selects nodes on it): controllers go to the system pool, which exists before GPU nodes.
POOL_LABEL = "agentpool"
# The Lustre claim the jobs mount (in the jobs' namespace) and its PV: one name.
LUSTRE_CLAIM = "lustre"


@dataclass(frozen=True, slots=True, kw_only=True)
class AksArgs:
    spec: ClusterSpec
    resource_group: pulumi.Input[str]
    vnet_id: pulumi.Input[str]
    node_subnet: pulumi.Input[str]
    system_subnet: pulumi.Input[str]
    egress_ips: Sequence[pulumi.Input[str | None]] = ()
    """The nodes' egress addresses (the NAT gateway's public IPs): the API server must admit them."""
    lustre_id: pulumi.Input[str] | None = None
    """The Managed Lustre file system's id: the CSI volume's handle."""
    lustre_mgs: pulumi.Input[str] | None = None
    """Its MGS address (client_info.mgs_address), the CSI volume's mgs-ip-address."""
    after: Sequence[pulumi.Resource] = ()
    """What the Lustre volume waits for (the file system)."""


class AksOrchestration(pulumi.ComponentResource):
    cluster: azure.containerservice.ManagedCluster
    gpu_pool: azure.containerservice.AgentPool
    kubeconfig: pulumi.Output[str]
    provider: k8s.Provider | None = None

    def __init__(self, name: str, args: AksArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-cluster:azure:Orchestration", name, None, opts)
        spec = args.spec
        tags = cluster_tags(spec)
        identity = azure.managedidentity.UserAssignedIdentity(
            f"{name}-identity",
            resource_group_name=args.resource_group,
            location=spec.region,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        client = azure.authorization.get_client_config_output(opts=pulumi.InvokeOutputOptions(parent=self))
        network_role = azure.authorization.RoleAssignment(
            f"{name}-network-role",
            principal_id=identity.principal_id,
            principal_type="ServicePrincipal",
            role_definition_id=pulumi.Output.format(
                "/subscriptions/{0}/providers/Microsoft.Authorization/roleDefinitions/{1}",
                client.subscription_id,
                NETWORK_CONTRIBUTOR,
            ),
            scope=args.vnet_id,
            opts=pulumi.ResourceOptions(parent=self),
        )
        o = spec.orchestration
        self.cluster = azure.containerservice.ManagedCluster(
            f"{name}-aks",
            resource_name_=spec.name,
            resource_group_name=args.resource_group,
            location=spec.region,
            dns_prefix=spec.name,
            # Left to AKS's default when the stack names no version (rules.py: no AKS version
            # list was read to pin one).
            kubernetes_version=o.kubernetes_version or None,
            identity=azure.containerservice.ManagedClusterIdentityArgs(
                type=azure.containerservice.ResourceIdentityType.USER_ASSIGNED, user_assigned_identities=[identity.id]
            ),
            # Paid tier, with the uptime SLA (Checkov CKV_AZURE_170; AZURE.md §7).
            sku=azure.containerservice.ManagedClusterSKUArgs(name="Base", tier="Standard"),
            # The API admits only the deployers' ranges (Checkov CKV_AZURE_6): `pulumi up` and
            # `validate submit` reach it from there; and the cluster's own egress address, where
            # every kubelet comes from through the NAT gateway (outboundType userAssignedNATGateway):
            # "include ... the cluster egress IP address (firewall, NAT gateway, or other address,
            # depending on your outbound type)" (api-server-authorized-ip-ranges.md:45 at fb060ab).
            # AKS adds only a Standard load balancer's outbound IP by itself (same page, line 51).
            api_server_access_profile=azure.containerservice.ManagedClusterAPIServerAccessProfileArgs(
                authorized_ip_ranges=[
                    *o.deployer_cidrs,
                    *(pulumi.Output.from_input(ip).apply(lambda a: f"{a}/32") for ip in args.egress_ips),
                ]
            ),
            network_profile=azure.containerservice.ContainerServiceNetworkProfileArgs(
                network_plugin="azure",
                network_plugin_mode="overlay",
                pod_cidr=AKS_POD_CIDR,
                service_cidr=AKS_SERVICE_CIDR,
                dns_service_ip=AKS_DNS_SERVICE_IP,
                # Egress through the node subnets' NAT gateway (AZURE.md §7 AKS cluster row).
                outbound_type="userAssignedNATGateway",
            ),
            # OIDC issuer and workload identity, blob CSI driver: as ai-infrastructure-on-azure
            # deploy-aks.sh at a01b073 creates its cluster (--enable-oidc-issuer
            # --enable-workload-identity --enable-blob-driver --os-sku Ubuntu --node-count 1).
            oidc_issuer_profile=azure.containerservice.ManagedClusterOIDCIssuerProfileArgs(enabled=True),
            security_profile=azure.containerservice.ManagedClusterSecurityProfileArgs(
                workload_identity=azure.containerservice.ManagedClusterSecurityProfileWorkloadIdentityArgs(enabled=True)
            ),
            storage_profile=azure.containerservice.ManagedClusterStorageProfileArgs(
                blob_csi_driver=azure.containerservice.ManagedClusterStorageProfileBlobCSIDriverArgs(enabled=True)
            ),
            enable_rbac=True,
            agent_pool_profiles=[
                azure.containerservice.ManagedClusterAgentPoolProfileArgs(
                    name=SYSTEM_POOL,
                    mode="System",
                    count=1,
                    os_sku="Ubuntu",
                    type="VirtualMachineScaleSets",
                    vnet_subnet_id=args.system_subnet,
                    enable_node_public_ip=False,
                    availability_zones=[spec.zone],
                )
            ],
            tags=tags,
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[network_role],
                # The GPU pool is its own resource (below); the cluster's inline list holds
                # the system pool only and must not fight it.
                ignore_changes=["agentPoolProfiles"],
            ),
        )
        self.gpu_pool = self._create_gpu_pool(name, spec, args)
        creds = azure.containerservice.list_managed_cluster_user_credentials_output(
            resource_group_name=args.resource_group,
            resource_name=self.cluster.name,
            opts=pulumi.InvokeOutputOptions(parent=self),
        )
        # "Base64-encoded Kubernetes configuration file" (CredentialResultResponse.value): the
        # stack output is the file itself, as on EKS and GKE. With local accounts on (no Entra
        # ID profile yet) this kubeconfig holds the cluster user's credentials: a secret output.
        self.kubeconfig = pulumi.Output.secret(
            creds.kubeconfigs[0].value.apply(lambda v: base64.b64decode(v).decode("utf-8"))
        )
        if spec.orchestration.in_cluster and args.lustre_id is not None and args.lustre_mgs is not None:
            # The layer waits for the cluster (its system pool is inline) and not for the GPU pool:
            # the operators' DaemonSets are ready with no GPU node yet.
            self.provider = k8s.Provider(
                f"{name}-k8s", kubeconfig=self.kubeconfig, opts=pulumi.ResourceOptions(parent=self)
            )
            create_in_cluster_layer(
                name,
                AksLayerArgs(
                    spec=spec,
                    volume_handle=args.lustre_id,
                    mgs_address=args.lustre_mgs,
                    after=list(args.after),
                ),
                pulumi.ResourceOptions(parent=self, provider=self.provider),
            )
        self.register_outputs({"cluster": self.cluster.id, "gpu_pool": self.gpu_pool.name})

    def _create_gpu_pool(self, name: str, spec: ClusterSpec, args: AksArgs) -> azure.containerservice.AgentPool:
        cap = spec.compute.capacity
        return azure.containerservice.AgentPool(
            f"{name}-gpu-pool",
            resource_group_name=args.resource_group,
            resource_name_=self.cluster.name,
            agent_pool_name=GPU_POOL,
            mode="User",
            vm_size=spec.compute.instance_type,
            count=spec.compute.nodes,
            type="VirtualMachineScaleSets",
            os_sku="Ubuntu",
            # The operators install the driver (GPU Operator with driver.rdma, or AMD's); AMD
            # pools must be None (use-amd-gpus.md). Create-time only.
            gpu_profile=azure.containerservice.GPUProfileArgs(driver="None"),
            node_taints=[GPU_TAINT],
            vnet_subnet_id=args.node_subnet,
            enable_node_public_ip=False,
            availability_zones=[spec.zone],
            os_disk_size_gb=spec.compute.root_volume_gib,
            capacity_reservation_group_id=cap.id if cap.type == "reservation" else None,
            scale_set_priority="Spot" if cap.type == "spot" else None,
            tags=cluster_tags(spec),
            opts=pulumi.ResourceOptions(parent=self),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AksLayerArgs:
    """What the in-cluster layer of an AKS cluster needs, whichever program deploys it."""

    spec: ClusterSpec
    volume_handle: pulumi.Input[str]
    mgs_address: pulumi.Input[str]
    gpu_operator: layer.GpuOperator | None = None
    """nvidia or amd; unset: the accelerator's vendor's. A mismatch is refused."""
    after: Sequence[pulumi.Resource] = ()
    controller_node_selector: Mapping[str, str] = field(default_factory=lambda: {POOL_LABEL: SYSTEM_POOL})


def gpu_operator_for(spec: ClusterSpec, asked: str | None) -> layer.GpuOperator:
    """The GPU operator the size needs: AMD's for MI300X (AKS installs no AMD driver or device
    plugin, use-amd-gpus.md at fb060ab), NVIDIA's for H100/H200. Any other choice is refused with
    the allowed one, before any resource is declared."""
    vendor = spec.instance.accelerator.vendor
    needed: layer.GpuOperator = "amd" if vendor == "amd" else "nvidia"
    if asked is not None and asked != needed:
        raise ValueError(
            f"gpu_operator: {asked!r} cannot drive {spec.compute.instance_type} ({vendor} GPUs) (allowed: {needed!r})"
        )
    return needed


def create_in_cluster_layer(name: str, args: AksLayerArgs, k8s_opts: pulumi.ResourceOptions) -> None:
    """The network operator with its NicClusterPolicy (``rdma/ib``), the GPU operator of the
    size's vendor, the Lustre CSI driver with the file system's volume and claim, the jobs'
    namespace and the JobSet controller: through the Kubernetes provider in ``k8s_opts``."""
    spec = args.spec
    operator = gpu_operator_for(spec, args.gpu_operator)
    # InfiniBand on every ND v5 size: the DOCA driver and the SR-IOV device plugin, for NVIDIA and
    # AMD GPUs alike (AKS_RDMA runs its RCCL test on rdma/ib too, tests/scenarios/k8s).
    # Every operand that must run on the GPU nodes tolerates the pool's taint (components/k8s/aks.py
    # says, per operand, where its default tolerations were read).
    taint = [layer.Toleration(key=k) for k in gpu_taint_keys(spec)]
    network = layer.network_operator(name, k8s_opts, taint)
    if operator == "nvidia":
        layer.gpu_operator(name, k8s_opts, taint, after=network[-1:])
    else:
        # AKS installs no AMD driver (use-amd-gpus.md:49) and the DeviceConfig leaves it off, as the
        # reference does: its own installer runs first (Azure/aks-rdma-infiniband deploy-aks.sh
        # all-amd: install_amdgpu_driver before install_amd_gpu_operator), on the GPU pool's nodes.
        driver = layer.amd_driver_installer(name, k8s_opts, taint, node_selector={POOL_LABEL: GPU_POOL})
        layer.amd_gpu_operator(name, k8s_opts, taint, after=driver)
    csi = layer.lustre_csi(name, k8s_opts)
    namespace = job_namespace(name, k8s_opts)
    layer.lustre_volume(
        name,
        claim_name=LUSTRE_CLAIM,
        namespace=namespace.metadata.name,
        volume_handle=args.volume_handle,
        mgs_address=args.mgs_address,
        size_gib=spec.storage.lustre.size_gib,
        opts=pulumi.ResourceOptions.merge(
            k8s_opts, pulumi.ResourceOptions(depends_on=[namespace, *csi[-1:], *args.after])
        ),
    )
    jobset(f"{name}-jobset", k8s_opts, node_selector=args.controller_node_selector, pins=spec.images)
