"""What a stack's GPU metrics add to the monthly cost (issue 46 item 5): the series its exporters
export, the samples a month its scrape interval makes of them, and the managed store's and
dashboard's prices where a provider's page gave them (components/metrics_cost.yaml, each with its
source). A price no source gave stays out: the estimate says "not priced" for it.

samples a month = active series x (seconds in a month / scrape interval), with a month of 730 hours
(365 x 24 / 12). Active series per node: the pinned DCGM exporter's default counters per NVIDIA GPU,
the node exporter's series where a stack runs one (measured, see the YAML), and the validation's
own per-node series (gpu_cluster.workloads.validate.metrics_export: a verdict state set of the four
verdicts and a verdict code); per cluster, the run's verdict code and end time. The scrape intervals
are the ones the stacks render, imported from their modules. Every assumption is in ``assumptions``,
which the plan prints.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpu_cluster.components.k8s.metrics import DCGM_INTERVAL

DATA_PATH = Path(__file__).with_name("metrics_cost.yaml")
HOURS_PER_MONTH = 730
SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600
# workloads/validate/metrics_export.py render_report: per node a state set over Verdict (PASS, WARN,
# FAIL, UNKNOWN) and a verdict code; per run a verdict code and an end timestamp. The components
# may not import the workloads (tests/test_import_graph.py): a test renders a real report and
# counts these.
VALIDATION_SERIES_PER_NODE = 5
VALIDATION_SERIES_PER_RUN = 2

# The plan's resources that are the metrics path: the managed store, its collector, the dashboard.
RESOURCE_TYPES = {
    "aws:amp/workspace:Workspace": "AMP workspace",
    "aws:amp/scraper:Scraper": "AMP managed collector",
    "aws:grafana/workspace:Workspace": "Amazon Managed Grafana workspace",
    "azure-native:monitor:AzureMonitorWorkspace": "Azure Monitor workspace",
    "azure-native:monitor:DataCollectionEndpoint": "data collection endpoint",
    "azure-native:monitor:DataCollectionRule": "data collection rule",
    "azure-native:monitor:DataCollectionRuleAssociation": "data collection rule association",
    "azure-native:dashboard:Grafana": "Azure Managed Grafana workspace",
    "gcp:monitoring/dashboard:Dashboard": "Cloud Monitoring dashboard",
    "kubernetes:monitoring.googleapis.com/v1:PodMonitoring": "managed collection PodMonitoring",
}


@dataclass(frozen=True, slots=True)
class Price:
    id: str
    usd: float
    per: str
    source: str
    """The source id in metrics_cost.yaml ``sources``."""
    url: str
    read: str
    samples: int = 0
    """For a per-sample price, how many samples ``usd`` buys."""


@dataclass(frozen=True, slots=True)
class Data:
    sources: dict[str, dict[str, str]]
    prices: dict[str, Price]
    unpriced: dict[str, str]
    dcgm_counters: tuple[str, ...]
    node_exporter_series: int


@functools.cache
def load(path: Path = DATA_PATH) -> Data:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    sources = {k: {"title": v["title"], "url": v["url"], "read": str(v["read"])} for k, v in doc["sources"].items()}
    prices = {
        k: Price(
            id=k,
            usd=float(v["usd"]),
            per=v["per"],
            source=v["source"],
            url=sources[v["source"]]["url"],
            read=sources[v["source"]]["read"],
            samples=int(v.get("samples", 0)),
        )
        for k, v in doc["prices"].items()
    }
    series = doc["series"]
    return Data(
        sources=sources,
        prices=prices,
        unpriced=dict(doc["unpriced"]),
        dcgm_counters=tuple(series["dcgm"]["counters"]),
        node_exporter_series=int(series["node_exporter"]["series"]),
    )


def seconds(interval: str) -> int:
    """A Prometheus duration of whole seconds or minutes (``30s``, ``1m``) in seconds."""
    unit = {"s": 1, "m": 60}[interval[-1]]
    return int(interval[:-1]) * unit


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    path: str
    """Which metrics path: eks, aws-slurm, gke, gcp-slurm, aks, azure-slurm."""
    series: int
    """Active series, the whole cluster."""
    series_per_node: dict[str, int]
    interval_s: int
    samples_per_month: int
    usd_per_month: float
    """The priced items' sum; a floor where anything is not priced."""
    items: list[dict[str, Any]] = field(default_factory=list)
    """Each ``{what, usd_per_month | None, price?, source?, read?, why?}``: priced with its source, or
    not priced with why."""
    assumptions: list[str] = field(default_factory=list)
    resources: list[str] = field(default_factory=list)
    """The plan's metrics resources, ``type name``."""


