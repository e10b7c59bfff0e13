"""The GPU dashboard (components/dashboard.py): every panel queries a metric the DCGM exporter
exports, each query parses, both renderings have the keys their references require, and the files
in dashboards/ are what the builder writes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_cluster.components.dashboard import (
    AKS_INFINIBAND_PANELS,
    AMD_PANELS,
    FABRIC_PANELS,
    GPU_PANELS,
    INFINIBAND_PANELS,
    GRAFANA_COLUMNS,
    MOSAIC_COLUMNS,
    NODE_LABEL,
    PANELS,
    cloud_monitoring,
    files,
    grafana,
)

ROOT = Path(__file__).resolve().parents[2]


def _mirror(name: str) -> Path:
    """A reference repository the library's fetch brought (``.mirror`` beside the checkout, or beside
    the folder of worktrees); absent on a machine without one, and the tests that read it skip."""
    for base in (ROOT.parent, ROOT.parent.parent):
        if (base / ".mirror" / name / "repo").exists():
            return base / ".mirror" / name / "repo"
    return ROOT.parent / ".mirror" / name / "repo"


EXPORTER = _mirror("NVIDIA+dcgm-exporter")
EXPORTER_COMMIT = "d5e5f510a1b6b393f39a43293ccd9dc985defc79"
# NVIDIA/dcgm-exporter etc/default-counters.csv at d5e5f51 (tag 4.5.3-4.8.2): the fields it enables
# (uncommented lines), name -> Prometheus type. Written out so the test runs without the mirror;
# the test below compares it with the file where the mirror is present.
DEFAULT_COUNTERS = {
    "DCGM_FI_DEV_SM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEMORY_TEMP": "gauge",
    "DCGM_FI_DEV_GPU_TEMP": "gauge",
    "DCGM_FI_DEV_POWER_USAGE": "gauge",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "counter",
    "DCGM_FI_DEV_GPU_UTIL": "gauge",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "gauge",
    "DCGM_FI_DEV_ENC_UTIL": "gauge",
    "DCGM_FI_DEV_DEC_UTIL": "gauge",
    "DCGM_FI_DEV_XID_ERRORS": "gauge",
    "DCGM_FI_DEV_FB_FREE": "gauge",
    "DCGM_FI_DEV_FB_USED": "gauge",
    "DCGM_FI_DEV_FB_RESERVED": "gauge",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "counter",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "gauge",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "gauge",
    "DCGM_FI_DRIVER_VERSION": "label",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gauge",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "gauge",
    "DCGM_FI_PROF_DRAM_ACTIVE": "gauge",
    "DCGM_FI_PROF_PCIE_TX_BYTES": "gauge",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "gauge",
}


# A recursive-descent parser for the PromQL the panels use (Prometheus's grammar for these forms:
# number, binary ``*``, ``agg by (labels) (expr)``, ``rate(selector[range])``, and a vector selector
# with ``=`` matchers). It returns the parse tree and refuses anything else, so a typo, an unclosed
# paren or a stray token fails the test.
TOKEN = re.compile(r'\s*(?:(\d+(?:\.\d+)?)|([A-Za-z_:][A-Za-z0-9_:]*)|("(?:[^"\\]|\\.)*")|(\[\d+[smhd]\])|([(){},=*]))')
AGGREGATIONS = {"sum", "avg", "max", "min", "count"}
FUNCTIONS = {"rate"}


def _tokens(q: str) -> list[str]:
    out, pos = [], 0
    while pos < len(q.rstrip()):
        m = TOKEN.match(q, pos)
        assert m and m.end() > pos, f"cannot read {q[pos:]!r} in {q!r}"
        out.append(next(g for g in m.groups() if g is not None))
        pos = m.end()
    return out


def parse(q: str) -> tuple:
    toks = _tokens(q)
    tree, rest = _expr(toks)
    assert not rest, f"trailing {rest} in {q!r}"
    return tree


def _expr(t: list[str]) -> tuple[tuple, list[str]]:
    left, t = _term(t)
    while t and t[0] == "*":
        right, t = _term(t[1:])
        left = ("*", left, right)
    return left, t


def _term(t: list[str]) -> tuple[tuple, list[str]]:
    head = t[0]
    if re.fullmatch(r"\d+(?:\.\d+)?", head):
        return ("number", float(head)), t[1:]
    if head in AGGREGATIONS:
        assert t[1] == "by" and t[2] == "(", t
        labels, t = _labels(t[3:])
        assert t[0] == "(", t
        inner, t = _expr(t[1:])
        assert t[0] == ")", t
        return ("agg", head, labels, inner), t[1:]
    if head in FUNCTIONS:
        assert t[1] == "(", t
        sel, t = _selector(t[2:])
        assert t[0].startswith("["), f"{head} needs a range, got {t}"
        assert t[1] == ")", t
        return ("call", head, sel, t[0]), t[2:]
    return _selector(t)


def _labels(t: list[str]) -> tuple[tuple[str, ...], list[str]]:
    names = []
    while t[0] != ")":
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", t[0]), t
        names.append(t[0])
        t = t[1:]
        if t[0] == ",":
            t = t[1:]
    return tuple(names), t[1:]


def _selector(t: list[str]) -> tuple[tuple, list[str]]:
    name = t[0]
    assert re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", name), f"not a metric name: {name}"
    t = t[1:]
    matchers = {}
    if t and t[0] == "{":
        t = t[1:]
        while t[0] != "}":
            label, eq, value = t[0], t[1], t[2]
            assert eq == "=" and value.startswith('"'), t
            matchers[label] = json.loads(value)
            t = t[3:]
            if t[0] == ",":
                t = t[1:]
        t = t[1:]
    return ("selector", name, matchers), t


def _selectors(tree: tuple) -> list[tuple]:
    if tree[0] == "selector":
        return [tree]
    return [s for part in tree[1:] if isinstance(part, tuple) for s in _selectors(part)]


def _aggregations(tree: tuple) -> list[tuple]:
    own = [tree] if tree[0] == "agg" else []
    return own + [a for part in tree[1:] if isinstance(part, tuple) for a in _aggregations(part)]


def test_the_parser_refuses_what_is_not_promql() -> None:
    for bad in ("avg by (node) (DCGM_FI_DEV_GPU_UTIL", "avg by (node) ()", "rate(DCGM_FI_DEV_GPU_UTIL)", "1 2"):
        with pytest.raises((AssertionError, IndexError)):
            parse(bad)


def test_the_written_out_counters_are_the_exporters_file() -> None:
    if not (EXPORTER / "HEAD").exists() and not (EXPORTER / ".git").exists():
        pytest.skip("no local copy of NVIDIA/dcgm-exporter")
    text = subprocess.run(
        ["git", "-C", str(EXPORTER), "show", f"{EXPORTER_COMMIT}:etc/default-counters.csv"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    enabled = {
        cols[0].strip(): cols[1].strip()
        for line in text.splitlines()
        if line.strip() and not line.startswith("#")
        for cols in [line.split(",")]
    }
    assert enabled == DEFAULT_COUNTERS


@pytest.mark.parametrize("cloud", sorted(NODE_LABEL))
def test_every_panel_queries_an_exported_metric_per_node(cloud: str) -> None:
    node = NODE_LABEL[cloud]
    for p in PANELS:
        tree = parse(p.promql(node, '{cluster="t1"}'))
        (sel,) = _selectors(tree)
        assert sel[1] == p.metric and p.metric in DEFAULT_COUNTERS, p.title
        assert DEFAULT_COUNTERS[p.metric] in ("gauge", "counter"), p.metric
        assert sel[2] == {"cluster": "t1"}
        # Per node: the outer aggregation keeps the node label and nothing else.
        (agg,) = _aggregations(tree)
        assert agg[2] == (node,), p.title
        # rate() only over a counter (a gauge's rate means nothing).
        if agg[3][0] == "call":
            assert DEFAULT_COUNTERS[p.metric] == "counter", p.title


def test_the_panels_cover_what_the_issue_asks() -> None:
    """Issue 46: utilisation and tensor activity, memory, power, temperature, XID and ECC, NVLink."""
    metrics = {p.metric for p in PANELS}
    assert {
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    } <= metrics
    assert len({p.title for p in PANELS}) == len(PANELS)


def test_cloud_monitoring_json_has_the_keys_the_api_requires() -> None:
    """projects.dashboards: displayName required; one layout; mosaic tiles inside the columns; each
    xyChart with dataSets whose timeSeriesQuery is a PromQL query."""
    d = cloud_monitoring(selector='{cluster="t1"}')
    assert d["displayName"]
    layouts = {"gridLayout", "mosaicLayout", "rowLayout", "columnLayout"} & set(d)
    assert layouts == {"mosaicLayout"}
    mosaic = d["mosaicLayout"]
    assert 1 <= mosaic["columns"] == MOSAIC_COLUMNS <= 12
    assert len(mosaic["tiles"]) == len(PANELS)
    cells: set[tuple[int, int]] = set()
    for tile, p in zip(mosaic["tiles"], PANELS, strict=True):
        assert tile["xPos"] >= 0 and tile["yPos"] >= 0 and tile["xPos"] + tile["width"] <= mosaic["columns"]
        mine = {
            (x, y)
            for x in range(tile["xPos"], tile["xPos"] + tile["width"])
            for y in range(tile["yPos"], tile["yPos"] + tile["height"])
        }
        assert not cells & mine, "tiles overlap"
        cells |= mine
        widget = tile["widget"]
        assert widget["title"] == p.title
        (ds,) = widget["xyChart"]["dataSets"]
        q = ds["timeSeriesQuery"]
        # One query kind per TimeSeriesQuery (a union field).
        assert set(q) == {"prometheusQuery", "unitOverride"}
        assert parse(q["prometheusQuery"]) and p.metric in q["prometheusQuery"]
        assert ds["plotType"] in ("LINE", "STACKED_AREA", "STACKED_BAR", "HEATMAP")


def test_grafana_json_has_the_keys_the_model_requires() -> None:
    d = grafana()
    assert d["title"] and 8 <= len(d["uid"]) <= 40
    assert isinstance(d["schemaVersion"], int) and d["templating"]["list"][0]["type"] == "datasource"
    assert d["templating"]["list"][0]["query"] == "prometheus"
    ids = [p["id"] for p in d["panels"]]
    assert len(set(ids)) == len(ids) == len(PANELS) + 2
    for panel, p in zip(d["panels"][: len(PANELS)], PANELS, strict=True):
        g = panel["gridPos"]
        assert 1 <= g["w"] <= GRAFANA_COLUMNS and 0 <= g["x"] and g["x"] + g["w"] <= GRAFANA_COLUMNS
        assert panel["type"] == "timeseries" and panel["title"] == p.title
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        (target,) = panel["targets"]
        assert target["refId"] == "A" and parse(target["expr"])
        assert _aggregations(parse(target["expr"]))[0][2] == ("node",)
        assert panel["fieldConfig"]["defaults"]["unit"] == p.grafana_unit


def test_grafana_has_the_validation_section_and_heal_annotation() -> None:
    """After the DCGM panels: the node verdicts and busbw against its floor, grouped by the labels the
    validation's metrics carry (gpu_cluster.workloads.validate.metrics_export), below the last row."""
    from gpu_cluster.workloads.validate import metrics_export

    d = grafana()
    verdict, busbw = d["panels"][len(PANELS) :]
    last_dcgm = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in d["panels"][: len(PANELS)])
    assert verdict["gridPos"]["y"] == busbw["gridPos"]["y"] == last_dcgm
    (v,) = verdict["targets"]
    assert _aggregations(parse(v["expr"]))[0][2] == ("node",) and metrics_export.NODE_VERDICT_CODE in v["expr"]
    exprs = [t["expr"] for t in busbw["targets"]]
    assert metrics_export.BUSBW in exprs[0] and metrics_export.BUSBW_FLOOR_WARN in exprs[1]
    assert all(parse(e) for e in exprs)
    (ann,) = d["annotations"]["list"]
    # The real Prometheus answers each of these queries: tests/workloads/test_metrics_export.py.
    assert ann["expr"].startswith(metrics_export.HEAL_INCIDENT)
    assert ann["datasource"] == {"type": "prometheus", "uid": "${datasource}"} and ann["enable"] is True
    assert {"{{incident}}", "{{state}}"} <= {w for w in ann["titleFormat"].replace(":", " ").split()}


