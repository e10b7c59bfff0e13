"""Liveness: each NVIDIA GPU pool's driver against the CUDA the job's image was built on
(components/liveness/driver.py), on the bundled stacks and on plans changed to break it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gpu_cluster.components import liveness as live
from gpu_cluster.components.liveness import driver
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


def test_no_cuda_check_where_no_cuda_runs() -> None:
    # MI300X runs ROCm.
    assert _driver_checks(bundled("azure-mi300x-aks").result) == []


def _amd_checks(result: live.Liveness) -> list[live.Check]:
    return [c for c in result.checks if c.kind == "node-image" and c.check.startswith("amdgpu driver runs ROCm")]


def test_the_mi300x_pools_amdgpu_runs_the_images_rocm() -> None:
    p = bundled("azure-mi300x-aks")
    (check,) = _amd_checks(p.result)
    assert check.holds, check.why
    assert "ROCm 7.2.4" in check.check and "runtime_images.rocm" in check.check
    assert "amdgpu 30.20.1" in check.why and "30.20.0-1, 30.10.0-2, 6.4.0-3, 6.3.3" in check.why
    assert driver.ROCM_SOURCE in check.source and "Standard_ND96isr_MI300X_v5" in check.object


def _installer_version(version: str) -> Any:
    def edit(inputs: dict[str, Any]) -> dict[str, Any]:
        if (inputs.get("metadata") or {}).get("name") != driver.AMD_INSTALLER:
            return inputs
        script = inputs["data"][driver.AMD_INSTALLER_SCRIPT]
        lines = [f"version={version}" if line.startswith("version=") else line for line in script.splitlines()]
        return {**inputs, "data": {driver.AMD_INSTALLER_SCRIPT: "\n".join(lines)}}

    return edit


@pytest.mark.parametrize(
    ("version", "holds"),
    [("30.20.0", True), ("30.10.2", True), ("6.3.3", True), ("30.20.2", False), ("6.3.2", False), ("29.1.0", False)],
)
def test_an_amdgpu_release_amd_does_not_list_for_the_rocm_fails(version: str, holds: bool) -> None:
    p = bundled("azure-mi300x-aks")
    plan = _with_inputs(p.plan, driver.CONFIGMAP, _installer_version(version))
    (check,) = _amd_checks(live.evaluate(plan, p.job))
    assert check.holds is holds, check.why
    assert f"amdgpu {version}" in check.why
    assert ("AMD_DRIVER_VERSION" in check.fix) is not holds


def test_an_mi300x_plan_without_the_installer_fails() -> None:
    p = bundled("azure-mi300x-aks")
    plan = dataclasses.replace(
        p.plan,
        resources=tuple(
            r
            for r in p.plan.resources
            if not (r.type == driver.CONFIGMAP and (r.inputs.get("metadata") or {}).get("name") == driver.AMD_INSTALLER)
        ),
    )
    (check,) = _amd_checks(live.evaluate(plan, p.job))
    assert not check.holds and "installs no amdgpu driver" in check.why


def test_an_unrecorded_rocm_release_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    p = bundled("azure-mi300x-aks")
    monkeypatch.setattr(driver, "ROCM_AMDGPU", {})
    (check,) = _amd_checks(live.evaluate(p.plan, p.job))
    assert not check.holds and "no amdgpu releases recorded for ROCm 7.2.4 on MI300X" in check.why


def test_the_installer_the_check_reads_is_the_one_the_component_writes() -> None:
    from gpu_cluster.components.k8s import aks_amd

    assert aks_amd.AMD_DRIVER_INSTALLER == driver.AMD_INSTALLER
    assert f"version={aks_amd.AMD_DRIVER_VERSION}" in aks_amd.amd_driver_script().splitlines()


def _slurm_driver_checks(result: live.Liveness) -> list[live.Check]:
    return [c for c in result.checks if c.kind == "node-image" and c.check.startswith("GPU driver runs the CUDA of")]


def test_the_pcs_sample_amis_driver_runs_the_slurm_jobs_torch() -> None:
    p = bundled("aws-h200-slurm")
    (check,) = _slurm_driver_checks(p.result)
    assert check.holds and not check.unverified, check.why
    assert "node image pcs-al2023: driver 590.48.01" in check.why
    assert "CUDA 12.6, 13.0, 13.2" in check.why and "CUDA 13.x needs a driver >= 580" in check.why
    assert "pcs-ami-notes" in check.source and driver.TORCH_CUDA_SOURCE in check.source
    assert "p5en.48xlarge" in check.object


def test_cluster_director_holds_only_unverified_naming_the_start_up_gate() -> None:
    (check,) = _slurm_driver_checks(bundled("gcp-h200-slurm").result)
    assert check.holds and check.unverified
    assert "no source read here records its NVIDIA driver" in check.why and "exit 3" in check.why


def test_a_pcs_image_with_an_older_driver_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    p = bundled("aws-h200-slurm")
    doc = driver._catalog()
    images = {**doc["node_images"], "pcs-al2023": {**doc["node_images"]["pcs-al2023"], "driver": "570.172.08"}}
    monkeypatch.setattr(driver, "_catalog", lambda: {**doc, "node_images": images})
    (check,) = _slurm_driver_checks(live.evaluate(p.plan, p.job))
    assert not check.holds and "driver 570.172.08" in check.why
    assert check.fix == "a node image with a driver >= 580 (compute.image)"


def test_a_pcs_image_with_no_recorded_driver_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    p = bundled("aws-h200-slurm")
    doc = driver._catalog()
    entry = {k: v for k, v in doc["node_images"]["pcs-al2023"].items() if k != "driver"}
    monkeypatch.setattr(driver, "_catalog", lambda: {**doc, "node_images": {**doc["node_images"], "pcs-al2023": entry}})
    (check,) = _slurm_driver_checks(live.evaluate(p.plan, p.job))
    assert not check.holds and not check.unverified and "node_images" in check.fix


def test_an_unrecorded_torch_release_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    p = bundled("aws-h200-slurm")
    monkeypatch.setattr(driver, "SLURM_TORCH", "2.99.0")
    (check,) = _slurm_driver_checks(live.evaluate(p.plan, p.job))
    assert not check.holds and "no CUDA builds recorded for torch 2.99" in check.why


def test_the_checked_torch_is_the_one_the_slurm_job_installs() -> None:
    from gpu_cluster.workloads.launch.bundle import JOB_REQUIREMENTS

    assert f"torch=={driver.SLURM_TORCH}" in JOB_REQUIREMENTS


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
