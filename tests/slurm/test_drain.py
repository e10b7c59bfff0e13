"""Draining and resuming a node for real: what bad-node isolation does to the scheduler."""

from __future__ import annotations

import pytest

from tests.slurm.cluster import SlurmCluster, drained_idle, idle_in_service
from gpu_cluster.workloads.launch import slurm_nodes

pytestmark = pytest.mark.slurm


def test_drain_then_resume(slurm_cluster: SlurmCluster) -> None:
    slurm_cluster.wait_until_idle(timeout_s=60)
    reason = "validate: busbw 12.5 GB/s < floor 40 (job 17)"
    try:
        info = slurm_cluster.drain("n2", reason)
        assert info.name == "n2"
        assert info.drained, info
        assert drained_idle(info), info
        # Slurm appends who drained it and when: "<reason> [root@<time>]".
        assert info.reason.startswith(reason + " [root@"), info.reason
        assert info.addr == "127.0.0.1"
        assert slurm_cluster.node_states()["n2"] == "drained"

        # A drained node takes no new job: a two-node job cannot start, a one-node job lands on n1.
        one = slurm_cluster.run("srun", "-N1", "printenv", "SLURMD_NODENAME")
        assert one.stdout.strip() == "n1"
        two = slurm_cluster.run("srun", "-N2", "--immediate=5", "hostname", check=False)
        assert two.returncode != 0
    finally:
        resumed = slurm_cluster.resume("n2")
    assert not resumed.draining_or_drained, resumed
    assert resumed.reason == ""
    slurm_cluster.wait_until_idle(timeout_s=60)
    assert idle_in_service(slurm_cluster.node("n2"))


def test_unknown_node_is_a_named_error(slurm_cluster: SlurmCluster) -> None:
    with pytest.raises(slurm_nodes.SlurmNodeError, match="n9"):
        slurm_cluster.node("n9")
    with pytest.raises(slurm_nodes.SlurmNodeError, match="not a Slurm node name"):
        slurm_cluster.drain("n1;reboot", "x")
    with pytest.raises(slurm_nodes.SlurmNodeError, match="one non-empty line"):
        slurm_cluster.drain("n1", "a\nb")
    assert idle_in_service(slurm_cluster.node("n1"))
