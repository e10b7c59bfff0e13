"""The sbatch launcher's script, submitted to the real test cluster: two nodes, one torchrun
each, c10d rendezvous at the first node's NodeAddr, a gloo all_reduce across both."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from tests.slurm.cluster import SlurmCluster, free_port
from gpu_cluster.workloads.launch import sbatch

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def _spec(workdir: Path, result: Path, **overrides: object) -> sbatch.LaunchSpec:
    fields: dict[str, object] = dict(
        job_name="probe",
        nodes=2,
        module="tests.slurm.allreduce_probe",
        module_args=("--out", str(result)),
        workdir=str(workdir),
        python=sys.executable,
        gpus_per_node=0,
        procs_per_node=1,
        partition="test",
        time_limit_min=5,
        rdzv_port=free_port(),
        rdzv_join_timeout_s=90,
        fabric_env={"GLOO_SOCKET_IFNAME": "lo"},
        # Both "nodes" are this host: the job imports this checkout's modules and stays on CPU.
        extra_env={"PYTHONPATH": str(REPO), "GPUC_FORCE_CPU": "1", "OMP_NUM_THREADS": "1"},
    )
    fields.update(overrides)
    return sbatch.LaunchSpec(**fields)  # type: ignore[arg-type]


def test_rendered_script_runs_allreduce_across_both_nodes(slurm_cluster: SlurmCluster) -> None:
    workdir = slurm_cluster.jobs / "e2e"
    workdir.mkdir(exist_ok=True)
    result = workdir / "result.json"
    # Values a careless script would execute: they must arrive as plain text.
    trap = workdir / "injected"
    tag = f"x; touch {trap} #$(touch {trap}) `touch {trap}` 'q' \"d\""
    note = f"a b $(touch {trap}) $HOME 'q'"
    spec = _spec(
        workdir,
        result,
        module_args=("--out", str(result), "--tag", tag),
        extra_env={"PYTHONPATH": str(REPO), "GPUC_FORCE_CPU": "1", "OMP_NUM_THREADS": "1", "GPUC_PROBE_NOTE": note},
    )
    script = sbatch.write(spec, workdir / "probe.sbatch")

    job = slurm_cluster.run_job(script, timeout_s=240)

    assert (job.state, job.returncode) == ("COMPLETED", 0), (
        f"job {job.job_id} failed:\n{job.output}\n{slurm_cluster.log_report()}"
    )
    out_file = workdir / f"probe-{job.job_id}.out"
    assert out_file.exists(), sorted(p.name for p in workdir.iterdir())
    log = out_file.read_text()
    assert f"rendezvous 127.0.0.1:{spec.rdzv_port} on n1" in log, log
    assert "allreduce_probe: world_size=2 sum=3.0" in log, log

    data = json.loads(result.read_text())
    assert data["world_size"] == 2
    assert data["allreduce_sum"] == [3.0] * 4 == [data["expected_sum"]] * 4
    ranks = sorted(data["ranks"], key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1]
    assert sorted(r["node"] for r in ranks) == ["n1", "n2"]
    assert {r["job_id"] for r in ranks} == {str(job.job_id)}
    assert {r["backend"] for r in ranks} == {"gloo"}
    assert (data["tag"], data["note_env"]) == (tag, note)
    assert not trap.exists()
    # The script made the NCCL log directory it points NCCL_DEBUG_FILE at.
    assert (workdir / "nccl").is_dir()


def test_one_crashing_node_fails_the_job_once_and_fast(slurm_cluster: SlurmCluster) -> None:
    """--max-restarts=0 and --kill-on-bad-exit: when the ranks on n2 crash after the group
    formed, the job fails (well before the 120 s collective timeout) and nothing restarts."""
    workdir = slurm_cluster.jobs / "e2e-crash"
    workdir.mkdir(exist_ok=True)
    result = workdir / "never.json"
    spec = _spec(workdir, result, job_name="probe-crash", module_args=("--out", str(result), "--crash-on-node", "n2"))
    job = slurm_cluster.run_job(sbatch.write(spec, workdir / "crash.sbatch"), timeout_s=240)
    assert job.state == "FAILED" and job.returncode != 0, job
    log = (workdir / f"probe-crash-{job.job_id}.out").read_text()
    # Fast, judged by what happened rather than by the clock: srun ended the whole step when n2's
    # task failed (--kill-on-bad-exit; Slurm prints "Terminating StepId=<job>.<step>"), and the
    # survivor's collective failed on the lost peer, not on the collective timeout.
    assert re.search(rf"srun: .*Terminating StepId={job.job_id}\.\d+", log), log
    assert re.search(r"Connection (reset|closed) by peer", log), log
    assert not re.search(r"[Tt]imed out", log), log  # gloo: "Timed out waiting ... for recv"
    # Each node's rank started exactly once: torchrun did not restart the crashed one.
    # (Which node gets rank 0 is the rendezvous' choice.)
    starts = re.findall(r"allreduce_probe: rank (\d) on (n\d) started", log)
    assert sorted(node for _, node in starts) == ["n1", "n2"], log
    assert re.search(r"allreduce_probe: rank \d on n2 crashing", log), log
    assert not result.exists()
    assert slurm_cluster.job_field(job.job_id, "Restarts") == "0"
