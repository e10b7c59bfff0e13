"""GPU metrics on GKE: the cluster's own monitoring configuration, GKE's managed DCGM package
into Google Cloud Managed Service for Prometheus. No exporter of ours runs on the nodes: with the
DCGM package on, GKE itself installs DCGM-Exporter on the GPU nodes and a ClusterPodMonitoring that
sends its metrics to Managed Service for Prometheus (docs.cloud.google.com/kubernetes-engine/docs/
how-to/dcgm-metrics, "Collect and view DCGM metrics", read 2026-12-07), so the liveness model has
no DaemonSet of ours to place for it. The package needs GKE's managed GPU drivers, which every GPU
pool installs (components/gcp/compute.py, ``gpu_driver_installation_config``).

The managed store is the project's Cloud Monitoring (Monarch): there is no workspace to create,
only the Cloud Monitoring API to have on (docs.cloud.google.com/stackdriver/docs/managed-prometheus/
setup-managed, "Before you begin": "A Google Cloud project with the Cloud Monitoring API enabled"),
which components/gcp/apis.py lists for GKE. The collectors write as the nodes' service accounts,
whose ``roles/container.defaultNodeServiceAccount`` (components/gcp/compute.py NODE_ROLES) is
GKE's least-privilege node role and carries the metric writer's permission.

Pure: it builds provider inputs and creates no resource.
"""

from __future__ import annotations

import pulumi_gcp as gcp

# The components cluster-toolkit turns on for every GKE cluster, and DCGM where
# ``enable_dcgm_monitoring`` is true (modules/scheduler/gke-cluster/main.tf at d64aec82,
# ``local.default_monitoring_component`` and ``monitoring_config``), which its A3 Ultra and A4
# GKE deployments set to true. KUBELET and CADVISOR need GKE
# 1.29.3-gke.1093000 and above (pulumi-gcp 10.2.0 ClusterMonitoringConfigArgs docstring); the
# bundled stacks ask for 1.35 and the spec's default is 1.33.
MONITORING_COMPONENTS = (
    "SYSTEM_COMPONENTS",
    "POD",
    "DAEMONSET",
    "DEPLOYMENT",
    "STATEFULSET",
    "STORAGE",
    "HPA",
    "CADVISOR",
    "KUBELET",
    "DCGM",
)


def monitoring_config() -> gcp.container.ClusterMonitoringConfigArgs:
    """The cluster's ``monitoring_config``: the components above, and managed collection on
    (cluster-toolkit gke-cluster main.tf at d64aec82: ``managed_prometheus { enabled = true }``;
    DCGM's page lists managed collection as what carries its metrics)."""
    return gcp.container.ClusterMonitoringConfigArgs(
        enable_components=list(MONITORING_COMPONENTS),
        managed_prometheus=gcp.container.ClusterMonitoringConfigManagedPrometheusArgs(enabled=True),
    )
