"""I8 on the real test Slurm, killed and rerun (issue 41): a second look whose first cleared peer
fails the pair for the pair's figure is repeated with a second, different cleared peer before the
node is blamed; passing there clears the node, which is resumed and read back (I4), and the first
peer is never drained, reserved past its check, or replaced (I1).

The cluster is three real slurmd nodes (tests/slurm/conftest.py ``slurm_cluster3``); the marks and
reservations are Slurm's own, read back with ``scontrol``. The check is a stand-in that answers by
peer, as the judge of a pair would (tests/slurm/test_heal_check.py runs the real one), killed after
each check closes and rerun.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_cluster.heal.adapters import CheckResult
from gpu_cluster.heal.journal import JOURNAL, read
from gpu_cluster.heal.slurm import SlurmScheduler
from gpu_cluster.heal.states import State
from gpu_cluster.workloads.validate.slurm import Shell
from tests.heal.world import SLOW
from tests.slurm.cluster import SlurmCluster
from tests.slurm.test_heal_rerun import CountingCloud, Killed, heal

pytestmark = pytest.mark.slurm

BAD, FIRST, SECOND = "n2", "n1", "n3"


class ByPeer:
    """A pair check whose figure FAILs with the first cleared peer (a finding of the pair, not the
    node's own) and PASSes with the second."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def estimate(self) -> tuple[float, str]:
        return 60.0, "test"

    def check(self, node: str, peer: str, incident: str, purpose: str) -> CheckResult:
        self.calls.append((node, peer, purpose))
        if peer == FIRST:
            return CheckResult(ran=True, passed=False, detail=f"pair {node}+{peer} busbw below floor", own=False)
        return CheckResult(ran=True, passed=True, detail=f"{node} PASS with {peer}")


class DiesAfterCloseNumber(SlurmScheduler):
    """Killed right after its ``n``-th check closed (Slurm has drained the node with the incident's
    mark, and no journal line says what the check found)."""

    def __init__(self, shell: Shell, n: int) -> None:
        super().__init__(shell, check_minutes=5)
        self.n, self.closed = n, 0

    def close_check(self, name: str, peer: str, incident: str) -> None:
        super().close_check(name, peer, incident)
        self.closed += 1
        if self.closed == self.n:
            raise Killed


def _report(tmp_path: Path) -> None:
    doc = {
        "verdict": "FAIL",
        "local": False,
        "instance_type": None,
        "nodes": [
            {"node": FIRST, "verdict": "PASS", "reasons": []},
            {"node": BAD, "verdict": "FAIL", "reasons": [SLOW]},
            {"node": SECOND, "verdict": "PASS", "reasons": []},
        ],
        "measurements": [],
    }
    (tmp_path / "report.json").write_text(json.dumps(doc), encoding="utf-8")


def _first_peer_untouched(cluster: SlurmCluster) -> None:
    info = cluster.node(FIRST)
    assert "DRAIN" not in info.state and info.reason == "", info


@pytest.mark.parametrize("kill", [0, 1, 2], ids=["uncut", "killed-after-first-peer", "killed-after-second-peer"])
def test_pair_failure_with_the_first_peer_killed_then_rerun_clears_with_a_second(
    slurm_cluster3: SlurmCluster, tmp_path: Path, kill: int
) -> None:
    cluster = slurm_cluster3
    cluster.wait_until_idle(timeout_s=60)
    _report(tmp_path)
    cloud = CountingCloud()
    shell = Shell((), cluster.env)
    try:
        if kill:
            with pytest.raises(Killed):
                heal(tmp_path, DiesAfterCloseNumber(shell, kill), ByPeer(), cloud)  # type: ignore[arg-type]
            _first_peer_untouched(cluster)  # what the kill left: the first peer never carries a mark
        checker = ByPeer()
        code, entries = heal(tmp_path, SlurmScheduler(shell, check_minutes=5), checker, cloud)  # type: ignore[arg-type]
        # The rerun looks again itself (I1), first with the first cleared peer, then with a second,
        # different one (I8); the node is cleared there, and nothing is quarantined or replaced.
        assert code == 0 and cloud.replaced == [], [e.detail for e in entries]
        assert checker.calls == [(BAD, FIRST, "confirm"), (BAD, SECOND, "reconfirm")]
        assert entries[-1].state is State.HEALTHY
        assert not any(e.state in (State.CONFIRMED, State.QUARANTINED) for e in entries)
        assert FIRST in entries[-1].detail or any(FIRST in e.detail for e in entries)
        # I4: the node is back, read back from scontrol; I1: the first peer was never drained.
        info = cluster.node(BAD)
        assert "DRAIN" not in info.state and info.reason == "", info
        _first_peer_untouched(cluster)
    finally:
        for e in read(tmp_path / JOURNAL)[0][:1]:
            cluster.run("scontrol", "delete", f"reservation={e.incident}", check=False)
        for n in (BAD, FIRST, SECOND):
            cluster.run("scontrol", "update", f"nodename={n}", "state=resume", check=False)
    cluster.wait_until_idle(timeout_s=60)
