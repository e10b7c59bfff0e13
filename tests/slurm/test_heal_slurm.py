"""heal's Slurm side against the real test cluster: the drain with the incident in the reason (read
back with scontrol show node), the wait for running jobs, the check's reservation that lets only
the check's job onto the two nodes, and the return to service."""

from __future__ import annotations

import subprocess
import time

import pytest

from gpu_cluster.heal.slurm import SlurmScheduler, held_by
from tests.slurm.cluster import SlurmCluster, drained_idle
from gpu_cluster.workloads.validate.slurm import Shell

pytestmark = pytest.mark.slurm
INCIDENT = "h-0123456789"


def test_quarantine_check_reservation_and_return(slurm_cluster: SlurmCluster) -> None:
    slurm_cluster.wait_until_idle(timeout_s=60)
    sched = SlurmScheduler(Shell((), slurm_cluster.env), partition=slurm_cluster.partition, check_minutes=5)
    try:
        out = sched.quarantine("n2", INCIDENT, "health.matmul: straggler, 0.33 under 0.5 x the median 191.38")
        assert out.ok, out.detail
        info = slurm_cluster.node("n2")
        assert drained_idle(info), info
        assert info.reason.startswith(f"gpu-cluster heal {INCIDENT}: health.matmul: straggler") and " [root@" in (
            info.reason
        )
        view = sched.node("n2")
        assert view.held_by == INCIDENT and not view.in_service and view.address == "127.0.0.1", view
        # ready: the node answers slurmctld's pings. On a loaded host a ping can miss and Slurm sets
        # NOT_RESPONDING until the next one answers (slurm.conf(5), SlurmdTimeout), so wait for the
        # scheduler to say so rather than assume it of the first read.
        slurm_cluster.wait_for(lambda: sched.node("n2").ready, 90, "n2 responding")
        # a second quarantine (a rerun) keeps the same mark and drains nothing new
        assert sched.quarantine("n2", INCIDENT, "again").ok
        assert slurm_cluster.node("n2").reason == info.reason

        opened = sched.open_for_check("n2", "n1", INCIDENT)
        assert opened.ok, opened.detail
        held = sched.node("n2")
        assert not held.in_service and held.held_by == INCIDENT and "DRAIN" not in slurm_cluster.node("n2").flags
        outside = slurm_cluster.run("srun", "-N2", "-w", "n1,n2", "--immediate=5", "hostname", check=False)
        assert outside.returncode != 0
        inside = slurm_cluster.run(
            "srun", "-N2", "-w", "n1,n2", f"--reservation={INCIDENT}", "printenv", "SLURMD_NODENAME"
        )
        assert sorted(inside.stdout.split()) == ["n1", "n2"]
        # opening twice (a rerun inside the check) reuses the reservation
        assert sched.open_for_check("n2", "n1", INCIDENT).ok

        sched.close_check("n2", "n1", INCIDENT)
        info = slurm_cluster.node("n2")
        assert drained_idle(info) and held_by(info.reason) == INCIDENT, info
        shown = slurm_cluster.run("scontrol", "show", "reservation", INCIDENT, check=False)
        assert f"ReservationName={INCIDENT}" not in shown.stdout and shown.returncode != 0

        back = sched.release("n2", INCIDENT)
        assert back.ok, back.detail
        assert slurm_cluster.node("n2").reason == "" and sched.node("n2").in_service
    finally:
        slurm_cluster.run("scontrol", "delete", f"reservation={INCIDENT}", check=False)
        slurm_cluster.run("scontrol", "update", "nodename=n2", "state=resume", check=False)
    slurm_cluster.wait_until_idle(timeout_s=60)


def test_release_leaves_another_drain_alone(slurm_cluster: SlurmCluster) -> None:
    slurm_cluster.wait_until_idle(timeout_s=60)
    sched = SlurmScheduler(Shell((), slurm_cluster.env))
    try:
        slurm_cluster.drain("n2", "operator: bad DIMM, ticket 42")
        out = sched.release("n2", INCIDENT)
        assert not out.ok and "not this incident's" in out.detail
        assert slurm_cluster.node("n2").reason.startswith("operator: bad DIMM")
        assert sched.node("n2").held_by is None
    finally:
        slurm_cluster.resume("n2")
    slurm_cluster.wait_until_idle(timeout_s=60)


def test_a_busy_node_is_draining_until_its_job_ends(slurm_cluster: SlurmCluster) -> None:
    slurm_cluster.wait_until_idle(timeout_s=60)
    sched = SlurmScheduler(Shell((), slurm_cluster.env))
    job = subprocess.Popen(["srun", "-N1", "-w", "n2", "sleep", "6"], env=slurm_cluster.env)
    try:
        deadline = time.monotonic() + 30
        while slurm_cluster.node("n2").base_state not in {"ALLOCATED", "MIXED"}:
            assert time.monotonic() < deadline, slurm_cluster.node("n2")
            time.sleep(0.3)
        first = sched.quarantine("n2", INCIDENT, "gate ecc.volatile (gpu0): 3")
        assert not first.ok and first.pending and "draining" in first.detail
        job.wait(timeout=60)
        deadline = time.monotonic() + 30
        while not (out := sched.quarantine("n2", INCIDENT, "gate ecc.volatile (gpu0): 3")).ok:
            assert out.pending and time.monotonic() < deadline, out.detail
            time.sleep(0.5)
        assert drained_idle(slurm_cluster.node("n2"))
    finally:
        job.kill()
        slurm_cluster.run("scontrol", "update", "nodename=n2", "state=resume", check=False)
    slurm_cluster.wait_until_idle(timeout_s=60)


def test_an_unknown_node_is_not_present(slurm_cluster: SlurmCluster) -> None:
    view = SlurmScheduler(Shell((), slurm_cluster.env)).node("n9")
    assert not view.present and "no such node" in view.detail
