"""The EFA images: the default is AWS's published PyTorch DLC, whose torch is the Slurm job's and
whose plugin is where the pods look; the build-your-own Dockerfile holds the catalog's pins, puts
the plugin where the start-up check (and NCCL) look, and runs as root like the default."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_cluster.components.catalog import ImageBuild, load_fabric_facts
from gpu_cluster.workloads.launch import validation as vjob
from gpu_cluster.workloads.launch.bundle import JOB_REQUIREMENTS

ROOT = Path(__file__).resolve().parents[2]


def _build() -> ImageBuild:
    b = load_fabric_facts()[1]["efa"].build
    assert b is not None
    return b


def _dockerfile() -> tuple[str, dict[str, str], dict[str, str]]:
    img = _build()
    text = (ROOT / img.dockerfile).read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))
    env = dict(re.findall(r"^ENV (\w+)=(\S+)$", text, re.M))
    return text, args, env


def test_dockerfile_pins_what_the_catalog_says() -> None:
    img = _build()
    text, args, _ = _dockerfile()
    assert args["BASE"] == img.base  # by tag while the digest is unknown; by digest once recorded
    assert re.search(r"^FROM \$\{BASE\}$", text, re.M)
    assert args["EFA_INSTALLER_VERSION"] == img.pins["efa_installer"] == "1.51.0"
    assert img.pins["aws_ofi_nccl"] == "1.22.0"  # what installer 1.51.0 ships (EFA release notes)
    assert f"efa{img.pins['efa_installer']}" in img.tag
    # The reference's container install: no kernel module, no limits file, no device test.
    assert "./efa_installer.sh -y -g -d --skip-kmod --skip-limit-conf --no-verify" in text
    # The same Python packages as the Slurm job's virtualenv.
    pip = re.search(r"pip install --no-cache-dir (.+)$", text, re.M)
    assert pip is not None and pip.group(1).split() == list(JOB_REQUIREMENTS)
    torch = next(r for r in JOB_REQUIREMENTS if r.startswith("torch==")).removeprefix("torch==")
    assert f"torch{torch}" in img.tag


# EFA installer >= 1.44.0 on Ubuntu: /opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so, no architecture
# directory (aws/deep-learning-containers scripts/docker/common/install_efa.sh at 2f60860).
UBUNTU_PLUGIN_DIR = "/opt/amazon/ofi-nccl/lib"


def test_the_plugin_directory_is_on_ld_library_path_where_the_check_looks() -> None:
    text, _, env = _dockerfile()
    ld = env["LD_LIBRARY_PATH"].split(":")
    assert ld[0] == UBUNTU_PLUGIN_DIR and UBUNTU_PLUGIN_DIR in load_fabric_facts()[0]["efa"].plugin_dirs
    # The installer's (1.51.0 >= 1.44.0) layout, checked when the image is built.
    assert tuple(int(x) for x in _build().pins["efa_installer"].split(".")) >= (1, 44, 0)
    assert f"RUN test -f {UBUNTU_PLUGIN_DIR}/libnccl-net-ofi.so" in text
    # No directory of the older layout is named: it does not exist with this installer.
    assert "linux-gnu" not in env["LD_LIBRARY_PATH"] and "ln -s" not in text
    assert "/opt/amazon/efa/lib" in ld  # libfabric, which the plugin links
    assert env["PATH"].startswith("/opt/venv/bin:")  # `python3` in the pod is the one with torch
    # The pods look there at start, for the name they load (NCCL_NET_PLUGIN=ofi: libnccl-net-ofi.so).
    from gpu_cluster.workloads.launch.fabric import wiring

    (ofi,) = [f for f in wiring("efa").pod.found_at_start if f.marker == "libnccl-net-ofi.so"]
    assert UBUNTU_PLUGIN_DIR in ofi.dirs


def test_the_built_image_runs_as_root_like_the_default() -> None:
    text, _, _ = _dockerfile()
    assert not re.findall(r"^USER ", text, re.M)


def test_the_default_efa_image_is_the_published_dlc_with_the_jobs_torch() -> None:
    img = load_fabric_facts()[1]["efa"]
    assert img.repository == "public.ecr.aws/deep-learning-containers/pytorch"
    torch = next(r for r in JOB_REQUIREMENTS if r.startswith("torch==")).removeprefix("torch==")
    assert img.torch == torch and img.tag.startswith(f"{torch}-")
    assert img.user == "root"
    # Published by tag only: render names the tag, submit resolves it (test_registry.py).
    assert img.digest is None and vjob.default_image("efa") == f"{img.repository}:{img.tag}"
    assert not vjob.pinned(vjob.default_image("efa"))
    # Its plugin (lib64/libnccl-net-ofi.so, dlc-pytorch-dockerfile) is where the pods look and what
    # they name.
    from gpu_cluster.workloads.launch.fabric import wiring

    pod = wiring("efa").pod
    (ofi,) = [f for f in pod.found_at_start if f.marker == "libnccl-net-ofi.so"]
    assert ofi.dirs[0] == "/opt/amazon/ofi-nccl/lib64"
    assert "/opt/amazon/ofi-nccl/lib64" in load_fabric_facts()[0]["efa"].plugin_dirs
    assert pod.env["NCCL_NET_PLUGIN"] == "ofi" and pod.run_as_root


def test_a_catalog_digest_pins_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    checks, images = load_fabric_facts()
    digest = "sha256:" + "ab" * 32
    pinned = {**images, "efa": replace(images["efa"], digest=digest)}
    # default_image reads the catalog where it lives (workloads/launch/images.py)
    from gpu_cluster.workloads.launch import images as launch_images

    monkeypatch.setattr(launch_images, "load_fabric_facts", lambda: (checks, pinned))
    assert vjob.default_image("efa") == f"{images['efa'].repository}:{images['efa'].tag}@{digest}"
    assert vjob.pinned(vjob.default_image("efa"))


def test_fabrics_without_a_catalog_image_and_cpu_runs_keep_the_ngc_image() -> None:
    assert vjob.default_image("tcpxo") == vjob.DEFAULT_IMAGE
    assert vjob.default_image("efa", cpu=True) == vjob.DEFAULT_IMAGE


@pytest.mark.parametrize("cpu", [False, True])
def test_slurm_job_checks_each_nodes_fabric_before_torchrun(cpu: bool) -> None:
    from tests.launch.test_render_stacks import SLURM_STACKS, args, outputs
    from gpu_cluster.workloads.validate import commands

    for stack in SLURM_STACKS:
        outs = outputs(stack)
        script = commands.render_run(outs, args(cpu=cpu), "20261201t070000z-ab12").files["validate.sbatch"]
        lines = script.splitlines()
        check = [i for i, line in enumerate(lines) if "-m gpu_cluster.workloads.health.fabric" in line]
        if cpu:
            assert not check, stack  # a CPU test cluster has no fabric to check
            continue
        (at,) = check
        line = lines[at]
        assert line.startswith('srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 ')
        assert f"--instance-type {outs.instance_type}" in line
        assert f" {vjob.venv_path(outs)}/bin/python -m gpu_cluster.workloads.health.fabric" in line
        assert "export PYTHONPATH=" in script  # the check runs from the job's own code
        first_torchrun = next(i for i, line in enumerate(lines) if "-m torch.distributed.run" in line)
        venv_made = next(i for i, line in enumerate(lines) if line.strip() == 'touch "$venv/.complete"')
        assert venv_made < at < first_torchrun, stack
