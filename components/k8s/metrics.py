"""In-cluster parts of the GPU metrics path: on AKS the managed Prometheus agent's scrape of the GPU
Operator's DCGM exporter; on EKS NVIDIA's DCGM exporter chart, which the AMP scraper pulls
(components/aws/metrics.py).

AKS's page scrapes the exporter with a PodMonitor (MicrosoftDocs/azure-aks-docs articles/aks/
monitor-gpu-metrics.md at 00435f9: every 30 s, the exporter's ``metrics`` port). The same scrape
is written here as the agent's custom scrape configuration, the ConfigMap
``ama-metrics-prometheus-config`` in kube-system, key ``prometheus-config`` (Azure/prometheus-collector
otelcollector/configmaps/ama-metrics-prometheus-config-configmap.yaml at 55a6b01), a core object
rather than the add-on's ``azmonitoring.coreos.com`` custom resource, whose schema the plan cannot
check at a pinned version (components/liveness/apis.py models only pinned CRDs).

The GPU Operator's exporter pods carry ``app: nvidia-dcgm-exporter`` and name their port 9400
``metrics`` (NVIDIA/gpu-operator assets/state-dcgm-exporter/0900_daemonset.yaml at 20358df); the
scrape keeps those in the operator's namespace and labels each series with its node, which is what
a per-node dashboard and the validation's per-node verdicts join on.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from gpu_cluster.components.k8s.registration import chart_defaults, with_toleration

AMA_SCRAPE_CONFIGMAP = "ama-metrics-prometheus-config"
AMA_NAMESPACE = "kube-system"
AMA_SCRAPE_KEY = "prometheus-config"
DCGM_JOB = "nvidia-dcgm-exporter"
DCGM_POD_LABEL = "nvidia-dcgm-exporter"
DCGM_PORT_NAME = "metrics"
DCGM_INTERVAL = "30s"


def dcgm_scrape_config(namespace: str) -> dict[str, Any]:
    """The Prometheus scrape configuration for the operator's exporter pods in ``namespace``."""
    return {
        "scrape_configs": [
            {
                "job_name": DCGM_JOB,
                "scrape_interval": DCGM_INTERVAL,
                "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [namespace]}}],
                "relabel_configs": [
                    {
                        "source_labels": ["__meta_kubernetes_pod_label_app"],
                        "action": "keep",
                        "regex": DCGM_POD_LABEL,
                    },
                    {
                        "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                        "action": "keep",
                        "regex": DCGM_PORT_NAME,
                    },
                    {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
                ],
            }
        ]
    }


def ama_dcgm_scrape(name: str, *, namespace: str, opts: pulumi.ResourceOptions) -> k8s.core.v1.ConfigMap:
    """The agent's custom scrape ConfigMap, scraping the DCGM exporter in ``namespace``."""
    return k8s.core.v1.ConfigMap(
        f"{name}-ama-metrics-scrape",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=AMA_SCRAPE_CONFIGMAP, namespace=AMA_NAMESPACE),
        data={AMA_SCRAPE_KEY: yaml.safe_dump(dcgm_scrape_config(namespace), sort_keys=False)},
        opts=opts,
    )


# NVIDIA's DCGM exporter chart, for clusters without the GPU Operator (EKS, whose node image has
# the driver and whose device plugin is NVIDIA's own chart). NVIDIA/dcgm-exporter at tag
# 4.5.3-4.8.2 (691c927): deployment/Chart.yaml version 4.8.2; README.md 38-39 the repository;
# values.yaml 127-129 a ServiceMonitor on by default (the Prometheus Operator's CRD, which no stack
# installs: off, or the chart fails to apply), 150 no nodeSelector, 153-156 a control-plane
# toleration only; templates/_helpers.tpl 61-65 the pods' app.kubernetes.io/name ``dcgm-exporter``;
# templates/daemonset.yaml 167-168 the port ``metrics``.
DCGM_EXPORTER_CHART = "dcgm-exporter"
DCGM_EXPORTER_VERSION = "4.8.2"
DCGM_EXPORTER_REPO = "https://nvidia.github.io/dcgm-exporter/helm-charts"
DCGM_EXPORTER_NAMESPACE = "kube-system"
DCGM_EXPORTER_POD_NAME = "dcgm-exporter"
# The node label every node carries with its instance type (kubernetes.io/docs/reference/
# labels-annotations-taints, node.kubernetes.io/instance-type); the EKS job selects on it too.
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


def dcgm_exporter_values(instance_type: str) -> dict[str, Any]:
    """The chart's values: only on the GPU nodes (the chart's default is every node, where a CPU
    node's exporter finds no GPU), no ServiceMonitor, and the chart's control-plane toleration with
    the GPU pool's registration taint's (components/k8s/registration.py): a node waiting for its
    validation is measured too."""
    return {
        "nodeSelector": {INSTANCE_TYPE_LABEL: instance_type},
        "serviceMonitor": {"enabled": False},
        "tolerations": with_toleration(chart_defaults(DCGM_EXPORTER_CHART, DCGM_EXPORTER_POD_NAME)),
    }


def dcgm_exporter(name: str, *, instance_type: str, opts: pulumi.ResourceOptions) -> k8s.helm.v4.Chart:
    """NVIDIA's DCGM exporter on every GPU node (port 9400, ``metrics``), pinned."""
    return k8s.helm.v4.Chart(
        f"{name}-dcgm-exporter",
        chart=DCGM_EXPORTER_CHART,
        version=DCGM_EXPORTER_VERSION,
        repository_opts=k8s.helm.v4.RepositoryOptsArgs(repo=DCGM_EXPORTER_REPO),
        namespace=DCGM_EXPORTER_NAMESPACE,
        values=dcgm_exporter_values(instance_type),
        opts=opts,
    )
