"""The test cluster itself: both nodes run jobs, batch jobs report their exit status, and
stopping it leaves no process behind."""

from __future__ import annotations

import os
import time

import pytest

from tests.slurm.cluster import ClusterError, SlurmCluster, idle_in_service, unavailable_reason
from gpu_cluster.workloads.launch import sbatch

pytestmark = pytest.mark.slurm


def test_srun_runs_one_task_on_each_node(slurm_cluster: SlurmCluster) -> None:
    done = slurm_cluster.run("srun", "-N2", "--ntasks-per-node=1", "-l", "printenv", "SLURMD_NODENAME")
    seen = sorted(line.split(": ", 1)[1] for line in done.stdout.splitlines())
    assert seen == ["n1", "n2"]


SCRIPT = "#!/bin/bash\n#SBATCH --nodes=2\nset -eu\nsrun -l printenv SLURMD_NODENAME | sort\nexit 7\n"


def test_sbatch_wait_returns_the_jobs_exit_status(slurm_cluster: SlurmCluster) -> None:
    """The launcher's submit(wait=True) is plain `sbatch --wait`: its status is the job's."""
    script = slurm_cluster.jobs / "exit7.sh"
    # sbatch --wait looks at the job after 2, 10, 42 s: keep the job short (no srun step).
    script.write_text("#!/bin/bash\n#SBATCH --nodes=2\necho batch step on $SLURMD_NODENAME\nexit 7\n")
    out = slurm_cluster.jobs / "exit7.out"
    sub = sbatch.submit(script, wait=True, extra_args=[f"--output={out}"], env=slurm_cluster.env, timeout_s=120)
    assert sub.returncode == 7, sub
    assert out.read_text() == "batch step on n1\n"
    assert slurm_cluster.job_field(sub.job_id, "JobState") == "FAILED"


def test_run_job_reports_state_exit_status_and_output(slurm_cluster: SlurmCluster) -> None:
    job = slurm_cluster.run_job(SCRIPT, timeout_s=90)
    assert (job.state, job.returncode) == ("FAILED", 7), job
    assert job.output.splitlines() == ["0: n1", "1: n2"], job
    ok = slurm_cluster.run_job("#!/bin/bash\necho fine\n", timeout_s=90)
    assert (ok.state, ok.returncode, ok.output) == ("COMPLETED", 0, "fine\n")


def test_nodes_are_idle_again_after_jobs(slurm_cluster: SlurmCluster) -> None:
    slurm_cluster.wait_until_idle(timeout_s=60)
    states = slurm_cluster.node_states()
    assert set(states) == {"n1", "n2"}, states
    for name in ("n1", "n2"):
        assert idle_in_service(slurm_cluster.node(name)), slurm_cluster.node(name)


def test_waiting_for_a_node_that_never_comes_names_it_and_shows_the_logs(slurm_cluster: SlurmCluster) -> None:
    with pytest.raises(ClusterError) as err:
        slurm_cluster.wait_until_idle(timeout_s=2, nodes=("n1", "n3"))
    message = str(err.value)
    assert "timed out after 2s waiting for nodes n1, n3 idle" in message
    assert "--- slurmctld.log" in message and "--- slurmd-n1.log" in message
    assert "last sinfo: 'n1 idle" in message


def test_stop_ends_daemons_and_running_jobs() -> None:
    """A cluster of its own, stopped while a job runs: nothing it started may survive."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    cluster = SlurmCluster.start()
    try:
        cluster.run("sbatch", "--nodes=2", f"--output={cluster.jobs}/sleep-%j.out", "--wrap", "srun sleep 600")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any("sleep 600" in cmd for _, cmd in cluster.leftover_processes()):
                break
            time.sleep(0.5)
        running = cluster.leftover_processes()
        assert any("sleep 600" in cmd for _, cmd in running), running
        assert any("slurmstepd" in cmd for _, cmd in running), running
        daemons = cluster.daemon_pids()
        assert set(daemons) == {"munged", "slurmctld", "slurmd-n1", "slurmd-n2"}
    finally:
        cluster.stop()
    try:
        assert cluster.leftover_processes() == []
        for name, pid in daemons.items():
            assert not _alive(pid), f"{name} (pid {pid}) still running after stop()"
        for pid, cmd in running:
            assert not _alive(pid), f"{cmd!r} (pid {pid}) still running after stop()"
    finally:
        cluster.cleanup_files()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead but not yet reaped by its parent.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
