"""Issue 41, I6 on the real test Slurm: a replacement that comes back under the slot's name (PCS,
Cluster Director) takes no user job between its registration and heal's passed revalidation,
whatever line heal is killed at.

The cloud is a stand-in that relaunches the node the way the test cluster can: the node's slurmd
killed, its spool emptied and a new slurmd registering under the name (SlurmCluster.relaunch); a
user's job naming the node is submitted right after, while the new slurmd registers. The check
runs a real job in the incident's reservation (``srun --reservation``) and answers FAIL for the
second look, PASS for the revalidation. heal is killed after every journal line it writes and
rerun until the incident ends; after each kill the user's job has not started.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.heal.adapters import CheckResult, Instance, NodeState, Outcome, Progress
from gpu_cluster.heal.engine import Engine
from gpu_cluster.heal.evidence import read_report
from gpu_cluster.heal.journal import JOURNAL, Entry, Journal, read
from gpu_cluster.heal.policy import Limits
from gpu_cluster.heal.slurm import HOLD, SlurmScheduler
from gpu_cluster.heal.states import State
from gpu_cluster.workloads.validate.slurm import Shell
from tests.heal.world import SLOW
from tests.slurm.cluster import SlurmCluster

pytestmark = pytest.mark.slurm
NODE, PEER = "n2", "n1"


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it in this run writes the journal."""


class KilledAt(Journal):
    """A journal whose run is killed right after its ``at``-th new line is on disk."""

    def __init__(self, run_dir: Path, at: int) -> None:
        super().__init__(run_dir)
        self.at = at
        self.written = 0

    def append(self, entry: Entry) -> Entry:
        got = super().append(entry)
        self.written += 1
        if self.written == self.at:
            raise Killed
        return got


class InReservation:
    """The check as a real job on the two nodes in the incident's reservation: FAIL for the second
    look (the node's own finding), PASS for the revalidation of the new instance."""

    def __init__(self, cluster: SlurmCluster) -> None:
        self.cluster = cluster
        self.ran: list[tuple[str, list[str]]] = []

    def estimate(self) -> tuple[float, str]:
        return 60.0, "test"

    def check(self, node: str, peer: str, incident: str, purpose: str) -> CheckResult:
        done = self.cluster.run(
            "srun", "-N2", "-w", f"{node},{peer}", f"--reservation={incident}", "--immediate=60",
            "printenv", "SLURMD_NODENAME", timeout_s=120, check=False,
        )  # fmt: skip
        hosts = sorted(done.stdout.split())
        self.ran.append((purpose, hosts))
        if done.returncode != 0 or hosts != sorted((node, peer)):
            return CheckResult(ran=False, passed=False, detail=f"srun {done.returncode}: {done.stderr.strip()}")
        passed = purpose.endswith("revalidate")
        return CheckResult(ran=True, passed=passed, detail=f"{purpose} on {hosts}", own=not passed)


class Relaunch:
    """A cloud whose replacement keeps the node's name: the slurmd relaunched, then the user's job
    submitted while the new one registers."""

    name = "test-relaunch"
    call = "test: relaunch the node's slurmd under its name"
    keeps_name = True

    def __init__(self, cluster: SlurmCluster) -> None:
        self.cluster = cluster
        self.launches = 0
        self.user_job = 0

    def instance(self, node: NodeState) -> Instance:
        return Instance(id=f"{node.node}.i{self.launches}", state="running")

    def replace(self, node: NodeState, instance: Instance, token: str, why: str) -> Outcome:
        self.launches += 1
        self.user_job = relaunch_clearing_the_drain(self.cluster, node.node)
        return Outcome(ok=True, detail=f"relaunched {node.node}")

    def progress(self, node: NodeState, old: str, token: str, facts: Mapping[str, Any]) -> Progress:
        new = f"{node.node}.i{self.launches}" if self.launches else ""
        return Progress(started=bool(self.launches), new_instance=new, detail=f"at {new or '-'}")

    def replace_estimate(self) -> tuple[float, str]:
        return 0.0, "test"


def relaunch_clearing_the_drain(cluster: SlurmCluster, node: str) -> int:
    """The node relaunched with heal's drain gone, as a power down leaves it (slurm-wlm 22.05:
    IDLE+DRAIN became IDLE+POWERED_DOWN, gpu_cluster/heal/gcp.py), then a user's job naming it
    submitted while its new slurmd registers; returns the job's id."""
    cluster.run("scontrol", "update", f"nodename={node}", "state=resume")
    cluster.relaunch(node)
    sub = cluster.run("sbatch", "--parsable", "-J", "user", "-w", node, f"--output={cluster.jobs}/user-%j.out",
                      "--wrap", "hostname")  # fmt: skip
    return int(sub.stdout.strip().split(";")[0])


def write_report(tmp_path: Path) -> None:
    doc = {
        "verdict": "FAIL",
        "local": False,
        "instance_type": None,
        "nodes": [
            {"node": PEER, "verdict": "PASS", "reasons": []},
            {"node": NODE, "verdict": "FAIL", "reasons": [SLOW]},
        ],
        "measurements": [],
    }
    (tmp_path / "report.json").write_text(json.dumps(doc), encoding="utf-8")


