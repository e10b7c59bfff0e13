"""Test resources declared through the providers' own SDKs, recorded under Pulumi's mock monitor.

The rules read wire-form inputs (camelCase keys, the types each provider schema uses). Writing
those dicts by hand would test the rules against our own guess of the wire form; declaring the
resources with the typed ``*Args`` classes and recording what the SDK sends tests them against
the real thing, as the engine (and CrossGuard) receive it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

import pulumi
import pulumi_aws as aws
import pulumi_aws_native as aws_native
import pulumi_azure_native as azure
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s
from pulumi.runtime.sync_await import _sync_await

from gpu_cluster.components.engine import OfflineRun, _RecordingMonitor, _StrictMocks

KMS_KEY = "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
OTHER_KEY = "arn:aws:kms:us-east-1:111122223333:key/ffffffff-12ab-34cd-56ef-1234567890ab"
# A global range: private and documentation ranges are never a public endpoint's audience.
API_CIDR = "203.0.114.0/24"


@dataclass
class Recording:
    run: OfflineRun
    property_dependencies: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    """URN -> input name -> URNs it depends on, as the engine would hand them to CrossGuard."""

    def get(self, name: str) -> Any:
        found = [r for r in self.run.resources if r.name == name]
        assert len(found) == 1, f"expected one resource named {name!r}, found {len(found)}"
        return found[0]


class _DepsMonitor(_RecordingMonitor):
    def __init__(self, mocks: _StrictMocks, run: OfflineRun, deps: dict[str, dict[str, list[str]]]):
        super().__init__(mocks, run)
        self._deps = deps

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)
        self._deps[response.urn] = {k: list(v.urns) for k, v in request.propertyDependencies.items()}
        return response


def record(body: Callable[[], None], stack: str = "policy-test") -> Recording:
    run = OfflineRun(stack=stack)
    rec = Recording(run=run)
    mocks = _StrictMocks({}, {}, run)
    pulumi.runtime.set_mocks(
        mocks,
        project="gpu-cluster",
        stack=stack,
        preview=False,
        monitor=_DepsMonitor(mocks, run, rec.property_dependencies),
    )
    settings = pulumi.runtime.settings.SETTINGS
    settings.rpc_manager.clear()
    settings.outputs.clear()
    _sync_await(pulumi.runtime.stack.run_pulumi_func(body))
    return rec


def _lt(
    name: str,
    *,
    tokens: str | None = "required",
    hops: int | None = 1,
    encrypted: str = "true",
    public: str | None = None,
    sg: Any = None,
    subnet: Any = None,
    group: Any = None,
    meta: bool = True,
) -> aws.ec2.LaunchTemplate:
    return aws.ec2.LaunchTemplate(
        name,
        metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
            http_endpoint="enabled", http_tokens=tokens, http_put_response_hop_limit=hops
        )
        if meta
        else None,
        block_device_mappings=[
            aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name="/dev/xvda",
                ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                    encrypted=encrypted, volume_size=500, volume_type="gp3"
                ),
            )
        ],
        network_interfaces=[
            aws.ec2.LaunchTemplateNetworkInterfaceArgs(
                device_index=i,
                network_card_index=i,
                interface_type="efa" if i == 0 else "efa-only",
                associate_public_ip_address=public if i == 0 else None,
                security_groups=[sg.id] if sg is not None else None,
                subnet_id=subnet.id if subnet is not None else None,
            )
            for i in range(2)
        ],
        placement=aws.ec2.LaunchTemplatePlacementArgs(group_name=group.name) if group is not None else None,
    )


def aws_program() -> None:
    """Pairs of resources: '<rule>-ok' passes its rule, '<rule>-bad*' breaks it."""
    vpc = aws.ec2.Vpc("vpc", cidr_block="10.0.0.0/16")
    subnet = aws.ec2.Subnet("subnet-a", vpc_id=vpc.id, cidr_block="10.0.0.0/20", availability_zone="us-east-1a")
    subnet_b = aws.ec2.Subnet("subnet-b", vpc_id=vpc.id, cidr_block="10.0.16.0/20", availability_zone="us-east-1b")

    # Security groups: the EFA group with inline self rules, one with separate rule resources,
    # one without any self rule; and open/closed ingress in each of the three styles.
    efa_sg = aws.ec2.SecurityGroup(
        "sg-ok",
        vpc_id=vpc.id,
        ingress=[
            aws.ec2.SecurityGroupIngressArgs(protocol="-1", from_port=0, to_port=0, self=True),
            aws.ec2.SecurityGroupIngressArgs(protocol="tcp", from_port=443, to_port=443, cidr_blocks=["10.0.0.0/16"]),
        ],
        egress=[
            aws.ec2.SecurityGroupEgressArgs(protocol="-1", from_port=0, to_port=0, self=True),
            aws.ec2.SecurityGroupEgressArgs(
                protocol="-1", from_port=0, to_port=0, cidr_blocks=["0.0.0.0/0"], ipv6_cidr_blocks=["::/0"]
            ),
        ],
    )
    split_sg = aws.ec2.SecurityGroup("sg-split", vpc_id=vpc.id)
    aws.vpc.SecurityGroupIngressRule(
        "sg-split-in", security_group_id=split_sg.id, ip_protocol="-1", referenced_security_group_id=split_sg.id
    )
    aws.vpc.SecurityGroupEgressRule(
        "sg-split-out", security_group_id=split_sg.id, ip_protocol="-1", referenced_security_group_id=split_sg.id
    )
    legacy_sg = aws.ec2.SecurityGroup("sg-legacy", vpc_id=vpc.id)
    aws.ec2.SecurityGroupRule(
        "sg-legacy-in", type="ingress", security_group_id=legacy_sg.id, protocol="-1", from_port=0, to_port=0, self=True
    )
    aws.ec2.SecurityGroupRule(
        "sg-legacy-out",
        type="egress",
        security_group_id=legacy_sg.id,
        protocol="-1",
        from_port=0,
        to_port=0,
        source_security_group_id=legacy_sg.id,
    )
    half_sg = aws.ec2.SecurityGroup(
        "sg-ingress-only",
        vpc_id=vpc.id,
        ingress=[aws.ec2.SecurityGroupIngressArgs(protocol="-1", from_port=0, to_port=0, self=True)],
    )
    aws.ec2.SecurityGroup(
        "sg-bad",
        vpc_id=vpc.id,
        ingress=[aws.ec2.SecurityGroupIngressArgs(protocol="tcp", from_port=22, to_port=22, cidr_blocks=["0.0.0.0/0"])],
    )
    aws.ec2.SecurityGroupRule(
        "sgr-bad",
        type="ingress",
        security_group_id=legacy_sg.id,
        protocol="tcp",
        from_port=443,
        to_port=443,
        ipv6_cidr_blocks=["::/0"],
    )
    aws.ec2.SecurityGroupRule(
        "sgr-egress-ok",
        type="egress",
        security_group_id=legacy_sg.id,
        protocol="-1",
        from_port=0,
        to_port=0,
        cidr_blocks=["0.0.0.0/0"],
    )
    aws.vpc.SecurityGroupIngressRule(
        "sgi-bad", security_group_id=legacy_sg.id, ip_protocol="tcp", from_port=22, to_port=22, cidr_ipv4="0.0.0.0/0"
    )
    aws.vpc.SecurityGroupIngressRule(
        "sgi-ok", security_group_id=legacy_sg.id, ip_protocol="tcp", from_port=22, to_port=22, cidr_ipv4="10.0.0.0/16"
    )

    group = aws.ec2.PlacementGroup("pg", strategy="cluster", name="pg")
    spread = aws.ec2.PlacementGroup("pg-spread", strategy="spread", name="pg-spread")

    _lt("lt-ok", sg=efa_sg, subnet=subnet, group=group)
    _lt("lt-split-sg", sg=split_sg, subnet=subnet, group=group)
    _lt("lt-legacy-sg", sg=legacy_sg, subnet=subnet, group=group)
    _lt("lt-half-sg", sg=half_sg, subnet=subnet, group=group)
    _lt("lt-no-group", sg=efa_sg, subnet=subnet)
    _lt("lt-spread-group", sg=efa_sg, subnet=subnet, group=spread)
    _lt("lt-other-zone", sg=efa_sg, subnet=subnet_b, group=group)
    _lt("lt-imdsv1", tokens="optional")
    _lt("lt-hops3", hops=3)
    _lt("lt-hops2", hops=2)
    _lt("lt-no-hops", hops=None)
    _lt("lt-no-meta", meta=False)
    _lt("lt-unencrypted", encrypted="false")
    _lt("lt-public", public="true")
    aws_native.ec2.LaunchTemplate(
        "native-lt-ok",
        launch_template_data=aws_native.ec2.LaunchTemplateDataArgs(
            metadata_options=aws_native.ec2.LaunchTemplateMetadataOptionsArgs(
                http_tokens="required", http_put_response_hop_limit=1
            ),
            block_device_mappings=[
                aws_native.ec2.LaunchTemplateBlockDeviceMappingArgs(
                    device_name="/dev/xvda", ebs=aws_native.ec2.LaunchTemplateEbsArgs(encrypted=True, volume_size=500)
                )
            ],
            network_interfaces=[
                aws_native.ec2.LaunchTemplateNetworkInterfaceArgs(
                    device_index=0, interface_type="efa", associate_public_ip_address=False, groups=[efa_sg.id]
                )
            ],
        ),
    )
    aws_native.ec2.LaunchTemplate(
        "native-lt-bad",
        launch_template_data=aws_native.ec2.LaunchTemplateDataArgs(
            metadata_options=aws_native.ec2.LaunchTemplateMetadataOptionsArgs(http_tokens="optional"),
            block_device_mappings=[
                aws_native.ec2.LaunchTemplateBlockDeviceMappingArgs(
                    device_name="/dev/xvda", ebs=aws_native.ec2.LaunchTemplateEbsArgs(encrypted=False)
                )
            ],
            network_interfaces=[
                aws_native.ec2.LaunchTemplateNetworkInterfaceArgs(device_index=0, associate_public_ip_address=True)
            ],
        ),
    )
    aws.ec2.Instance(
        "instance-ok",
        ami="ami-0123456789abcdef0",
        instance_type="m7i.large",
        metadata_options=aws.ec2.InstanceMetadataOptionsArgs(http_tokens="required", http_put_response_hop_limit=1),
        root_block_device=aws.ec2.InstanceRootBlockDeviceArgs(encrypted=True),
        associate_public_ip_address=False,
    )
    aws.ec2.Instance(
        "instance-bad",
        ami="ami-0123456789abcdef0",
        instance_type="m7i.large",
        root_block_device=aws.ec2.InstanceRootBlockDeviceArgs(volume_size=100),
        associate_public_ip_address=True,
    )
    aws.ebs.Volume("volume-ok", availability_zone="us-east-1a", size=100, encrypted=True)
    aws.ebs.Volume("volume-bad", availability_zone="us-east-1a", size=100)

    role = "arn:aws:iam::111122223333:role/eks"
    aws.eks.Cluster(
        "eks-ok",
        role_arn=role,
        vpc_config=aws.eks.ClusterVpcConfigArgs(
            subnet_ids=[subnet.id],
            endpoint_private_access=True,
            endpoint_public_access=True,
            public_access_cidrs=[API_CIDR],
        ),
        encryption_config=aws.eks.ClusterEncryptionConfigArgs(
            resources=["secrets"], provider=aws.eks.ClusterEncryptionConfigProviderArgs(key_arn=KMS_KEY)
        ),
    )
    aws.eks.Cluster(
        "eks-private",
        role_arn=role,
        vpc_config=aws.eks.ClusterVpcConfigArgs(
            subnet_ids=[subnet.id], endpoint_private_access=True, endpoint_public_access=False
        ),
    )
    aws.eks.Cluster("eks-bad", role_arn=role, vpc_config=aws.eks.ClusterVpcConfigArgs(subnet_ids=[subnet.id]))
    aws.eks.Cluster(
        "eks-unlisted",
        role_arn=role,
        vpc_config=aws.eks.ClusterVpcConfigArgs(
            subnet_ids=[subnet.id], endpoint_public_access=True, public_access_cidrs=["198.51.100.0/24"]
        ),
    )
    scaling = aws.eks.NodeGroupScalingConfigArgs(desired_size=2, min_size=2, max_size=2)
    aws.eks.NodeGroup("ng-ok", cluster_name="c", node_role_arn=role, subnet_ids=[subnet.id], scaling_config=scaling)
    aws.eks.NodeGroup(
        "ng-ssh-ok",
        cluster_name="c",
        node_role_arn=role,
        subnet_ids=[subnet.id],
        scaling_config=scaling,
        remote_access=aws.eks.NodeGroupRemoteAccessArgs(ec2_ssh_key="ops", source_security_group_ids=[efa_sg.id]),
    )
    aws.eks.NodeGroup(
        "ng-bad",
        cluster_name="c",
        node_role_arn=role,
        subnet_ids=[subnet.id],
        scaling_config=scaling,
        remote_access=aws.eks.NodeGroupRemoteAccessArgs(ec2_ssh_key="ops"),
    )

    def fsx(name: str, key: str | None, protect: bool) -> None:
        aws.fsx.LustreFileSystem(
            name,
            subnet_ids=subnet.id,
            deployment_type="PERSISTENT_2",
            storage_capacity=2400,
            per_unit_storage_throughput=250,
            kms_key_id=key,
            opts=pulumi.ResourceOptions(protect=protect),
        )

    fsx("fsx-ok", KMS_KEY, True)
    fsx("fsx-bad", OTHER_KEY, False)
    fsx("fsx-service-key", None, True)

    ok = aws.s3.Bucket("bucket-ok", bucket="example-checkpoints")
    aws.s3.BucketPublicAccessBlock(
        "bucket-ok-pab",
        bucket=ok.id,
        block_public_acls=True,
        block_public_policy=True,
        ignore_public_acls=True,
        restrict_public_buckets=True,
    )
    named = aws.s3.Bucket("bucket-by-name", bucket="example-named")
    aws.s3.BucketPublicAccessBlock(
        "bucket-by-name-pab",
        bucket=named.bucket,
        block_public_acls=True,
        block_public_policy=True,
        ignore_public_acls=True,
        restrict_public_buckets=True,
    )
    partial = aws.s3.Bucket("bucket-partial")
    aws.s3.BucketPublicAccessBlock(
        "bucket-partial-pab", bucket=partial.id, block_public_acls=True, block_public_policy=True
    )
    aws.s3.Bucket("bucket-bare")
    _aws_audit(vpc, ok)


def _aws_audit(vpc: aws.ec2.Vpc, ok: aws.s3.Bucket) -> None:
    """Flow logs, default groups, access logs, lifecycle, IAM and KMS: '-ok' passes, '-bad' breaks."""
    aws.ec2.FlowLog(
        "flow-ok",
        vpc_id=vpc.id,
        traffic_type="ALL",
        log_destination_type="s3",
        log_destination="arn:aws:s3:::example-logs/flow-logs/",
    )
    reject_vpc = aws.ec2.Vpc("vpc-reject-only", cidr_block="10.1.0.0/16")
    aws.ec2.FlowLog(
        "flow-reject-only",
        vpc_id=reject_vpc.id,
        traffic_type="REJECT",
        log_destination_type="s3",
        log_destination="arn:aws:s3:::example-logs/flow-logs/",
    )
    aws.ec2.Vpc("vpc-bare", cidr_block="10.2.0.0/16")
    aws.ec2.DefaultSecurityGroup("dsg-ok", vpc_id=vpc.id)
    open_vpc = aws.ec2.Vpc("vpc-default-open", cidr_block="10.3.0.0/16")
    aws.ec2.DefaultSecurityGroup(
        "dsg-bad",
        vpc_id=open_vpc.id,
        ingress=[aws.ec2.DefaultSecurityGroupIngressArgs(protocol="-1", from_port=0, to_port=0, self=True)],
    )

    logs = aws.s3.Bucket("bucket-logs")
    aws.s3.BucketPublicAccessBlock(
        "bucket-logs-pab",
        bucket=logs.id,
        block_public_acls=True,
        block_public_policy=True,
        ignore_public_acls=True,
        restrict_public_buckets=True,
    )
    aws.s3.BucketLogging("bucket-ok-logging", bucket=ok.id, target_bucket=logs.id, target_prefix="access-logs/")
    aws.s3.BucketVersioning(
        "bucket-ok-versioning",
        bucket=ok.id,
        versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(status="Enabled"),
    )
    aws.s3.BucketLifecycleConfiguration(
        "bucket-ok-lifecycle",
        bucket=ok.id,
        rules=[
            aws.s3.BucketLifecycleConfigurationRuleArgs(
                id="noncurrent",
                status="Enabled",
                filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=""),
                noncurrent_version_expiration=aws.s3.BucketLifecycleConfigurationRuleNoncurrentVersionExpirationArgs(
                    noncurrent_days=30
                ),
                abort_incomplete_multipart_upload=aws.s3.BucketLifecycleConfigurationRuleAbortIncompleteMultipartUploadArgs(
                    days_after_initiation=7
                ),
            )
        ],
    )
    kept = aws.s3.Bucket("bucket-versions-kept")
    aws.s3.BucketVersioning(
        "bucket-versions-kept-versioning",
        bucket=kept.id,
        versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(status="Enabled"),
    )

    scoped = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": ["pcs:RegisterComputeNodeGroupInstance"],
                "Resource": "arn:aws:pcs:us-east-1:111122223333:cluster/pcs_abc",
            },
            {"Effect": "Allow", "Action": ["ec2:DescribeInstances", "sts:GetCallerIdentity"], "Resource": "*"},
            {"Effect": "Deny", "Action": "*", "Resource": "*", "Condition": {"Bool": {"aws:SecureTransport": "false"}}},
        ],
    }
    star = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "pcs:RegisterComputeNodeGroupInstance", "Resource": "*"}],
    }
    role = aws.iam.Role(
        "iam-role-ok",
        assume_role_policy=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
                ],
            }
        ),
    )
    aws.iam.RolePolicy("iam-ok", role=role.name, policy=json.dumps(scoped))
    aws.iam.RolePolicy("iam-bad", role=role.name, policy=json.dumps(star))
    aws.iam.Policy(
        "iam-policy-bad",
        policy=json.dumps(
            {"Version": "2012-10-17", "Statement": {"Effect": "Allow", "Action": "s3:*", "Resource": ["*"]}}
        ),
    )
    aws.iam.Role(
        "iam-role-inline-bad",
        assume_role_policy=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
                ],
            }
        ),
        inline_policies=[aws.iam.RoleInlinePolicyArgs(name="wide", policy=json.dumps(star))],
    )

    root = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "Enable IAM User Permissions",
                "Effect": "Allow",
                "Principal": {"AWS": "arn:aws:iam::111122223333:root"},
                "Action": "kms:*",
                "Resource": "*",
            }
        ],
    }
    public = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "kms:Decrypt", "Resource": "*"}],
    }
    aws.kms.Key("key-ok", enable_key_rotation=True, policy=json.dumps(root))
    separate = aws.kms.Key("key-separate", enable_key_rotation=True)
    aws.kms.KeyPolicy("key-separate-policy", key_id=separate.id, policy=json.dumps(root))
    aws.kms.Key("key-no-policy", enable_key_rotation=True)
    aws.kms.Key("key-public", enable_key_rotation=True, policy=json.dumps(public))
    aws.kms.Key("key-no-rotation", policy=json.dumps(root))
    aws.kms.Key("key-asymmetric", customer_master_key_spec="RSA_2048", key_usage="SIGN_VERIFY", policy=json.dumps(root))


def gcp_program() -> None:
    net = gcp.compute.Network("net-ok", auto_create_subnetworks=False, mtu=8244)
    gcp.compute.Network("net-default-mtu", auto_create_subnetworks=False)
    gcp.compute.Network("net-bad-mtu", auto_create_subnetworks=False, mtu=1500)
    disks = [
        gcp.compute.InstanceTemplateDiskArgs(
            source_image="projects/cos-cloud/global/images/family/cos-stable", boot=True, disk_size_gb=200
        )
    ]
    gcp.compute.InstanceTemplate(
        "template-ok",
        machine_type="a3-megagpu-8g",
        disks=disks,
        network_interfaces=[gcp.compute.InstanceTemplateNetworkInterfaceArgs(network=net.id, nic_type="GVNIC")],
    )
    gcp.compute.InstanceTemplate(
        "template-bad",
        machine_type="a3-megagpu-8g",
        disks=disks,
        network_interfaces=[
            gcp.compute.InstanceTemplateNetworkInterfaceArgs(
                network=net.id, access_configs=[gcp.compute.InstanceTemplateNetworkInterfaceAccessConfigArgs()]
            )
        ],
    )

    for name, public in (("slurm-ok", False), ("slurm-bad", True)):
        gcp.hypercomputecluster.Cluster(
            name,
            cluster_id=name,
            location="europe-west1",
            network_resources=[gcp.hypercomputecluster.ClusterNetworkResourceArgs(id="net")],
            orchestrator=gcp.hypercomputecluster.ClusterOrchestratorArgs(
                slurm=gcp.hypercomputecluster.ClusterOrchestratorSlurmArgs(
                    login_nodes=gcp.hypercomputecluster.ClusterOrchestratorSlurmLoginNodesArgs(
                        count="1", machine_type="n2-standard-8", zone="europe-west1-b", enable_public_ips=public
                    ),
                    node_sets=[],
                    partitions=[],
                )
            ),
        )

    gcp.compute.Firewall(
        "fw-ok", network=net.id, source_ranges=["10.0.0.0/8"], allows=[gcp.compute.FirewallAllowArgs(protocol="all")]
    )
    gcp.compute.Firewall(
        "fw-deny-world",
        network=net.id,
        source_ranges=["0.0.0.0/0"],
        denies=[gcp.compute.FirewallDenyArgs(protocol="all")],
    )
    gcp.compute.Firewall(
        "fw-egress-world",
        network=net.id,
        direction="EGRESS",
        destination_ranges=["0.0.0.0/0"],
        allows=[gcp.compute.FirewallAllowArgs(protocol="all")],
    )
    gcp.compute.Firewall(
        "fw-bad",
        network=net.id,
        source_ranges=["0.0.0.0/0"],
        allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=["22"])],
    )

    shielded = gcp.container.ClusterNodeConfigShieldedInstanceConfigArgs(
        enable_secure_boot=True, enable_integrity_monitoring=True
    )
    gcp.container.Cluster(
        "gke-ok",
        location="us-central1-a",
        initial_node_count=1,
        remove_default_node_pool=True,
        private_cluster_config=gcp.container.ClusterPrivateClusterConfigArgs(
            enable_private_nodes=True, enable_private_endpoint=False, master_ipv4_cidr_block="172.16.0.0/28"
        ),
        master_authorized_networks_config=gcp.container.ClusterMasterAuthorizedNetworksConfigArgs(
            cidr_blocks=[gcp.container.ClusterMasterAuthorizedNetworksConfigCidrBlockArgs(cidr_block=API_CIDR)]
        ),
        workload_identity_config=gcp.container.ClusterWorkloadIdentityConfigArgs(
            workload_pool="example-gpu-project.svc.id.goog"
        ),
        database_encryption=gcp.container.ClusterDatabaseEncryptionArgs(
            state="ENCRYPTED", key_name="projects/p/locations/us-central1/keyRings/r/cryptoKeys/k"
        ),
        node_config=gcp.container.ClusterNodeConfigArgs(
            shielded_instance_config=shielded,
            workload_metadata_config=gcp.container.ClusterNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA"),
        ),
    )
    gcp.container.Cluster(
        "gke-bad",
        location="us-central1-a",
        initial_node_count=1,
        enable_shielded_nodes=False,
        master_authorized_networks_config=gcp.container.ClusterMasterAuthorizedNetworksConfigArgs(
            cidr_blocks=[gcp.container.ClusterMasterAuthorizedNetworksConfigCidrBlockArgs(cidr_block="0.0.0.0/0")]
        ),
        node_config=gcp.container.ClusterNodeConfigArgs(
            workload_metadata_config=gcp.container.ClusterNodeConfigWorkloadMetadataConfigArgs(mode="GCE_METADATA")
        ),
    )
    gcp.container.Cluster("gke-open", location="us-central1-a", initial_node_count=1)
    gcp.container.NodePool(
        "pool-ok",
        cluster="gke-ok",
        node_count=4,
        node_config=gcp.container.NodePoolNodeConfigArgs(
            machine_type="a3-megagpu-8g",
            shielded_instance_config=gcp.container.NodePoolNodeConfigShieldedInstanceConfigArgs(
                enable_secure_boot=True, enable_integrity_monitoring=True
            ),
            workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA"),
        ),
    )
    gcp.container.NodePool(
        "pool-bad",
        cluster="gke-ok",
        node_count=4,
        network_config=gcp.container.NodePoolNetworkConfigArgs(enable_private_nodes=False),
        node_config=gcp.container.NodePoolNodeConfigArgs(
            machine_type="a3-megagpu-8g",
            shielded_instance_config=gcp.container.NodePoolNodeConfigShieldedInstanceConfigArgs(
                enable_integrity_monitoring=False
            ),
            workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode="GCE_METADATA"),
        ),
    )

    gcs_logs = gcp.storage.Bucket(
        "gcs-logs",
        name="example-logs",
        location="US-CENTRAL1",
        public_access_prevention="enforced",
        uniform_bucket_level_access=True,
    )
    gcp.storage.Bucket(
        "gcs-ok",
        location="US-CENTRAL1",
        public_access_prevention="enforced",
        uniform_bucket_level_access=True,
        logging=gcp.storage.BucketLoggingArgs(log_bucket=gcs_logs.name),
        versioning=gcp.storage.BucketVersioningArgs(enabled=True),
        lifecycle_rules=[
            gcp.storage.BucketLifecycleRuleArgs(
                action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
                condition=gcp.storage.BucketLifecycleRuleConditionArgs(days_since_noncurrent_time=30),
            )
        ],
    )
    gcp.storage.Bucket(
        "gcs-bad",
        location="US-CENTRAL1",
        public_access_prevention="inherited",
        versioning=gcp.storage.BucketVersioningArgs(enabled=True),
    )
    gcp.compute.Subnetwork(
        "subnet-ok",
        network=net.id,
        ip_cidr_range="10.0.0.0/20",
        region="us-central1",
        log_config=gcp.compute.SubnetworkLogConfigArgs(aggregation_interval="INTERVAL_5_SEC", flow_sampling=0.5),
    )
    gcp.compute.Subnetwork("subnet-bad", network=net.id, ip_cidr_range="10.0.16.0/20", region="us-central1")
    _k8s_workloads()

    for name, protect in (("lustre-ok", True), ("lustre-bad", False)):
        gcp.lustre.Instance(
            name,
            instance_id=name,
            capacity_gib="18000",
            filesystem="scratch",
            location="us-central1-a",
            network=net.id,
            per_unit_storage_throughput="250",
            opts=pulumi.ResourceOptions(protect=protect),
        )


DIGEST = "sha256:" + "ab" * 32


class _Chart(pulumi.ComponentResource):
    def __init__(self, name: str) -> None:
        super().__init__("kubernetes:helm.sh/v4:Chart", name, None, None)


def _k8s_workloads() -> None:
    """Workload objects: '-ok' hardened and pinned, '-bad' neither, '-skip' with Checkov skips."""
    hardened = k8s.core.v1.SecurityContextArgs(
        allow_privilege_escalation=False,
        run_as_non_root=True,
        privileged=False,
        capabilities=k8s.core.v1.CapabilitiesArgs(drop=["ALL"]),
        seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault"),
    )

    def daemonset(
        name: str,
        image: str,
        namespace: str | None,
        ctx: Any,
        host_network: bool = False,
        token: bool | None = False,
        annotations: dict[str, str] | None = None,
    ) -> None:
        k8s.apps.v1.DaemonSet(
            name,
            metadata=k8s.meta.v1.ObjectMetaArgs(name=name, namespace=namespace, annotations=annotations),
            spec=k8s.apps.v1.DaemonSetSpecArgs(
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels={"app": name}),
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels={"app": name}),
                    spec=k8s.core.v1.PodSpecArgs(
                        host_network=host_network,
                        automount_service_account_token=token,
                        containers=[k8s.core.v1.ContainerArgs(name="main", image=image, security_context=ctx)],
                    ),
                ),
            ),
        )

    daemonset("ds-ok", f"registry.k8s.io/pause:3.10@{DIGEST}", "gpu-system", hardened)
    # A chart's children, as CrossGuard sees them under `pulumi preview`: their URNs run through
    # the chart's type (helm.v4.Chart registers its objects as its children).
    chart = _Chart("chart")
    k8s.apps.v1.DaemonSet(
        "chart-ds-bad",
        metadata=k8s.meta.v1.ObjectMetaArgs(name="plugin", namespace="kube-system"),
        spec=k8s.apps.v1.DaemonSetSpecArgs(
            selector=k8s.meta.v1.LabelSelectorArgs(match_labels={"app": "plugin"}),
            template=k8s.core.v1.PodTemplateSpecArgs(
                metadata=k8s.meta.v1.ObjectMetaArgs(labels={"app": "plugin"}),
                spec=k8s.core.v1.PodSpecArgs(
                    containers=[k8s.core.v1.ContainerArgs(name="plugin", image="nvcr.io/nvidia/plugin:v0.17.1")]
                ),
            ),
        ),
        opts=pulumi.ResourceOptions(parent=chart),
    )
    daemonset(
        "ds-bad",
        "registry.k8s.io/pause:3.10",
        None,
        k8s.core.v1.SecurityContextArgs(privileged=True),
        host_network=True,
        token=None,
    )
    # An installer that must be privileged, saying why in Checkov's own annotation syntax.
    daemonset(
        "ds-skip",
        f"registry.k8s.io/pause:3.10@{DIGEST}",
        "kube-system",
        k8s.core.v1.SecurityContextArgs(
            privileged=True,
            allow_privilege_escalation=True,
            run_as_non_root=True,
            capabilities=k8s.core.v1.CapabilitiesArgs(drop=["ALL"]),
            seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault"),
        ),
        annotations={
            "checkov.io/skip1": "CKV_K8S_16=writes the NCCL plugin into the host's library path",
            "checkov.io/skip2": "CKV_K8S_20=privileged implies it",
        },
    )
    daemonset(
        "ds-skip-no-reason",
        f"registry.k8s.io/pause:3.10@{DIGEST}",
        "kube-system",
        k8s.core.v1.SecurityContextArgs(
            privileged=True,
            allow_privilege_escalation=False,
            run_as_non_root=True,
            capabilities=k8s.core.v1.CapabilitiesArgs(drop=["ALL"]),
            seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault"),
        ),
        annotations={"checkov.io/skip1": "CKV_K8S_16"},
    )
    k8s.apiextensions.CustomResource(
        "jobset-bad",
        api_version="jobset.x-k8s.io/v1alpha2",
        kind="JobSet",
        metadata=k8s.meta.v1.ObjectMetaArgs(name="train", namespace="default"),
        spec={
            "replicatedJobs": [
                {
                    "name": "workers",
                    "template": {
                        "spec": {"template": {"spec": {"containers": [{"name": "w", "image": "python:3.12"}]}}}
                    },
                }
            ]
        },
    )


def _rule(name: str, access: str, source: str, port: str = "22") -> azure.network.SecurityRuleArgs:
    return azure.network.SecurityRuleArgs(
        name=name,
        access=access,
        direction="Inbound",
        protocol="Tcp",
        priority=100,
        source_address_prefix=source,
        source_port_range="*",
        destination_address_prefix="*",
        destination_port_range=port,
    )


def azure_program() -> None:
    rg = "rg"
    azure.network.NetworkSecurityGroup(
        "nsg-ok",
        resource_group_name=rg,
        security_rules=[_rule("vnet", "Allow", "10.0.0.0/16"), _rule("deny", "Deny", "Internet")],
    )
    azure.network.NetworkSecurityGroup(
        "nsg-ssh-internet", resource_group_name=rg, security_rules=[_rule("ssh", "Allow", "Internet")]
    )
    azure.network.NetworkSecurityGroup(
        "nsg-rdp-any", resource_group_name=rg, security_rules=[_rule("rdp", "Allow", "*", "3389")]
    )
    azure.network.SecurityRule(
        "rule-open",
        resource_group_name=rg,
        network_security_group_name="n",
        access="Allow",
        direction="Inbound",
        protocol="Udp",
        priority=200,
        source_address_prefix="0.0.0.0/0",
        destination_port_range="*",
    )
    private = dict(
        resource_group_name=rg,
        kind="StorageV2",
        sku=azure.storage.SkuArgs(name="Standard_LRS"),
        enable_https_traffic_only=True,
        minimum_tls_version="TLS1_2",
        allow_blob_public_access=False,
        allow_shared_key_access=False,
        network_rule_set=azure.storage.NetworkRuleSetArgs(default_action=azure.storage.DefaultAction.DENY),
    )
    azure.storage.StorageAccount("acct-ok", **private)  # type: ignore[arg-type]
    azure.storage.StorageAccount(
        "acct-open",
        resource_group_name=rg,
        kind="StorageV2",
        sku=azure.storage.SkuArgs(name="Standard_LRS"),
        allow_blob_public_access=True,
        minimum_tls_version="TLS1_0",
    )
    pool = azure.containerservice.ManagedClusterAgentPoolProfileArgs(
        name="system", mode="System", enable_node_public_ip=False
    )
    azure.containerservice.ManagedCluster(
        "aks-ok",
        resource_group_name=rg,
        agent_pool_profiles=[pool],
        api_server_access_profile=azure.containerservice.ManagedClusterAPIServerAccessProfileArgs(
            authorized_ip_ranges=["203.0.114.7/32"]
        ),
    )
    azure.containerservice.ManagedCluster(
        "aks-private",
        resource_group_name=rg,
        agent_pool_profiles=[pool],
        api_server_access_profile=azure.containerservice.ManagedClusterAPIServerAccessProfileArgs(
            enable_private_cluster=True
        ),
    )
    azure.containerservice.ManagedCluster(
        "aks-open",
        resource_group_name=rg,
        agent_pool_profiles=[
            azure.containerservice.ManagedClusterAgentPoolProfileArgs(name="system", enable_node_public_ip=True)
        ],
        api_server_access_profile=azure.containerservice.ManagedClusterAPIServerAccessProfileArgs(
            authorized_ip_ranges=["0.0.0.0/0"]
        ),
    )
    azure.containerservice.ManagedCluster("aks-no-ranges", resource_group_name=rg, agent_pool_profiles=[pool])
    azure.containerservice.AgentPool("pool-ok", resource_group_name=rg, resource_name_="c", enable_node_public_ip=False)
    azure.containerservice.AgentPool(
        "pool-public", resource_group_name=rg, resource_name_="c", enable_node_public_ip=True
    )
    lustre = dict(
        resource_group_name=rg,
        filesystem_subnet="s",
        storage_capacity_ti_b=16,
        maintenance_window=azure.storagecache.AmlFilesystemMaintenanceWindowArgs(
            day_of_week=azure.storagecache.MaintenanceDayOfWeekType.SATURDAY, time_of_day_utc="23:00"
        ),
    )
    azure.storagecache.AmlFilesystem("amlfs-ok", opts=pulumi.ResourceOptions(protect=True), **lustre)  # type: ignore[arg-type]
    azure.storagecache.AmlFilesystem("amlfs-bad", **lustre)  # type: ignore[arg-type]
    _azure_issue35(rg)
    _azure_vms(rg)


def _azure_vms(rg: str) -> None:
    """What the VM rules check (policies/azure_vms.py): keys-only Linux VMs and scale sets, a VM
    with extensions off, NICs without a public address; and each broken."""
    c, n = azure.compute, azure.network
    keys = c.LinuxConfigurationArgs(
        disable_password_authentication=True,
        ssh=c.SshConfigurationArgs(public_keys=[c.SshPublicKeyArgs(key_data="ssh-ed25519 AAAA k", path="/k")]),
    )
    c.VirtualMachine(
        "vm-ok",
        resource_group_name=rg,
        os_profile=c.OSProfileArgs(admin_username="u", linux_configuration=keys, allow_extension_operations=False),
    )
    c.VirtualMachine(
        "vm-password",
        resource_group_name=rg,
        os_profile=c.OSProfileArgs(
            admin_username="u",
            admin_password="not-a-real-one",
            linux_configuration=c.LinuxConfigurationArgs(disable_password_authentication=False),
        ),
    )
    c.VirtualMachineScaleSet(
        "vmss-ok",
        resource_group_name=rg,
        virtual_machine_profile=c.VirtualMachineScaleSetVMProfileArgs(
            os_profile=c.VirtualMachineScaleSetOSProfileArgs(admin_username="u", linux_configuration=keys),
            network_profile=c.VirtualMachineScaleSetNetworkProfileArgs(
                network_interface_configurations=[
                    c.VirtualMachineScaleSetNetworkConfigurationArgs(
                        name="eth0",
                        ip_configurations=[c.VirtualMachineScaleSetIPConfigurationArgs(name="ipconfig")],
                    )
                ]
            ),
        ),
    )
    c.VirtualMachineScaleSet(
        "vmss-public",
        resource_group_name=rg,
        virtual_machine_profile=c.VirtualMachineScaleSetVMProfileArgs(
            os_profile=c.VirtualMachineScaleSetOSProfileArgs(
                admin_username="u", linux_configuration=c.LinuxConfigurationArgs(disable_password_authentication=True)
            ),
            network_profile=c.VirtualMachineScaleSetNetworkProfileArgs(
                network_interface_configurations=[
                    c.VirtualMachineScaleSetNetworkConfigurationArgs(
                        name="eth0",
                        ip_configurations=[
                            c.VirtualMachineScaleSetIPConfigurationArgs(
                                name="ipconfig",
                                public_ip_address_configuration=c.VirtualMachineScaleSetPublicIPAddressConfigurationArgs(
                                    name="pip"
                                ),
                            )
                        ],
                    )
                ]
            ),
        ),
    )
    n.NetworkInterface(
        "nic-ok", resource_group_name=rg, ip_configurations=[n.NetworkInterfaceIPConfigurationArgs(name="ipconfig")]
    )
    n.NetworkInterface(
        "nic-public",
        resource_group_name=rg,
        ip_configurations=[
            n.NetworkInterfaceIPConfigurationArgs(name="ipconfig", public_ip_address=n.PublicIPAddressArgs(id="pip-id"))
        ],
    )


def _azure_issue35(rg: str) -> None:
    """What the issue-35 rules check: a cluster with every setting and one without, storage with
    and without soft delete, audit logs by diagnostic setting (ids as the mock engine gives them)."""
    system = azure.containerservice.ManagedClusterAgentPoolProfileArgs(
        name="system",
        mode="System",
        vm_size="Standard_D4ds_v5",
        enable_encryption_at_host=True,
        node_taints=["CriticalAddonsOnly=true:NoSchedule"],
    )
    secure = azure.containerservice.ManagedCluster(
        "aks-secure",
        resource_group_name=rg,
        agent_pool_profiles=[system],
        network_profile=azure.containerservice.ContainerServiceNetworkProfileArgs(
            network_plugin="azure", network_dataplane="cilium", network_policy="cilium"
        ),
        disable_local_accounts=True,
        aad_profile=azure.containerservice.ManagedClusterAADProfileArgs(managed=True, enable_azure_rbac=True),
        addon_profiles={
            "omsagent": azure.containerservice.ManagedClusterAddonProfileArgs(
                enabled=True, config={"logAnalyticsWorkspaceResourceID": "ws-id"}
            )
        },
    )
    bare = azure.containerservice.ManagedCluster(
        "aks-bare",
        resource_group_name=rg,
        agent_pool_profiles=[azure.containerservice.ManagedClusterAgentPoolProfileArgs(name="system", mode="System")],
        network_profile=azure.containerservice.ContainerServiceNetworkProfileArgs(network_plugin="azure"),
        disable_local_accounts=True,
    )
    azure.containerservice.AgentPool(
        "pool-nd", resource_group_name=rg, resource_name_="c", vm_size="Standard_ND96isr_H100_v5"
    )
    azure.containerservice.AgentPool(
        "pool-cpu-plain", resource_group_name=rg, resource_name_="c", vm_size="Standard_D4ds_v5"
    )
    azure.monitor.DiagnosticSetting(
        "aks-secure-audit",
        resource_uri=secure.id,
        workspace_id="ws-id",
        logs=[azure.monitor.DiagnosticsLogSettingsArgs(category="kube-audit-admin", enabled=True)],
    )
    azure.monitor.DiagnosticSetting(
        "aks-bare-apiserver-only",
        resource_uri=bare.id,
        workspace_id="ws-id",
        logs=[azure.monitor.DiagnosticsLogSettingsArgs(category="kube-apiserver", enabled=True)],
    )
    account = dict(resource_group_name=rg, kind="StorageV2", sku=azure.storage.SkuArgs(name="Standard_LRS"))
    kept = azure.storage.StorageAccount("acct-kept", account_name="acctkept", **account)  # type: ignore[arg-type]
    azure.storage.BlobServiceProperties(
        "acct-kept-blob",
        account_name="acctkept",
        resource_group_name=rg,
        delete_retention_policy=azure.storage.DeleteRetentionPolicyArgs(enabled=True, days=30),
        container_delete_retention_policy=azure.storage.DeleteRetentionPolicyArgs(enabled=True, days=30),
    )
    azure.monitor.DiagnosticSetting(
        "acct-kept-logs",
        resource_uri=pulumi.Output.concat(kept.id, "/blobServices/default"),
        workspace_id="ws-id",
        logs=[
            azure.monitor.DiagnosticsLogSettingsArgs(category=c, enabled=True)
            for c in ("StorageRead", "StorageWrite", "StorageDelete")
        ],
    )
    loose = azure.storage.StorageAccount("acct-loose", account_name="acctloose", **account)  # type: ignore[arg-type]
    azure.storage.BlobServiceProperties(
        "acct-loose-blob",
        account_name="acctloose",
        resource_group_name=rg,
        container_delete_retention_policy=azure.storage.DeleteRetentionPolicyArgs(enabled=True, days=7),
    )
    azure.monitor.DiagnosticSetting(
        "acct-loose-logs",
        resource_uri=pulumi.Output.concat(loose.id, "/blobServices/default"),
        workspace_id="ws-id",
        logs=[azure.monitor.DiagnosticsLogSettingsArgs(category="StorageWrite", enabled=True)],
    )
