"""heal's check on the real Slurm test cluster: the validation job for two nodes, submitted into
the incident's reservation with --reservation and --nodelist while the node is quarantined, judged
by its own judge step and read back; a slow node fails it, a sound one passes, and either way the
node is drained again when the check closes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from gpu_cluster.components.contract import load_outputs
from gpu_cluster.heal.slurm import SlurmChecker, SlurmScheduler, held_by
from tests.slurm.cluster import SMALL_RUN, SlurmCluster, free_port, validation_outputs
from gpu_cluster.workloads.validate.slurm import Shell

pytestmark = pytest.mark.slurm
INCIDENT = "h-5ca1ab1e00"


def checker(cluster: SlurmCluster, tmp_path: Path, inject: dict[str, str]) -> SlurmChecker:
    args = argparse.Namespace(
        python=sys.executable,
        cpu=True,
        procs_per_node=1,
        shared=True,
        rdzv_port=free_port(),
        run_arg=list(SMALL_RUN),
        env=[f"{k}={v}" for k, v in {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", **inject}.items()],
    )
    shell = Shell((), {k: v for k, v in cluster.env.items() if k != "PYTHONPATH"})
    return SlurmChecker(shell, load_outputs(validation_outputs(cluster)), args, tmp_path, poll_s=1.0)


def test_the_check_runs_in_the_reservation_and_judges_the_node(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    slurm_cluster.wait_until_idle(timeout_s=60)
    sched = SlurmScheduler(Shell((), slurm_cluster.env), check_minutes=10)
    try:
        assert sched.quarantine("n2", INCIDENT, "health.matmul: straggler").ok
        for inject, passes in (({"GPUC_INJECT_SLOW_NODE": "n2", "GPUC_INJECT_SLOW_MS": "60"}, False), ({}, True)):
            assert sched.open_for_check("n2", "n1", INCIDENT).ok
            try:
                result = checker(slurm_cluster, tmp_path, inject).check("n2", "n1", INCIDENT, "confirm")
            finally:
                sched.close_check("n2", "n1", INCIDENT)
            assert result.ran, result.detail
            assert result.passed is passes, result.detail
            if not passes:
                assert "n2 FAIL" in result.detail and "straggler" in result.detail
            else:
                assert "multi_node.all_reduce" in result.detail
            info = slurm_cluster.node("n2")
            assert "DRAIN" in info.state and held_by(info.reason) == INCIDENT
        assert sched.release("n2", INCIDENT).ok
    finally:
        slurm_cluster.run("scontrol", "delete", f"reservation={INCIDENT}", check=False)
        slurm_cluster.run("scontrol", "update", "nodename=n2", "state=resume", check=False)
    slurm_cluster.wait_until_idle(timeout_s=60)