def test_cloud_monitoring_has_the_validation_section_only_where_asked() -> None:
    """GKE's tiles: the node verdicts and busbw against its floor below the DCGM charts, every query
    held by the stack's cluster selector and parsing; no annotation (Cloud Monitoring has none)."""
    from gpu_cluster.workloads.validate import metrics_export

    selector = '{cluster="c1"}'
    plain = cloud_monitoring(selector=selector)["mosaicLayout"]["tiles"]
    d = cloud_monitoring(selector=selector, validation=True)
    assert "annotations" not in d
    tiles = d["mosaicLayout"]["tiles"]
    assert tiles[: len(PANELS)] == plain and len(tiles) == len(PANELS) + 2
    verdict, busbw = tiles[len(PANELS) :]
    last = max(t["yPos"] + t["height"] for t in plain)
    assert verdict["yPos"] == busbw["yPos"] == last and verdict["xPos"] + verdict["width"] <= busbw["xPos"]
    assert busbw["xPos"] + busbw["width"] <= MOSAIC_COLUMNS
    queries = [ds["timeSeriesQuery"] for t in (verdict, busbw) for ds in t["widget"]["xyChart"]["dataSets"]]
    for q in queries:
        tree = parse(q["prometheusQuery"])
        assert [sel[2] for sel in _selectors(tree)] == [{"cluster": "c1"}]
    v, bw, floor = (parse(q["prometheusQuery"]) for q in queries)
    assert _selectors(v)[0][1] == metrics_export.NODE_VERDICT_CODE and _aggregations(v)[0][2] == ("node",)
    assert _selectors(bw)[0][1] == metrics_export.BUSBW and _selectors(floor)[0][1] == metrics_export.BUSBW_FLOOR_WARN
    assert _aggregations(bw)[0][2] == ("collective", "scope", "size_bytes")
    assert [q["unitOverride"] for q in queries] == ["1", "By/s", "By/s"]


