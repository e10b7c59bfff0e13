"""The GKE stack's GPU dashboard in Cloud Monitoring (components/dashboard.py builds its JSON).

``gcp.monitoring.Dashboard`` takes the v1 ``Dashboard`` resource as ``dashboard_json`` (pulumi-gcp
10.2.0 ``monitoring.Dashboard`` docstring: "The JSON representation of a dashboard, following the
format at https://cloud.google.com/monitoring/api/ref_v3/rest/v1/projects.dashboards"). Its widgets
query Managed Service for Prometheus with PromQL, which Cloud Monitoring charts accept as
``timeSeriesQuery.prometheusQuery`` (cloud.google.com/monitoring/dashboards/api-examples, "Using MQL
or PromQL with the API", read 2026-12-07). Every query is held to this cluster by the ``cluster``
label managed collection puts on each series (GoogleCloudPlatform/prometheus-engine
pkg/operator/apis/monitoring/v1/pod_config.go at 01e7efc: ``cluster`` forced to the cluster's name),
since the project's Cloud Monitoring holds every cluster's metrics. The validation's figures, which
the stack's Pushgateway carries there (components/gcp/metrics.py), follow as a section of their own,
held by the same label; Cloud Monitoring has no annotations, so heal's incidents are not drawn.

Cluster Director's nodes write the Ops Agent's DCGM series instead (components/gcp/slurm_metrics.py):
the same layout over those panels, a node being its VM's ``instance_id``. Those series carry no
cluster label (the ``gce_instance`` resource has project, instance and zone only), so the Slurm
dashboard shows every VM in the project that runs the receiver.

A dashboard is configuration, not data: it is not protected, and teardown removes it with the stack.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_gcp as gcp

from gpu_cluster.components.dashboard import NODE_LABEL, cloud_monitoring, dumps
from gpu_cluster.components.gcp import slurm_metrics
from gpu_cluster.components.spec import ClusterSpec


def cluster_selector(spec: ClusterSpec) -> str:
    """The PromQL matcher for this cluster's series (the GKE cluster is named ``spec.name``)."""
    return "{cluster=" + json.dumps(spec.name) + "}"


def gke_dashboard(
    name: str, spec: ClusterSpec, project: pulumi.Input[str], parent: pulumi.Resource
) -> gcp.monitoring.Dashboard:
    """The cluster's GPU dashboard, one chart per panel of components/dashboard.py, per node."""
    body = cloud_monitoring(
        NODE_LABEL["gke"], title=f"{spec.name}: GPUs per node", selector=cluster_selector(spec), validation=True
    )
    return gcp.monitoring.Dashboard(
        f"{name}-gpu-dashboard",
        dashboard_json=dumps(body),
        project=project,
        opts=pulumi.ResourceOptions(parent=parent),
    )


def slurm_dashboard(
    name: str, spec: ClusterSpec, project: pulumi.Input[str], parent: pulumi.Resource
) -> gcp.monitoring.Dashboard:
    """Cluster Director's GPU dashboard: the panels over the Ops Agent's DCGM series, per VM."""
    body = cloud_monitoring(slurm_metrics.NODE_LABEL, title=f"{spec.name}: GPUs per node", panels=slurm_metrics.PANELS)
    return gcp.monitoring.Dashboard(
        f"{name}-gpu-dashboard",
        dashboard_json=dumps(body),
        project=project,
        opts=pulumi.ResourceOptions(parent=parent),
    )
