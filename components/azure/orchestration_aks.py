"""Orchestration on AKS: the cluster with its system pool, a CPU pool for the in-cluster
controllers, and the GPU pool on the ND size; their upgrade windows, identities and logs.

The GPU pool is a scale-set pool (the Virtual Machines pool type has no InfiniBand,
virtual-machines-node-pools.md at fb060ab) with the GPU driver left to the operators
(``gpu_profile.driver: None``: NVIDIA's GPU Operator and Network Operator, or AMD's GPU
operator, which AKS requires for MI300X; use-nvidia-gpu.md, use-amd-gpus.md at fb060ab).
The operators themselves, the Managed Lustre CSI driver with the file system's volume and JobSet
are the in-cluster layer (``create_in_cluster_layer``, parts in components/k8s/aks.py), deployed
through the cluster's API by the same ``pulumi up``. The subscription feature ``Microsoft.ContainerService/AKSInfinibandSupport``
must be Registered for ND v5 pools (use-amd-gpus.md); it is subscription-wide, so the program
does not flip it: the Azure preflight checks it (components/preflight/azure.py).

Every page named below is MicrosoftDocs/azure-aks-docs ``articles/aks/<page>`` at fb060ab unless
another repository is named.

* Access: Microsoft Entra ID with Azure RBAC, local accounts off (local-accounts.md:16: with them
  on, ``--admin`` stays "a non-auditable backdoor"; entra-id-authorization.md:78-102). The deployer
  (whoever runs ``pulumi up``) gets Azure Kubernetes Service RBAC Cluster Admin on the cluster, so
  the in-cluster layer can go in; role assignments "can take up to five minutes to propagate"
  (entra-id-authorization.md:36). The kubeconfig signs in through the Azure CLI (common.py).
* Pools: the system pool runs critical add-ons only (``CriticalAddonsOnly=true:NoSchedule``,
  use-system-pools.md:70), 3 nodes across the region's zones (at least two, three recommended,
  line 77; 4 vCPU minimum, no B-series, lines 78-79), Standard_D4ds_v5 with an ephemeral OS disk
  (best-practices-app-cluster-reliability.md:750: v5 sizes with ephemeral OS disks; the size's
  150 GiB temp disk holds the default ephemeral OS disk, concepts-storage.md:37; Ddsv5 "Ephemeral
  OS Disks: Supported", MicrosoftDocs/azure-compute-docs ddsv5-series.md at 1421aeb). The
  controllers (operators, NFD, cert-manager, the Lustre CSI controller, JobSet) go to a user pool of
  their own, ``ctrl``, since the system pool no longer takes them ("schedule your application pods
  on user node pools", use-system-pools.md:222). Every pool: 250 pods a node, Azure CNI Overlay's
  default and maximum (concepts-network-azure-cni-overlay.md:108-116), written out.
* Network policy: Cilium (azure-cni-powered-by-cilium.md:160-170: ``--network-dataplane cilium``
  on an overlay cluster; "With Cilium, you don't need to install a separate network policy
  engine", line 62; use-network-policies.md:48 recommends it, and Azure NPM for Linux retires
  2028-09-30, line 125), so the job's NetworkPolicy is enforced.
* Lifecycle: the Kubernetes minor is pinned (rules.py, with its end of life); the patch channel
  keeps it patched and the SecurityPatch node OS channel patches the nodes, reimaging only when a
  patch needs it (auto-upgrade-node-os-image.md:61), both only inside one weekly window, Sunday
  00:00-04:00 UTC (planned-maintenance.md:67-68, 79: four hours or more; Sunday, the portal's
  recommended default, auto-upgrade-node-os-image.md:131), as are AKS's own weekly releases (the
  ``default`` configuration, planned-maintenance.md:63). The GPU pool upgrades in place, one node
  at a time (``maxSurge 0, maxUnavailable 1``): no surge ND VM that nobody reserved
  (upgrade-aks-node-pools-rolling.md:88, 97; use-capacity-reservation-groups.md:100).
* Logs: control-plane and audit logs (audit.py) and Container insights (the ``omsagent`` add-on
  with managed-identity auth and its data collection rule, as microsoft/Docker-Provider's own
  onboarding does: scripts/onboarding/aks/onboarding-msi-bicep/existingClusterOnboarding.bicep at
  22adfe2, streams and settings from onboarding-msi-terraform/variables.tf at 0da65e5) go to the
  stack's Log Analytics workspace.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_azure_native as azure
import pulumi_kubernetes as k8s

from gpu_cluster.components import nccl_topology
from gpu_cluster.components.azure import audit, metrics
from gpu_cluster.components.azure.grafana import ManagedGrafana
from gpu_cluster.components.azure.common import (
    AKS_DNS_SERVICE_IP,
    AKS_POD_CIDR,
    AKS_SERVICE_CIDR,
    azurecli_kubeconfig,
    cluster_tags,
)
from gpu_cluster.components.azure.rules import ZONES
from gpu_cluster.components.azure.workload_identity import JobIdentity, JobIdentityArgs, job_service_account
from gpu_cluster.components.k8s import aks as layer
from gpu_cluster.components.k8s import aks_amd
from gpu_cluster.components.azure.ama_settings import ama_settings
from gpu_cluster.components.k8s.metrics import ama_scrape, pushgateway
from gpu_cluster.components.k8s.addons import JOB_NAMESPACE, job_namespace, jobset
from gpu_cluster.components.spec import ClusterSpec

# Pool names: lower-case letters and digits, starting with a letter, 1-12 characters on Linux
# (create-node-pools.md at fb060ab).
GPU_POOL = "gpu"
SYSTEM_POOL = "system"
CONTROLLER_POOL = "ctrl"
# The system pool takes critical add-ons only (use-system-pools.md:70); AKS's own add-ons tolerate it.
CRITICAL_ADDONS_TAINT = "CriticalAddonsOnly=true:NoSchedule"
SYSTEM_NODES = 3
CONTROLLER_NODES = 2
CPU_POOL_SIZE = "Standard_D4ds_v5"
MAX_PODS = 250
# Taint on the GPU pool, the GPU Operator page's example (nvidia-gpu-operator.md at fb060ab);
# only pods that tolerate it land there.
GPU_TAINT_KEY = "sku"
GPU_TAINT = f"{GPU_TAINT_KEY}=gpu:NoSchedule"
# AKS taints every Spot pool kubernetes.azure.com/scalesetpriority=spot:NoSchedule itself
# (spot-node-pool.md:41 at fb060ab): on a spot GPU pool the operators' DaemonSets and the jobs
# must tolerate it too, or nothing lands there.
SPOT_TAINT_KEY = "kubernetes.azure.com/scalesetpriority"
# The weekly maintenance window (module notes): every planned upgrade of the cluster and its nodes.
MAINTENANCE_DAY = "Sunday"
MAINTENANCE_START_UTC = "00:00"
MAINTENANCE_HOURS = 4
MAINTENANCE_CONFIGS = ("default", "aksManagedAutoUpgradeSchedule", "aksManagedNodeOSUpgradeSchedule")
UPGRADE_CHANNEL = "patch"
NODE_OS_CHANNEL = "SecurityPatch"
# The GPU pool's rolling upgrade: no surge node, one node out at a time.
GPU_MAX_SURGE = "0"
GPU_MAX_UNAVAILABLE = "1"
# Container insights' data collection (module notes: Docker-Provider's defaults).
CONTAINER_INSIGHTS_STREAMS = (
    "Microsoft-ContainerLog",
    "Microsoft-ContainerLogV2",
    "Microsoft-KubeEvents",
    "Microsoft-KubePodInventory",
    "Microsoft-KubeNodeInventory",
    "Microsoft-KubePVInventory",
    "Microsoft-KubeServices",
    "Microsoft-KubeMonAgentEvents",
    "Microsoft-InsightsMetrics",
    "Microsoft-ContainerInventory",
    "Microsoft-ContainerNodeInventory",
    "Microsoft-Perf",
)
CONTAINER_INSIGHTS_ASSOCIATION = "ContainerInsightsExtension"


def gpu_taint_keys(spec: ClusterSpec) -> list[str]:
    """Every taint key the GPU pool's nodes carry: ours, and AKS's own on a Spot pool."""
    return [GPU_TAINT_KEY, *([SPOT_TAINT_KEY] if spec.compute.capacity.type == "spot" else [])]


# Built-in role ids (learn.microsoft.com/azure/role-based-access-control/built-in-roles, read through
# find_string 2026-12-01: the table rows "Azure Kubernetes Service RBAC Cluster Admin |
# b1ff04bb-8a4e-4dc4-8eb5-8693973ce19b"; Contributor b24988ac-6180-42a0-ab88-20f7382dd24c). Network
# Contributor: the cluster's identity manages the node subnets and the NAT gateway of a VNet it did
# not create; the same id in AKS BYO-subnet bicep samples (find_string, read 2026-12-01).
NETWORK_CONTRIBUTOR = "4d97b98b-1d4f-4787-a291-c67834d212e7"
CONTRIBUTOR = "b24988ac-6180-42a0-ab88-20f7382dd24c"
AKS_RBAC_CLUSTER_ADMIN = "b1ff04bb-8a4e-4dc4-8eb5-8693973ce19b"
# A capacity reservation group is used by a pool only when the cluster's user-assigned identity
# holds Contributor on the group's resource group; the assignment "can take up to 60 minutes to
# propagate" (use-capacity-reservation-groups.md:26, 43-49 at fb060ab).
RESERVATION_ROLE_PROPAGATION = "up to 60 minutes"
# AKS labels each node with its pool (agentpool=<name>; ai-infrastructure-on-azure deploy-aks.sh at
# a01b073 selects nodes on it): controllers go to the controller pool, which exists before GPU nodes.
POOL_LABEL = "agentpool"
# The Lustre claim the jobs mount (in the jobs' namespace) and its PV: one name.
LUSTRE_CLAIM = "lustre"


def reservation_resource_group(group_id: str) -> str:
    """The resource group id that holds a capacity reservation group (its ARM id's first four
    segments: /subscriptions/<s>/resourceGroups/<rg>; the spec checked the id's shape)."""
    parts = group_id.strip("/").split("/")
    return "/" + "/".join(parts[:4])


@dataclass(frozen=True, slots=True, kw_only=True)
class AksArgs:
    spec: ClusterSpec
    resource_group: pulumi.Input[str]
    vnet_id: pulumi.Input[str]
    node_subnet: pulumi.Input[str]
    system_subnet: pulumi.Input[str]
    workspace_id: pulumi.Input[str]
    """The stack's Log Analytics workspace (audit.py): control-plane logs and Container insights."""
    egress_ips: Sequence[pulumi.Input[str | None]] = ()
    """The nodes' egress addresses (the NAT gateway's public IPs): the API server must admit them."""
    lustre_id: pulumi.Input[str] | None = None
    """The Managed Lustre file system's id: the CSI volume's handle."""
    lustre_mgs: pulumi.Input[str] | None = None
    """Its MGS address (client_info.mgs_address), the CSI volume's mgs-ip-address."""
    after: Sequence[pulumi.Resource] = ()
    """What the Lustre volume waits for (the file system)."""
    checkpoint_container_id: pulumi.Input[str] | None = None
    """The checkpoint container: the jobs' identity is allowed on it alone (workload_identity.py)."""


# The CPU pools (system and controllers) share these: ephemeral OS disks, and encryption at host
# (enable-host-encryption.md:16: temp disks and the OS disk's cache encrypted on the host; the
# subscription feature Microsoft.Compute/EncryptionAtHost must be registered first, lines 38-48, which
# the Azure preflight checks, components/preflight/azure.py; create-time only, line 32).
CPU_OS_DISK = "Ephemeral"
CPU_ENCRYPTION_AT_HOST = True


class AksOrchestration(pulumi.ComponentResource):
    cluster: azure.containerservice.ManagedCluster
    gpu_pool: azure.containerservice.AgentPool
    controller_pool: azure.containerservice.AgentPool
    reservation_role: azure.authorization.RoleAssignment | None
    """Contributor on the capacity reservation group's resource group, when the pool uses one."""
    jobs: JobIdentity | None
    """The identity the jobs act as on the checkpoint container (when the stack has one)."""
    kubeconfig: pulumi.Output[str]
    provider: k8s.Provider | None = None
    prometheus: metrics.ManagedPrometheus

    def __init__(self, name: str, args: AksArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-cluster:azure:Orchestration", name, None, opts)
        spec = args.spec
        tags = cluster_tags(spec)
        child = pulumi.ResourceOptions(parent=self)
        identity = azure.managedidentity.UserAssignedIdentity(
            f"{name}-identity",
            resource_group_name=args.resource_group,
            location=spec.region,
            tags=tags,
            opts=child,
        )
        client = azure.authorization.get_client_config_output(opts=pulumi.InvokeOutputOptions(parent=self))

        def role(
            suffix: str, principal: pulumi.Input[str], role_id: str, scope: pulumi.Input[str], *, sp: bool = True
        ) -> azure.authorization.RoleAssignment:
            return azure.authorization.RoleAssignment(
                f"{name}-{suffix}",
                principal_id=principal,
                # The deployer (sp=False) may be a person or a service principal: ARM tells.
                principal_type="ServicePrincipal" if sp else None,
                role_definition_id=pulumi.Output.format(
                    "/subscriptions/{0}/providers/Microsoft.Authorization/roleDefinitions/{1}",
                    client.subscription_id,
                    role_id,
                ),
                scope=scope,
                opts=child,
            )

        network_role = role("network-role", identity.principal_id, NETWORK_CONTRIBUTOR, args.vnet_id)
        cap = spec.compute.capacity
        self.reservation_role = (
            role("reservation-role", identity.principal_id, CONTRIBUTOR, reservation_resource_group(cap.id))
            if cap.type == "reservation" and cap.id
            else None
        )
        o = spec.orchestration
        # What the system and controller pools share (module notes; CPU_OS_DISK below).
        cpu_pool: dict[str, Any] = {
            "vm_size": CPU_POOL_SIZE,
            "os_sku": "Ubuntu",
            "os_disk_type": CPU_OS_DISK,
            "enable_encryption_at_host": CPU_ENCRYPTION_AT_HOST,
            "type": "VirtualMachineScaleSets",
            "vnet_subnet_id": args.system_subnet,
            "enable_node_public_ip": False,
            "availability_zones": list(ZONES),
            "max_pods": MAX_PODS,
        }
        self.cluster = azure.containerservice.ManagedCluster(
            f"{name}-aks",
            resource_name_=spec.name,
            resource_group_name=args.resource_group,
            location=spec.region,
            dns_prefix=spec.name,
            # Pinned, and refused once out of support (rules.py aks_version).
            kubernetes_version=o.kubernetes_version,
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
                network_dataplane="cilium",
                network_policy="cilium",
                pod_cidr=AKS_POD_CIDR,
                service_cidr=AKS_SERVICE_CIDR,
                dns_service_ip=AKS_DNS_SERVICE_IP,
                # Egress through the node subnets' NAT gateway (AZURE.md §7 AKS cluster row).
                outbound_type="userAssignedNATGateway",
            ),
            # Entra ID, Azure RBAC, no local accounts (module notes).
            aad_profile=azure.containerservice.ManagedClusterAADProfileArgs(
                managed=True, enable_azure_rbac=True, tenant_id=client.tenant_id
            ),
            disable_local_accounts=True,
            enable_rbac=True,
            auto_upgrade_profile=azure.containerservice.ManagedClusterAutoUpgradeProfileArgs(
                upgrade_channel=UPGRADE_CHANNEL, node_os_upgrade_channel=NODE_OS_CHANNEL
            ),
            # Container insights through the Azure Monitor agent with managed identity (useAADAuth),
            # its data collection rule associated below.
            addon_profiles={
                "omsagent": azure.containerservice.ManagedClusterAddonProfileArgs(
                    enabled=True, config={"logAnalyticsWorkspaceResourceID": args.workspace_id, "useAADAuth": "true"}
                )
            },
            # OIDC issuer and workload identity, blob CSI driver: as ai-infrastructure-on-azure
            # deploy-aks.sh at a01b073 creates its cluster (--enable-oidc-issuer
            # --enable-workload-identity --enable-blob-driver --os-sku Ubuntu).
            oidc_issuer_profile=azure.containerservice.ManagedClusterOIDCIssuerProfileArgs(enabled=True),
            security_profile=azure.containerservice.ManagedClusterSecurityProfileArgs(
                workload_identity=azure.containerservice.ManagedClusterSecurityProfileWorkloadIdentityArgs(enabled=True)
            ),
            # Azure Managed Prometheus (its workspace and collection rule: components/azure/metrics.py).
            azure_monitor_profile=metrics.azure_monitor_profile(),
            storage_profile=azure.containerservice.ManagedClusterStorageProfileArgs(
                blob_csi_driver=azure.containerservice.ManagedClusterStorageProfileBlobCSIDriverArgs(enabled=True)
            ),
            agent_pool_profiles=[
                azure.containerservice.ManagedClusterAgentPoolProfileArgs(
                    name=SYSTEM_POOL,
                    mode="System",
                    count=SYSTEM_NODES,
                    node_taints=[CRITICAL_ADDONS_TAINT],
                    **cpu_pool,
                )
            ],
            tags=tags,
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[network_role],
                # The other pools are their own resources (below); the cluster's inline list holds
                # the system pool only and must not fight them.
                ignore_changes=["agentPoolProfiles"],
            ),
        )
        self._create_maintenance(name, args)
        self._create_logging(name, spec, args)
        self.prometheus = metrics.ManagedPrometheus(
            f"{name}-prometheus", spec=spec, resource_group=args.resource_group, cluster_id=self.cluster.id, opts=child
        )
        # Where the GPU dashboard is looked at: Managed Grafana over that workspace (components/azure/grafana.py).
        self.grafana = ManagedGrafana(
            f"{name}-grafana",
            spec=spec,
            resource_group=args.resource_group,
            workspace_id=self.prometheus.workspace.id,
            subscription_id=client.subscription_id,
            deployer=client.object_id,
            opts=child,
        )
        self.controller_pool = azure.containerservice.AgentPool(
            f"{name}-ctrl-pool",
            resource_group_name=args.resource_group,
            resource_name_=self.cluster.name,
            agent_pool_name=CONTROLLER_POOL,
            mode="User",
            count=CONTROLLER_NODES,
            tags=tags,
            **cpu_pool,
            opts=child,
        )
        self.gpu_pool = self._create_gpu_pool(name, spec, args)
        self.jobs = (
            JobIdentity(
                f"{name}-jobs",
                JobIdentityArgs(
                    spec=spec,
                    resource_group=args.resource_group,
                    issuer=self.cluster.oidc_issuer_profile.apply(lambda p: p.issuer_url if p else ""),
                    container_id=args.checkpoint_container_id,
                    subscription_id=client.subscription_id,
                    namespace=JOB_NAMESPACE,
                ),
                child,
            )
            if args.checkpoint_container_id is not None
            else None
        )
        admin = role("deployer-admin-role", client.object_id, AKS_RBAC_CLUSTER_ADMIN, self.cluster.id, sp=False)
        creds = azure.containerservice.list_managed_cluster_user_credentials_output(
            resource_group_name=args.resource_group,
            resource_name=self.cluster.name,
            opts=pulumi.InvokeOutputOptions(parent=self),
        )
        # "Base64-encoded Kubernetes configuration file" (CredentialResultResponse.value): the
        # stack output is the file itself, as on EKS and GKE. With local accounts off it holds no
        # credential, only the kubelogin exec (converted to the Azure CLI's sign-in); still secret,
        # as on the other clouds.
        self.kubeconfig = pulumi.Output.secret(
            creds.kubeconfigs[0].value.apply(lambda v: azurecli_kubeconfig(base64.b64decode(v).decode("utf-8")))
        )
        if spec.orchestration.in_cluster and args.lustre_id is not None and args.lustre_mgs is not None:
            # The layer waits for the cluster, the controller pool its controllers run on and the
            # deployer's role on the cluster; not for the GPU pool: the operators' DaemonSets are
            # ready with no GPU node yet.
            self.provider = k8s.Provider(
                f"{name}-k8s",
                kubeconfig=self.kubeconfig,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[admin, self.controller_pool]),
            )
            create_in_cluster_layer(
                name,
                AksLayerArgs(
                    spec=spec,
                    volume_handle=args.lustre_id,
                    mgs_address=args.lustre_mgs,
                    after=list(args.after),
                    jobs_client_id=self.jobs.identity.client_id if self.jobs is not None else None,
                ),
                pulumi.ResourceOptions(parent=self, provider=self.provider),
            )
        self.register_outputs({"cluster": self.cluster.id, "gpu_pool": self.gpu_pool.name})

    def _create_maintenance(self, name: str, args: AksArgs) -> None:
        for config in MAINTENANCE_CONFIGS:
            azure.containerservice.MaintenanceConfiguration(
                f"{name}-maintenance-{config}",
                resource_group_name=args.resource_group,
                resource_name_=self.cluster.name,
                config_name=config,
                maintenance_window=azure.containerservice.MaintenanceWindowArgs(
                    schedule=azure.containerservice.ScheduleArgs(
                        weekly=azure.containerservice.WeeklyScheduleArgs(day_of_week=MAINTENANCE_DAY, interval_weeks=1)
                    ),
                    start_time=MAINTENANCE_START_UTC,
                    duration_hours=MAINTENANCE_HOURS,
                    utc_offset="+00:00",
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )

    def _create_logging(self, name: str, spec: ClusterSpec, args: AksArgs) -> None:
        child = pulumi.ResourceOptions(parent=self)
        audit.diagnostic_setting(
            f"{name}-control-plane-logs",
            target=self.cluster.id,
            workspace_id=args.workspace_id,
            categories=audit.AKS_LOG_CATEGORIES,
            opts=child,
        )
        rule = azure.monitor.DataCollectionRule(
            f"{name}-insights-rule",
            resource_group_name=args.resource_group,
            location=spec.region,
            kind="Linux",
            data_sources=azure.monitor.DataCollectionRuleDataSourcesArgs(
                extensions=[
                    azure.monitor.ExtensionDataSourceArgs(
                        name=CONTAINER_INSIGHTS_ASSOCIATION,
                        extension_name="ContainerInsights",
                        streams=list(CONTAINER_INSIGHTS_STREAMS),
                        extension_settings={
                            "dataCollectionSettings": {
                                "interval": "1m",
                                "namespaceFilteringMode": "Off",
                                "enableContainerLogV2": True,
                            }
                        },
                    )
                ]
            ),
            destinations=azure.monitor.DataCollectionRuleDestinationsArgs(
                log_analytics=[
                    azure.monitor.LogAnalyticsDestinationArgs(
                        name="ciworkspace", workspace_resource_id=args.workspace_id
                    )
                ]
            ),
            data_flows=[
                azure.monitor.DataFlowArgs(streams=list(CONTAINER_INSIGHTS_STREAMS), destinations=["ciworkspace"])
            ],
            tags=cluster_tags(spec),
            opts=child,
        )
        azure.monitor.DataCollectionRuleAssociation(
            f"{name}-insights-association",
            resource_uri=self.cluster.id,
            association_name=CONTAINER_INSIGHTS_ASSOCIATION,
            data_collection_rule_id=rule.id,
            description="Container insights of the cluster (Docker-Provider's onboarding association)",
            opts=child,
        )

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
            max_pods=MAX_PODS,
            # No encryption at host: the ND size pages list no such support (ndh100v5-series.md's
            # feature list at 0277390 names none), and AKS takes it only on supported sizes
            # (enable-host-encryption.md:33); whether an ND size's SKU says EncryptionAtHostSupported
            # is not read here. An exception in policies/checkov-azure-exceptions.yaml (CKV_AZURE_227).
            enable_encryption_at_host=False,
            upgrade_settings=azure.containerservice.AgentPoolUpgradeSettingsArgs(
                max_surge=GPU_MAX_SURGE, max_unavailable=GPU_MAX_UNAVAILABLE
            ),
            capacity_reservation_group_id=cap.id if cap.type == "reservation" else None,
            scale_set_priority="Spot" if cap.type == "spot" else None,
            tags=cluster_tags(spec),
            opts=pulumi.ResourceOptions(
                parent=self,
                # The pool is created only once the identity may use the reservation group.
                depends_on=[self.reservation_role] if self.reservation_role is not None else [],
            ),
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
    controller_node_selector: Mapping[str, str] = field(default_factory=lambda: {POOL_LABEL: CONTROLLER_POOL})
    jobs_client_id: pulumi.Input[str] | None = None
    """The jobs' identity's client id: the jobs' service account names it (workload_identity.py)."""


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
    pins = spec.images
    network = layer.network_operator(name, k8s_opts, taint, pins=pins)
    if operator == "nvidia":
        layer.gpu_operator(name, k8s_opts, taint, after=network[-1:], pins=pins)
    else:
        # AKS installs no AMD driver (use-amd-gpus.md:49) and the DeviceConfig leaves it off, as the
        # reference does: its own installer runs first (Azure/aks-rdma-infiniband deploy-aks.sh
        # all-amd: install_amdgpu_driver before install_amd_gpu_operator), on the GPU pool's nodes.
        driver = aks_amd.amd_driver_installer(name, k8s_opts, taint, node_selector={POOL_LABEL: GPU_POOL})
        aks_amd.amd_gpu_operator(name, k8s_opts, taint, after=[*driver, network[1]], pins=pins)
    # The add-on keeps the node exporter's InfiniBand counters too (components/azure/ama_settings.py).
    ama_settings(name, opts=k8s_opts)
    csi = layer.lustre_csi(name, k8s_opts)
    namespace = job_namespace(name, k8s_opts)
    # The ND v5 topology for NCCL, which every job mounts (components/nccl_topology.py); none for
    # MI300X, whose RCCL reference sets no topology file.
    topology = nccl_topology.for_instance(spec.compute.instance_type)
    if topology is not None:
        layer.nccl_topology_configmap(
            name,
            namespace=namespace.metadata.name,
            topology=topology,
            opts=pulumi.ResourceOptions.merge(k8s_opts, pulumi.ResourceOptions(depends_on=[namespace])),
        )
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
    if args.jobs_client_id is not None:
        job_service_account(
            name,
            namespace=namespace.metadata.name,
            client_id=args.jobs_client_id,
            opts=pulumi.ResourceOptions.merge(k8s_opts, pulumi.ResourceOptions(depends_on=[namespace])),
        )
    jobset(f"{name}-jobset", k8s_opts, node_selector=args.controller_node_selector, pins=spec.images)
    # The managed Prometheus agent scrapes the NVIDIA operator's DCGM exporter and, on every size, the
    # Pushgateway the validation's judge pushes to, on the controllers' pool (components/k8s/metrics.py).
    # On the AMD sizes it scrapes AMD's device-metrics exporter, which the DeviceConfig turns on.
    dcgm = layer.GPU_OPERATOR_NAMESPACE if operator == "nvidia" else None
    amd = (layer.AMD_OPERATOR_NAMESPACE, layer.AMD_DEVICE_CONFIG_NAME) if operator == "amd" else None
    ama_scrape(name, dcgm_namespace=dcgm, amd_exporter=amd, opts=k8s_opts)
    pushgateway(name, node_selector=args.controller_node_selector, pins=spec.images, opts=k8s_opts)