def test_the_shipped_files_are_what_the_builder_writes() -> None:
    for path, text in files().items():
        assert (ROOT / path).read_text() == text, f"{path} is stale: python -m gpu_cluster.components.dashboard"
        json.loads(text)


# Where each orchestrator's dashboard lives (components/gcp/dashboard.py, components/azure/grafana.py,
# components/aws/grafana.py).
DASHBOARD_TYPE = {
    "gke": "gcp:monitoring/dashboard:Dashboard",
    "aks": "azure-native:dashboard:Grafana",
    "eks": "aws:grafana/workspace:Workspace",
}


def _kubernetes_stacks() -> list[tuple[str, str]]:
    import yaml

    out = []
    for path in sorted((ROOT / "stacks").glob("Pulumi.*.yaml")):
        cluster = (yaml.safe_load(path.read_text()).get("config") or {}).get("gpu-cluster:cluster") or {}
        kind = (cluster.get("orchestration") or {}).get("kind")
        if kind in DASHBOARD_TYPE:
            out.append((path.name.removeprefix("Pulumi.").removesuffix(".yaml"), kind))
    return out


def test_every_bundled_kubernetes_stack_is_listed() -> None:
    assert {k for _, k in _kubernetes_stacks()} == set(DASHBOARD_TYPE)


