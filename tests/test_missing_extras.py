"""A subcommand whose extra is not installed says so in one line, ``--help`` included, naming the
extra and the command that installs it, and exits 3 (could not run) without a traceback.

The module is hidden for real: the installed ``gpu-cluster`` script runs in a process whose
``sitecustomize`` puts a finder first on ``sys.meta_path`` that refuses it, so ``import torch``
fails exactly as it does where torch is not installed. Nothing of the CLI is replaced.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_cluster import cli

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / "gpu-cluster"
HIDER = """\
import os, sys

_HIDDEN = set(filter(None, os.environ.get("GPUC_TEST_HIDE", "").split(",")))


class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
"""


def _run(tmp_path: Path, hidden: str, *argv: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "sitecustomize.py").write_text(HIDER, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "GPUC_TEST_HIDE": hidden}
    return subprocess.run([str(SCRIPT), *argv], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.parametrize(
    ("hidden", "argv", "extra"),
    [
        ("torch", ["train", "--help"], "validate"),
        ("torch", ["parallel", "--help"], "validate"),
        ("torch", ["tasks", "--help"], "tasks"),
        ("boto3", ["preflight", "aws-h200-slurm", "--no-address-check"], "preflight"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v,
)
def test_a_missing_extra_is_one_line_naming_it(tmp_path: Path, hidden: str, argv: list[str], extra: str) -> None:
    assert SCRIPT.is_file(), f"{SCRIPT}: the virtualenv's gpu-cluster script (make venv installs it)"
    proc = _run(tmp_path, hidden, *argv)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    (line,) = [ln for ln in (proc.stdout + proc.stderr).splitlines() if f"[{extra}]" in ln]
    assert line == (
        f"gpu-cluster {argv[0]}: needs the Python package {hidden}, which is not installed "
        f"(gpu-cluster's [{extra}] extra): run pip install 'gpu-cluster[{extra}]'"
    )
    assert proc.stderr.strip() == line


def test_every_extra_the_cli_names_is_declared() -> None:
    import tomllib

    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    )
    named = {e for es in cli.EXTRA_OF_MODULE.values() for e in es} | {s.extra for s in cli.SUBCOMMANDS if s.extra}
    assert named <= extras


def test_a_missing_module_of_our_own_keeps_its_traceback() -> None:
    """Only third-party modules an extra installs get the one line: a bug stays visible."""
    sub = cli.SUBCOMMANDS[0]
    assert cli.missing_extra(sub, ModuleNotFoundError("x", name="components.nope")) is None
    assert "[validate]" in str(cli.missing_extra(sub, ModuleNotFoundError("x", name="torch.distributed")))


# Each cloud's SDKs, by the import names its extra installs (pyproject.toml [aws], [gcp], [azure]).
CLOUD_SDKS = {
    "aws": "pulumi_aws,pulumi_aws_native",
    "gcp": "pulumi_gcp",
    "azure": "pulumi_azure_native",
}


@pytest.mark.parametrize(
    ("cloud", "stack", "commands"),
    # Kubernetes stacks: they read the most shared code (the job's image list, the in-cluster layer).
    [
        ("aws", "aws-h100-eks", ("plan", "render")),
        ("gcp", "gcp-h100-gke", ("plan",)),
        ("azure", "azure-h100-aks", ("plan", "render")),
    ],
)
def test_one_clouds_extra_plans_and_renders_that_clouds_stack(
    tmp_path: Path, cloud: str, stack: str, commands: tuple[str, ...]
) -> None:
    """With the other clouds' SDKs hidden (issue 47 item 2): the plan, the job's render and the image
    list of a stack of this cloud need nothing of theirs (an EKS plan once stopped with "needs
    pulumi_gcp" through the GKE checkpoint account's name)."""
    others = ",".join(sdk for c, sdk in CLOUD_SDKS.items() if c != cloud)
    argvs = {"plan": ["plan", stack], "render": ["validate", "render", stack, "--out", str(tmp_path / "job")]}
    for argv in (argvs[c] for c in commands):
        proc = _run(tmp_path, others, *argv)
        said = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"{' '.join(argv)} with {others} hidden:\n{said[-3000:]}"
        assert "Traceback" not in said and "needs the Python package" not in said, said[-3000:]
