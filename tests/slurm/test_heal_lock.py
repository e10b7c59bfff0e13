"""I9, one healer per cluster, on the real Slurm the tests start: the lock is a held batch job
named gpu-cluster-heal-lock (sbatch --hold: priority zero, it never runs and holds no node), its
comment naming the holder and when it last renewed; the live candidate with the lowest job id
holds it. A second ``gpu-cluster heal --apply`` refuses in one line naming the holder; a holder
killed with SIGKILL keeps the cluster until its duration lapses, then the next heal takes over and
says so. The locks read an injected clock: no test waits on the wall clock."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gpu_cluster.heal import lock as lockmod
from gpu_cluster.heal.cli import main
from gpu_cluster.heal.lock import SLURM_JOB, Holder, LockHeld, SlurmLock
from tests.slurm.cluster import SlurmCluster, validation_outputs
from gpu_cluster.workloads.validate.slurm import Shell

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parents[2]
T0 = 1_800_000_000.0


def at(t: float) -> Callable[[], float]:
    return lambda: t


def candidate(cluster: SlurmCluster, folder: str, pid: int, t: float) -> SlurmLock:
    return SlurmLock(
        Shell((), cluster.env),
        Holder(host="login-1", pid=pid, folder=folder),
        partition=cluster.partition,
        clock=at(t),
    )


def queued(cluster: SlurmCluster) -> list[str]:
    """The lock's pending jobs: id|state|reason|comment."""
    out = cluster.run("squeue", "--noheader", f"--name={SLURM_JOB}", "--states=PENDING", "--format=%i|%T|%r|%k")
    return [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]


def test_the_held_job_lock_refuses_renews_and_is_taken_over_when_stale(slurm_cluster: SlurmCluster) -> None:
    slurm_cluster.wait_until_idle(timeout_s=60)
    a = candidate(slurm_cluster, "/runs/a", 101, T0)
    try:
        assert a.acquire() == ""
        (job,) = queued(slurm_cluster)
        assert job == (
            f"{a.job}|PENDING|JobHeldUser|since={T0:.0f} renewed={T0:.0f} ttl=60 host=login-1 pid=101 folder=/runs/a"
        )
        # it holds no node: work still runs on both while heal holds the cluster
        ran = slurm_cluster.run("srun", "-N2", "--immediate=30", "hostname")
        assert ran.returncode == 0

        with pytest.raises(LockHeld) as held:
            candidate(slurm_cluster, "/runs/b", 202, T0 + 30).acquire()
        assert "Slurm job gpu-cluster-heal-lock" in str(held.value)
        assert "host login-1, pid 101, folder /runs/a, since " in str(held.value)
        assert len(queued(slurm_cluster)) == 1  # the refused one left nothing behind

        a.clock = at(T0 + 50)
        assert a.renew() == ""
        assert f"renewed={T0 + 50:.0f}" in queued(slurm_cluster)[0]
        with pytest.raises(LockHeld):
            candidate(slurm_cluster, "/runs/b", 202, T0 + 100).acquire()
        b = candidate(slurm_cluster, "/runs/b", 202, T0 + 111)
        note = b.acquire()
        assert note.startswith(f"heal: took over Slurm job gpu-cluster-heal-lock from a stale holder (job {a.job})")
        assert "pid 101, folder /runs/a" in note
        (job,) = queued(slurm_cluster)
        assert job.startswith(f"{b.job}|") and job.endswith("pid=202 folder=/runs/b")
        assert "gone" in a.renew()
        b.release()
        assert queued(slurm_cluster) == []
    finally:
        a.release()


def test_two_candidates_that_both_submit_the_lowest_job_id_holds(slurm_cluster: SlurmCluster) -> None:
    c = candidate(slurm_cluster, "/runs/c", 303, T0)
    d = candidate(slurm_cluster, "/runs/d", 404, T0)
    try:
        assert c.acquire() == ""
        real = d.candidates
        calls = [0]

        def empty_first() -> list[tuple[int, Holder]]:
            calls[0] += 1
            return [] if calls[0] == 1 else real()  # d read the queue before c's job was in it

        d.candidates = empty_first  # type: ignore[method-assign]
        with pytest.raises(LockHeld, match="pid 303, folder /runs/c"):
            d.acquire()
        (job,) = queued(slurm_cluster)  # d submitted, saw the lower id, and cancelled its own
        assert job.startswith(f"{c.job}|") and d.job == ""
    finally:
        c.release()
        d.release()
    assert queued(slurm_cluster) == []


def test_a_second_heal_refuses_then_takes_over_a_killed_holder(
    slurm_cluster: SlurmCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for k, v in slurm_cluster.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.chdir(tmp_path)
    report = tmp_path / "report.json"
    nodes = [{"node": n, "verdict": "PASS", "reasons": []} for n in slurm_cluster.nodes]
    report.write_text(json.dumps({"verdict": "PASS", "nodes": nodes, "measurements": []}), encoding="utf-8")
    outs = validation_outputs(slurm_cluster)
    folder_a, folder_b = tmp_path / "run-a", tmp_path / "run-b"
    argv = ["aws-h200-slurm", "--outputs", str(outs), "--report", str(report), "--out", str(folder_b)]
    argv += ["--here", "--apply"]

    def heal() -> tuple[int, str, str]:
        code = main(argv)
        got = capsys.readouterr()
        return code, got.out, got.err

    holder = subprocess.Popen(
        [sys.executable, "-m", "tests.heal._lock_worker", "slurm", "-", str(folder_a)],
        cwd=REPO,
        env={**slurm_cluster.env, "PYTHONPATH": str(REPO)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == f"held {holder.pid}"
        code, _out, err = heal()
        (line,) = [ln for ln in err.splitlines() if ln.startswith("gpu-cluster heal:")]
        assert code == 3 and "Traceback" not in err
        assert (
            f"another gpu-cluster heal holds this cluster (Slurm job gpu-cluster-heal-lock): host "
            f"{socket.gethostname()}, pid {holder.pid}, folder {folder_a.resolve()}, since " in line
        )
        holder.send_signal(signal.SIGKILL)
        assert holder.wait(timeout=30) == -signal.SIGKILL
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    (job,) = queued(slurm_cluster)  # the killed heal's job stays: nothing released it
    renewed = float(job.split("renewed=")[1].split()[0])
    monkeypatch.setattr(lockmod, "now", lambda: renewed + 1)
    code, _out, err = heal()
    assert code == 3 and f"pid {holder.pid}" in err
    monkeypatch.setattr(lockmod, "now", lambda: renewed + 61)
    code, out, err = heal()
    assert code == 0, out + err
    assert f"took over Slurm job gpu-cluster-heal-lock from a stale holder (job {job.split('|')[0]})" in out
    assert f"pid {holder.pid}, folder {folder_a.resolve()}" in out
    assert queued(slurm_cluster) == []  # released at the end
