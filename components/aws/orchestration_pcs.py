"""Orchestration with Slurm: AWS Parallel Computing Service (managed slurmctld).

pulumi-aws 7.51 has no PCS resources; pulumi-aws-native's ``pcs`` module (CloudFormation's
``AWS::PCS::*``) does. The cluster has:

* a PCS cluster (Slurm ``PCS_SLURM_VERSION``; the controller size is the spec's
  ``orchestration.size``, never derived from the node count: PCS replaces a cluster whose size
  changes, components/aws/rules.py) in the node subnet, in the EFA group: the group's self rule
  admits slurmctld (6817) and slurmd (6818) traffic both ways;
* a login node group on a small template of its own, in the same private subnet (reached
  through SSM Session Manager: no public IPs anywhere);
* the GPU node group on Compute's launch template, min = max = nodes (a job spans all); on a
  capacity block min = 0, so that the group can exist before the block starts: every node is then
  dynamic, launched by PCS for a waiting job and released when idle (PCS user guide
  scaling-job-level);
* the node role's right to register with this cluster, and no other (the call returns the
  cluster's Munge key; CKV_AWS_355 / CKV_AWS_290);
* a queue, the Slurm partition, mapped to the GPU node group.

Every node, login or GPU, mounts the Lustre file system at boot from its user data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping

import pulumi
import pulumi_aws as aws
import pulumi_aws_native as aws_native

from gpu_cluster.components.aws.compute import launch_template_args
from gpu_cluster.components.aws.versions import PCS_SLURM_VERSION
from gpu_cluster.components.spec import CapacitySpec

pcs = aws_native.pcs

LOGIN_INSTANCE_TYPE = "m6i.xlarge"
LOGIN_ROOT_GIB = 100
# PCS tags every instance it launches with its node group's id (AWS PCS user guide,
# "Finding compute node group instances").
NODE_GROUP_TAG = "aws:pcs:compute-node-group-id"

PURCHASE_OPTIONS = {
    "on-demand": pcs.ComputeNodeGroupPurchaseOption.ONDEMAND,
    "reservation": pcs.ComputeNodeGroupPurchaseOption.ONDEMAND,  # template targets the ODCR
    "capacity-block": pcs.ComputeNodeGroupPurchaseOption.CAPACITY_BLOCK,
    "spot": pcs.ComputeNodeGroupPurchaseOption.SPOT,
}

_BOUNDARY = "==GPU-CLUSTER-BOUNDARY=="


def lustre_user_data(
    dns_name: pulumi.Input[str], mount_name: pulumi.Input[str], mount_point: str
) -> pulumi.Output[str]:
    """MIME multipart user data that mounts the file system at boot, idempotently, with the
    options of Storage's mount command (``flock``: torch's FileStore locks files on it).

    Multipart because PCS adds its own part to a template's user data and accepts only
    MIME documents (AWS PCS user guide, "Using Amazon EC2 launch templates with AWS PCS").
    """
    script = (
        'Content-Type: multipart/mixed; boundary="{b}"\n'
        "MIME-Version: 1.0\n"
        "\n"
        "--{b}\n"
        'Content-Type: text/x-shellscript; charset="us-ascii"\n'
        "\n"
        "#!/bin/bash\n"
        "set -euo pipefail\n"
        "# The client ships with the PCS images; install it where a custom image lacks it\n"
        "# (Amazon Linux 2: extras topic 'lustre'; Amazon Linux 2023: package lustre-client).\n"
        "command -v mount.lustre >/dev/null || amazon-linux-extras install -y lustre "
        "|| dnf install -y lustre-client\n"
        "mkdir -p {mp}\n"
        "grep -q ' {mp} lustre ' /etc/fstab || "
        "echo '{{0}}@tcp:/{{1}} {mp} lustre relatime,flock,_netdev 0 0' >> /etc/fstab\n"
        "mountpoint -q {mp} || mount {mp}\n"
        "chmod 1777 {mp}\n"
        "# The validation job needs Python >= 3.10 (torch 2.13 has no 3.9 wheels); AL2023 keeps\n"
        "# /usr/bin/python3 at 3.9 and ships newer ones as namespaced packages (python3.12 ->\n"
        "# /usr/bin/python3.12): AL2023 user guide, 'Python in AL2023', read 2026-12-01.\n"
        "command -v python3.12 >/dev/null || dnf install -y python3.12 "
        "|| echo 'python3.12 not installed: the validation job needs --python' >&2\n"
        "\n"
        "--{b}--\n"
    ).format(b=_BOUNDARY, mp=mount_point)
    return pulumi.Output.format(script, dns_name, mount_name)


@dataclass(kw_only=True, frozen=True, slots=True)
class PcsArgs:
    region: str
    """Region of the cluster; used in the login command."""
    node_subnet_id: pulumi.Input[str]
    """The one subnet of the controller ENI, the login nodes and the GPU nodes."""
    security_group_id: pulumi.Input[str]
    """The EFA group: admits Slurm traffic between controller and nodes through its self rule."""
    launch_template_id: pulumi.Input[str]
    launch_template_version: pulumi.Input[str]
    instance_profile_arn: pulumi.Input[str]
    node_role_name: pulumi.Input[str]
    """The role in that profile; granted registration with this cluster only."""
    image_id: pulumi.Input[str]
    """The PCS image every node group launches (Compute.image_id), set only in the node groups'
    amiId (the launch templates carry none)."""
    image_pinned: bool = False
    """``image_id`` is the stack's own pin; else a looked-up value, kept once created."""
    user_data: pulumi.Input[str]
    """The Lustre mount (``lustre_user_data``), also given to the login template."""
    instance_type: str
    nodes: int
    capacity: CapacitySpec
    login_nodes: int
    partition: str
    size: str
    """The controller's size (components/aws/rules.py ``pcs_size``): SMALL, MEDIUM or LARGE."""
    ssh_key_name: str | None = None
    """orchestration.ssh_key_name: the EC2 key pair the login nodes accept for ec2-user."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """Merged into every resource."""


# How a person (and `validate submit`) reaches a login node: no node has a public address, so through
# AWS Systems Manager Session Manager (the nodes' role has AmazonSSMManagedInstanceCore, compute.py;
# the AL2023 PCS image runs the SSM agent). The instance is found by the tag PCS puts on its group's
# instances. With a key pair on the login nodes the command is ssh with Session Manager as its
# ProxyCommand: the SSM user guide's "ssh ... ec2-user@i-..." over the AWS-StartSSHSession document
# with "portNumber=%p" (AWS CLI reference, ssm start-session, example 2; SSM user guide,
# session-manager-getting-started-enable-ssh-connections), which, unlike an interactive session, runs
# the command it is given. ssh runs ProxyCommand through the user's shell, so the $(...) that finds the
# instance is evaluated there. The host key is taken on first use under the group's id
# (StrictHostKeyChecking=accept-new), since a replaced login node comes back with a new one.
def login_command(region: str, group_id: str, key_name: str | None) -> str:
    """The stack output access.ssh_command of a PCS cluster with login nodes."""
    find = (
        f"aws ec2 describe-instances --region {region} --filters Name=tag:{NODE_GROUP_TAG},Values={group_id} "
        'Name=instance-state-name,Values=running --query "Reservations[0].Instances[0].InstanceId" --output text'
    )
    if key_name is None:
        return f"aws ssm start-session --region {region} --target $({find})"
    proxy = (
        f"aws ssm start-session --region {region} --target $({find}) "
        "--document-name AWS-StartSSHSession --parameters portNumber=%p"
    )
    return (
        f"ssh -o StrictHostKeyChecking=accept-new -o HostKeyAlias={group_id} "
        f"-o 'ProxyCommand={proxy}' ec2-user@{group_id}"
    )


class Orchestration(pulumi.ComponentResource):
    cluster_id: pulumi.Output[str]
    login: pulumi.Output[str] | None
    ssh_command: pulumi.Output[str] | None

    def __init__(self, name: str, args: PcsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-cluster:aws:Orchestration", name, None, opts)
        self._name = name
        self._args = args
        self.cluster = pcs.Cluster(
            f"{name}-pcs",
            scheduler=pcs.SchedulerPropertiesArgs(
                type=pcs.ClusterSchedulerPropertiesType.SLURM, version=PCS_SLURM_VERSION
            ),
            size=pcs.ClusterSize(args.size),
            networking=pcs.NetworkingPropertiesArgs(
                subnet_ids=[args.node_subnet_id],
                security_group_ids=[args.security_group_id],
            ),
            tags=dict(args.tags),
            # A fixed name: a replacement must free the name first. The nodes are replaced either way.
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )
        self.cluster_id = self.cluster.aws_id
        self.register_policy = self._create_register_policy()
        self.login_group = self._create_login() if args.login_nodes > 0 else None
        self.gpu_group = self._node_group(
            "gpu",
            instance_type=args.instance_type,
            count=args.nodes,
            template_id=args.launch_template_id,
            template_version=args.launch_template_version,
            capacity=args.capacity,
        )
        self.queue = pcs.Queue(
            f"{name}-queue",
            cluster_id=self.cluster_id,
            name=args.partition,
            compute_node_group_configurations=[
                pcs.QueueComputeNodeGroupConfigurationArgs(compute_node_group_id=self.gpu_group.aws_id)
            ],
            tags=dict(args.tags),
            # The queue's name is the Slurm partition jobs are submitted to, so it is fixed;
            # a replacement must free the name before it can take it.
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True, depends_on=[self.register_policy]),
        )

        if self.login_group is not None:
            self.login = pulumi.Output.format(
                "PCS compute node group {0} (tag {1})", self.login_group.aws_id, NODE_GROUP_TAG
            )
            self.ssh_command = self.login_group.aws_id.apply(
                lambda group: login_command(args.region, group, args.ssh_key_name)
            )
        else:
            self.login = None
            self.ssh_command = None
        self.register_outputs(
            {
                "cluster_id": self.cluster_id,
                "login": self.login,
                "ssh_command": self.ssh_command,
                "queue": self.queue.name,
            }
        )

    def _create_register_policy(self) -> aws.iam.RolePolicy:
        # A PCS node registers itself with its cluster on boot; without this call it never joins
        # Slurm (AWS PCS user guide, "IAM instance profiles for AWS PCS"). The call returns the
        # cluster's Munge key, so the grant names this cluster's ARN, not "*".
        return aws.iam.RolePolicy(
            f"{self._name}-node-register",
            role=self._args.node_role_name,
            policy=self.cluster.arn.apply(
                lambda arn: json.dumps(
                    {
                        "Version": "2012-10-17",
                        "Statement": [
                            {"Effect": "Allow", "Action": ["pcs:RegisterComputeNodeGroupInstance"], "Resource": arn}
                        ],
                    },
                    sort_keys=True,
                )
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _create_login(self) -> pcs.ComputeNodeGroup:
        name, args = self._name, self._args
        template = aws.ec2.LaunchTemplate(
            f"{name}-login",
            args=launch_template_args(
                root_volume_gib=LOGIN_ROOT_GIB,
                vpc_security_group_ids=[args.security_group_id],
                user_data=args.user_data,
                # aws-hpc-recipes' PCS login template takes the user's key pair the same way
                # (recipes/pcs/getting_started/assets/cfn-pcs-lt-efs-fsxl.yaml line 66 at 009a29a:
                # KeyName: !Ref SshKeyName); it is reached here through Session Manager, not a public IP.
                key_name=args.ssh_key_name,
                tags=args.tags,
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        return self._node_group(
            "login",
            instance_type=LOGIN_INSTANCE_TYPE,
            count=args.login_nodes,
            template_id=template.id,
            template_version=template.latest_version.apply(str),
            capacity=CapacitySpec(type="on-demand"),
        )

    def _node_group(
        self,
        role: str,
        *,
        instance_type: str,
        count: int,
        template_id: pulumi.Input[str],
        template_version: pulumi.Input[str],
        capacity: CapacitySpec,
    ) -> pcs.ComputeNodeGroup:
        args = self._args
        option = PURCHASE_OPTIONS[capacity.type]
        return pcs.ComputeNodeGroup(
            f"{self._name}-{role}",
            cluster_id=self.cluster_id,
            name=role,
            ami_id=args.image_id,
            iam_instance_profile_arn=args.instance_profile_arn,
            instance_configs=[pcs.ComputeNodeGroupInstanceConfigArgs(instance_type=instance_type)],
            # Static: PCS keeps exactly `count` instances; a job spans all of them. A capacity
            # block starts at 0: the group may be created while the block is only scheduled, and
            # maxInstanceCount must not exceed the block ("capacity-blocks-configure-cng").
            scaling_configuration=pcs.ScalingConfigurationPropertiesArgs(
                min_instance_count=0 if capacity.type == "capacity-block" else count,
                max_instance_count=count,
            ),
            subnet_ids=[args.node_subnet_id],
            custom_launch_template=pcs.CustomLaunchTemplatePropertiesArgs(
                template_id=template_id,
                version=template_version,
            ),
            purchase_option=option,
            spot_options=(
                pcs.SpotOptionsPropertiesArgs(
                    allocation_strategy=pcs.ComputeNodeGroupSpotOptionsPropertiesAllocationStrategy.CAPACITY_OPTIMIZED
                )
                if capacity.type == "spot"
                else None
            ),
            tags=dict(args.tags),
            # Fixed names (Slurm names the nodes after the group): a replacement must free
            # the name first. The nodes are replaced either way.
            # A looked-up image is kept once the group exists (compute.image moves it).
            opts=pulumi.ResourceOptions(
                parent=self,
                delete_before_replace=True,
                depends_on=[self.register_policy],
                ignore_changes=[] if args.image_pinned else ["amiId"],
            ),
        )
