"""In-cluster parts of the GPU metrics path: on AKS the managed Prometheus agent's scrape of the GPU
Operator's DCGM exporter (AMD's device-metrics exporter on the MI300X sizes, below); on EKS NVIDIA's DCGM exporter chart, which the AMP scraper pulls
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

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from gpu_cluster.components.contract import METRICS_PUSH_NAMESPACE, METRICS_PUSH_SERVICE
from gpu_cluster.components.contract import PUSHGATEWAY_STACKS as PUSHGATEWAY_STACKS
from gpu_cluster.components.image_pins import chart_image
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


# AMD's device-metrics exporter on the MI300X sizes: the DaemonSet AMD's GPU operator makes from the
# DeviceConfig's ``metricsExporter`` (components/k8s/aks.py AMD_DEVICE_CONFIG_SPEC), scraped the same
# way as the DCGM exporter, by its pods. ROCm/gpu-operator internal/metricsexporter/metricsexporter.go
# at v1.4.1 (3b39804), the operator chart the stack pins: the pods carry ``app.kubernetes.io/name:
# metrics-exporter`` and ``daemonset-name: <DeviceConfig name>`` (lines 61, 71, 193-196), in the
# DeviceConfig's namespace (internal/controllers/device_config_reconciler.go line 1139), and without
# kube-rbac-proxy (the DeviceConfig sets no ``rbacConfig``) the exporter container itself names its
# port ``exporter-port`` (lines 396-404), the DeviceConfig's ``port``. The operator's Service,
# ``<DeviceConfig name>-metrics-exporter`` (reconciler line 1172; the same selector and port name,
# metricsexporter.go lines 484-545), has ``internalTrafficPolicy: Local``: a scrape through it from the
# agent's replica reaches only a pod on the replica's own node, so the job discovers the pods instead.
# The agent takes Kubernetes pod discovery and relabelling in this ConfigMap (MicrosoftDocs/azure-
# monitor-docs articles/azure-monitor/containers/prometheus-metrics-scrape-configuration.md at 0e48cd4,
# "Configmaps" item 2 and "Scrape Configs using Config file"). The exporter labels each series with
# ``hostname`` itself; ``node`` is added as on the DCGM job, the label the dashboard groups by. The
# minimal ingestion profile applies to default targets only (the same page), so every series the
# exporter writes is kept: with no config it exports every field (ROCm/device-metrics-exporter
# pkg/amdgpu/gpuagent/gpuagent_metrics.go at v1.4.1, e2a7018, ``initFieldConfig``), profiler fields
# off (``initProfilerMetrics``).
AMD_EXPORTER_JOB = "amd-device-metrics-exporter"
AMD_EXPORTER_POD_NAME = "metrics-exporter"
AMD_EXPORTER_PORT_NAME = "exporter-port"


def amd_exporter_scrape_job(namespace: str, device_config: str, interval: str = DCGM_INTERVAL) -> dict[str, Any]:
    """The scrape of AMD's exporter pods that the DeviceConfig ``device_config`` in ``namespace`` makes."""
    return {
        "job_name": AMD_EXPORTER_JOB,
        "scrape_interval": interval,
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [namespace]}}],
        "relabel_configs": [
            {
                "source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"],
                "action": "keep",
                "regex": AMD_EXPORTER_POD_NAME,
            },
            {"source_labels": ["__meta_kubernetes_pod_label_daemonset_name"], "action": "keep", "regex": device_config},
            {
                "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                "action": "keep",
                "regex": AMD_EXPORTER_PORT_NAME,
            },
            {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
        ],
    }


def ama_scrape_config(dcgm_namespace: str | None, amd_exporter: tuple[str, str] | None = None) -> dict[str, Any]:
    """The agent's whole custom scrape: the DCGM exporter in ``dcgm_namespace`` (None: the AMD sizes,
    which have no DCGM exporter), AMD's exporter where ``amd_exporter`` names its (namespace,
    DeviceConfig), and the Pushgateway (below)."""
    config: dict[str, Any] = dcgm_scrape_config(dcgm_namespace) if dcgm_namespace else {"scrape_configs": []}
    if amd_exporter is not None:
        config["scrape_configs"].append(amd_exporter_scrape_job(*amd_exporter))
    config["scrape_configs"].append(pushgateway_scrape_job())
    return config


def ama_scrape(
    name: str,
    *,
    dcgm_namespace: str | None,
    amd_exporter: tuple[str, str] | None = None,
    opts: pulumi.ResourceOptions,
) -> k8s.core.v1.ConfigMap:
    """The agent's custom scrape ConfigMap: the DCGM exporter in ``dcgm_namespace``, AMD's exporter
    (``amd_exporter``: its namespace and DeviceConfig) and the Pushgateway."""
    return k8s.core.v1.ConfigMap(
        f"{name}-ama-metrics-scrape",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=AMA_SCRAPE_CONFIGMAP, namespace=AMA_NAMESPACE),
        data={AMA_SCRAPE_KEY: yaml.safe_dump(ama_scrape_config(dcgm_namespace, amd_exporter), sort_keys=False)},
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


