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

The validation's figures (issue 46 item 3) reach the same store through the Pushgateway every
Kubernetes stack deploys (components/k8s/metrics.py), which managed collection scrapes by the
``PodMonitoring`` below. Managed collection keeps its own target labels: ``project_id``, ``location``
and ``cluster`` are forced to the cluster's, ``namespace`` and ``job`` (the PodMonitoring's name) are
set on every target, ``instance`` is ``<pod>:<port name>``
(GoogleCloudPlatform/prometheus-engine pkg/operator/apis/monitoring/v1/pod_config.go at 2ffde4e,
``ScrapeConfigs`` lines 118-138, ``endpointScrapeConfig`` lines 180-190 and 361-367), and the scrape
config it builds sets no ``honor_labels`` (common_types.go at 2ffde4e, ``buildPrometheusScrapeConfig``
lines 145-159), so a pushed label of one of those names is kept as ``exported_<name>`` (prometheus/
prometheus docs/configuration/configuration.md at 1e317d0, scrape_config ``honor_labels``). The
label question is settled by the cluster's name: the GKE cluster is named ``spec.name``
(components/gcp/orchestration_gke.py), which is also the stack's ``cluster_name`` the judge pushes,
so managed collection's ``cluster`` already names it and the dashboard's validation charts select
on it as the DCGM charts do (components/gcp/dashboard.py); the pushed one stays as
``exported_cluster``, and the pushed ``job`` as ``exported_job``. ``node`` is no protected label and
the PodMonitoring asks for no pod metadata labels (``targetLabels.metadata`` empty), so the pushed
``node`` stays the judged node.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from gpu_cluster.components.contract import METRICS_PUSH_NAMESPACE
from gpu_cluster.components.k8s.metrics import (
    DCGM_INTERVAL,
    PUSHGATEWAY_JOB,
    PUSHGATEWAY_POD_NAME,
    PUSHGATEWAY_PORT_NAME,
)

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


# monitoring.googleapis.com/v1 (prometheus-engine pkg/operator/apis/monitoring/v1/register.go at
# 2ffde4e, Version "v1"), the API GKE's managed collection serves.
POD_MONITORING_API = "monitoring.googleapis.com/v1"


def pushgateway_pod_monitoring_spec() -> dict[str, Any]:
    """The PodMonitoring's spec (pod_types.go at 2ffde4e): the Pushgateway chart's pods (their
    ``app.kubernetes.io/name``, components/k8s/metrics.py), its ``metrics`` port, every 30 s as the
    other stacks scrape it (``interval`` is required, line 238), and no pod metadata labels
    (``targetLabels.metadata`` lines 252-264: the default adds ``container``, ``pod`` and the
    controller's; an empty list adds none, and ``node`` must never be one: it would displace the
    pushed node)."""
    return {
        "selector": {"matchLabels": {"app.kubernetes.io/name": PUSHGATEWAY_POD_NAME}},
        "endpoints": [{"port": PUSHGATEWAY_PORT_NAME, "interval": DCGM_INTERVAL}],
        "targetLabels": {"metadata": []},
    }


def pushgateway_pod_monitoring(
    name: str, *, labels: dict[str, str], opts: pulumi.ResourceOptions
) -> k8s.apiextensions.CustomResource:
    """Managed collection's scrape of the Pushgateway, in its namespace (a PodMonitoring selects only
    pods of its own namespace: pod_config.go lines 142-147). Its name is the ``job`` label managed
    collection writes."""
    return k8s.apiextensions.CustomResource(
        f"{name}-pushgateway-monitoring",
        api_version=POD_MONITORING_API,
        kind="PodMonitoring",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=PUSHGATEWAY_JOB, namespace=METRICS_PUSH_NAMESPACE, labels=labels),
        spec=pushgateway_pod_monitoring_spec(),
        opts=opts,
    )
