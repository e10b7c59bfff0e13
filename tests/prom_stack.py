"""The real Prometheus programs the metrics tests start on 127.0.0.1: a node exporter serving a
textfile directory, a Pushgateway, and a Prometheus scraping one of them with a stack's own job;
and the query that polls Prometheus for an answer. Each ``start_*`` appends its process to
``procs`` and returns once it answers; :func:`stop` ends them all. :func:`scraped_textfile` is the
Slurm pair: a node exporter and a Prometheus scraping it with the stack's node-exporter job."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

PROMETHEUS = shutil.which("prometheus")
NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
PROMTOOL = shutil.which("promtool")
PUSHGATEWAY = shutil.which("prometheus-pushgateway") or shutil.which("pushgateway")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], bound_s: float = 60.0) -> None:
    end = time.monotonic() + bound_s
    while time.monotonic() < end:
        assert proc.poll() is None, f"{proc.args!r} exited {proc.returncode}"
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer within {bound_s} s")


def query(base: str, expr: str, bound_s: float = 90.0) -> list[dict[str, Any]]:
    """Poll the query API until ``expr`` returns series (a generous bound, never a fixed wait)."""
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    end = time.monotonic() + bound_s
    while True:
        doc = json.load(urllib.request.urlopen(url, timeout=10))
        assert doc["status"] == "success", doc
        if doc["data"]["result"] or time.monotonic() > end:
            return list(doc["data"]["result"])
        time.sleep(0.5)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def node_exporter_job(scrape_configs: list[dict[str, Any]], port: int, placeholder: str, host: str) -> dict[str, Any]:
    """A Slurm stack's node-exporter job (from its ``scrape_configs``) aimed at 127.0.0.1:``port``, the
    boot-time host ``placeholder`` in its relabelling replaced by ``host`` (as the node's boot script does)."""
    job = next(j for j in scrape_configs if j["job_name"] == "node-exporter")
    job["static_configs"] = [{"targets": [f"127.0.0.1:{port}"]}]
    for r in job["relabel_configs"]:
        r["replacement"] = r["replacement"].replace(placeholder, host)
    return job


def _start(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]], name: str, argv: list[str], port: int, ready: str
) -> str:
    """Start ``argv`` (its stderr in ``tmp_path/<name>.log``) listening on ``port``; its address once
    ``ready`` answers."""
    procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=(tmp_path / f"{name}.log").open("wb")))
    wait_http(f"http://127.0.0.1:{port}{ready}", procs[-1])
    return f"http://127.0.0.1:{port}"


def start_node_exporter(tmp_path: Path, procs: list[subprocess.Popen[bytes]], textfile: Path, port: int) -> str:
    """A node exporter on ``port`` with only its textfile collector, reading ``textfile``."""
    argv = [
        NODE_EXPORTER or "",
        f"--web.listen-address=127.0.0.1:{port}",
        "--collector.disable-defaults",
        "--collector.textfile",
        f"--collector.textfile.directory={textfile}",
    ]
    return _start(tmp_path, procs, "node-exporter", argv, port, "/metrics")


def start_pushgateway(tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> str:
    port = free_port()
    # Its own store: Debian's build defaults --persistence.file to /var/lib/prometheus/
    # pushgateway.data, which every run on the host would share (and load at start).
    argv = [
        PUSHGATEWAY or "",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--persistence.file={tmp_path / 'pushgateway.data'}",
    ]
    return _start(tmp_path, procs, "pushgateway", argv, port, "/-/ready")


def start_prometheus_jobs(tmp_path: Path, procs: list[subprocess.Popen[bytes]], jobs: list[dict[str, Any]]) -> str:
    """A Prometheus scraping every second with ``jobs`` as its scrape configs."""
    conf = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"}, "scrape_configs": jobs}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(conf))
    port = free_port()
    argv = [
        PROMETHEUS or "",
        f"--config.file={tmp_path / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    return _start(tmp_path, procs, "prometheus", argv, port, "/-/ready")


def start_prometheus(tmp_path: Path, procs: list[subprocess.Popen[bytes]], job: dict[str, object], target: str) -> str:
    """A Prometheus scraping ``target`` with ``job``, its Kubernetes discovery (and the relabelling that
    reads it) replaced by the target; a job without Kubernetes discovery keeps its relabelling."""
    drop = ("kubernetes_sd_configs", "relabel_configs") if "kubernetes_sd_configs" in job else ()
    job = {k: v for k, v in job.items() if k not in (*drop, "scrape_interval")}
    job["static_configs"] = [{"targets": [target.removeprefix("http://")]}]
    return start_prometheus_jobs(tmp_path, procs, [job])


@contextmanager
def scraped_textfile(
    tmp_path: Path, textfile: Path, scrape_configs: list[dict[str, Any]], placeholder: str, host: str
) -> Iterator[str]:
    """A node exporter serving ``textfile`` and a Prometheus scraping it with the node-exporter job of
    ``scrape_configs`` (its host ``placeholder`` made ``host``); yields Prometheus's address."""
    port = free_port()
    job = node_exporter_job(scrape_configs, port, placeholder, host)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        start_node_exporter(tmp_path, procs, textfile, port)
        yield start_prometheus_jobs(tmp_path, procs, [job])
    finally:
        stop(procs)
