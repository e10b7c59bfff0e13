"""The checkpoint bucket, usable from GKE jobs: a Google account the jobs act as (Workload
Identity), allowed on that bucket only, and a statically provisioned GCS FUSE volume and claim.

The pattern is cluster-toolkit's (at 1047080): modules/scheduler/gke-cluster/main.tf binds a
Kubernetes service account (default name ``workload-identity-k8s-sa``) to a Google account
through terraform-google-modules' workload-identity module, i.e. an
``iam.gke.io/gcp-service-account`` annotation on the Kubernetes account and
``roles/iam.workloadIdentityUser`` for ``serviceAccount:<project>.svc.id.goog[<ns>/<ksa>]``; and
modules/file-system/gke-persistent-volume/templates/gcs-pv.yaml.tftpl declares the bucket as a
ReadWriteMany PersistentVolume of driver ``gcsfuse.csi.storage.gke.io`` with the bucket name
as its volume handle. cluster-toolkit grants the account ``storage.objectAdmin`` on the whole
project; here it gets ``roles/storage.objectUser`` on the checkpoint bucket alone (read, write,
delete objects; no bucket administration).

Pods that mount the claim run as ``CHECKPOINT_KSA`` and carry the GKE annotation
``gke-gcsfuse/volumes: "true"`` so the driver injects its sidecar (the launcher's part).
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from gpu_cluster.components.gcp.rules import CHECKPOINT_KSA
from gpu_cluster.components.spec import ClusterSpec

GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
BUCKET_ROLE = "roles/storage.objectUser"
# A GCS FUSE volume has no size; Kubernetes requires one (cluster-toolkit's A3 Ultra example
# declares 1000000 GiB for its checkpoint volume).
NOMINAL_CAPACITY = "1000000Gi"


def checkpoint_claim_name(orchestration_component: str) -> str:
    return f"{orchestration_component}-checkpoints"


def workload_account(
    name: str,
    spec: ClusterSpec,
    *,
    project: pulumi.Input[str],
    bucket: pulumi.Input[str],
    namespace: str,
    opts: pulumi.ResourceOptions,
) -> gcp.serviceaccount.Account:
    """The Google account the jobs act as, allowed on the checkpoint bucket, and its binding."""
    account = gcp.serviceaccount.Account(
        f"{name}-jobs",
        account_id=spec.name[:24].rstrip("-") + "-jobs",
        display_name=f"gpu-cluster {spec.name} jobs (Workload Identity)",
        project=project,
        opts=opts,
    )
    gcp.storage.BucketIAMMember(
        f"{name}-jobs-bucket",
        bucket=bucket,
        role=BUCKET_ROLE,
        member=pulumi.Output.format("serviceAccount:{0}", account.email),
        opts=opts,
    )
    gcp.serviceaccount.IAMMember(
        f"{name}-jobs-wi",
        service_account_id=account.name,
        role="roles/iam.workloadIdentityUser",
        member=pulumi.Output.format("serviceAccount:{0}.svc.id.goog[{1}/{2}]", project, namespace, CHECKPOINT_KSA),
        opts=opts,
    )
    return account


def bucket_volume(
    name: str,
    *,
    bucket: pulumi.Input[str],
    claim_name: str,
    namespace: str,
    account_email: pulumi.Input[str],
    labels: dict[str, str],
    opts: pulumi.ResourceOptions,
) -> k8s.core.v1.PersistentVolumeClaim:
    """The Kubernetes account bound to the Google one, and the bucket's PV and claim."""
    k8s.core.v1.ServiceAccount(
        f"{name}-jobs-ksa",
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=CHECKPOINT_KSA,
            namespace=namespace,
            labels=labels,
            annotations={"iam.gke.io/gcp-service-account": account_email},
        ),
        opts=opts,
    )
    pv = k8s.core.v1.PersistentVolume(
        f"{name}-checkpoints-pv",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=claim_name, labels=labels),
        spec=k8s.core.v1.PersistentVolumeSpecArgs(
            storage_class_name="",
            capacity={"storage": NOMINAL_CAPACITY},
            access_modes=["ReadWriteMany"],
            # Retain: deleting the claim must never reach the bucket.
            persistent_volume_reclaim_policy="Retain",
            mount_options=["implicit-dirs"],
            csi=k8s.core.v1.CSIPersistentVolumeSourceArgs(driver=GCSFUSE_DRIVER, volume_handle=bucket),
        ),
        opts=opts,
    )
    return k8s.core.v1.PersistentVolumeClaim(
        f"{name}-checkpoints-pvc",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=claim_name, namespace=namespace, labels=labels),
        spec=k8s.core.v1.PersistentVolumeClaimSpecArgs(
            storage_class_name="",
            volume_name=claim_name,
            access_modes=["ReadWriteMany"],
            resources=k8s.core.v1.VolumeResourceRequirementsArgs(requests={"storage": NOMINAL_CAPACITY}),
        ),
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[pv])),
    )
