"""The Slurm job's interpreter: --python, else the first of python3.12/3.11/3.10/python3 that is
3.10 or newer, checked before pip; none stops the job (exit 3) with one line naming what it found.
Run in bash over real CPython builds (pyenv's 3.9 and 3.12 on this machine)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpu_cluster.workloads.launch.validation import interpreter_lines

PYENV = Path.home() / ".pyenv" / "versions"


def _python(version: str) -> Path:
    for v in sorted(PYENV.glob(f"{version}.*"), reverse=True):
        if (v / "bin" / f"python{version}").is_file():
            return v / "bin" / f"python{version}"
    pytest.skip(f"no CPython {version} under {PYENV}")


def _node(tmp_path: Path, **names: Path) -> Path:
    """A PATH directory holding only the interpreters named (name -> real binary)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, real in names.items():
        (bin_dir / name).symlink_to(real)
    return bin_dir


def _run(lines: list[str], path: Path) -> subprocess.CompletedProcess[str]:
    script = "\n".join(["set -euo pipefail", *lines, 'echo "chose $gpuc_python"'])
    return subprocess.run(["/bin/bash", "-c", script], capture_output=True, text=True, env={"PATH": str(path)})


def test_al2023_python3_alone_stops_the_job_naming_it(tmp_path: Path) -> None:
    py39 = _python("3.9")
    done = _run(interpreter_lines(None), _node(tmp_path, python3=py39))
    assert done.returncode == 3 and "chose" not in done.stdout
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(
        "no interpreter >= 3.10 for the job: looked for python3.12, python3.11, python3.10, python3;"
    )
    assert f"found {tmp_path}/bin/python3 3.9." in line and "pass --python PATH" in line


def test_the_newest_candidate_wins_over_an_old_python3(tmp_path: Path) -> None:
    py39, py312 = _python("3.9"), _python("3.12")
    done = _run(interpreter_lines(None), _node(tmp_path, python3=py39, **{"python3.12": py312}))
    assert done.returncode == 0, done.stderr
    assert f"job interpreter: {tmp_path}/bin/python3.12 3.12." in done.stdout
    assert done.stdout.strip().endswith(f"chose {tmp_path}/bin/python3.12")


def test_an_old_python_flag_is_refused_and_a_missing_one_named(tmp_path: Path) -> None:
    py39 = _python("3.9")
    old = _run(interpreter_lines(str(py39)), _node(tmp_path))
    assert old.returncode == 3
    assert (
        f"looked for --python {py39}; found {py39} 3.9." in old.stderr
        and "(allowed: an interpreter 3.10 or newer)" in old.stderr
    )
    gone = _run(interpreter_lines("/opt/none/bin/python"), _node(tmp_path))
    assert gone.returncode == 3 and "found none" in gone.stderr
