"""The start-up gate (workloads/health/fabric.py, run by workloads/runtime/device.py and the node
gate): a GPU job whose node shows no GPU stops with exit 3, naming the driver and the CUDA it
found, instead of running on CPU and gloo. Tested by what it decides on this CPU machine: torch
here sees no GPU, which is the case the gate is for."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gpu_cluster.workloads.health import fabric, node_gate
from gpu_cluster.workloads.launch import validation as vjob
from gpu_cluster.workloads.runtime import device
from tests.launch.test_render_stacks import outputs

PROC = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.274.02  Release Build  (dvs-builder@U16)\n"


def test_the_driver_is_read_from_the_kernel_modules_version_line(tmp_path: Path) -> None:
    f = tmp_path / "version"
    f.write_text(PROC + "GCC version:  gcc version 12.2.0\n")
    assert fabric.driver_found(str(f)) == "535.274.02"
    assert fabric.driver_found(str(tmp_path / "absent")) is None


def test_an_old_driver_under_a_cuda_13_build_is_named_with_its_floor() -> None:
    why = fabric.start_up_refusal(8, 0, driver="535.274.02", cuda="13.1", torch_version="2.10.0a0")
    assert why == (
        "start-up gate: 8 GPU(s) expected on this node, torch 2.10.0a0 sees none: driver 535.274.02, CUDA 13.1; "
        "CUDA 13.x needs a driver >= 580, this node's is older; stopping (exit 3) instead of running on CPU"
    )


def test_no_driver_and_a_cpu_torch_are_each_named() -> None:
    why = fabric.start_up_refusal(8, 0, driver=None, cuda=None, torch_version="2.13.0+cpu")
    assert why is not None
    assert "no NVIDIA driver loaded (/proc/driver/nvidia/version absent)" in why
    assert "no CUDA (a CPU build of torch)" in why and "needs a driver" not in why
    rocm = fabric.start_up_refusal(8, 0, driver=None, cuda=None, torch_version="2.9.1", hip="7.2.4")
    assert rocm is not None and "no amdgpu driver loaded" in rocm and "ROCm 7.2.4" in rocm


def test_a_node_with_gpus_or_a_job_without_goes_on() -> None:
    assert fabric.start_up_refusal(8, 8, driver="580.126.20", cuda="13.1", torch_version="2") is None
    assert fabric.start_up_refusal(0, 0, driver=None, cuda=None, torch_version="2") is None


def test_a_gpu_job_on_this_cpu_node_stops_with_exit_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not torch.cuda.is_available()  # this machine: the node the gate is for
    monkeypatch.setenv(fabric.EXPECT_GPUS_ENV, "8")
    monkeypatch.delenv("GPUC_FORCE_CPU", raising=False)
    with pytest.raises(SystemExit) as info:
        device.setup(timeout_s=5)
    assert info.value.code == 3
    err = capsys.readouterr().err
    assert err.startswith("start-up gate: 8 GPU(s) expected on this node, torch ")
    assert f"torch {torch.__version__} sees none" in err and "stopping (exit 3) instead of running on CPU" in err
    # The node gate's own command stops the same way.
    with pytest.raises(SystemExit) as again:
        node_gate.main(["--gemm-seconds", "0.01"])
    assert again.value.code == 3


def test_force_cpu_and_a_bad_count_are_decided_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(fabric.EXPECT_GPUS_ENV, "8")
    monkeypatch.setenv("GPUC_FORCE_CPU", "1")
    device.require_gpus()  # a CPU run asked for: goes on
    monkeypatch.delenv("GPUC_FORCE_CPU")
    monkeypatch.setenv(fabric.EXPECT_GPUS_ENV, "eight")
    with pytest.raises(SystemExit) as info:
        device.require_gpus()
    assert info.value.code == 3
    assert "GPUC_EXPECT_GPUS='eight' is not a GPU count (allowed: an integer)" in capsys.readouterr().err


def test_the_launcher_sets_the_expectation_on_gpu_jobs_only() -> None:
    from gpu_cluster.workloads.launch.bundle import build as build_bundle

    outs = outputs("aws-h100-eks")
    gpu = vjob.for_cluster(outs, "20261207t010000z-beef", build_bundle())
    assert gpu.extra_env["GPUC_EXPECT_GPUS"] == "8"
    cpu = vjob.for_cluster(outs, "20261207t010000z-beef", build_bundle(), cpu=True)
    assert "GPUC_EXPECT_GPUS" not in cpu.extra_env and cpu.extra_env["GPUC_FORCE_CPU"] == "1"
