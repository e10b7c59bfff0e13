"""The validation's figures on the Kubernetes stacks, read by the real programs: the judge step of the
EKS stack's rendered JobSet, run as rendered (its ``--metrics-push`` aimed at a real Pushgateway on
127.0.0.1 instead of the cluster's service name), pushes its run; a real Prometheus scrapes the
Pushgateway with the AMP scraper's own job (components/aws/metrics.py, its pod discovery swapped for
the local address) and answers PromQL with the labels cluster, run and node of the judged nodes."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpu_cluster.components.aws.metrics import scrape_configuration
from gpu_cluster.components.contract import METRICS_PUSH_URL
from gpu_cluster.components.k8s.metrics import ama_scrape_config, pushgateway_scrape_job
from gpu_cluster.workloads.validate import commands, metrics_export
from gpu_cluster.workloads.validate.__main__ import main as validate_main
from tests.launch.test_render_stacks import args, outputs
from tests.workloads.hang_fabricate import main_statuses
from tests.workloads.test_metrics_export import PROMETHEUS, _free_port, _query, _wait_http

PUSHGATEWAY = shutil.which("prometheus-pushgateway") or shutil.which("pushgateway")
needs = pytest.mark.skipif(
    not (PROMETHEUS and PUSHGATEWAY),
    reason="prometheus and prometheus-pushgateway (scripts/install-system-deps.sh)",
)
RUN_ID = "20261207t120000z-ab12"


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def start_pushgateway(tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> str:
    port = _free_port()
    procs.append(
        subprocess.Popen(
            [PUSHGATEWAY or "", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "pushgateway.log").open("wb"),
        )
    )
    _wait_http(f"http://127.0.0.1:{port}/-/ready", procs[-1])
    return f"http://127.0.0.1:{port}"


def start_prometheus(tmp_path: Path, procs: list[subprocess.Popen[bytes]], job: dict[str, object], target: str) -> str:
    """A Prometheus scraping ``target`` with ``job``, its Kubernetes discovery replaced by the target."""
    job = {k: v for k, v in job.items() if k not in ("kubernetes_sd_configs", "relabel_configs", "scrape_interval")}
    job["static_configs"] = [{"targets": [target.removeprefix("http://")]}]
    conf = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"}, "scrape_configs": [job]}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(conf))
    port = _free_port()
    procs.append(
        subprocess.Popen(
            [
                PROMETHEUS or "",
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "prometheus.log").open("wb"),
        )
    )
    _wait_http(f"http://127.0.0.1:{port}/-/ready", procs[-1])
    return f"http://127.0.0.1:{port}"


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
        _stop(procs)


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
    outs = outputs("aws-h100-eks")
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
    said = capsys.readouterr()
    assert f"metrics published: {pushgw}" in said.out, said.err
    report = json.loads((out / "report.json").read_text())
    judged = {n["node"]: n["verdict"] for n in report["nodes"]}
    assert set(judged) == set(nodes) and code == {"PASS": 0, "WARN": 1, "FAIL": 2}.get(report["verdict"], 3)

    verdicts = _query(prom, f'{metrics_export.NODE_VERDICT}{{cluster="{outs.cluster_name}",run="{RUN_ID}"}} == 1')
    assert {r["metric"]["node"]: r["metric"]["verdict"] for r in verdicts} == judged
    # honor_labels: the pushed job, cluster and node stand (never exported_*), the gateway's own do not.
    for s in verdicts:
        assert s["metric"]["job"] == metrics_export.VALIDATION_JOB
        assert not [k for k in s["metric"] if k.startswith("exported_")], s["metric"]
    run = _query(prom, f'{metrics_export.RUN_VERDICT_CODE}{{cluster="{outs.cluster_name}"}}')
    assert [(s["metric"]["run"], s["value"][1]) for s in run] == [(RUN_ID, str(code))]
