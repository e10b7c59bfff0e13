"""``validate rehearse``: every bundled stack's rendered job runs here, under what it declares, to
its first collective; three planted breaks make it fail with the job's own cause."""

from __future__ import annotations

import argparse
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.components.spec import bundled_stacks, read_stack_file
from tests.launch.test_render_stacks import outputs
from gpu_cluster.workloads.validate import rehearse as rh

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("setpriv") is None,
        reason="the rehearsal needs root and util-linux's unshare and setpriv",
    ),
]

EKS = [s for s in bundled_stacks() if read_stack_file(s)[1]["orchestration"]["kind"] == "eks"]


def _args(tmp_path: Path, **over: Any) -> argparse.Namespace:
    base: dict[str, Any] = dict(python=None, image=None, ranks=2, timeout=240.0, keep=False, stage_dir=str(tmp_path))
    base.update(over)
    return argparse.Namespace(**base)


def _params() -> list[Any]:
    # Every stack, the Azure ones included since their render mounts the Lustre claim (issue 23).
    return list(bundled_stacks())


@pytest.mark.parametrize("stack", _params())
def test_every_bundled_stack_reaches_its_first_collective(stack: str, tmp_path: Path) -> None:
    got = rh.rehearse(outputs(stack), _args(tmp_path))
    assert got.code == rh.EXIT_PASS, "\n".join(got.lines)
    assert re.search(
        r"rehearsal passed: 2 rank\(s\) reached their first collective as uid \d+ and wrote /", got.lines[-1]
    )


def test_eks_runs_as_the_root_it_declares_and_makes_its_run_directory(tmp_path: Path) -> None:
    # The EKS pods state runAsUser 0 (the catalog's EFA pod facts: the run directory is made on
    # FSx's root-owned mount, and IPC_LOCK is effective only for root); the rehearsal takes the
    # user from the rendered pod, not from a list kept here.
    got = rh.rehearse(outputs(EKS[0]), _args(tmp_path, ranks=1))
    assert got.code == rh.EXIT_PASS, "\n".join(got.lines)
    assert re.search(r"reached their first collective as uid 0 and wrote /fsx/validation/", got.lines[-1])


def _k8s_stack() -> str:
    return next(s for s in bundled_stacks() if read_stack_file(s)[1]["orchestration"]["kind"] == "gke")


def test_planted_non_root_user_on_root_owned_mount_fails(tmp_path: Path) -> None:
    def non_root(r: Any) -> None:
        c = r.jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
        c["securityContext"].update(runAsUser=4242, runAsGroup=4242, runAsNonRoot=True)

    got = rh.rehearse(outputs(_k8s_stack()), _args(tmp_path, ranks=1), break_job=non_root)
    assert got.code == rh.EXIT_FAIL
    failed = next(ln for ln in got.lines if ln.startswith("rehearsal failed"))
    assert "mkdir: cannot create directory '/fsx/validation': Permission denied" in failed


def test_planted_python39_without_python_flag_fails_naming_what_it_found(tmp_path: Path) -> None:
    # The PCS node stands in for AL2023 (python3 3.9, python3.12 from the user data); the break
    # is a node whose user data did not install python3.12.
    stack = next(s for s in bundled_stacks() if s.startswith("aws-") and s.endswith("-slurm"))
    saved = dict(rh.NODE_PYTHONS)
    rh.NODE_PYTHONS[("aws", "slurm")] = {"python3": "3.9"}
    try:
        got = rh.rehearse(outputs(stack), _args(tmp_path, ranks=1))
    finally:
        rh.NODE_PYTHONS.clear()
        rh.NODE_PYTHONS.update(saved)
    assert got.code == rh.EXIT_FAIL
    failed = next(ln for ln in got.lines if ln.startswith("rehearsal failed"))
    assert "(exit 3)" in failed
    assert re.search(r"no interpreter >= 3\.10 for the job: .* found /usr/bin/python3 3\.9\.\d+ ", failed), failed