# The validation's figures and heal's incidents on the Kubernetes stacks: a Prometheus Pushgateway in
# the cluster, which the judge pod pushes to and each cloud's collector scrapes beside the DCGM
# exporter (components/aws/metrics.py, the AMA scrape above, components/gcp/metrics.py). The
# community chart prometheus-community/helm-charts charts/prometheus-pushgateway at 4fa56e1:
# Chart.yaml line 6 version 3.8.0, line 3 appVersion v1.11.3 (the image tag the chart defaults to,
# templates/_helpers.tpl lines 135-143, ``repository:tag``); README.md line 19 the OCI chart;
# values.yaml line 13 fullnameOverride (the Service's and Deployment's name), 18-23 the image
# quay.io/prometheus/pushgateway, 47 automountServiceAccountToken true, 107-117 no resources (the
# commented example: requests cpu 100m, memory 30Mi; limits cpu 200m, memory 50Mi), 253 and 260 no
# tolerations or nodeSelector, 282-285 the pod runs as 65534 non-root, 289-293 no container
# securityContext (the commented example: no privilege escalation, read-only root), 441 no
# NetworkPolicy; templates/_helpers.tpl lines 188-189 the pod's port ``metrics`` 9091, line 75 its
# ``app.kubernetes.io/name`` (the chart's name); templates/deployment.yaml 314-315 the store an
# emptyDir (persistentVolume.enabled false, values.yaml line 380).
PUSHGATEWAY_CHART = "oci://ghcr.io/prometheus-community/charts/prometheus-pushgateway"
PUSHGATEWAY_VERSION = "3.8.0"
PUSHGATEWAY_IMAGE = "quay.io/prometheus/pushgateway:v1.11.3"
PUSHGATEWAY_POD_NAME = "prometheus-pushgateway"
PUSHGATEWAY_PORT_NAME = "metrics"
PUSHGATEWAY_JOB = "gpu-cluster-pushgateway"


def pushgateway_scrape_job(interval: str = DCGM_INTERVAL) -> dict[str, Any]:
    """The scrape of the Pushgateway's pod: ``honor_labels`` keeps the pushed ``node``, ``cluster``,
    ``run`` and ``job`` (the Pushgateway README's rule for scraping it, README.md lines 76-81 and
    158-175 at v1.11.3, e803ebd; prometheus/prometheus docs/configuration/configuration.md at 1e317d0,
    scrape_config ``honor_labels``), and no relabelling names a ``node``: a pushed series carries the
    node it is about, not the one the Pushgateway runs on. AMP's managed collector takes it: its
    configuration is Prometheus's ``<scrape_config>``, and the user guide's own sample scrape job sets
    ``honor_labels: true`` (docs.aws.amazon.com/prometheus/latest/userguide/AMP-collector-how-to.html,
    "Scraper configuration", read 2026-12-07; hashicorp/terraform-provider-aws
    ``website/docs/r/prometheus_scraper.html.markdown`` at 1a50548d, the same sample)."""
    return {
        "job_name": PUSHGATEWAY_JOB,
        "scrape_interval": interval,
        "honor_labels": True,
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [METRICS_PUSH_NAMESPACE]}}],
        "relabel_configs": [
            {
                "source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"],
                "action": "keep",
                "regex": PUSHGATEWAY_POD_NAME,
            },
            {
                "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                "action": "keep",
                "regex": PUSHGATEWAY_PORT_NAME,
            },
        ],
    }


def pushgateway_values(node_selector: Mapping[str, str], pins: Mapping[str, str]) -> dict[str, Any]:
    """The chart's values: on the system pool (the cluster's controllers' pool, registration-tainted
    GPU nodes never), hardened as the mandatory workload rules want of our own pods (policies/
    workloads.py: no API token, non-root, read-only root, no privilege escalation, every capability
    dropped, the runtime's seccomp profile, requests and limits), the image by digest where the stack
    pins it (components/image_pins.py)."""
    values: dict[str, Any] = {
        "fullnameOverride": METRICS_PUSH_SERVICE,
        "nodeSelector": dict(node_selector),
        # It never calls the Kubernetes API (CKV_K8S_38).
        "automountServiceAccountToken": False,
        # The chart's own figures, from its commented example (values.yaml lines 112-117).
        "resources": {"requests": {"cpu": "100m", "memory": "30Mi"}, "limits": {"cpu": "200m", "memory": "50Mi"}},
        "securityContext": {
            "fsGroup": 65534,
            "runAsUser": 65534,
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containerSecurityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsUser": 65534,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    image = chart_image(PUSHGATEWAY_IMAGE, pins)
    if image:
        values["image"] = {**image, "pullPolicy": "IfNotPresent"}
    return values


def pushgateway(
    name: str, *, node_selector: Mapping[str, str], pins: Mapping[str, str], opts: pulumi.ResourceOptions
) -> k8s.helm.v4.Chart:
    """The Pushgateway (Service ``gpu-cluster-pushgateway.kube-system``, port 9091), pinned. It keeps
    what was pushed in memory (the chart's emptyDir): a restart loses the groups the store has already
    scraped, and the next run's push sets them again."""
    return k8s.helm.v4.Chart(
        f"{name}-pushgateway",
        chart=PUSHGATEWAY_CHART,
        version=PUSHGATEWAY_VERSION,
        namespace=METRICS_PUSH_NAMESPACE,
        values=pushgateway_values(node_selector, pins),
        opts=opts,
    )
