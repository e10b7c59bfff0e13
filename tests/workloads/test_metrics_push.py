"""The validation's figures on the Kubernetes stacks, read by the real programs: the judge step of the
EKS stack's rendered JobSet, run as rendered (its ``--metrics-push`` aimed at a real Pushgateway on
127.0.0.1 instead of the cluster's service name), pushes its run; a real Prometheus scrapes the
Pushgateway with the AMP scraper's own job (components/aws/metrics.py, its pod discovery swapped for
the local address) and answers PromQL with the labels cluster, run and node of the judged nodes.
GKE's the same way, its Prometheus scraping as the stack's PodMonitoring asks managed collection to
(below)."""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpu_cluster.components.aws.metrics import scrape_configuration
from gpu_cluster.components.contract import METRICS_PUSH_NAMESPACE, METRICS_PUSH_URL
from gpu_cluster.components.dashboard import validation_tiles
from gpu_cluster.components.gcp.metrics import pushgateway_pod_monitoring_spec
from gpu_cluster.components.k8s.metrics import PUSHGATEWAY_JOB, ama_scrape_config, pushgateway_scrape_job
from gpu_cluster.workloads.validate import commands, metrics_export
from gpu_cluster.workloads.validate.__main__ import main as validate_main
from tests.launch.test_render_stacks import args, outputs
from tests.workloads.hang_fabricate import main_statuses
from tests.prom_stack import PROMETHEUS, PUSHGATEWAY, query, start_prometheus, start_pushgateway, stop

needs = pytest.mark.skipif(
    not (PROMETHEUS and PUSHGATEWAY),
    reason="prometheus and prometheus-pushgateway (scripts/install-system-deps.sh)",
)
RUN_ID = "20261207t120000z-ab12"


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A Pushgateway and a Prometheus scraping it with the AMP scraper's Pushgateway job: yields both
    addresses."""
    config = yaml.safe_load(scrape_configuration())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == pushgateway_scrape_job()["job_name"]]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        pushgw = start_pushgateway(tmp_path, procs)
        yield pushgw, start_prometheus(tmp_path, procs, job, pushgw)
    finally:
        stop(procs)


def _run_rendered_judge(stack: str, pushgw: str, tmp_path: Path) -> tuple[int, dict[str, str], str]:
    """The stack's rendered judge step, its push aimed at ``pushgw``, over a run whose main phase hung on
    its third node: (exit code, node -> verdict, the cluster name it pushed)."""
    outs = outputs(stack)
    r = commands.render_run(outs, args(), RUN_ID)
    assert r.configmap is not None and r.jobset is not None
    script = "\n".join(str(v) for v in r.configmap.get("data", {}).values()) + json.dumps(r.jobset)
    script = script.replace("\\n", "\n").replace('\\"', '"')
    argv = _judge_argv(script)
    # The rendered step pushes to the stack's service; here that name is the local Pushgateway.
    at = argv.index("--metrics-push")
    assert argv[at + 1] == METRICS_PUSH_URL
    argv[at + 1] = pushgw
    nodes = argv[argv.index("--expect-nodes") + 1].split(",")
    out = tmp_path / RUN_ID
    out.mkdir()
    argv[argv.index("--out") + 1] = str(out)
    argv.remove("--print-archive")
    # A run whose main phase hung on its third node (every rank's status line, as a cluster leaves it).
    main_statuses(out, nodes, 8, nodes[2], "nccl-abort")
    code = validate_main(argv)
    report = json.loads((out / "report.json").read_text())
    judged = {n["node"]: n["verdict"] for n in report["nodes"]}
    assert set(judged) == set(nodes) and code == {"PASS": 0, "WARN": 1, "FAIL": 2}.get(report["verdict"], 3)
    return code, judged, outs.cluster_name


def _judge_argv(script: str) -> list[str]:
    """The judge step's arguments as the rendered pod runs them."""
    (line,) = [ln for ln in script.splitlines() if "gpu_cluster.workloads.validate judge" in ln]
    argv = shlex.split(line.split("||")[0])
    return argv[argv.index("gpu_cluster.workloads.validate") + 1 :]


def test_every_scrape_keeps_the_pushed_labels() -> None:
    aws = yaml.safe_load(scrape_configuration())["scrape_configs"]
    aks = ama_scrape_config("gpu-operator")["scrape_configs"]
    for jobs in (aws, aks, ama_scrape_config(None)["scrape_configs"]):
        (push,) = [j for j in jobs if j["job_name"] == pushgateway_scrape_job()["job_name"]]
        assert push["honor_labels"] is True
        # No relabelling writes a node: the pushed one is the judged node's.
        assert all(r.get("target_label") != "node" for r in push["relabel_configs"])
    assert [j["job_name"] for j in ama_scrape_config(None)["scrape_configs"]] == ["gpu-cluster-pushgateway"]


