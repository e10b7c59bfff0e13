"""The pods run the image's own torch: where that is not the torch the job is tested with, render
and the rehearsal say so (the rehearsal stands this project's interpreter in for the image's)."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from components.catalog import load_runtime_images
from workloads.launch import validation as vjob
from workloads.launch.bundle import JOB_REQUIREMENTS


def test_the_tested_torch_is_the_one_the_slurm_job_installs() -> None:
    assert f"torch=={vjob.TESTED_TORCH}" in JOB_REQUIREMENTS


def test_an_image_with_the_tested_torch_gets_no_note_others_do() -> None:
    eks = vjob.default_image("efa")
    assert vjob.image_torch(eks) == vjob.TESTED_TORCH and vjob.image_torch_note(eks) is None
    rocm = load_runtime_images()["rocm"]
    note = vjob.image_torch_note(rocm.ref)
    assert note is not None and f"carries torch {rocm.torch}" in note and vjob.TESTED_TORCH in note
    ngc = vjob.image_torch_note(vjob.DEFAULT_IMAGE)
    assert ngc is not None and "does not record" in ngc
    assert "does not record" in (vjob.image_torch_note("registry.example/mine:1") or "")


@pytest.mark.parametrize(
    ("stack", "says"), [("azure-mi300x-aks", "carries torch 2.9.1"), ("gcp-h100-gke", "does not record")]
)
def test_render_says_which_torch_the_pods_get(stack: str, says: str, tmp_path: Path) -> None:
    from workloads.validate.__main__ import main

    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["render", stack, "--out", str(tmp_path)])
    assert code == 0, out.getvalue()
    line = next(ln for ln in out.getvalue().splitlines() if "the job is tested with torch" in ln)
    assert says in line


def test_render_of_the_eks_stack_has_no_torch_note(tmp_path: Path) -> None:
    from workloads.validate.__main__ import main

    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["render", "aws-h100-eks", "--out", str(tmp_path)]) == 0
    assert "the job is tested with torch" not in out.getvalue()
