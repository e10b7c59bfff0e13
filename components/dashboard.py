"""The GPU dashboard: one list of panels, rendered for each cloud's dashboard service.

Every panel queries the DCGM exporter's series with PromQL, per node. The metric names are the
exporter's own: NVIDIA/dcgm-exporter ``etc/default-counters.csv`` at d5e5f51 (tag 4.5.3-4.8.2, the
chart 4.8.2 EKS installs, components/k8s/metrics.py), whose enabled set is the same as
``etc/dcp-metrics-included.csv`` there; the GPU Operator on AKS runs the same exporter, and GKE's
managed DCGM package installs DCGM-Exporter itself (docs.cloud.google.com/kubernetes-engine/docs/
how-to/dcgm-metrics, read 2026-12-07). Fields the file leaves commented out (the ECC volatile and
aggregate totals, NVLink error counters) are not charted: ECC shows as the remapped-row counters
the file enables.

How a series names its node differs by path:

* AKS and EKS: our scrape relabels ``__meta_kubernetes_pod_node_name`` to ``node``
  (components/k8s/metrics.py, components/aws/metrics.py).
* GKE: managed collection (a ClusterPodMonitoring, per GKE's DCGM page) sets ``instance`` to
  ``<node name>:<port name>`` for a pod a DaemonSet controls (GoogleCloudPlatform/prometheus-engine
  pkg/operator/apis/monitoring/v1/pod_config.go at 01e7efc, ``endpointScrapeConfig``): one value per
  node, since the exporter is one DaemonSet pod per node with one metrics port.

Two renderings, each the shape its reference defines:

* Cloud Monitoring (``gcp.monitoring.Dashboard.dashboard_json``): the v1 ``Dashboard`` resource,
  ``displayName`` required, a ``mosaicLayout`` of ``tiles`` (``xPos``, ``yPos``, ``width``,
  ``height``, ``widget``), each widget an ``xyChart`` whose ``dataSets[].timeSeriesQuery`` holds a
  ``prometheusQuery`` and a ``unitOverride`` (cloud.google.com/monitoring/api/ref_v3/rest/v1/
  projects.dashboards, read 2026-12-07; "Using MQL or PromQL with the API",
  cloud.google.com/monitoring/dashboards/api-examples). ``columns`` is 12: older client libraries
  document 1 to 12, newer ones 1 to 48 (google-cloud-monitoring-dashboards MosaicLayout), so 12
  holds under both.
* Grafana (Azure Managed Grafana, Amazon Managed Grafana): the classic dashboard JSON model
  (grafana.com/docs/grafana/latest/dashboards/json-model/, and AMG's copy docs.aws.amazon.com/
  grafana/latest/userguide/v10-dash-dashboard-json-model.html): ``uid`` of 8 to 40 characters,
  ``panels`` with ``gridPos`` on a 24-column grid, and a ``datasource`` template variable of type
  ``prometheus`` so the import binds the workspace's Prometheus data source.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

TITLE = "gpu-cluster: GPUs per node"
GRAFANA_UID = "gpu-cluster-gpus"
# Cloud Monitoring's mosaic: 12 columns, two tiles a row.
MOSAIC_COLUMNS = 12
# Grafana's grid: 24 columns, height in 30-pixel units (the JSON model's gridPos).
GRAFANA_COLUMNS = 24
PANEL_HEIGHT = 8
# rate() over a window that holds several samples at the 30 s scrape of AKS and EKS
# (components/k8s/metrics.py DCGM_INTERVAL, components/aws/metrics.py SCRAPE_INTERVAL).
RATE_WINDOW = "5m"
# How each path labels a series with its node (module docstring).
NODE_LABEL = {"gke": "instance", "aks": "node", "eks": "node"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Panel:
    """One chart: a title, a PromQL expression over one DCGM metric per node, and its unit."""

    title: str
    """What a person reads above the chart."""
    metric: str
    """The DCGM exporter's metric name (default-counters.csv at d5e5f51)."""
    expr: str
    """PromQL with ``{node}`` where the node label goes and ``{metric}`` for the metric."""
    grafana_unit: str
    """Grafana's unit id (grafana/grafana packages/grafana-data/src/valueFormats/categories.ts)."""
    monitoring_unit: str
    """Cloud Monitoring's unitOverride, in the MetricDescriptor unit syntax (UCUM)."""
    node_label: str | None = None
    """The label this panel's series name their node by, where it is not the dashboard's: a
    collector the stack does not configure (AKS's own node exporter job labels ``instance``)."""

    def label(self, node_label: str) -> str:
        """The node label this panel groups by on a dashboard whose series use ``node_label``."""
        return self.node_label or node_label

    def promql(self, node_label: str, selector: str = "") -> str:
        """The query, its metric restricted by ``selector`` (``{cluster="..."}``) where one is given."""
        return self.expr.format(node=self.label(node_label), metric=self.metric + selector)


