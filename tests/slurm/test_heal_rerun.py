"""The heal loop on the real test Slurm, killed and rerun at the seams the local rehearsal hides
(issue 41, severity 1, shapes 1 to 3): the marks are Slurm's own (scontrol drain reasons, read
back), the check is a stand-in that answers pass or fail without a job (tests/slurm/
test_heal_check.py runs the real one), and the cloud is a stand-in that counts replacements.

- killed after the second look drained the node with the incident's mark and before its journal
  line: the rerun looks again (I1), and a node it clears is resumed and read back (I4);
- a node that still runs a job past --evict-timeout is never replaced; the rerun waits again and
  names the job (I5).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.heal.adapters import CheckResult, Instance, NodeState, Outcome, Progress
from gpu_cluster.heal.engine import Engine
from gpu_cluster.heal.evidence import read_report
from gpu_cluster.heal.journal import JOURNAL, Journal, read
from gpu_cluster.heal.policy import Limits
from gpu_cluster.heal.slurm import SlurmScheduler, held_by
from gpu_cluster.heal.states import State
from tests.heal.world import SLOW
from tests.slurm.cluster import SlurmCluster
from gpu_cluster.workloads.validate.slurm import Shell

pytestmark = pytest.mark.slurm


class Killed(BaseException):
    """Stands for SIGKILL inside the run: nothing after it in this process writes the journal."""


class Answers:
    """A check that answers what the test says (pass or fail), as the judge of the pair would."""

    def __init__(self, passed: bool) -> None:
        self.passed = passed
        self.calls: list[tuple[str, str, str]] = []

    def estimate(self) -> tuple[float, str]:
        return 60.0, "test"

    def check(self, node: str, peer: str, incident: str, purpose: str) -> CheckResult:
        self.calls.append((node, peer, purpose))
        # a FAIL for the node's own gate finding: no second peer is needed to blame it (I8)
        return CheckResult(
            ran=True, passed=self.passed, detail=f"{node} {'PASS' if self.passed else 'FAIL'}", own=not self.passed
        )


class CountingCloud:
    name = "test"
    call = "test: count the replacement"

    def __init__(self) -> None:
        self.replaced: list[str] = []

    def instance(self, node: NodeState) -> Instance:
        return Instance(id=f"{node.node}.i0", state="running")

    def replace(self, node: NodeState, instance: Instance, token: str, why: str) -> Outcome:
        self.replaced.append(node.node)
        return Outcome(ok=True, detail="counted")

    def progress(self, node: NodeState, old: str, token: str, facts: Mapping[str, Any]) -> Progress:
        return Progress(started=bool(self.replaced), detail="test")

    def replace_estimate(self) -> tuple[float, str]:
        return 0.0, "test"


def report(tmp_path: Path) -> Path:
    import json

    path = tmp_path / "report.json"
    doc = {
        "verdict": "FAIL",
        "local": False,
        "instance_type": None,
        "nodes": [
            {"node": "n1", "verdict": "PASS", "reasons": []},
            {"node": "n2", "verdict": "FAIL", "reasons": [SLOW]},
        ],
        "measurements": [],
    }
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def heal(
    tmp_path: Path, sched: SlurmScheduler, checker: Answers, cloud: CountingCloud, **limits: Any
) -> tuple[int, list[Any]]:
    with Journal(tmp_path) as j:
        e = Engine(
            cluster="test",
            journal=j,
            scheduler=sched,
            cloud=cloud,
            checker=checker,
            limits=Limits(apply=True, join_timeout_s=2.0, **limits),
            say=lambda line: None,
            sleep=time.sleep,
            poll_s=0.5,
        )
        code = e.run(read_report(tmp_path / "report.json")).code
    return code, read(tmp_path / JOURNAL)[0]


class DiesAfterClose(SlurmScheduler):
    def close_check(self, name: str, peer: str, incident: str) -> None:
        super().close_check(name, peer, incident)
        raise Killed


def test_killed_after_the_check_drained_it_the_rerun_looks_again_and_resumes(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    slurm_cluster.wait_until_idle(timeout_s=60)
    report(tmp_path)
    cloud = CountingCloud()
    try:
        with pytest.raises(Killed):
            heal(tmp_path, DiesAfterClose(Shell((), slurm_cluster.env), check_minutes=5), Answers(True), cloud)
        info = slurm_cluster.node("n2")
        assert "DRAIN" in info.state and held_by(info.reason)  # the mark the kill left
        sched = SlurmScheduler(Shell((), slurm_cluster.env), check_minutes=5)
        checker = Answers(True)
        code, entries = heal(tmp_path, sched, checker, cloud)
        # I1: the rerun ran the second look itself; nothing was quarantined or replaced
        assert code == 0 and checker.calls == [("n2", "n1", "confirm")] and cloud.replaced == []
        assert [e.state for e in entries] == [State.SUSPECT, State.HEALTHY]
        # I4: resumed, and read back from scontrol
        info = slurm_cluster.node("n2")
        assert "DRAIN" not in info.state and info.reason == "", info
        assert "back in service (read back" in entries[-1].detail
    finally:
        slurm_cluster.run("scontrol", "delete", f"reservation={read(tmp_path / JOURNAL)[0][0].incident}", check=False)
        slurm_cluster.run("scontrol", "update", "nodename=n2", "state=resume", check=False)
    slurm_cluster.wait_until_idle(timeout_s=60)


def test_rerun_past_the_evict_timeout_never_replaces_a_node_running_a_job(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    slurm_cluster.wait_until_idle(timeout_s=60)
    report(tmp_path)
    cloud = CountingCloud()
    sched = SlurmScheduler(Shell((), slurm_cluster.env), check_minutes=5)
    job = subprocess.Popen(["srun", "-N1", "-w", "n2", "-J", "pretrain", "sleep", "120"], env=slurm_cluster.env)
    try:
        deadline = time.monotonic() + 30
        while not {"ALLOCATED", "MIXED"} & set(slurm_cluster.node("n2").state.split("+")):
            assert time.monotonic() < deadline, slurm_cluster.node("n2")
            time.sleep(0.3)
        for _ in range(2):  # the first run, then a rerun past the deadline
            code, entries = heal(tmp_path, sched, Answers(False), cloud, evict_timeout_s=1.0)
            assert code == 2 and entries[-1].state is State.RETRY, entries[-1].detail
            assert "not empty after 1 s" in entries[-1].detail and "pretrain" in entries[-1].detail
            assert cloud.replaced == [] and "DRAIN" in slurm_cluster.node("n2").state
        assert not any(e.state is State.QUARANTINED for e in entries)
    finally:
        job.kill()
        job.wait(timeout=30)
        slurm_cluster.run("scancel", "-n", "pretrain", check=False)
        slurm_cluster.run("scontrol", "update", "nodename=n2", "state=resume", check=False)
    slurm_cluster.wait_until_idle(timeout_s=90)
