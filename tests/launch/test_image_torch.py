"""The pods run the image's own torch: where that is not the torch the job is tested with, render
and the rehearsal say so (the rehearsal stands this project's interpreter in for the image's)."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from gpu_cluster.components.catalog import load_runtime_images
from gpu_cluster.workloads.launch import validation as vjob
from gpu_cluster.workloads.launch.bundle import JOB_REQUIREMENTS


def test_the_tested_torch_is_the_one_the_slurm_job_installs() -> None:
    assert f"torch=={vjob.TESTED_TORCH}" in JOB_REQUIREMENTS


def test_an_image_with_the_tested_torch_gets_no_note_others_do() -> None:
    eks = vjob.default_image("efa")
    assert vjob.image_torch(eks) == vjob.TESTED_TORCH and vjob.image_torch_note(eks) is None
    rocm = load_runtime_images()["rocm"]
    note = vjob.image_torch_note(rocm.ref)
    assert note is not None and f"carries torch {rocm.torch}" in note and vjob.TESTED_TORCH in note
    ngc = vjob.image_torch_note(vjob.DEFAULT_IMAGE)
    cuda = load_runtime_images()["cuda"]
    assert ngc == (
        f"image {vjob.DEFAULT_IMAGE} carries torch {cuda.torch} (the catalog's record), a pre-release build of "
        f"{cuda.tested_on}: the job is tested on torch {vjob.TESTED_TORCH} in CI and on {cuda.tested_on} by "
        "`make image-torch`"
    )
    assert "does not record" in (vjob.image_torch_note("registry.example/mine:1") or "")
    assert vjob.image_tested_torch("localhost:5000/nvcr.io/nvidia/pytorch:25.12-py3") is None


def test_the_nvidia_jobs_image_is_chosen_by_its_published_torch_and_cuda() -> None:
    """The NVIDIA Kubernetes jobs' image outside EFA is the catalog's runtime_images.cuda: NGC 25.12,
    whose release notes publish its torch (2.10.0a0+b4e4ee81d3) and CUDA (13.1.0); `make image-torch`
    tests the release of that torch line, which the catalog records as tested_on."""
    cuda = load_runtime_images()["cuda"]
    assert vjob.DEFAULT_IMAGE == cuda.ref == "nvcr.io/nvidia/pytorch:25.12-py3"
    assert (cuda.torch, cuda.cuda, cuda.tested_on) == ("2.10.0a0+b4e4ee81d3", "13.1.0", "2.10.0")
    assert [s.id for s in cuda.sources] == ["ngc-pytorch-25-12", "pytorch-wheel-rpath"]
    assert cuda.sources[0].url.endswith("pytorch-release-notes/rel-25-12.html")
    # tested_on is the release of the line the pre-release build belongs to (2.10.0a0 -> 2.10.0).
    line = ".".join(cuda.tested_on.split(".")[:2])
    assert cuda.torch.startswith(f"{line}.0a0+")
    for fabric in ("tcpx", "tcpxo", "rdma"):
        assert vjob.default_image(fabric, gpu_runtime="cuda") == vjob.DEFAULT_IMAGE
        assert vjob.image_tested_torch(vjob.default_image(fabric, gpu_runtime="cuda")) == "2.10.0"
    # EFA keeps AWS's DLC (torch 2.13.0 on CUDA 13.3.0), ROCm its own image.
    efa = vjob.default_image("efa", gpu_runtime="cuda")
    assert efa.startswith("public.ecr.aws/deep-learning-containers/pytorch:")
    assert vjob.image_tested_torch(efa) == vjob.TESTED_TORCH
    assert vjob.default_image("infiniband", gpu_runtime="rocm") == load_runtime_images()["rocm"].ref


def test_make_image_torch_runs_the_tests_on_the_recorded_line() -> None:
    root = Path(__file__).resolve().parents[2]
    make = (root / "Makefile").read_text()
    assert "\nimage-torch: $(VENV_OK)\n\tbash scripts/image-torch.sh $(PY)\n" in make
    script = (root / "scripts" / "image-torch.sh").read_text()
    # The version comes from the catalog, never a second copy of it.
    assert 'load_runtime_images()["cuda"]' in script and "2.10" not in script
    assert "-m pytest" in script and "tests/workloads" in script and "rehearse gcp-h100-gke" in script
    assert "`make image-torch`" in (root / "docs" / "validate.md").read_text()


@pytest.mark.parametrize(
    ("stack", "says"),
    [("azure-mi300x-aks", "carries torch 2.9.1"), ("gcp-h100-gke", "a pre-release build of 2.10.0")],
)
def test_render_says_which_torch_the_pods_get(stack: str, says: str, tmp_path: Path) -> None:
    from gpu_cluster.workloads.validate.__main__ import main

    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["render", stack, "--out", str(tmp_path)])
    assert code == 0, out.getvalue()
    line = next(ln for ln in out.getvalue().splitlines() if "the job is tested" in ln)
    assert says in line


def test_render_of_the_eks_stack_has_no_torch_note(tmp_path: Path) -> None:
    from gpu_cluster.workloads.validate.__main__ import main

    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["render", "aws-h100-eks", "--out", str(tmp_path)]) == 0
    assert "the job is tested" not in out.getvalue()
