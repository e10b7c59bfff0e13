"""`validate submit --here` where sbatch is not installed (issue 47 item 5): it made the run
directory on the shared file system (/fsx) and only then found no sbatch. Now it looks first: one
line, exit 3, nothing written here or on the file system."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_cluster.components.engine import run_offline
from gpu_cluster.components.spec import read_stack_file
from gpu_cluster.workloads.validate.slurm import SchedulerError, Shell, SlurmJob

REPO = Path(__file__).resolve().parents[2]
STACK = "aws-h200-slurm"


def _bin_without_sbatch(tmp: Path) -> Path:
    """A PATH with the shell and the commands the submit line runs, and no sbatch."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "sh", "mkdir", "cat"):
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    return bin_dir


def test_submit_here_without_sbatch_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    name, raw = read_stack_file(STACK)
    outs = run_offline(name, raw).outputs
    fsx = tmp_path / "fsx"
    outs["mount"]["mount_point"] = str(fsx)
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(outs), encoding="utf-8")
    back = tmp_path / "back"
    env = {**os.environ, "PATH": str(_bin_without_sbatch(tmp_path))}
    done = subprocess.run(
        [sys.executable, "-m", "gpu_cluster.workloads.validate", "submit", STACK, "--outputs", str(outputs), "--here"]
        + ["--fetch-to", str(back)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr
    assert lines == [
        "validate submit: --here: sbatch is not on this machine's PATH "
        "(allowed: --here on the cluster's login node, else --ssh CMD)"
    ], lines
    assert not fsx.exists() and not back.exists()


@pytest.mark.parametrize("prefix", [(), ("bash", "-c")], ids=["here", "through-a-remote-shell"])
def test_the_submit_line_looks_for_sbatch_before_it_makes_the_run_directory(
    tmp_path: Path, prefix: tuple[str, ...]
) -> None:
    """Through ssh the login node's PATH is only known there: the one command checks it first
    (``bash -c`` stands in for the remote shell, which receives the line as one argument)."""
    run_dir = tmp_path / "fsx" / "validation" / "run-1"
    shell = Shell(prefix, {"PATH": str(_bin_without_sbatch(tmp_path))})
    with pytest.raises(SchedulerError) as err:
        SlurmJob.submit(shell, str(run_dir), "#!/bin/bash\necho hi\n")
    assert "sbatch is not on the PATH of" in str(err.value) and "nothing was written" in str(err.value)
    assert not (tmp_path / "fsx").exists()


def test_with_sbatch_the_same_line_writes_the_script_and_submits_it(tmp_path: Path) -> None:
    """The control: an sbatch on the PATH (a stand-in that prints a job id) gets the script the
    line wrote into the run directory."""
    bin_dir = _bin_without_sbatch(tmp_path)
    sbatch = bin_dir / "sbatch"
    sbatch.write_text('#!/bin/bash\n[ "$1" = --parsable ] && [ -s "$2" ] && echo "4242;cluster"\n')
    sbatch.chmod(0o755)
    run_dir = tmp_path / "fsx" / "validation" / "run-1"
    job = SlurmJob.submit(Shell((), {"PATH": str(bin_dir)}), str(run_dir), "#!/bin/bash\necho hi\n")
    assert job.job_id == 4242 and (run_dir / "validate.sbatch").read_text() == "#!/bin/bash\necho hi\n"