def user_job_started(cluster: SlurmCluster, job: int) -> bool:
    return bool(job) and cluster.job_field(job, "JobState") not in ("PENDING", "")


def test_killed_at_every_line_of_a_relaunch_the_rerun_keeps_the_replacement_out_of_work(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    slurm_cluster.wait_until_idle(timeout_s=60)
    write_report(tmp_path)
    cloud, checker = Relaunch(slurm_cluster), InReservation(slurm_cluster)
    sched = SlurmScheduler(Shell((), slurm_cluster.env), check_minutes=5)
    kills, state, seen_pending = 0, None, []
    try:
        for at in range(1, 40):
            j = KilledAt(tmp_path, at=1)
            try:
                with j:
                    Engine(
                        cluster="test",
                        journal=j,
                        scheduler=sched,
                        cloud=cloud,
                        checker=checker,
                        limits=Limits(apply=True, join_timeout_s=60.0),
                        say=lambda line: None,
                        sleep=time.sleep,
                        poll_s=0.5,
                    ).run(read_report(tmp_path / "report.json"))
            except Killed:
                kills += 1
            entries = read(tmp_path / JOURNAL)[0]
            state = entries[-1].state
            if state is State.HEALTHY:
                break
            if cloud.user_job:
                # The invariant at this line: the job submitted during the relaunch has not started.
                assert not user_job_started(slurm_cluster, cloud.user_job), (entries[-1], slurm_cluster.node(NODE))
                seen_pending.append(entries[-1].state.value + "/" + entries[-1].event)
        assert state is State.HEALTHY, [(e.state.value, e.event, e.detail) for e in read(tmp_path / JOURNAL)[0]]
        entries = read(tmp_path / JOURNAL)[0]
        assert cloud.launches == 1 and kills >= 8, (cloud.launches, kills)
        # The hold was made before the cloud was asked, and the user's job waited through the
        # registration (JOINING) and the revalidation (REVALIDATING) lines.
        intent = next(e for e in entries if e.state is State.REPLACING and e.event == "intent")
        assert f"reservation {intent.incident}{HOLD}" in intent.detail
        assert {"JOINING/enter", "REVALIDATING/enter", "REVALIDATING/passed"} <= set(seen_pending), seen_pending
        assert [p for p, _ in checker.ran] == ["confirm", "revalidate"] and all(
            h == [PEER, NODE] for _, h in checker.ran
        )
        # Returned after the passed revalidation: the hold is gone and the user's job runs on it.
        assert "deleted" in entries[-1].detail and sched.node(NODE).in_service
        slurm_cluster.wait_for(
            lambda: slurm_cluster.job_field(cloud.user_job, "JobState") == "COMPLETED", 60, "the user's job done"
        )
        assert slurm_cluster.job_field(cloud.user_job, "NodeList") == NODE
    finally:
        for e in read(tmp_path / JOURNAL)[0][:1]:
            for r in (e.incident, e.incident + HOLD):
                slurm_cluster.run("scontrol", "delete", f"reservation={r}", check=False)
        slurm_cluster.run("scancel", "-n", "user", check=False)
        slurm_cluster.run("scontrol", "update", f"nodename={NODE}", "state=resume", check=False)
    slurm_cluster.wait_until_idle(timeout_s=90)


def test_without_the_hold_a_relaunch_whose_drain_was_cleared_takes_a_user_job(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """The window the slot's hold closes: the same relaunch with heal's drain only (no reservation)
    and the drain cleared, as a power down clears it; the user's job runs on the unchecked node."""
    slurm_cluster.wait_until_idle(timeout_s=60)
    sched = SlurmScheduler(Shell((), slurm_cluster.env), check_minutes=5)
    try:
        assert sched.quarantine(NODE, "h-nohold0001", "test").ok
        job = relaunch_clearing_the_drain(slurm_cluster, NODE)
        slurm_cluster.wait_for(
            lambda: slurm_cluster.job_field(job, "JobState") == "COMPLETED", 90, "the user's job on the relaunched node"
        )
        assert slurm_cluster.job_field(job, "NodeList") == NODE
        # With the hold, the same relaunch leaves it out of work: the scheduler's own view says so.
        assert sched.quarantine(NODE, "h-hold000001", "test").ok
        assert sched.hold(NODE, "h-hold000001").ok and sched.hold(NODE, "h-hold000001").ok  # idempotent
        held = relaunch_clearing_the_drain(slurm_cluster, NODE)
        slurm_cluster.wait_for(lambda: sched.node(NODE).ready, 90, f"{NODE} registered again")
        view = sched.node(NODE)
        assert not view.in_service and view.held_by == "h-hold000001", view
        assert slurm_cluster.job_field(held, "JobState") == "PENDING"
        back = sched.release(NODE, "h-hold000001")
        assert back.ok and "deleted" in back.detail, back.detail
        slurm_cluster.wait_for(
            lambda: slurm_cluster.job_field(held, "JobState") == "COMPLETED", 60, "the job, released"
        )
    finally:
        slurm_cluster.run("scontrol", "delete", f"reservation=h-hold000001{HOLD}", check=False)
        slurm_cluster.run("scancel", "-n", "user", check=False)
        slurm_cluster.run("scontrol", "update", f"nodename={NODE}", "state=resume", check=False)
    slurm_cluster.wait_until_idle(timeout_s=90)
