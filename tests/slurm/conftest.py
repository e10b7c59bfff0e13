"""The session's Slurm cluster: started once, on first use, and stopped at the end.

Tests ask for it by name::

    def test_x(slurm_cluster: SlurmCluster) -> None:
        slurm_cluster.run("srun", "-N2", "hostname")
        job = slurm_cluster.run_job(script_path_or_text, timeout_s=120)  # JobResult
        slurm_cluster.drain("n2", "reason"); slurm_cluster.resume("n2")
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from tests.slurm.cluster import NODES, SlurmCluster, unavailable_reason


def _session_cluster(nodes: Sequence[str], what: str) -> Iterator[SlurmCluster]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    cluster = SlurmCluster.start(nodes=nodes)
    try:
        yield cluster
    finally:
        cluster.stop()
    left = cluster.leftover_processes()
    assert not left, f"processes of the {what} outlived its teardown: {left}"
    cluster.cleanup_files()


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    yield from _session_cluster(NODES, "test Slurm cluster")


@pytest.fixture(scope="session")
def slurm_cluster3() -> Iterator[SlurmCluster]:
    """Three nodes (n1..n3 on 127.0.0.1, each slurmd on its own port): the least a pairwise search
    needs to pair a suspect with a known-good node. Started only by the tests that ask for it."""
    yield from _session_cluster(("n1", "n2", "n3"), "three-node test Slurm cluster")