# Units: the exporter's help text in default-counters.csv gives %, MiB, W and C; the profiling
# ratios are 0..1 and are charted as percent (x100); PCIe is bytes per second.
PANELS: tuple[Panel, ...] = (
    Panel(
        title="GPU utilisation (mean of the node's GPUs)",
        metric="DCGM_FI_DEV_GPU_UTIL",
        expr="avg by ({node}) ({metric})",
        grafana_unit="percent",
        monitoring_unit="%",
    ),
    Panel(
        title="Tensor pipe active (mean of the node's GPUs)",
        metric="DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        expr="100 * avg by ({node}) ({metric})",
        grafana_unit="percent",
        monitoring_unit="%",
    ),
    Panel(
        title="GPU memory used (sum of the node's GPUs)",
        metric="DCGM_FI_DEV_FB_USED",
        expr="sum by ({node}) ({metric})",
        grafana_unit="mbytes",
        monitoring_unit="MiBy",
    ),
    Panel(
        title="Power draw (sum of the node's GPUs)",
        metric="DCGM_FI_DEV_POWER_USAGE",
        expr="sum by ({node}) ({metric})",
        grafana_unit="watt",
        monitoring_unit="W",
    ),
    Panel(
        title="GPU temperature (hottest GPU of the node)",
        metric="DCGM_FI_DEV_GPU_TEMP",
        expr="max by ({node}) ({metric})",
        grafana_unit="celsius",
        monitoring_unit="Cel",
    ),
    Panel(
        title="Last XID error (0: none)",
        metric="DCGM_FI_DEV_XID_ERRORS",
        expr="max by ({node}) ({metric})",
        grafana_unit="none",
        monitoring_unit="1",
    ),
    Panel(
        title="ECC: rows remapped for uncorrectable errors",
        metric="DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        expr="sum by ({node}) ({metric})",
        grafana_unit="none",
        monitoring_unit="1",
    ),
    Panel(
        title="ECC: rows remapped for correctable errors",
        metric="DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        expr="sum by ({node}) ({metric})",
        grafana_unit="none",
        monitoring_unit="1",
    ),
    Panel(
        # The exporter's help text gives no unit for this counter ("Total number of NVLink
        # bandwidth counters for all lanes"), so the chart claims none.
        title="NVLink bandwidth counter, rate (all lanes, DCGM's unit)",
        metric="DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        expr="sum by ({node}) (rate({metric}[" + RATE_WINDOW + "]))",
        grafana_unit="none",
        monitoring_unit="1/s",
    ),
    Panel(
        title="PCIe transmit (sum of the node's GPUs)",
        metric="DCGM_FI_PROF_PCIE_TX_BYTES",
        expr="sum by ({node}) ({metric})",
        grafana_unit="Bps",
        monitoring_unit="By/s",
    ),
    Panel(
        title="PCIe receive (sum of the node's GPUs)",
        metric="DCGM_FI_PROF_PCIE_RX_BYTES",
        expr="sum by ({node}) ({metric})",
        grafana_unit="Bps",
        monitoring_unit="By/s",
    ),
)


