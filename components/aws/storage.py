"""Storage: FSx for Lustre (PERSISTENT_2) for data and an S3 bucket for checkpoints.

Storage builds no network: it takes the node subnet, the VPC and the nodes' security group
and gives back the mount description every cloud's file system exposes.

Both stores are protected (``protect=True``): ``pulumi destroy`` stops at them until an
operator lifts the protection on purpose, because losing either loses training data or
checkpoints that took GPU-hours to produce. The data repository association and the
security group are not: deleting them loses nothing (``delete_data_in_filesystem`` is off).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import pulumi
import pulumi_aws as aws

from gpu_cluster.components.aws.audit import checkpoint_audit
from gpu_cluster.components.aws.common import with_name
from gpu_cluster.components.aws.keys import lustre_key
from gpu_cluster.components.spec import LustreSpec

# Lustre's ports: 988 for the LNet traffic itself, 1018-1023 for the client's privileged
# source ports (FSx for Lustre user guide, "File system access control with Amazon VPC").
LUSTRE_PORTS = ((988, 988), (1018, 1023))
LUSTRE_VERSION = "2.15"
# Where an S3 data repository appears inside the file system (and so under the mount point).
DATA_REPOSITORY_PATH = "/data"


def mount_command(dns_name: pulumi.Input[str], mount_name: pulumi.Input[str], mount_point: str) -> pulumi.Output[str]:
    """The one command that mounts the file system on a node (flock: PyTorch's file store)."""
    return pulumi.Output.format("mount -t lustre -o relatime,flock {0}@tcp:/{1} {2}", dns_name, mount_name, mount_point)


@dataclass(kw_only=True, frozen=True, slots=True)
class StorageArgs:
    lustre: LustreSpec
    """Size, throughput, data repository paths, mount point, optional KMS key."""
    bucket_name: str | None
    """Checkpoint bucket name; Pulumi auto-names it from the resource name when None."""
    vpc_id: pulumi.Input[str]
    """VPC of the file system's security group."""
    subnet_id: pulumi.Input[str]
    """The node subnet: FSx serves from that subnet's zone, the zone of every GPU node."""
    node_security_group_id: pulumi.Input[str]
    """The nodes' group; the only source admitted on the Lustre ports."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """Merged into every resource."""
    log_bucket: pulumi.Input[str] | None = None
    """The stack's log bucket (Network.log_bucket.id): the checkpoint bucket's access logs go there."""
    noncurrent_days: int = 30
    """Days a noncurrent checkpoint version is kept (spec.security.checkpoint_noncurrent_days)."""


class Storage(pulumi.ComponentResource):
    mount: dict[str, Any]
    """{"type": "lustre", "mount_point", "dns_name", "mount_name", "volume_handle", "mount_command"}."""
    file_system_id: pulumi.Output[str]
    bucket_name: pulumi.Output[str]

    def __init__(self, name: str, args: StorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-cluster:aws:Storage", name, None, opts)
        self._name = name
        self._args = args
        lustre = args.lustre
        if lustre.export_path is not None and lustre.export_path != lustre.import_path:
            # One data repository association links one S3 prefix both ways.
            raise ValueError(
                f"storage.lustre.export_path: {lustre.export_path!r} differs from import_path "
                f"{lustre.import_path!r}; an FSx data repository association imports from and "
                "exports to the same S3 prefix (allowed: the import path)"
            )

        self.security_group = self._create_security_group()
        # CKV_AWS_190: the key the stack names, else one it creates with its key policy (keys.py).
        kms_key = (
            lustre.kms_key_id
            or lustre_key(name, self.security_group.arn, args.tags, pulumi.ResourceOptions(parent=self)).arn
        )
        self.file_system = aws.fsx.LustreFileSystem(
            f"{name}-lustre",
            deployment_type="PERSISTENT_2",
            storage_type="SSD",
            storage_capacity=lustre.size_gib,
            per_unit_storage_throughput=lustre.throughput_mbps_per_tib,
            file_system_type_version=LUSTRE_VERSION,
            data_compression_type="LZ4",
            metadata_configuration=aws.fsx.LustreFileSystemMetadataConfigurationArgs(mode="AUTOMATIC"),
            # efa_enabled is left unset, on purpose. The FSx page "Working with EFA-enabled file
            # systems" (docs.aws.amazon.com/fsx/latest/LustreGuide/efa-file-systems.html, read
            # 2026-12-01) recommends EFA above 10 GBps of throughput capacity; the bundled stacks
            # have 4800 GiB x 250 MB/s/TiB, about 1.2 GBps. It is also fixed at creation and then
            # freezes per_unit_storage_throughput (pulumi-aws 7.51 LustreFileSystem.efa_enabled), and
            # it helps only clients whose Lustre client is set up for EFA, which our launch templates
            # do not do yet. Not adopted until both are built.
            subnet_ids=args.subnet_id,
            security_group_ids=[self.security_group.id],
            kms_key_id=kms_key,
            copy_tags_to_backups=True,
            tags=with_name(args.tags, f"{name}-lustre"),
            opts=pulumi.ResourceOptions(parent=self, protect=True),
        )
        self.data_repository = self._create_data_repository()
        self._create_bucket()
        if args.log_bucket is not None:
            checkpoint_audit(name, self.bucket, args.log_bucket, args.noncurrent_days, self)

        self.file_system_id = self.file_system.id
        self.mount = {
            "type": "lustre",
            "mount_point": lustre.mount_point,
            "dns_name": self.file_system.dns_name,
            "mount_name": self.file_system.mount_name,
            # What a CSI driver names the file system by (the FSx CSI volume handle).
            "volume_handle": self.file_system.id,
            "mount_command": mount_command(self.file_system.dns_name, self.file_system.mount_name, lustre.mount_point),
        }
        self.register_outputs(
            {"mount": self.mount, "bucket_name": self.bucket_name, "file_system_id": self.file_system_id}
        )

    def _create_security_group(self) -> aws.ec2.SecurityGroup:
        name, args = self._name, self._args
        sg = aws.ec2.SecurityGroup(
            f"{name}-lustre",
            vpc_id=args.vpc_id,
            description="FSx for Lustre: Lustre ports from the GPU nodes and between file servers",
            tags=with_name(args.tags, f"{name}-lustre"),
            opts=pulumi.ResourceOptions(parent=self),
        )
        # Servers of one file system talk to each other on the same ports, hence the self rules.
        for source, ref in (("nodes", args.node_security_group_id), ("self", sg.id)):
            for lo, hi in LUSTRE_PORTS:
                aws.vpc.SecurityGroupIngressRule(
                    f"{name}-lustre-{source}-{lo}",
                    security_group_id=sg.id,
                    referenced_security_group_id=ref,
                    ip_protocol="tcp",
                    from_port=lo,
                    to_port=hi,
                    description=f"Lustre {lo}-{hi} from {source}",
                    tags=dict(args.tags),
                    opts=pulumi.ResourceOptions(parent=self),
                )
        # Lustre servers also open connections to the clients on the same ports, so the nodes'
        # group admits them from the file system's group (FSx for Lustre user guide, "Lustre
        # client VPC security group rules"). The rule is Storage's: the access is its need.
        for lo, hi in LUSTRE_PORTS:
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-nodes-from-lustre-{lo}",
                security_group_id=args.node_security_group_id,
                referenced_security_group_id=sg.id,
                ip_protocol="tcp",
                from_port=lo,
                to_port=hi,
                description=f"Lustre {lo}-{hi} from the file servers",
                tags=dict(args.tags),
                opts=pulumi.ResourceOptions(parent=self),
            )
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-lustre-out",
            security_group_id=sg.id,
            referenced_security_group_id=args.node_security_group_id,
            ip_protocol="-1",
            description="Replies and callbacks to the GPU nodes",
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self),
        )
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-lustre-out-self",
            security_group_id=sg.id,
            referenced_security_group_id=sg.id,
            ip_protocol="-1",
            description="Between file servers",
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self),
        )
        return sg

    def _create_data_repository(self) -> aws.fsx.DataRepositoryAssociation | None:
        lustre = self._args.lustre
        if lustre.import_path is None:
            return None
        events = ["NEW", "CHANGED", "DELETED"]
        return aws.fsx.DataRepositoryAssociation(
            f"{self._name}-s3-data",
            file_system_id=self.file_system.id,
            file_system_path=DATA_REPOSITORY_PATH,
            data_repository_path=lustre.import_path,
            # Load the listing at creation so a job sees the dataset from its first step;
            # file contents are then fetched lazily on first read.
            batch_import_meta_data_on_create=True,
            delete_data_in_filesystem=False,
            s3=aws.fsx.DataRepositoryAssociationS3Args(
                auto_import_policy=aws.fsx.DataRepositoryAssociationS3AutoImportPolicyArgs(events=events),
                auto_export_policy=(
                    aws.fsx.DataRepositoryAssociationS3AutoExportPolicyArgs(events=events)
                    if lustre.export_path is not None
                    else None
                ),
            ),
            tags=dict(self._args.tags),
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _create_bucket(self) -> None:
        name, args = self._name, self._args
        self.bucket = aws.s3.Bucket(
            f"{name}-checkpoints",
            bucket=args.bucket_name,
            # force_destroy stays off: a bucket with checkpoints in it is never emptied by a destroy.
            force_destroy=False,
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self, protect=True),
        )
        child = pulumi.ResourceOptions(parent=self)
        # CKV_AWS_53-56: no ACL or policy can make any of it public.
        self.public_access_block = aws.s3.BucketPublicAccessBlock(
            f"{name}-checkpoints",
            bucket=self.bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=child,
        )
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-checkpoints",
            bucket=self.bucket.id,
            rules=[
                aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                    apply_server_side_encryption_by_default=(
                        aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                            sse_algorithm="aws:kms",
                            kms_master_key_id=args.lustre.kms_key_id,
                        )
                    ),
                    # Bucket keys cut KMS requests by orders of magnitude for the many small
                    # objects a sharded checkpoint writes.
                    bucket_key_enabled=True,
                )
            ],
            opts=child,
        )
        # Versioning: an overwritten or deleted checkpoint can be recovered.
        aws.s3.BucketVersioning(
            f"{name}-checkpoints",
            bucket=self.bucket.id,
            versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(status="Enabled"),
            opts=child,
        )
        self.bucket_name = self.bucket.bucket