@pytest.mark.parametrize(("stack", "kind"), _kubernetes_stacks())
def test_every_bundled_kubernetes_stack_plans_its_dashboard(stack: str, kind: str) -> None:
    from tests.components.aws._offline import run

    plan = run(stack)[0]
    assert len(plan.of_type(DASHBOARD_TYPE[kind])) == 1, stack
    if kind == "gke":
        body = json.loads(plan.one(DASHBOARD_TYPE[kind]).inputs["dashboardJson"])
        # The DCGM charts, then the validation's two (components/gcp/metrics.py publishes them).
        assert len(body["mosaicLayout"]["tiles"]) == len(PANELS) + 2


def test_the_picture_is_drawn_from_the_json(tmp_path: Path) -> None:
    """scripts/dashboard_png.py draws the shipped Grafana file; the docs' copy is a PNG of it."""
    out = tmp_path / "dash.png"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "dashboard_png.py"),
            str(ROOT / "dashboards" / "gpu-grafana.json"),
            str(out),
        ],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (ROOT / "docs" / "images" / "gpu-dashboard.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# The fabric panels (issue 46 item 2). node_exporter's infiniband collector at v1.12.1: the two data
# counters it writes, written out so the test runs without the mirror, and compared with the
# collector's source where the mirror is present.
NODE_EXPORTER = _mirror("prometheus+node_exporter")
NODE_EXPORTER_TAG = "v1.12.1"
INFINIBAND_COUNTERS = {
    "node_infiniband_port_data_received_bytes_total",
    "node_infiniband_port_data_transmitted_bytes_total",
}


def test_the_infiniband_counters_are_the_collectors() -> None:
    if not (NODE_EXPORTER / "HEAD").exists() and not (NODE_EXPORTER / ".git").exists():
        pytest.skip("no node_exporter mirror here")
    src = subprocess.run(
        ["git", "-C", str(NODE_EXPORTER), "show", f"{NODE_EXPORTER_TAG}:collector/infiniband_linux.go"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # The collector names its counters "port_data_..._total" under namespace "node", subsystem "infiniband".
    assert 'i.subsystem = "infiniband"' in src
    for name in INFINIBAND_COUNTERS:
        assert f'"{name.removeprefix("node_infiniband_")}"' in src, name


def test_the_fabric_panels_are_per_node_rates_of_the_collectors_counters() -> None:
    assert FABRIC_PANELS["azure-slurm"] == INFINIBAND_PANELS
    assert {p.metric for p in INFINIBAND_PANELS} == INFINIBAND_COUNTERS
    for p in INFINIBAND_PANELS:
        tree = parse(p.promql("node"))
        (sel,) = _selectors(tree)
        assert sel[1] == p.metric
        (agg,) = _aggregations(tree)
        assert agg[2] == ("node",)
        assert agg[3][0] == "call" and agg[3][1] == "rate", p.title  # counters: charted as rates
        assert p.grafana_unit == "Bps"


def test_only_platforms_whose_collector_scrapes_the_series_get_fabric_panels() -> None:
    """A fabric panel is charted only where a collector scrapes the series: Azure Slurm's node
    Prometheus and PCS's ADOT collector scrape the node exporter with ``node`` set, EKS's AMP collector
    the EFA exporter's pods likewise; AKS's add-on keeps the InfiniBand counters of its node exporter
    job, which names the node ``instance``."""
    from gpu_cluster.components.aws import efa_textfile
    from gpu_cluster.components.aws import slurm_metrics as pcs
    from gpu_cluster.components.azure import ama_settings
    from gpu_cluster.components.azure import slurm_metrics as azure_slurm

    config = azure_slurm.prometheus_config("https://dce.example/write", "client")
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    node_job = jobs["node-exporter"]
    assert node_job["static_configs"] == [{"targets": [f"localhost:{azure_slurm.NODE_EXPORTER_PORT}"]}]
    assert {"target_label": "node", "replacement": azure_slurm.HOST_PLACEHOLDER} in node_job["relabel_configs"]
    scrape = pcs.collector_config("https://x/", "us-east-1")["receivers"]["prometheus"]["config"]
    pcs_job = {j["job_name"]: j for j in scrape["scrape_configs"]}["node-exporter"]
    assert {"target_label": "node", "replacement": pcs.HOST_PLACEHOLDER} in pcs_job["relabel_configs"]
    assert {p.metric for p in FABRIC_PANELS["aws-slurm"]} == set(efa_textfile.COUNTERS)
    assert all(re.fullmatch(ama_settings.NODE_EXPORTER_KEEP, p.metric) for p in FABRIC_PANELS["azure-aks"])
    assert {p.metric for p in FABRIC_PANELS["azure-aks"]} == INFINIBAND_COUNTERS
    for p in FABRIC_PANELS["azure-aks"]:
        (agg,) = _aggregations(parse(p.promql("node")))
        assert agg[2] == ("instance",)
    # EKS: the EFA exporter's job labels its pods' series ``node`` (components/aws/efa_exporter.py).
    from gpu_cluster.components.aws.efa_exporter import scrape_job

    assert {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"} in scrape_job()[
        "relabel_configs"
    ]
    assert {p.metric for p in FABRIC_PANELS["aws-eks"]} == set(efa_textfile.COUNTERS)
    charted = {k for k, v in FABRIC_PANELS.items() if v}
    assert charted == {"azure-slurm", "azure-aks", "aws-slurm", "aws-eks"}


def test_the_fabric_panels_follow_the_gpu_panels_and_only_where_asked() -> None:
    plain = grafana()
    with_ib = grafana(fabric=FABRIC_PANELS["azure-slurm"])
    assert [p["title"] for p in with_ib["panels"]][: len(PANELS)] == [p["title"] for p in plain["panels"]][
        : len(PANELS)
    ]
    fabric = with_ib["panels"][len(PANELS) : len(PANELS) + len(INFINIBAND_PANELS)]
    assert [p["targets"][0]["expr"] for p in fabric] == [p.promql("node") for p in INFINIBAND_PANELS]
    # the validation's section comes after them, the same in both
    after = with_ib["panels"][len(PANELS) + len(INFINIBAND_PANELS) :]
    assert [p["title"] for p in after] == [p["title"] for p in plain["panels"][len(PANELS) :]]
    assert after and all(p["title"].startswith("Validation:") for p in after)
    assert not any("infiniband" in p["targets"][0]["expr"] for p in plain["panels"])
    # ids stay unique and the grid has no overlap
    assert len({p["id"] for p in with_ib["panels"]}) == len(with_ib["panels"])
    assert len({(p["gridPos"]["x"], p["gridPos"]["y"]) for p in with_ib["panels"]}) == len(with_ib["panels"])


# AMD's panels (the MI300X AKS stack). ROCm/device-metrics-exporter at v1.4.1 (e2a7018): the metrics
# the panels chart, name -> (the field of example/config.json, what docs/configuration/metricslist.md
# says the value is). Every one is a gauge (pkg/amdgpu/gpuagent/gpuagent_metrics.go NewGaugeVec);
# "accumulated" ones only grow, so they are the ones charted as rates. Written out so the test runs
# without the mirror; the test below reads them from the exporter's source where the mirror is present.
AMD_EXPORTER = _mirror("ROCm+device-metrics-exporter")
AMD_EXPORTER_COMMIT = "e2a70188ded751b7fe0c8f7f30eeff4c923007f5"
AMD_EXPORTED = {
    "gpu_gfx_activity": ("GPU_GFX_ACTIVITY", "percent"),
    "gpu_used_vram": ("GPU_USED_VRAM", "MB"),
    "gpu_power_usage": ("GPU_POWER_USAGE", "W"),
    "gpu_junction_temperature": ("GPU_JUNCTION_TEMPERATURE", "C"),
    # Not in the metrics list: its help text says what it is (gpuagent_metrics.go line 1114).
    "gpu_health": ("GPU_HEALTH", "Health of the GPU (0 = Unhealthy | 1 = Healthy)"),
    "gpu_ecc_uncorrect_total": ("GPU_ECC_UNCORRECT_TOTAL", "count"),
    "gpu_ecc_correct_total": ("GPU_ECC_CORRECT_TOTAL", "count"),
    "gpu_xgmi_link_rx": ("GPU_XGMI_LINK_RX", "accumulated KB"),
    "gpu_xgmi_link_tx": ("GPU_XGMI_LINK_TX", "accumulated KB"),
}


def _amd_file(path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(AMD_EXPORTER), "show", f"{AMD_EXPORTER_COMMIT}:{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_the_amd_metrics_are_the_exporters() -> None:
    """Each charted name is one the exporter registers as a gauge, the lower-case name of a field its
    example config lists and its metrics list documents, with the unit written out above."""
    if not (AMD_EXPORTER / "HEAD").exists() and not (AMD_EXPORTER / ".git").exists():
        pytest.skip("no local copy of ROCm/device-metrics-exporter")
    source = _amd_file("pkg/amdgpu/gpuagent/gpuagent_metrics.go")
    fields = json.loads(_amd_file("example/config.json"))["GPUConfig"]["Fields"]
    listed = _amd_file("docs/configuration/metricslist.md")
    for name, (field, unit) in AMD_EXPORTED.items():
        registered = re.search(r"prometheus\.New(\w+)Vec\(prometheus\.\w+Opts\{\s*Name: \"" + name + '"', source)
        assert registered and registered.group(1) == "Gauge", name
        assert field in fields and field.lower() == name
        if field == "GPU_HEALTH":
            assert f'Name: "{name}",\n\t\t\tHelp: "{unit}"' in source
            continue
        row = next(line for line in listed.splitlines() if re.search(rf"\|\s*{field}\s", line))
        words = {"percent": "percentage", "MB": "in MB", "W": "Watts", "C": "Celsius", "count": "error count"}
        words["accumulated KB"] = "Accumulated XGMI Link Data"
        assert words[unit] in row, (field, row)


def test_every_amd_panel_queries_an_exported_metric_per_node() -> None:
    assert GPU_PANELS == {"nvidia": PANELS, "amd": AMD_PANELS}
    assert len({p.title for p in AMD_PANELS}) == len(AMD_PANELS)
    for p in AMD_PANELS:
        tree = parse(p.promql("node"))
        (sel,) = _selectors(tree)
        assert sel[1] == p.metric and p.metric in AMD_EXPORTED, p.title
        (agg,) = _aggregations(tree)
        assert agg[2] == ("node",), p.title
        # rate() only over what the exporter accumulates.
        assert (agg[3][0] == "call") == AMD_EXPORTED[p.metric][1].startswith("accumulated"), p.title


def test_the_amd_panels_cover_what_the_issue_asks() -> None:
    """Issue 46 on MI300X: activity, memory used, power, temperature, ECC, and XGMI, which the
    exporter exports per link."""
    assert {p.metric for p in AMD_PANELS} == set(AMD_EXPORTED)


def test_the_mi300x_dashboard_is_amds_panels_then_aks_fabric_then_the_validation() -> None:
    d = json.loads((ROOT / "dashboards" / "gpu-grafana-aks-mi300x.json").read_text())
    exprs = [p["targets"][0]["expr"] for p in d["panels"]]
    gpu, ib = len(AMD_PANELS), len(AKS_INFINIBAND_PANELS)
    assert exprs[:gpu] == [p.promql("node") for p in AMD_PANELS]
    assert exprs[gpu : gpu + ib] == [p.promql("node") for p in AKS_INFINIBAND_PANELS]
    assert [p["title"] for p in d["panels"][gpu + ib :]] == [p["title"] for p in grafana()["panels"][len(PANELS) :]]
    assert not any("DCGM_" in e for e in exprs) and "dcgm" not in d["tags"]
    assert [p["fieldConfig"]["defaults"]["unit"] for p in d["panels"][:gpu]] == [p.grafana_unit for p in AMD_PANELS]
    assert len({(p["gridPos"]["x"], p["gridPos"]["y"]) for p in d["panels"]}) == len(d["panels"])