def cloud_monitoring(
    node_label: str = NODE_LABEL["gke"],
    *,
    title: str = TITLE,
    selector: str = "",
    panels: Sequence[Panel] = PANELS,
    validation: bool = False,
) -> dict[str, Any]:
    """The Cloud Monitoring dashboard: a mosaic of line charts, two a row. A project's Cloud
    Monitoring holds every cluster's series, so the stack passes its cluster as ``selector``.
    ``panels`` are the exporter's series by default; Cluster Director's nodes write the Ops Agent's
    instead (components/gcp/slurm_metrics.py PANELS). ``validation``: the validation's section after
    them (:func:`validation_tiles`), where the stack publishes its figures."""
    half = MOSAIC_COLUMNS // 2
    tiles = []
    for i, p in enumerate(panels):
        tiles.append(
            {
                "xPos": (i % 2) * half,
                "yPos": (i // 2) * 4,
                "width": half,
                "height": 4,
                "widget": {
                    "title": p.title,
                    "xyChart": {
                        "dataSets": [
                            {
                                "timeSeriesQuery": {
                                    "prometheusQuery": p.promql(node_label, selector),
                                    "unitOverride": p.monitoring_unit,
                                },
                                "plotType": "LINE",
                            }
                        ],
                        "yAxis": {"scale": "LINEAR"},
                    },
                },
            }
        )
    if validation:
        tiles += validation_tiles(selector, y=((len(panels) + 1) // 2) * 4)
    return {"displayName": title, "mosaicLayout": {"columns": MOSAIC_COLUMNS, "tiles": tiles}}


def grafana(
    node_label: str = NODE_LABEL["aks"],
    *,
    title: str = TITLE,
    fabric: Sequence[Panel] = (),
    gpu: Sequence[Panel] = PANELS,
    tags: Sequence[str] = ("gpu-cluster", "dcgm"),
) -> dict[str, Any]:
    """The Grafana dashboard (classic JSON model) over a Prometheus data source chosen at import:
    the GPU panels (``gpu``: the DCGM exporter's, or AMD's exporter's, :data:`GPU_PANELS`), then
    ``fabric`` (the platform's interconnect panels, :data:`FABRIC_PANELS`)."""
    datasource = {"type": "prometheus", "uid": "${datasource}"}
    half = GRAFANA_COLUMNS // 2
    panels = []
    for i, p in enumerate((*gpu, *fabric)):
        panels.append(
            {
                "id": i + 1,
                "type": "timeseries",
                "title": p.title,
                "datasource": datasource,
                "gridPos": {"h": PANEL_HEIGHT, "w": half, "x": (i % 2) * half, "y": (i // 2) * PANEL_HEIGHT},
                "fieldConfig": {"defaults": {"unit": p.grafana_unit}, "overrides": []},
                "targets": [
                    {
                        "refId": "A",
                        "datasource": datasource,
                        "expr": p.promql(node_label),
                        "legendFormat": "{{" + p.label(node_label) + "}}",
                    }
                ],
            }
        )
    return {
        "id": None,
        "uid": GRAFANA_UID,
        "title": title,
        "tags": list(tags),
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        # The JSON model page's own new-dashboard value; Grafana migrates an older schema forward
        # on load, so the file imports into any current Grafana.
        "schemaVersion": 17,
        "version": 0,
        "links": [],
        "annotations": {"list": validation_annotations(datasource)},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                }
            ]
        },
        "panels": panels + validation_panels(datasource, first_id=len(panels) + 1, y=_rows(len(panels))),
    }


# The validation's figures and heal's incidents (gpu_cluster.workloads.validate.metrics_export), a
# section of its own after the DCGM panels: Grafana only. The series carry the judged node in
# ``node`` (the Slurm stacks' node-exporter job keeps it with honor_labels), the label the DCGM
# panels group by on AKS, EKS, PCS and Azure Slurm. On GKE the same two charts are Cloud Monitoring
# tiles (:func:`validation_tiles`), held to the cluster by managed collection's ``cluster`` label
# (components/gcp/metrics.py); GKE's DCGM charts name a node by ``instance`` (``<node>:metrics``),
# these by ``node``. Cloud Monitoring's dashboards have no annotations (the projects.dashboards
# resource of the module docstring defines none): heal's incidents are in the store, not drawn there.
VALIDATION_NODE_VERDICT = "gpu_cluster_validation_node_verdict_code"
VALIDATION_BUSBW = "gpu_cluster_validation_busbw_bytes_per_second"
VALIDATION_BUSBW_FLOOR_WARN = "gpu_cluster_validation_busbw_floor_warn_bytes_per_second"
HEAL_INCIDENT = "gpu_cluster_heal_incident"
# Grafana's Prometheus annotation query: ``expr``, ``step`` (min step), ``titleFormat``, ``tagKeys``,
# ``textFormat``, ``useValueForTime`` (grafana/grafana packages/grafana-prometheus/src/components/
# AnnotationQueryEditor.tsx at 2059de2), in an entry of the JSON model's ``annotations.list`` with
# ``name``, ``datasource``, ``enable``, ``hide``, ``iconColor`` (the AnnotationQuery interface, "stored
# in the dashboard json model": grafana.com/docs/grafana/v8.5/packages_api/data/annotationquery/, read
# 2026-12-07; grafana.com/docs/grafana/latest/datasources/prometheus/annotations/, read 2026-12-07).
HEAL_ANNOTATION_STEP = "60s"


def _rows(n: int) -> int:
    """The y where a section after ``n`` half-width panels starts."""
    return ((n + 1) // 2) * PANEL_HEIGHT


def validation_panels(datasource: dict[str, str], *, first_id: int, y: int) -> list[dict[str, Any]]:
    """Per-node verdict over time, and busbw per size against its warn floor."""

    def target(ref: str, expr: str, legend: str) -> dict[str, Any]:
        return {"refId": ref, "datasource": datasource, "expr": expr, "legendFormat": legend}

    half = GRAFANA_COLUMNS // 2
    return [
        {
            "id": first_id,
            "type": "timeseries",
            "title": "Validation: node verdict (0 pass, 1 warn, 2 fail, 3 could not run)",
            "datasource": datasource,
            "gridPos": {"h": PANEL_HEIGHT, "w": half, "x": 0, "y": y},
            "fieldConfig": {"defaults": {"unit": "none", "min": 0, "max": 3}, "overrides": []},
            "targets": [target("A", f"max by (node) ({VALIDATION_NODE_VERDICT})", "{{node}}")],
        },
        {
            "id": first_id + 1,
            "type": "timeseries",
            "title": "Validation: busbw per message size, and its warn floor",
            "datasource": datasource,
            "gridPos": {"h": PANEL_HEIGHT, "w": half, "x": half, "y": y},
            "fieldConfig": {"defaults": {"unit": "Bps"}, "overrides": []},
            "targets": [
                target(
                    "A",
                    f"max by (collective, scope, size_bytes) ({VALIDATION_BUSBW})",
                    "{{collective}} {{scope}} {{size_bytes}} B",
                ),
                target(
                    "B",
                    f"max by (collective, scope, size_bytes) ({VALIDATION_BUSBW_FLOOR_WARN})",
                    "warn floor {{collective}} {{scope}} {{size_bytes}} B",
                ),
            ],
        },
    ]


def validation_tiles(selector: str, *, y: int) -> list[dict[str, Any]]:
    """The validation's two charts as Cloud Monitoring tiles from row ``y``: the same PromQL as
    :func:`validation_panels`, each metric held by ``selector`` (the stack's cluster)."""
    half = MOSAIC_COLUMNS // 2

    def data(expr: str, unit: str) -> dict[str, Any]:
        return {"timeSeriesQuery": {"prometheusQuery": expr, "unitOverride": unit}, "plotType": "LINE"}

    def tile(x: int, title: str, sets: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "xPos": x,
            "yPos": y,
            "width": half,
            "height": 4,
            "widget": {"title": title, "xyChart": {"dataSets": sets, "yAxis": {"scale": "LINEAR"}}},
        }

    by_size = "collective, scope, size_bytes"
    return [
        tile(
            0,
            "Validation: node verdict (0 pass, 1 warn, 2 fail, 3 could not run)",
            [data(f"max by (node) ({VALIDATION_NODE_VERDICT}{selector})", "1")],
        ),
        tile(
            half,
            "Validation: busbw per message size, and its warn floor",
            [
                data(f"max by ({by_size}) ({VALIDATION_BUSBW}{selector})", "By/s"),
                data(f"max by ({by_size}) ({VALIDATION_BUSBW_FLOOR_WARN}{selector})", "By/s"),
            ],
        ),
    ]


def validation_annotations(datasource: dict[str, str]) -> list[dict[str, Any]]:
    """Heal's incidents as annotations: a marker while an incident is in a state, titled with it."""
    return [
        {
            "name": "heal incidents",
            "datasource": datasource,
            "enable": True,
            "hide": False,
            "iconColor": "red",
            "expr": f"{HEAL_INCIDENT} == 1",
            "step": HEAL_ANNOTATION_STEP,
            "titleFormat": "heal {{incident}}: {{state}}",
            "textFormat": "node {{node}}",
            "tagKeys": "node,state",
            "useValueForTime": False,
        }
    ]


# --- Fabric panels (issue 46, item 2: "NVLink and NIC/EFA/InfiniBand throughput per node") ---
#
# Charted only where a collector we deploy, or a managed default, produces the series on that
# platform. What each has:
#
# * NVLink, every DCGM path: the GPU panel above over DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL (enabled in
#   default-counters.csv at d5e5f51), and Cluster Director's gpu.dcgm.nvlink.io
#   (components/gcp/slurm_metrics.py).
# * InfiniBand, Azure Slurm (ND): the node exporter on every GPU node (components/azure/
#   slurm_metrics.py, v1.12.1) runs its ``infiniband`` collector by default (README.md line 141),
#   which reads ``/sys/class/infiniband/<device>/ports/<port>/counters/port_{rcv,xmit}_data`` and
#   writes ``node_infiniband_port_data_{received,transmitted}_bytes_total`` with labels ``device``
#   and ``port`` (prometheus/node_exporter collector/infiniband_linux.go lines 77-78 and 207-208 at
#   v1.12.1, fc12f2c); procfs multiplies the counters' 4-octet words into bytes
#   (prometheus/procfs sysfs/class_infiniband.go, ``port_rcv_data`` ``*= 4``, at v0.21.1, 3c943fd,
#   the version node_exporter v1.12.1's go.mod requires). Our scrape labels each series ``node``.
# * InfiniBand, AKS (ND): the managed Prometheus add-on scrapes AKS's own node exporter on every
#   Linux node (job ``node``, ``$NODE_IP:19100``: Azure/prometheus-collector otelcollector/
#   configmapparser/default-prom-configs/nodeexporterDefaultDs.yml at 106ca1d, and ama-metrics-
#   daemonset.yaml at 021674c, ``NODE_EXPORTER_TARGETPORT`` "19100", "the node exporter shipped out of
#   box with AKS"). That exporter is the node image's systemd service, started with every default
#   collector but ``wifi`` and ``hwmon`` (Azure/AgentBaker parts/linux/cloud-init/artifacts/
#   node-exporter/node-exporter-startup.sh at 1138c29: ``--web.listen-address=${NODE_IP}:19100``,
#   ``--no-collector.wifi --no-collector.hwmon``), so its ``infiniband`` collector runs. The add-on's
#   minimal ingestion profile keeps only its listed metrics (learn.microsoft.com/azure/azure-monitor/
#   containers/prometheus-metrics-scrape-configuration-minimal, read 2026-12-07); the stack widens the
#   ``nodeexporter`` keep-list by the two counters (components/azure/ama_settings.py). That job labels
#   the node ``instance`` (the node's name, the file above), so these panels group by it.
# * EFA, PCS: the boot script's timer copies each EFA port's ``hw_counters/{rx,tx}_bytes`` into
#   ``gpu_cluster_efa_{rx,tx}_bytes_total{device,port}`` in the node exporter's textfile directory
#   (components/aws/efa_textfile.py), which the node's collector scrapes with ``node`` set.
# * EFA, EKS: the same writer and series, run by a DaemonSet on every GPU node beside a node exporter
#   that serves only its textfile directory (components/aws/efa_exporter.py), scraped by the AMP
#   collector's ``gpu-cluster-efa`` job, which labels each series ``node`` (components/aws/metrics.py).
#   The node exporter's own ``infiniband`` collector is no substitute: it reads ``counters/`` and the
#   mlx5 ``hw_counters`` names (infiniband_linux.go above), not EFA's ``hw_counters/{rx,tx}_bytes``
#   (aws-samples/awsome-distributed-training 4.validation_and_observability/3.efa-node-exporter/
#   class_amazon_efa.go at 7217859). AWS's own observability uses a fork of node exporter with an
#   ``amazonefa`` collector (``node_amazonefa_rx_bytes`` ...: same folder), run on HyperPod from a
#   private image (``1.architectures/5.sagemaker-hyperpod/LifecycleScripts/base-config/observability/
#   install_efa_exporter.sh``: 602401143452.dkr.ecr.<region>.amazonaws.com/hyperpod/efa_exporter:1.0.0);
#   no public image of it was found.
# * Not charted, GKE (GPUDirect-TCPX/TCPXO/RDMA NICs): managed collection's packages (components/
#   gcp/metrics.py) include no node exporter, and no GKE page read names a per-NIC counter of the
#   GPU NICs that managed collection writes.


def _throughput(fabric: str, of: str, rx_metric: str, tx_metric: str) -> tuple[Panel, ...]:
    """Receive and transmit of one fabric, per node: counters of bytes, summed over ``of``."""
    return tuple(
        Panel(
            title=f"{fabric} {way} (all {of} of the node)",
            metric=metric,
            expr="sum by ({node}) (rate({metric}[" + RATE_WINDOW + "]))",
            grafana_unit="Bps",
            monitoring_unit="By/s",
        )
        for way, metric in (("receive", rx_metric), ("transmit", tx_metric))
    )


INFINIBAND_PANELS = _throughput(
    "InfiniBand",
    "ports",
    "node_infiniband_port_data_received_bytes_total",
    "node_infiniband_port_data_transmitted_bytes_total",
)
# AKS: the same counters from the add-on's node exporter job, which names the node ``instance``.
AKS_INFINIBAND_PANELS = tuple(replace(p, node_label="instance") for p in INFINIBAND_PANELS)
# PCS: components/aws/efa_textfile.py's counters, bytes.
EFA_PANELS = _throughput("EFA", "devices", "gpu_cluster_efa_rx_bytes_total", "gpu_cluster_efa_tx_bytes_total")


def eks_efa_panels() -> tuple[Panel, ...]:
    """EKS: PCS's series from the EFA exporter DaemonSet (components/aws/efa_exporter.py), whose scrape
    job labels the node ``node`` as PCS's does, so the panels are PCS's own."""
    return EFA_PANELS


# Platform (``<cloud>-<orchestrator>`` of the stack outputs) -> its fabric panels (the list above).
FABRIC_PANELS: dict[str, tuple[Panel, ...]] = {
    "azure-slurm": INFINIBAND_PANELS,
    "azure-aks": AKS_INFINIBAND_PANELS,
    "aws-eks": eks_efa_panels(),
    "aws-slurm": EFA_PANELS,
    "gcp-gke": (),
    "gcp-slurm": (),
}


# --- AMD's GPU panels (issue 46: the MI300X AKS stack) ---
#
# The series of AMD's device-metrics exporter, which AMD's GPU operator runs from the DeviceConfig
# (components/k8s/aks.py AMD_DEVICE_CONFIG_SPEC, image rocm/device-metrics-exporter:v1.4.1) and the
# managed Prometheus agent scrapes with ``node`` set (components/k8s/metrics.py
# amd_exporter_scrape_job). ROCm/device-metrics-exporter at v1.4.1 (e2a7018):
#
# * names: pkg/amdgpu/gpuagent/gpuagent_metrics.go ``initPrometheusMetrics`` (lines 663-1450), each
#   a field of example/config.json's ``GPUConfig.Fields`` (lines 10-167) in lower case; no prefix,
#   since the DeviceConfig gives the exporter no config (``GetPrefix`` is empty without one,
#   pkg/exporter/metricsutil/metrics.go lines 161-182), and every field on (``initFieldConfig``,
#   gpuagent_metrics.go lines 440-466);
# * units: docs/configuration/metricslist.md: GPU_GFX_ACTIVITY percent (line 16), GPU_USED_VRAM MB
#   (line 85), GPU_POWER_USAGE W (line 37), GPU_JUNCTION_TEMPERATURE C (line 13), the ECC totals
#   counts (lines 39-40), GPU_HEALTH 1 healthy, 0 not (gpuagent_metrics.go line 1115), and
#   GPU_XGMI_LINK_RX/TX "Accumulated XGMI Link Data Read/Write in KB" per ``link_index`` (lines
#   83-84; gpuagent_metrics.go lines 1117-1126 and 2166-2177).
#
# Every one is a Prometheus gauge; the XGMI pair holds accumulated kilobytes, so it is charted as a
# rate. The list's "Hypervisor" column marks GPU_USED_VRAM and the XGMI fields as not served there;
# which column an Azure ND MI300X v5 VM falls in was not read in a source, so a panel that stays
# empty on it says the exporter did not serve that field. Power is GPU_POWER_USAGE, not
# GPU_PACKAGE_POWER, which the list says is "not available on guest VM" (line 10).
AMD_PANELS: tuple[Panel, ...] = (
    Panel(
        title="GPU activity (mean of the node's GPUs)",
        metric="gpu_gfx_activity",
        expr="avg by ({node}) ({metric})",
        grafana_unit="percent",
        monitoring_unit="%",
    ),
    Panel(
        title="GPU memory used (sum of the node's GPUs)",
        metric="gpu_used_vram",
        expr="sum by ({node}) ({metric})",
        grafana_unit="decmbytes",
        monitoring_unit="MBy",
    ),
    Panel(
        title="Power draw (sum of the node's GPUs)",
        metric="gpu_power_usage",
        expr="sum by ({node}) ({metric})",
        grafana_unit="watt",
        monitoring_unit="W",
    ),
    Panel(
        title="GPU junction temperature (hottest GPU of the node)",
        metric="gpu_junction_temperature",
        expr="max by ({node}) ({metric})",
        grafana_unit="celsius",
        monitoring_unit="Cel",
    ),
    Panel(
        title="GPU health (1: every GPU of the node healthy)",
        metric="gpu_health",
        expr="min by ({node}) ({metric})",
        grafana_unit="none",
        monitoring_unit="1",
    ),
    Panel(
        title="ECC: uncorrectable errors (sum of the node's GPUs)",
        metric="gpu_ecc_uncorrect_total",
        expr="sum by ({node}) ({metric})",
        grafana_unit="none",
        monitoring_unit="1",
    ),
    Panel(
        title="ECC: correctable errors (sum of the node's GPUs)",
        metric="gpu_ecc_correct_total",
        expr="sum by ({node}) ({metric})",
        grafana_unit="none",
        monitoring_unit="1",
    ),
    *(
        Panel(
            title=f"XGMI {way} (all links of the node's GPUs, the exporter's KB)",
            metric=metric,
            expr="sum by ({node}) (rate({metric}[" + RATE_WINDOW + "]))",
            grafana_unit="KBs",
            monitoring_unit="kBy/s",
        )
        for way, metric in (("receive", "gpu_xgmi_link_rx"), ("transmit", "gpu_xgmi_link_tx"))
    ),
)
# Who makes the node's GPUs (the catalog's ``accelerator.vendor``) -> the GPU panels of its exporter.
GPU_PANELS: dict[str, tuple[Panel, ...]] = {"nvidia": PANELS, "amd": AMD_PANELS}
AMD_TAGS = ("gpu-cluster", "amd-device-metrics-exporter")


def grafana_amd(*, title: str = TITLE, fabric: Sequence[Panel] = ()) -> dict[str, Any]:
    """The Grafana dashboard of an AMD stack (AKS MI300X): AMD's panels, then ``fabric``."""
    return grafana(NODE_LABEL["aks"], title=title, fabric=fabric, gpu=AMD_PANELS, tags=AMD_TAGS)


def dumps(dashboard: dict[str, Any]) -> str:
    """The JSON as the repository's files hold it and as the stack sends it."""
    return json.dumps(dashboard, indent=2, sort_keys=False) + "\n"


def files() -> dict[str, str]:
    """The dashboards the repository ships (dashboards/), path -> text: the Cloud Monitoring one the
    GKE stack creates, the Grafana one without fabric panels, one per platform with its fabric
    panels (Azure Slurm, AKS, PCS, EKS), and AKS MI300X's with AMD's GPU panels."""
    return {
        "dashboards/gpu-cloud-monitoring.json": dumps(cloud_monitoring(validation=True)),
        "dashboards/gpu-grafana.json": dumps(grafana()),
        "dashboards/gpu-grafana-azure-slurm.json": dumps(grafana(fabric=FABRIC_PANELS["azure-slurm"])),
        "dashboards/gpu-grafana-aks.json": dumps(grafana(fabric=FABRIC_PANELS["azure-aks"])),
        "dashboards/gpu-grafana-pcs.json": dumps(grafana(fabric=FABRIC_PANELS["aws-slurm"])),
        "dashboards/gpu-grafana-eks.json": dumps(grafana(fabric=FABRIC_PANELS["aws-eks"])),
        "dashboards/gpu-grafana-aks-mi300x.json": dumps(grafana_amd(fabric=FABRIC_PANELS["azure-aks"])),
    }


if __name__ == "__main__":
    # python -m gpu_cluster.components.dashboard: rewrite dashboards/ from PANELS.
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for path, text in files().items():
        (root / path).parent.mkdir(exist_ok=True)
        (root / path).write_text(text)
        print(path)
