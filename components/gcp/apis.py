"""The Google APIs a GCP stack needs, by orchestrator: one list for the stack that enables them
(components/gcp/services.py) and for the preflight that reads their state. Pure: no Pulumi.

Every stack: VPCs, subnets, NAT, firewall, VMs (compute); the peering Managed Lustre attaches
through (servicenetworking, cloud.google.com/managed-lustre/docs/vpc); Managed Lustre (lustre);
the checkpoint bucket (storage); node and job service accounts (iam); their project-level role
bindings, which go through the project's IAM policy (cloudresourcemanager). GKE adds container and
binaryauthorization (the cluster enforces the project's Binary Authorization policy: orchestration_gke.py)
and monitoring (Managed Service for Prometheus stores the cluster's DCGM metrics there: metrics.py);
Cluster Director adds hypercomputecluster, file (the Filestore instance for /home) and monitoring
(the Ops Agent on its GPU nodes writes DCGM metrics there, and the stack creates a dashboard: slurm_metrics.py).
"""

from __future__ import annotations

COMMON = (
    "compute.googleapis.com",
    "servicenetworking.googleapis.com",
    "lustre.googleapis.com",
    "storage.googleapis.com",
    "iam.googleapis.com",
    "cloudresourcemanager.googleapis.com",
)
BY_ORCHESTRATOR: dict[str, tuple[str, ...]] = {
    "gke": ("container.googleapis.com", "binaryauthorization.googleapis.com", "monitoring.googleapis.com"),
    "slurm": ("hypercomputecluster.googleapis.com", "file.googleapis.com", "monitoring.googleapis.com"),
}


def for_orchestrator(kind: str) -> tuple[str, ...]:
    return COMMON + BY_ORCHESTRATOR[kind]
