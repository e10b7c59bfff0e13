"""Liveness: each NVIDIA GPU pool's driver against the CUDA the job's image was built on
(components/liveness/driver.py), on the bundled stacks and on plans changed to break it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from components import liveness as live
from components.liveness import driver
from tests.components._liveness import bundled

NVIDIA_K8S = {
    "aws-h100-eks": ("AL2023_x86_64_NVIDIA", "13.3.0"),
    "aws-h100-capacity-block": ("AL2023_x86_64_NVIDIA", "13.3.0"),
    "gcp-h100-gke": ("LATEST", "13.1.0"),
    "gcp-h200-gke": ("LATEST", "13.1.0"),
    "azure-h100-aks": ("v26.3.0", "13.1.0"),
}


def _driver_checks(result: live.Liveness) -> list[live.Check]:
    return [c for c in result.checks if c.kind == "node-image" and c.check.startswith("GPU driver runs CUDA")]


@pytest.mark.parametrize("stack", sorted(NVIDIA_K8S))
def test_every_bundled_nvidia_pool_has_a_driver_that_runs_the_image(stack: str) -> None:
    p = bundled(stack)
    (check,) = _driver_checks(p.result)
    setting, cuda = NVIDIA_K8S[stack]
    assert check.holds, check.why
    assert f"CUDA {cuda}" in check.check and setting in check.why
    assert "CUDA 13.x needs a driver >= 580" in check.why
    assert driver.CUDA_COMPAT in check.source and p.spec.compute.instance_type in check.object


@pytest.mark.parametrize("stack", ["azure-mi300x-aks", "aws-h200-slurm", "gcp-h200-slurm"])
def test_no_cuda_check_where_no_cuda_image_runs(stack: str) -> None:
    # MI300X runs ROCm; the Slurm jobs run no container image.
    assert _driver_checks(bundled(stack).result) == []


def _with_inputs(plan: live.Plan, type_: str, edit: Any) -> live.Plan:
    resources = tuple(
        dataclasses.replace(r, inputs=edit(dict(r.inputs))) if r.type == type_ else r for r in plan.resources
    )
    return dataclasses.replace(plan, resources=resources)


def _gke_default(inputs: dict[str, Any]) -> dict[str, Any]:
    cfg = dict(inputs.get("nodeConfig") or {})
    if cfg.get("guestAccelerators"):
        accel = dict(cfg["guestAccelerators"][0], gpuDriverInstallationConfig={"gpuDriverVersion": "DEFAULT"})
        cfg["guestAccelerators"] = [accel]
    return {**inputs, "nodeConfig": cfg}


def test_gke_default_driver_fails_and_names_latest() -> None:
    p = bundled("gcp-h100-gke")
    plan = _with_inputs(p.plan, driver.GKE_POOL, _gke_default)
    (check,) = _driver_checks(live.evaluate(plan, p.job))
    assert not check.holds
    assert "gpuDriverVersion DEFAULT: no source read here records its driver" in check.why
    assert check.fix == "gpuDriverVersion LATEST (components/gcp/compute.py GPU_DRIVER)"


def test_an_eks_pool_off_the_nvidia_ami_fails() -> None:
    p = bundled("aws-h100-eks")
    plan = _with_inputs(p.plan, driver.EKS_GROUP, lambda i: {**i, "amiType": "AL2023_x86_64_STANDARD"})
    (check,) = _driver_checks(live.evaluate(plan, p.job))
    assert not check.holds and check.fix == "amiType AL2023_x86_64_NVIDIA"


def test_an_unrecorded_gpu_operator_chart_fails() -> None:
    p = bundled("azure-h100-aks")
    plan = _with_inputs(p.plan, driver.CHART, lambda i: {**i, "version": "v99.0.0"})
    (check,) = _driver_checks(live.evaluate(plan, p.job))
    assert not check.holds and "GPU Operator chart v99.0.0: its driver not recorded" in check.why


def test_an_image_the_catalog_does_not_record_is_left_to_the_start_up_gate() -> None:
    p = bundled("aws-h100-eks")
    assert p.job is not None
    job = dataclasses.replace(p.job, image="registry.example.com/team/train:v1")
    assert _driver_checks(live.evaluate(p.plan, job)) == []
