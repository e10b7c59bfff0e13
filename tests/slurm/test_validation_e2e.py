"""The validation job, rendered by the launcher and submitted to the real two-node Slurm cluster:
a healthy run passes; a slow node is named and drained; a node that dies mid-run is named and
the report still lands. The same script a cloud Slurm cluster gets, on CPU ranks."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.cluster import SlurmCluster, free_port
from workloads.launch import sbatch
from workloads.launch.validation import ValidationJob, sbatch_spec

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def _submit(cluster: SlurmCluster, name: str, inject: dict[str, str]) -> tuple[Any, dict[str, Any], str]:
    workdir = cluster.jobs / name
    workdir.mkdir(exist_ok=True)
    job = ValidationJob(
        nodes=2, workdir=str(workdir), python=sys.executable, partition="test", procs_per_node=1,
        time_limit_min=10, rdzv_port=free_port(), exclusive=False,
        # Small messages and few iterations: the point here is the path, not CPU bandwidth.
        run_args=("--multi-max", "1M", "--single-max", "1M", "--pair-size", "1M", "--iters", "3", "--warmup", "1",
                  "--timeout", "60"),
        extra_env={"PYTHONPATH": str(REPO), "GPUC_FORCE_CPU": "1", "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
                   **inject},
    )
    script = sbatch.write(sbatch_spec(job), workdir / "validate.sbatch")
    result = cluster.run_job(script, timeout_s=420)
    report = json.loads((workdir / "report.json").read_text())
    md = (workdir / "report.md").read_text()
    return result, report, md


def _node(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(n for n in report["nodes"] if n["node"] == name)


def test_healthy_cluster_passes(slurm_cluster: SlurmCluster) -> None:
    job, report, md = _submit(slurm_cluster, "healthy", {})
    assert report["verdict"] == "PASS", md
    assert job.returncode == 0, job.output
    assert {n["node"] for n in report["nodes"]} == {"n1", "n2"}
    assert report["floors_applied"] is False
    checks = {m["check"] for m in report["measurements"]}
    assert {"health.matmul", "multi_node.all_reduce", "fabric_only.all_reduce", "ddp.loss_falls"} <= checks
    assert "step 5 (judge) exit status 0" in job.output


def test_slow_node_is_named_and_drained(slurm_cluster: SlurmCluster) -> None:
    try:
        job, report, md = _submit(slurm_cluster, "slow", {"GPUC_INJECT_SLOW_NODE": "n2", "GPUC_INJECT_SLOW_MS": "60"})
        assert report["verdict"] == "FAIL", md
        assert job.returncode == 2, job.output
        assert _node(report, "n2")["verdict"] == "FAIL"
        assert any("straggler" in r for r in _node(report, "n2")["reasons"]), md
        assert _node(report, "n1")["verdict"] == "PASS", md
        assert report["drained"] == ["n2"]
        assert slurm_cluster.node("n2").draining_or_drained
        assert "gpu-cluster validate" in slurm_cluster.node("n2").reason
        assert not slurm_cluster.node("n1").draining_or_drained
    finally:
        slurm_cluster.resume("n2")


def test_node_dying_mid_run_is_reported_and_report_lands(slurm_cluster: SlurmCluster) -> None:
    try:
        job, report, md = _submit(slurm_cluster, "dies", {"GPUC_INJECT_FAIL_NODE": "n2", "GPUC_INJECT_FAIL_PHASE": "main"})
        assert report["verdict"] == "FAIL", md
        assert _node(report, "n2")["verdict"] == "FAIL", md
        assert any("never finished" in r or "did not arrive" in r for r in _node(report, "n2")["reasons"]), md
        assert _node(report, "n1")["verdict"] != "FAIL", md + job.output
        assert "n2" in report["drained"]
    finally:
        slurm_cluster.resume("n2")
