"""The one command: ``gpu-cluster --help`` lists every subcommand, each subcommand's ``--help``
is its module's, and every ``python -m`` path the docs ever named still runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpu_cluster import cli

ROOT = Path(__file__).resolve().parents[1]
OLD_PATHS = (
    "gpu_cluster.workloads.validate",
    "gpu_cluster.workloads.collectives",
    "gpu_cluster.workloads.ddp_train",
    "gpu_cluster.workloads.data",
    "gpu_cluster.workloads.model_parallel",
    "gpu_cluster.workloads.shard_tasks",
    "gpu_cluster.workloads.batch_infer",
    "gpu_cluster.workloads.gpu_health",
    "gpu_cluster.workloads.fabric_check",
    "gpu_cluster.workloads.node_gate",
    "gpu_cluster.components.plan",
    "gpu_cluster.components.spec",
    "gpu_cluster.components.preflight",
)
NEW_PATHS = (
    "gpu_cluster.workloads.train",
    "gpu_cluster.workloads.train.data",
    "gpu_cluster.workloads.parallel",
    "gpu_cluster.workloads.tasks",
    "gpu_cluster.workloads.tasks.infer",
    "gpu_cluster.workloads.health.gpu",
    "gpu_cluster.workloads.health.fabric",
    "gpu_cluster.workloads.health.node_gate",
    "gpu_cluster",
    "gpu_cluster.components.provider",
)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_help_lists_every_subcommand_on_one_line_each() -> None:
    proc = _run("-m", "gpu_cluster", "--help")
    assert proc.returncode == 0, proc.stderr
    for sub in cli.SUBCOMMANDS:
        (line,) = [ln for ln in proc.stdout.splitlines() if ln.split()[:1] == [sub.name]]
        assert sub.summary in line
    for name in ("plan", "spec", "preflight", "validate", "collectives", "train", "parallel", "tasks", "node-gate"):
        assert name in {s.name for s in cli.SUBCOMMANDS}


@pytest.mark.parametrize("name", [s.name for s in cli.SUBCOMMANDS])
def test_every_subcommand_help_exits_0_without_a_traceback(name: str) -> None:
    proc = _run("-m", "gpu_cluster", name, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    # The usage line names what a user types (issue 47 item 5: validate's said `python -m
    # gpu_cluster.workloads.validate`); a job every rank runs names the module torchrun takes.
    sub = next(s for s in cli.SUBCOMMANDS if s.name == name)
    want = f"usage: python -m {sub.module} " if sub.under_torchrun else f"usage: gpu-cluster {name} "
    assert proc.stdout.startswith(want), proc.stdout[:200]


@pytest.mark.parametrize("module", OLD_PATHS + NEW_PATHS)
def test_every_module_path_still_answers_help(module: str) -> None:
    proc = _run("-m", module, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "usage:" in proc.stdout


def test_an_unknown_subcommand_names_what_is_allowed() -> None:
    proc = _run("-m", "gpu_cluster", "deploy")
    assert proc.returncode == 2
    assert "'deploy' is not a subcommand (allowed: plan, spec," in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_subcommand_keeps_its_module_flags(tmp_path: Path) -> None:
    """``gpu-cluster spec`` is ``python -m gpu_cluster.components.spec``: the same check, the same exit."""
    assert cli.main(["spec", "aws-h200-slurm"]) == 0
    with pytest.raises(SystemExit) as exc:
        cli.main(["spec", str(tmp_path / "missing.yaml")])
    assert exc.value.code == 2


def test_the_installed_script_names_the_command() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert 'gpu-cluster = "gpu_cluster.cli:main"' in text


def test_python_m_gpu_cluster_plan_is_gpu_cluster_plan() -> None:
    """`python -m gpu_cluster.plan` runs the command (without the guard it imported and exited 0
    having printed nothing)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "gpu_cluster.plan", "--help"], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: gpu-cluster plan")
    nothing = subprocess.run(
        [sys.executable, "-m", "gpu_cluster.plan"], capture_output=True, text=True, check=False, timeout=120
    )
    assert nothing.returncode == 2 and "give one STACK or --all" in nothing.stderr