def test_planted_missing_plugin_path_fails_naming_the_plugin(tmp_path: Path) -> None:
    # The path the job declares today for its net plugin (LD_LIBRARY_PATH) moved off where the
    # node has the plugin.
    def off_path(r: Any) -> None:
        c = r.jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
        c["command"][2] = c["command"][2].replace(
            "LD_LIBRARY_PATH=/usr/local/nvidia/lib64", "LD_LIBRARY_PATH=/usr/local/nvidia/lib32"
        )
        assert "lib32" in c["command"][2]

    got = rh.rehearse(outputs(_k8s_stack()), _args(tmp_path, ranks=1), break_job=off_path)
    assert got.code == rh.EXIT_FAIL
    text = next(ln for ln in got.lines if ln.startswith("rehearsal failed"))
    assert re.search(
        r"net plugin .*libnccl-net\.so.* (not on LD_LIBRARY_PATH|not found on LD_LIBRARY_PATH) \(/usr/local/nvidia/lib32",
        text,
    ), text


def test_a_read_only_root_where_declared_is_read_only(tmp_path: Path) -> None:
    # Not one of the three planted breaks: a pod that declares readOnlyRootFilesystem and
    # unpacks its code into /tmp, which no volume covers.
    def read_only(r: Any) -> None:
        c = r.jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
        c["securityContext"]["readOnlyRootFilesystem"] = True

    got = rh.rehearse(outputs(_k8s_stack()), _args(tmp_path, ranks=1), break_job=read_only)
    assert got.code == rh.EXIT_FAIL
    failed = next(ln for ln in got.lines if ln.startswith("rehearsal failed"))
    assert "mkdir: cannot create directory '/tmp/gpuc-code': Read-only file system" in failed, failed


def test_command_exits_3_for_an_unknown_stack(capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_cluster.workloads.validate.__main__ import main

    assert main(["rehearse", "no-such-stack"]) == 3
    assert "could not rehearse no-such-stack: no outputs for stack 'no-such-stack'" in capsys.readouterr().err
    from gpu_cluster.cli import main as cli

    assert cli(["validate", "rehearse", "no-such-stack"]) == 3


def test_image_python_stands_in_for_the_image_interpreter(tmp_path: Path) -> None:
    """``--image-python``: the job's python3 is the interpreter given (here a wrapper that says
    so on stderr before handing over to this project's), and the report names it and its torch."""
    wrapper_dir = tmp_path / "image-py"
    wrapper_dir.mkdir()
    wrapper = wrapper_dir / "python"
    wrapper.write_text(f'#!/bin/sh\necho "image-python wrapper: $*" >&2\nexec {rh.sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    wrapper_dir.chmod(0o755)
    tmp_path.chmod(0o755)  # the job's user reaches the wrapper through it
    got = rh.rehearse(outputs(_k8s_stack()), _args(tmp_path, image_python=str(wrapper), keep=True))
    assert got.code == rh.EXIT_PASS, "\n".join(got.lines)
    said = "\n".join(got.lines)
    assert f"the image's python3: the interpreter given (--image-python) {wrapper} (torch " in said
    [log] = list(tmp_path.glob("gpuc-rehearse-*/job.log"))
    assert "image-python wrapper: " in log.read_text()  # the job's own python3 was the wrapper


def test_image_python_must_start_and_is_for_images_only(tmp_path: Path) -> None:
    with pytest.raises(rh.CouldNotRehearse, match="--image-python /nonexistent/python: cannot run it"):
        rh.rehearse(outputs(_k8s_stack()), _args(tmp_path, image_python="/nonexistent/python"))
    slurm = next(s for s in bundled_stacks() if read_stack_file(s)[1]["orchestration"]["kind"] == "slurm")
    with pytest.raises(rh.CouldNotRehearse, match="container image's interpreter"):
        rh.rehearse(outputs(slurm), _args(tmp_path, image_python=rh.sys.executable))
