"""Compute: how every GPU node boots (launch template, image, IAM), whoever launches it.

The node group itself belongs to the orchestrator (an EKS managed node group or a PCS
compute node group); both take this launch template, this instance profile and this image,
so every node of a stack boots the same way.

Image: ``compute.image`` pins it. Unset, it is looked up at the first ``pulumi up`` and then
kept: the node group (EKS) and the compute node groups (PCS) ignore later changes of the
looked-up value, so a routine ``pulumi up`` (a scale-up, a tag) never rolls every GPU node onto
an image nobody chose. Moving to a new image is a change of ``compute.image``.

* EKS: the node group runs the EKS-optimised Amazon Linux 2023 NVIDIA image
  (``ami_type`` ``AL2023_x86_64_NVIDIA``, which carries the NVIDIA driver, the EFA driver
  and the container toolkit) at the release AWS currently recommends for the cluster's
  Kubernetes version, read from the public SSM parameter
  ``/aws/service/eks/optimized-ami/<version>/amazon-linux-2023/x86_64/nvidia/recommended/release_version``.
  The release is pinned in the node group rather than the image id in the launch template:
  with an image id in the template EKS stops writing the node's bootstrap (nodeadm) user
  data, and writing it here would need the cluster's endpoint and CA inside a template the
  cluster's node group is created from.
* PCS (Slurm): the AWS PCS sample image for the scheduler version, found with
  ``aws.ec2.get_ami_output`` (owner ``amazon``, name ``aws-pcs-sample_ami-al2023-x86_64-slurm-<v>*``,
  most recent; versions.py has the pins and their sources). It carries the PCS agent, Slurm,
  the EFA installer, the NVIDIA driver and CUDA on Amazon Linux 2023 (AWS PCS user guide, "AMI
  release notes"). AWS calls the sample images a starting point; production clusters build
  their own (aws-hpc-recipes ``dlami_for_pcs_imagebuilder``) and pin it in ``compute.image``.

Capacity, as each orchestrator wants it (EKS user guide, "Customizing managed nodes with
launch templates"; AWS PCS user guide, "Compute node groups"):

* reservation (ODCR): the template targets the reservation id;
* capacity block: the template sets market type ``capacity-block``, targets the block and
  names the instance type; the node group says CAPACITY_BLOCK (and, on EKS, names no instance
  type). Both EKS ("capacity-blocks-mng": "InstanceType set to an instance type that supports
  Capacity Blocks", or "the create request will be rejected") and PCS
  ("capacity-blocks-configure-cng": "A valid InstanceType that matches the instance type of
  the Capacity Block") require the type in the template;
* spot: the node group says SPOT, and the template carries no ``InstanceMarketOptions``: EKS
  makes a Spot group from the node group's capacity type ("create a managed node group by
  setting the capacity type as spot", awsdocs/amazon-eks-user-guide managed-node-groups.adoc at
  15e4649, "Managed node group capacity types"; its launch-templates.adoc at 1fe584b lists no
  market setting among the prohibited ones, so this is one source of the market, not a rule EKS
  states) and PCS sets the market from its purchase option.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Literal, Mapping, Sequence

import pulumi
import pulumi_aws as aws

from gpu_cluster.components.aws.common import assume_role_policy, managed_policy_arn
from gpu_cluster.components.aws.interconnect import Nic
from gpu_cluster.components.aws.versions import EKS_KUBERNETES_VERSION, PCS_SLURM_VERSION, pcs_ami_name
from gpu_cluster.components.spec import CapacitySpec

# The root device name of Amazon Linux 2 and 2023 images (both images above).
ROOT_DEVICE = "/dev/xvda"
# IMDSv2, hop limit 1 (CKV_AWS_341): a pod in its own network namespace is one hop further
# and never reaches the node's metadata, so it cannot take the node role's credentials. What
# needs the node's metadata runs in the host network (the VPC CNI, the EKS Pod Identity agent,
# kube-proxy, the FSx CSI node plugin); pods that call AWS get their own role through EKS Pod
# Identity (orchestration_eks). PCS jobs run on the host.
METADATA_HOP_LIMIT = 1
# The managed node group's AMI type for AL2023 with NVIDIA drivers (EKS API Nodegroup.amiType;
# the same enum as aws-cdk's NodegroupAmiType.AL2023_X86_64_NVIDIA, docs.aws.amazon.com/cdk/api/v2/
# python/aws_cdk.aws_eks/NodegroupAmiType.html, read 2026-12).
EKS_AMI_TYPE = "AL2023_x86_64_NVIDIA"

# The node role's managed policies: the three EKS requires of a node role (EKS user guide
# "Amazon EKS node IAM role", create-node-role; not re-read this session, see the closing note)
# and SSM's core policy for Session Manager access instead of SSH keys.
EKS_NODE_POLICIES = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryReadOnly",
    "AmazonSSMManagedInstanceCore",
)
PCS_NODE_POLICIES = ("AmazonSSMManagedInstanceCore",)
# The IAM path PCS requires of the node ROLE (or a name starting AWSPCS); see _create_iam.
PCS_ROLE_PATH = "/aws-pcs/"


def eks_release_parameter(kubernetes_version: str) -> str:
    """The SSM parameter of the recommended EKS AL2023 NVIDIA release (EKS user guide,
    retrieve-ami-id: amazon-linux-2023/x86_64/nvidia)."""
    return (
        f"/aws/service/eks/optimized-ami/{kubernetes_version}/amazon-linux-2023/"
        "x86_64/nvidia/recommended/release_version"
    )


def pcs_ami_name_filter(slurm_version: str = PCS_SLURM_VERSION) -> str:
    return pcs_ami_name(slurm_version) + "*"


def encode_user_data(user_data: pulumi.Input[str]) -> pulumi.Output[str]:
    """Launch templates take user data base64-encoded."""
    return pulumi.Output.from_input(user_data).apply(lambda s: base64.b64encode(s.encode()).decode())


@dataclass(kw_only=True, frozen=True, slots=True)
class ComputeArgs:
    orchestrator: Literal["eks", "slurm"]
    """Who launches the nodes; decides the image lookup and the node role's policies."""
    region: str
    """Region of the stack; names the ARN partition of managed policies."""
    capacity: CapacitySpec
    """How the GPU capacity is bought (on-demand, reservation, capacity block, spot)."""
    instance_type: str
    """The GPU type; written into the template for a capacity block (see the module docstring)."""
    subnet_id: pulumi.Input[str] | None = None
    """PCS only: the node subnet, set on every interface of the template as every AWS PCS EFA
    example does (aws-hpc-recipes recipes/pcs/enable_efa/assets/pcs-lt-efa-p5.yaml). EKS refuses
    a subnet in a managed node group's template ("launch-templates": prohibited), so None there."""
    kubernetes_version: str = EKS_KUBERNETES_VERSION
    """EKS only: the version whose recommended NVIDIA image release is looked up."""
    image: str | None = None
    """Pinned node image (spec.compute.image): EKS release version or PCS AMI id; None looks
    it up."""
    root_volume_gib: int = 500
    """Encrypted gp3 root volume per node."""
    nics: Sequence[Nic]
    """The EFA layout (Interconnect.nics), primary interface first."""
    security_group_ids: Sequence[pulumi.Input[str]]
    """Groups on every interface: EFA refuses traffic unless all of them are in its group."""
    placement_group_name: pulumi.Input[str] | None = None
    """Cluster placement group: the stack's own, or the one an ODCR was created in; None when
    the capacity is placed already or the reservation lies outside any group."""
    user_data: pulumi.Input[str] | None = None
    """Plain-text user data (a MIME multipart document), e.g. the Lustre mount on PCS."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """Merged into every resource and, through tag specifications, into instances and volumes."""


def launch_template_args(
    *,
    root_volume_gib: int,
    network_interfaces: Sequence[aws.ec2.LaunchTemplateNetworkInterfaceArgs] | None = None,
    vpc_security_group_ids: Sequence[pulumi.Input[str]] | None = None,
    image_id: pulumi.Input[str] | None = None,
    instance_type: str | None = None,
    iam_instance_profile_arn: pulumi.Input[str] | None = None,
    user_data: pulumi.Input[str] | None = None,
    key_name: str | None = None,
    tags: Mapping[str, str],
) -> aws.ec2.LaunchTemplateArgs:
    """The hardening every node template shares (GPU nodes and PCS login nodes). ``key_name``: the
    EC2 key pair a PCS login node accepts (orchestration.ssh_key_name); no other node takes one."""
    return aws.ec2.LaunchTemplateArgs(
        image_id=image_id,
        instance_type=instance_type,
        key_name=key_name,
        # CKV_AWS_79 / CKV_AWS_341: tokens required, hop limit 1 (see METADATA_HOP_LIMIT).
        metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
            http_endpoint="enabled",
            http_tokens="required",
            http_put_response_hop_limit=METADATA_HOP_LIMIT,
            instance_metadata_tags="disabled",
        ),
        block_device_mappings=[
            aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name=ROOT_DEVICE,
                ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                    volume_size=root_volume_gib,
                    volume_type="gp3",
                    encrypted="true",
                    delete_on_termination="true",
                ),
            )
        ],
        network_interfaces=network_interfaces,
        vpc_security_group_ids=vpc_security_group_ids,
        iam_instance_profile=(
            aws.ec2.LaunchTemplateIamInstanceProfileArgs(arn=iam_instance_profile_arn)
            if iam_instance_profile_arn is not None
            else None
        ),
        user_data=encode_user_data(user_data) if user_data is not None else None,
        tag_specifications=[
            aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=dict(tags))
            for kind in ("instance", "volume", "network-interface")
        ],
        update_default_version=True,
        tags=dict(tags),
    )


class Compute(pulumi.ComponentResource):
    launch_template_id: pulumi.Output[str]
    launch_template_version: pulumi.Output[str]
    node_role_arn: pulumi.Output[str]
    node_role_name: pulumi.Output[str]
    """PCS: the role the orchestrator grants registration with its own cluster (its ARN is
    known only once the PCS cluster exists)."""
    instance_profile_arn: pulumi.Output[str]
    image_id: pulumi.Output[str] | None
    """PCS: the image the node groups launch. None on EKS (the node group's ami_type)."""
    release_version: pulumi.Output[str] | None
    """EKS: the recommended NVIDIA image release for the node group. None on PCS."""

    def __init__(self, name: str, args: ComputeArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-cluster:aws:Compute", name, None, opts)
        self._name = name
        self._args = args
        self._create_iam()
        self._lookup_image()

        self.launch_template = aws.ec2.LaunchTemplate(
            f"{name}-gpu",
            args=self._template_args(),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.launch_template_id = self.launch_template.id
        # Node groups pin a version so that a template change rolls the nodes on purpose.
        self.launch_template_version = self.launch_template.latest_version.apply(str)
        self.register_outputs(
            {
                "launch_template_id": self.launch_template_id,
                "launch_template_version": self.launch_template_version,
                "node_role_arn": self.node_role_arn,
                "instance_profile_arn": self.instance_profile_arn,
            }
        )

    def _create_iam(self) -> None:
        name, args = self._name, self._args
        self.node_role = aws.iam.Role(
            f"{name}-node",
            assume_role_policy=assume_role_policy("ec2.amazonaws.com"),
            # PCS passes only a ROLE whose path is /aws-pcs/ or whose name starts with AWSPCS;
            # the rule is on the role, not on the instance profile (AWS PCS API,
            # ComputeNodeGroup.iamInstanceProfileArn: "the role name must start with AWSPCS or
            # must have the path /aws-pcs/"; PCS user guide, "IAM instance profiles for AWS
            # PCS", Requirements: docs.aws.amazon.com/pcs/latest/userguide/security-instance-profiles.html,
            # read 2026-12-07). The path keeps Pulumi's generated, unique name.
            path=PCS_ROLE_PATH if args.orchestrator == "slurm" else "/",
            description=f"GPU nodes of {name}",
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self),
        )
        policies = EKS_NODE_POLICIES if args.orchestrator == "eks" else PCS_NODE_POLICIES
        for policy in policies:
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{policy}",
                role=self.node_role.name,
                policy_arn=managed_policy_arn(args.region, policy),
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.instance_profile = aws.iam.InstanceProfile(
            f"{name}-node",
            role=self.node_role.name,
            # PCS sets no rule on the profile itself (the rule above is the role's); the same
            # path keeps the pair together in `aws iam list-instance-profiles --path-prefix`.
            path=PCS_ROLE_PATH if args.orchestrator == "slurm" else "/",
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.node_role_arn = self.node_role.arn
        self.node_role_name = self.node_role.name
        self.instance_profile_arn = self.instance_profile.arn

    def _lookup_image(self) -> None:
        args = self._args
        invoke = pulumi.InvokeOutputOptions(parent=self)
        if args.image is not None:
            pinned = pulumi.Output.from_input(args.image)
            self.release_version, self.image_id = (pinned, None) if args.orchestrator == "eks" else (None, pinned)
            return
        if args.orchestrator == "eks":
            self.release_version = aws.ssm.get_parameter_output(
                name=eks_release_parameter(args.kubernetes_version),
                opts=invoke,
            ).value
            self.image_id = None
        else:
            self.image_id = aws.ec2.get_ami_output(
                owners=["amazon"],
                most_recent=True,
                filters=[
                    aws.ec2.GetAmiFilterArgs(name="name", values=[pcs_ami_name_filter()]),
                    aws.ec2.GetAmiFilterArgs(name="architecture", values=["x86_64"]),
                ],
                opts=invoke,
            ).id
            self.release_version = None

    def _template_args(self) -> aws.ec2.LaunchTemplateArgs:
        args = self._args
        interfaces = [
            aws.ec2.LaunchTemplateNetworkInterfaceArgs(
                network_card_index=nic.network_card_index,
                device_index=nic.device_index,
                interface_type=nic.interface_type,
                security_groups=list(args.security_group_ids),
                delete_on_termination="true",
                subnet_id=args.subnet_id if args.orchestrator == "slurm" else None,
                # No public IPs on GPU nodes (CKV_AWS_88): egress goes through the NAT.
                associate_public_ip_address="false" if nic.device_index == 0 and nic.network_card_index == 0 else None,
            )
            for nic in args.nics
        ]
        template = launch_template_args(
            root_volume_gib=args.root_volume_gib,
            network_interfaces=interfaces,
            # No image in the template, on PCS either: the compute node group's amiId is the one
            # place it is set ("If not provided, AWS PCS uses the AMI ID specified in the custom
            # launch template": CloudFormation AWS::PCS::ComputeNodeGroup, AmiId, read 2026-12-01).
            # A looked-up image there is kept once created (ignore_changes amiId), while one in the
            # template would make a new template version, and roll the nodes, on any newer image.
            image_id=None,
            # EKS sets the instance profile from the node group's role itself and refuses a
            # template that names one; PCS takes the profile from the node group, too.
            user_data=args.user_data,
            tags=args.tags,
        )
        if args.placement_group_name is not None:
            # The group binds to the zone of the first instance it holds: the node subnet's.
            template.placement = aws.ec2.LaunchTemplatePlacementArgs(group_name=args.placement_group_name)
        capacity = args.capacity
        if capacity.type in ("reservation", "capacity-block"):
            template.capacity_reservation_specification = aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                capacity_reservation_target=(
                    aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                        capacity_reservation_id=capacity.id,
                    )
                ),
            )
        if capacity.type == "capacity-block":
            template.instance_market_options = aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(
                market_type="capacity-block",
            )
            template.instance_type = args.instance_type
        return template
