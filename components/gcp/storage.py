"""Storage: a Managed Lustre instance for training data and a GCS bucket for checkpoints.

Storage does not build networks: it takes the VPC and the private service access connection it
depends on. Both stores are protected (``protect=True``): a mistaken ``pulumi destroy`` or a
replacement must never take a data set or a checkpoint with it.

Managed Lustre has no "import on create" field (pulumi_gcp 10.2.0 ``lustre.Instance`` has none);
loading from Cloud Storage is an operation (``gcloud lustre instances import-data``), so the
component exports that command for ``storage.lustre.import_path`` instead of pretending.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from gpu_cluster.components.gcp.audit import access_log_bucket, checkpoint_lifecycle, checkpoint_logging
from gpu_cluster.components.gcp.common import labels, short_id
from gpu_cluster.components.spec import ClusterSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class StorageArgs:
    spec: ClusterSpec
    """The checked cluster description (sizes were checked against the service's tiers)."""
    network: pulumi.Input[str]
    """The system VPC's id, ``projects/<p>/global/networks/<n>``."""
    psa: pulumi.Resource
    """The private service access connection the instance needs before it can be created."""


class Storage(pulumi.ComponentResource):
    """Managed Lustre + checkpoint bucket, with the common mount description."""

    lustre: gcp.lustre.Instance
    bucket: gcp.storage.Bucket
    instance_id: str
    filesystem: str
    mount: dict[str, Any]
    import_command: pulumi.Output[str] | None

    def __init__(self, name: str, args: StorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-cluster:gcp:Storage", name, None, opts)
        spec = args.spec
        lu = spec.storage.lustre
        self.instance_id = f"{spec.name}-lustre"
        self.filesystem = short_id(spec, 8)
        self.lustre = gcp.lustre.Instance(
            f"{name}-lustre",
            instance_id=self.instance_id,
            location=spec.zone,
            network=args.network,
            capacity_gib=str(lu.size_gib),
            per_unit_storage_throughput=str(lu.throughput_mbps_per_tib),
            filesystem=self.filesystem,
            # No gke_support_enabled (the old move of Lustre to port 6988): GKE clusters from
            # 1.33.2-gke.4780000 on talk to Lustre on its default port 988, and the flag is now
            # only for instances made with it (docs.cloud.google.com/managed-lustre/docs/
            # lustre-csi-driver-existing-instance, "Lustre communication ports", read 2026-12-01);
            # the spec allows GKE 1.35 and newer only (components/gcp/rules.py).
            kms_key=lu.kms_key_id,
            labels=labels(spec),
            opts=pulumi.ResourceOptions(parent=self, protect=True, depends_on=[args.psa]),
        )
        bucket_opts = pulumi.ResourceOptions(parent=self, protect=True)
        # Usage logs into the stack's log bucket, noncurrent versions expired (audit.py).
        self.log_bucket = access_log_bucket(name, spec, self)
        self.bucket = gcp.storage.Bucket(
            f"{name}-bucket",
            name=spec.storage.bucket_name,
            location=spec.region.upper(),
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            versioning=gcp.storage.BucketVersioningArgs(enabled=True),
            logging=checkpoint_logging(self.log_bucket),
            lifecycle_rules=checkpoint_lifecycle(spec.security),
            force_destroy=False,
            labels=labels(spec),
            opts=bucket_opts,
        )
        self.mount = {
            "type": "lustre",
            "mount_point": lu.mount_point,
            # Managed Lustre reports its address as "<ip>@tcp:/<filesystem>", the mount source.
            "dns_name": self.lustre.mount_point,
            "mount_name": self.filesystem,
            "mount_command": pulumi.Output.format(
                "sudo mkdir -p {1} && sudo mount -t lustre {0} {1}", self.lustre.mount_point, lu.mount_point
            ),
        }
        self.import_command = None
        if lu.import_path:
            self.import_command = pulumi.Output.format(
                "gcloud lustre instances import-data {0} --location={1} --gcs-path-uri={2} --lustre-path=/",
                self.instance_id,
                spec.zone,
                lu.import_path,
            )
        self.register_outputs({"mount": self.mount, "bucket": self.bucket.name, "import_command": self.import_command})