@needs
def test_the_rendered_judge_pushes_and_prometheus_reads_each_node(
    tmp_path: Path, gateway: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    pushgw, prom = gateway
    code, judged, cluster = _run_rendered_judge("aws-h100-eks", pushgw, tmp_path)
    said = capsys.readouterr()
    assert f"metrics published: {pushgw}" in said.out, said.err

    verdicts = query(prom, f'{metrics_export.NODE_VERDICT}{{cluster="{cluster}",run="{RUN_ID}"}} == 1')
    assert {r["metric"]["node"]: r["metric"]["verdict"] for r in verdicts} == judged
    # honor_labels: the pushed job, cluster and node stand (never exported_*), the gateway's own do not.
    for s in verdicts:
        assert s["metric"]["job"] == metrics_export.VALIDATION_JOB
        assert not [k for k in s["metric"] if k.startswith("exported_")], s["metric"]
    run = query(prom, f'{metrics_export.RUN_VERDICT_CODE}{{cluster="{cluster}"}}')
    assert [(s["metric"]["run"], s["value"][1]) for s in run] == [(RUN_ID, str(code))]


# What managed collection makes of the PodMonitoring (GoogleCloudPlatform/prometheus-engine
# pkg/operator/apis/monitoring/v1 at 2ffde4e): pod_config.go ``ScrapeConfigs`` lines 118-138 force
# project_id, location and cluster; ``endpointScrapeConfig`` lines 180-190 set namespace and job (the
# PodMonitoring's name) and lines 361-367 instance ``<pod>:<port name>``; common_types.go
# ``buildPrometheusScrapeConfig`` lines 145-159 the interval and no honor_labels. Its pod discovery
# (and the selector's and port's keep rules) is the static target here.
GKE_PROJECT, GKE_LOCATION, GKE_POD = "test-project", "us-central1-a", "gpu-cluster-pushgateway-6d9f7-x2k4p"


def pod_monitoring_job(cluster: str, target: str) -> dict[str, object]:
    spec = pushgateway_pod_monitoring_spec()
    (endpoint,) = spec["endpoints"]
    assert spec["targetLabels"] == {"metadata": []}, "a metadata label would be a target label here too"

    def force(label: str, value: str) -> dict[str, str]:
        return {"action": "replace", "target_label": label, "replacement": value}

    return {
        "job_name": f"PodMonitoring/{METRICS_PUSH_NAMESPACE}/{PUSHGATEWAY_JOB}/{endpoint['port']}",
        "honor_labels": False,
        "static_configs": [{"targets": [target.removeprefix("http://")]}],
        "relabel_configs": [
            force("project_id", GKE_PROJECT),
            force("location", GKE_LOCATION),
            force("cluster", cluster),
            force("namespace", METRICS_PUSH_NAMESPACE),
            force("job", PUSHGATEWAY_JOB),
            force("instance", f"{GKE_POD}:{endpoint['port']}"),
        ],
    }


@needs
def test_the_rendered_gke_judge_pushes_and_the_pod_monitorings_scrape_reads_each_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """GKE: the rendered judge pushes to a real Pushgateway; a real Prometheus scrapes it as the stack's
    PodMonitoring asks managed collection to (pod_monitoring_job above). Managed collection itself
    (its collector and Monarch) was not run: what holds here is Prometheus's own rule for a scraped
    label that a target label shadows without honor_labels (it becomes ``exported_<name>``), which
    managed collection's Prometheus-based collector applies to the labels its config forces."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        pushgw = start_pushgateway(tmp_path, procs)
        from gpu_cluster.components.spec import read_stack_file

        name, raw = read_stack_file("gcp-h100-gke")
        # The GKE cluster's name (components/gcp/orchestration_gke.py: ``name=spec.name``), which
        # managed collection writes as ``cluster``.
        from gpu_cluster.components.spec import default_name, parse_spec

        gke_cluster = parse_spec(raw, default_name=default_name(name), deployer_placeholder=True).name
        prom = start_prometheus(tmp_path, procs, pod_monitoring_job(gke_cluster, pushgw), pushgw)
        code, judged, pushed_cluster = _run_rendered_judge("gcp-h100-gke", pushgw, tmp_path)
        assert f"metrics published: {pushgw}" in capsys.readouterr().out
        # The label decision: the cluster the judge pushes is the GKE cluster's own name.
        assert pushed_cluster == gke_cluster

        selector = "{" + f'cluster="{gke_cluster}",run="{RUN_ID}"' + "}"
        verdicts = query(prom, f"{metrics_export.NODE_VERDICT}{selector} == 1")
        assert {r["metric"]["node"]: r["metric"]["verdict"] for r in verdicts} == judged
        for s in verdicts:
            m = s["metric"]
            # Managed collection's labels stand; the pushed job and cluster are kept as exported_*.
            assert (m["job"], m["namespace"], m["project_id"]) == (PUSHGATEWAY_JOB, METRICS_PUSH_NAMESPACE, GKE_PROJECT)
            assert m["exported_job"] == metrics_export.VALIDATION_JOB and m["exported_cluster"] == pushed_cluster
            assert "exported_node" not in m and m["instance"] == f"{GKE_POD}:metrics"
        # The Cloud Monitoring tiles' own queries (components/dashboard.py) answer with every judged node
        # and the busbw curve.
        verdict_tile, busbw_tile = validation_tiles('{cluster="' + gke_cluster + '"}', y=0)
        (v,) = verdict_tile["widget"]["xyChart"]["dataSets"]
        by_node = query(prom, v["timeSeriesQuery"]["prometheusQuery"])
        assert {r["metric"]["node"]: int(float(r["value"][1])) for r in by_node} == {
            n: {"PASS": 0, "WARN": 1, "FAIL": 2}.get(verdict, 3) for n, verdict in judged.items()
        }
        bw, floor = (ds["timeSeriesQuery"]["prometheusQuery"] for ds in busbw_tile["widget"]["xyChart"]["dataSets"])
        run = query(prom, f"{metrics_export.RUN_VERDICT_CODE}{selector}")
        assert [s["value"][1] for s in run] == [str(code)]
        # The main phase hung: no curve of it, and the tiles' queries parse and run (empty is an answer).
        for q in (bw, floor):
            query(prom, q, bound_s=0)
    finally:
        stop(procs)