def _interval(path: str) -> str | None:
    """The scrape interval the path's component renders. Imported when asked: each cloud's module
    needs that cloud's SDK, which a plan of another cloud may not have installed."""
    if path in ("gke", "aks"):
        return DCGM_INTERVAL
    if path == "eks":
        from gpu_cluster.components.aws import metrics as eks

        return eks.SCRAPE_INTERVAL
    if path == "aws-slurm":
        from gpu_cluster.components.aws import slurm_metrics as pcs

        return pcs.SCRAPE_INTERVAL
    if path == "azure-slurm":
        from gpu_cluster.components.azure import slurm_metrics as azure_slurm

        return azure_slurm.SCRAPE_INTERVAL
    return None


def _path(cloud: str, orchestrator: str) -> str:
    return f"{cloud}-{orchestrator}" if orchestrator == "slurm" else orchestrator


def estimate(
    *, cloud: str, orchestrator: str, nodes: int, gpus_per_node: int, gpu_vendor: str, resources: list[tuple[str, str]]
) -> Estimate | None:
    """The estimate for one cluster; ``resources`` are the plan's ``(type, name)``. None where the
    stack has no metrics path."""
    data = load()
    path = _path(cloud, orchestrator)
    mine = [f"{t} {n}" for t, n in resources if t in RESOURCE_TYPES]
    types = {t for t, _ in resources}
    month = f"a month of {HOURS_PER_MONTH} hours"
    assumptions = [month]
    items: list[dict[str, Any]] = []
    interval = _interval(path)
    if path == "gcp-slurm":
        items.append(
            {
                "what": "Ops Agent DCGM metrics into Cloud Monitoring",
                "usd_per_month": None,
                "why": data.unpriced["ops-agent"],
            }
        )
        items.append(_gcp_dashboard(types))
        return Estimate(
            path=path,
            series=0,
            series_per_node={},
            interval_s=0,
            samples_per_month=0,
            usd_per_month=0.0,
            items=items,
            assumptions=[*assumptions, "the Ops Agent's series are not counted: its price is by bytes, not samples"],
            resources=mine,
        )
    if interval is None:
        return None
    per_node: dict[str, int] = {}
    if gpu_vendor == "nvidia":
        per_node["dcgm"] = len(data.dcgm_counters) * gpus_per_node
        assumptions.append(
            f"DCGM exporter: {len(data.dcgm_counters)} series per GPU (the default counters of the pinned "
            "4.5.3-4.8.2 release), no MIG or vGPU split"
        )
    else:
        # AKS MI300X: AMD's device-metrics exporter (components/k8s/metrics.py), every field on by
        # default; which of them an ND MI300X v5 VM serves was not read in a source (docs/day2.md).
        assumptions.append(
            f"no DCGM exporter on {gpu_vendor} GPUs; AMD's device-metrics exporter's series are not counted "
            "(which of its fields the VM serves is not sourced)"
            if gpu_vendor == "amd"
            else f"no DCGM exporter on {gpu_vendor} GPUs: no GPU series counted"
        )
    if path in ("aws-slurm", "azure-slurm"):
        per_node["node_exporter"] = data.node_exporter_series
        assumptions.append(
            f"node exporter: {data.node_exporter_series} series per node, measured on a 2-core VM (node exporter "
            "1.5.0, default collectors); a GPU node, with more CPUs, NICs and InfiniBand ports, exposes more"
        )
    per_node["validation"] = VALIDATION_SERIES_PER_NODE
    assumptions.append(
        f"validation: {VALIDATION_SERIES_PER_NODE} series per node and {VALIDATION_SERIES_PER_RUN} per run, "
        "the last run's kept; its busbw curves and pair-search series (a few per message size) are not counted"
    )
    if path == "gke":
        assumptions.append(
            "GKE's managed DCGM package: its own counter list and scrape interval were not read; the pinned "
            f"exporter's list and our PodMonitoring's {DCGM_INTERVAL} are used"
        )
    if path == "aks" and gpu_vendor == "nvidia":
        assumptions.append("AKS runs the GPU Operator's DCGM exporter: counted with the pinned release's list")
    if path in ("gke", "aks"):
        assumptions.append(
            "the platform's own default targets (kubelet, cAdvisor, kube-state-metrics"
            + (", the add-on's node exporter" if path == "aks" else "")
            + ") are not counted"
        )
    series = nodes * sum(per_node.values()) + VALIDATION_SERIES_PER_RUN
    interval_s = seconds(interval)
    samples = series * (SECONDS_PER_MONTH // interval_s)
    if cloud == "aws":
        items.append(
            {"what": "AMP ingestion and storage", "usd_per_month": None, "why": data.unpriced["amp-ingestion"]}
        )
        if "aws:grafana/workspace:Workspace" in types:
            editor, viewer = data.prices["amg-editor"], data.prices["amg-viewer"]
            items.append(
                _priced(
                    "Amazon Managed Grafana, 1 editor (the workspace's minimum)",
                    editor.usd,
                    editor,
                    extra=f"each further editor ${editor.usd:g}, viewer ${viewer.usd:g}",
                )
            )
            assumptions.append("Grafana: one active editor, the minimum a workspace is billed for")
    elif cloud == "gcp":
        gmp = data.prices["gmp-samples"]
        items.append(_priced("Managed Service for Prometheus samples", samples / gmp.samples * gmp.usd, gmp))
        items.append(_gcp_dashboard(types))
    elif cloud == "azure":
        items.append(
            {
                "what": "Azure Monitor managed Prometheus ingestion",
                "usd_per_month": None,
                "why": data.unpriced["azure-prometheus"],
            }
        )
        if "azure-native:dashboard:Grafana" in types:
            items.append(
                {
                    "what": "Azure Managed Grafana (Standard)",
                    "usd_per_month": None,
                    "why": data.unpriced["azure-grafana"],
                }
            )
    assumptions.append("queries (dashboards, alerts) are not counted")
    return Estimate(
        path=path,
        series=series,
        series_per_node=per_node,
        interval_s=interval_s,
        samples_per_month=samples,
        usd_per_month=round(sum(i["usd_per_month"] or 0.0 for i in items), 2),
        items=items,
        assumptions=assumptions,
        resources=mine,
    )


def _priced(what: str, usd: float, price: Price, extra: str = "") -> dict[str, Any]:
    unit = f"per {price.samples:,} samples" if price.samples else f"per {price.per}"
    return {
        "what": what,
        "usd_per_month": round(usd, 2),
        "price": f"${price.usd:g} {unit}" + (f"; {extra}" if extra else ""),
        "source": price.url,
        "read": price.read,
    }


def _gcp_dashboard(types: set[str]) -> dict[str, Any]:
    present = "gcp:monitoring/dashboard:Dashboard" in types
    return {
        "what": "Cloud Monitoring dashboard" if present else "no dashboard",
        "usd_per_month": None,
        "why": "the pricing page read lists no charge for a dashboard of its own; not priced",
    }


def line(e: dict[str, Any]) -> str:
    """The plan's ``metrics`` line from an estimate (as ``to_json`` writes it)."""
    parts = []
    for i in e["items"]:
        if i["usd_per_month"] is None:
            parts.append(f"{i['what']} not priced")
        else:
            parts.append(f"{i['what']} ${i['usd_per_month']:,.2f} at {i['price']} ({i['source']}, read {i['read']})")
    unpriced = any(i["usd_per_month"] is None for i in e["items"])
    priced = any(i["usd_per_month"] is not None for i in e["items"])
    total = f"~${e['usd_per_month']:,.2f}/month" if priced else "not priced"
    if priced and unpriced:
        total += " plus what is not priced"
    volume = (
        f"{e['series']:,} series, {e['samples_per_month']:,} samples/month at one per {e['interval_s']} s"
        if e["series"]
        else "series not counted"
    )
    return (
        f"{total} ({volume}; "
        + "; ".join(parts)
        + "); assumes "
        + "; ".join(e["assumptions"])
        + f"; {len(e['resources'])} metrics resources listed above (components/metrics_cost.py)"
    )
