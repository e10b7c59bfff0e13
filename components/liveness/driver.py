"""The GPU driver against the job's image: per GPU pool, the driver its node image or operator
installs is new enough for the CUDA release the job's container was built on.

The host's driver comes with the platform, never the image: the NVIDIA container runtime mounts
the host's ``libcuda`` into the container, and the job's own ``command:`` bypasses NGC's entrypoint
(where the forward-compatibility libraries would be chosen), so the driver on the node is the one
the image's CUDA runtime meets. CUDA's minor version compatibility (NVIDIA, "CUDA Compatibility",
minor-version-compatibility, Table 1, read 2026-12-07): an application built with CUDA 13.x runs on
a driver >= 580, one built with 12.x on >= 525.

What each platform installs (each a fact with its source; a platform or setting whose driver was
not read is said so, and the check fails naming what to read or set):

* EKS, ``amiType: AL2023_x86_64_NVIDIA``: the 580 branch (awslabs/amazon-eks-ami issue 2470,
  "Containerd2.1 and Nvidia 580 Upgrade Timeline", 2025-10-14, and the 580 backports of PRs 2484,
  2496, 2509; the EKS user guide's AL2023 NVIDIA AMI text, "The EKS-optimized accelerated AMIs
  currently include NVIDIA driver version 580", as quoted in NVIDIA/aicr PR 2743, 2026).
* GKE, ``gpuDriverVersion: LATEST``: above 580.65 (rapidsai/deployment PR 659, 2026-02-05: "Using
  the latest flag ensures that driver version > 580.65 is installed, which is a requirement when
  using CUDA 13"; the issue it fixes, rapidsai/deployment 656, saw GKE's driver DaemonSet install
  535.274.02). GKE's own per-version driver table was not found in the sources read here; DEFAULT
  has no recorded driver and fails.
* AKS with the NVIDIA GPU Operator (``gpu_profile.driver: None``): the chart's driver,
  580.126.20 at chart v26.3.0 (NVIDIA/gpu-operator values.yaml at 30a8bbd lines 132-134; the pin
  in components/k8s/aks.py).

The job's CUDA is the catalog's record of its image (``fabrics.<f>.image.cuda``,
``runtime_images.<r>.cuda``). An image the catalog does not record (``--image``) is not checked
here: the job's start-up gate reads the driver and the CUDA it finds and stops on a mismatch
(workloads/health).

AMD pools run ROCm, whose user space meets the host's amdgpu kernel driver: AMD lists, per ROCm
release and GPU, the amdgpu releases it supports (ROCm 7.2.4 release notes, "User space, driver,
and firmware dependent changes", 2026-05-29). The job's ROCm is the catalog's record of its image
(``runtime_images.rocm.rocm``); the node's amdgpu is the release the AKS installer DaemonSet's
script installs (its ConfigMap ``install-amdgpu-driver``, components/k8s/aks_amd.py).

Slurm pools run no container image: the job installs torch from PyPI into a virtualenv
(``SLURM_TORCH``, workloads/launch/bundle.py JOB_REQUIREMENTS; a test holds the two equal), whose
CUDA is one of the builds PyTorch's release matrix lists for that release; the check takes the most
demanding of them, so it holds whichever one pip picks. The node's driver is the catalog's record
of the node image (``node_images.<n>.driver``):

* PCS, the sample AMI (``node_images.pcs-al2023``): 590.48.01 (PCS user guide, "AMI release
  notes", x86_64, Slurm 25.11).
* Azure's HPC image (``node_images.azure-ubuntu-hpc-2404``): 580.173.02 at the release the catalog
  pins (azhpc-images versions.json at tag ubuntu-hpc-2026072901), credited only to a scale set that
  runs that release (its ``image``); any other release, ``latest`` included, is *unverified*.
* Cluster Director: no source read here records its Slurm image's driver. The check holds only as
  *unverified* (counted apart): the job's start-up gate names the driver and the CUDA it finds and
  stops (exit 3) on a mismatch (workloads/health/fabric.py start_up_refusal).

Pure: no Pulumi, no ``workloads``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from gpu_cluster.components.catalog import CATALOG_PATH, CatalogError, load_catalog
from gpu_cluster.components.liveness.model import Check, Job, Plan, Resource
from gpu_cluster.components.liveness.node_image import node_image_name
from gpu_cluster.components.liveness.pools import pools

EKS_GROUP = "aws:eks/nodeGroup:NodeGroup"
GKE_POOL = "gcp:container/nodePool:NodePool"
AKS_POOL = "azure-native:containerservice:AgentPool"
AZURE_VMSS = "azure-native:compute:VirtualMachineScaleSet"
CHART = "kubernetes:helm.sh/v4:Chart"

CUDA_COMPAT = "docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html (Table 1, read 2026-12-07)"
# CUDA major -> the lowest driver branch that runs its minor releases (CUDA_COMPAT, Table 1).
CUDA_MIN_DRIVER = {13: 580, 12: 525}

EKS_NVIDIA_AMI = "AL2023_x86_64_NVIDIA"
EKS_DRIVER_SOURCE = (
    "awslabs/amazon-eks-ami issue 2470 (NVIDIA 580 on the AL2023 NVIDIA AMIs, 2025-10-14) and PRs 2484/2496/2509; "
    "EKS user guide, AL2023 NVIDIA AMI (quoted in NVIDIA/aicr PR 2743)"
)
GKE_LATEST_SOURCE = "rapidsai/deployment PR 659 (2026-02-05; issue 656: the driver DaemonSet installed 535.274.02)"
GPU_OPERATOR_CHART = "gpu-operator"
# GPU Operator chart version -> the driver its values.yaml installs.
GPU_OPERATOR_DRIVER = {"v26.3.0": "580.126.20"}
GPU_OPERATOR_SOURCE = "NVIDIA/gpu-operator deployments/gpu-operator/values.yaml at 30a8bbd, lines 132-134"

# The torch the Slurm job installs from PyPI (workloads/launch/bundle.py JOB_REQUIREMENTS; a test
# holds them equal: components never import workloads).
SLURM_TORCH = "2.13.0"
# PyTorch release -> the CUDA releases its Linux builds are made with, stable and experimental
# (TORCH_CUDA_SOURCE): pip's PyPI wheel is one of them.
TORCH_CUDA_BUILDS = {"2.13": ("12.6", "13.0", "13.2")}
TORCH_CUDA_SOURCE = (
    "pytorch/pytorch RELEASE.md, Release Compatibility Matrix, row 2.13: stable CUDA 12.6 and 13.0, experimental 13.2 "
    "(read 2026-12-07 from a copy of the file; the upstream copy at hand predates 2.13)"
)
# ROCm release -> GPU model -> the amdgpu releases AMD supports with it, as (line, lowest patch,
# highest patch): "30.20.x where x (0-1)" is ("30.20", 0, 1). ROCm 7.2.4's MI300X row (ROCM_SOURCE):
# 30.20.x (0-1), 30.10.x (0-2), 6.4.z (0-3), 6.3.3. The 30.30 line is not recorded: the copy of the
# 7.2.4 page read here shows it only in the MI355X and MI350X rows (ROCm 7.2.1's page lists 30.30.0-2
# for MI300X too), so a 30.30 driver fails this check until someone reads the row again.
ROCM_AMDGPU: dict[str, dict[str, tuple[tuple[str, int, int], ...]]] = {
    "7.2.4": {"MI300X": (("30.20", 0, 1), ("30.10", 0, 2), ("6.4", 0, 3), ("6.3", 3, 3))},
}
ROCM_SOURCE = (
    "rocm.docs.amd.com/en/docs-7.2.4/about/release-notes.html (2026-05-29), User space, driver, and firmware "
    "dependent changes, MI300X row"
)
# The AKS installer's ConfigMap and script (components/k8s/aks_amd.py AMD_DRIVER_INSTALLER; liveness
# reads the plan, never the component).
AMD_INSTALLER = "install-amdgpu-driver"
AMD_INSTALLER_SCRIPT = "install-driver.sh"
CONFIGMAP = "kubernetes:core/v1:ConfigMap"

CLUSTER_DIRECTOR_DRIVER = (
    "GCP Cluster Director's Slurm image: no source read here records its NVIDIA driver (unverified); the job's "
    "start-up gate names the driver and the CUDA it finds and stops (exit 3) on a mismatch "
    "(workloads/health/fabric.py start_up_refusal)"
)
AZURE_HPC_IMAGE_DRIVER = (
    "Azure's HPC image at a release other than the one the catalog records (node_images.azure-ubuntu-hpc-2404 "
    "image and driver), e.g. at latest: its NVIDIA driver is not recorded (unverified); the job's start-up gate "
    "names the driver and the CUDA it finds and stops (exit 3) on a mismatch (workloads/health/fabric.py "
    "start_up_refusal)"
)


@dataclass(frozen=True, slots=True)
class Driver:
    """The driver a pool's nodes get: its branch (None where no source records it) and why."""

    branch: int | None
    what: str
    source: str
    fix: str = ""


@functools.cache
def _catalog() -> Mapping[str, Any]:
    with open(CATALOG_PATH, encoding="utf-8") as fh:
        doc: Mapping[str, Any] = yaml.safe_load(fh)
    return doc


def _repository(image: str) -> str:
    """An image reference without its digest and tag (a registry's port is not a tag)."""
    name = image.split("@", 1)[0]
    return name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name


def _cuda_of(image: str) -> tuple[str, str] | None:
    """(CUDA release, catalog path) of an image the catalog records, by its repository."""
    name = _repository(image)
    doc = _catalog()
    candidates = [(f"fabrics.{n}.image", (f.get("image") or {})) for n, f in (doc.get("fabrics") or {}).items()]
    candidates += [(f"runtime_images.{n}", r or {}) for n, r in (doc.get("runtime_images") or {}).items()]
    for where, raw in candidates:
        if raw.get("repository") == name and raw.get("cuda"):
            return str(raw["cuda"]), where
    return None


def _upstream(image: str, plan: Plan) -> str:
    """The image as its registry names it where the stack pulls it through a mirror (the ECR
    pull-through cache: ``scheduler.mirrors`` maps the registry to the mirror's prefix)."""
    mirrors = (plan.outputs.get("scheduler") or {}).get("mirrors") or {}
    for registry, mirror in mirrors.items():
        if image.startswith(f"{mirror}/"):
            return f"{registry}/{image[len(mirror) + 1 :]}"
    return image


def _nvidia(instance_type: str) -> bool:
    try:
        it = load_catalog().get(instance_type)
    except CatalogError:
        return False
    return bool(it.accelerator.count) and it.accelerator.vendor == "nvidia"


def _branch(version: str) -> int:
    return int(version.split(".", 1)[0])


def _accelerator(instance_type: str) -> tuple[str, str]:
    """(vendor, model) of an instance type's GPU; ('', '') where the catalog has none."""
    try:
        acc = load_catalog().get(instance_type).accelerator
    except CatalogError:
        return "", ""
    return (acc.vendor, acc.model) if acc.count else ("", "")


def _eks(r: Resource) -> Driver:
    ami = str(r.inputs.get("amiType", ""))
    if ami == EKS_NVIDIA_AMI:
        return Driver(580, f"amiType {ami}: the NVIDIA 580 branch", EKS_DRIVER_SOURCE)
    return Driver(
        None, f"amiType {ami or '(none)'}: no driver recorded", EKS_DRIVER_SOURCE, f"amiType {EKS_NVIDIA_AMI}"
    )


def _gke(r: Resource) -> Driver:
    cfg: Mapping[str, Any] = r.inputs.get("nodeConfig") or {}
    accels = cfg.get("guestAccelerators") or [{}]
    install = str((accels[0].get("gpuDriverInstallationConfig") or {}).get("gpuDriverVersion", ""))
    if install == "LATEST":
        return Driver(580, "gpuDriverVersion LATEST: above 580.65", GKE_LATEST_SOURCE)
    return Driver(
        None,
        f"gpuDriverVersion {install or '(unset)'}: no source read here records its driver (a report saw 535)",
        GKE_LATEST_SOURCE,
        "gpuDriverVersion LATEST (components/gcp/compute.py GPU_DRIVER)",
    )


def _aks(plan: Plan) -> Driver:
    charts = [c for c in plan.of(CHART) if c.inputs.get("chart") == GPU_OPERATOR_CHART]
    version = str(charts[0].inputs.get("version", "")) if charts else ""
    driver = GPU_OPERATOR_DRIVER.get(version)
    if driver is None:
        what = f"GPU Operator chart {version}: its driver not recorded" if charts else "no GPU Operator planned"
        return Driver(None, what, GPU_OPERATOR_SOURCE, "record the chart's driver.version in GPU_OPERATOR_DRIVER")
    return Driver(_branch(driver), f"GPU Operator chart {version}: driver {driver}", GPU_OPERATOR_SOURCE)


def pool_drivers(plan: Plan) -> list[tuple[str, str, Driver]]:
    """(pool, instance type, driver) of every NVIDIA GPU pool a Kubernetes plan makes (the pools as
    the liveness model reads them, so a capacity block's type comes from its launch template)."""
    out: list[tuple[str, str, Driver]] = []
    for pool in pools(plan):
        if not pool.gpu or not _nvidia(pool.instance_type):
            continue
        words = set(pool.resource.replace("(", " ").replace(")", " ").split())
        for r in plan.of(EKS_GROUP, GKE_POOL, AKS_POOL):
            if r.name not in words and str(r.inputs.get("name", "")) not in words:
                continue
            driver = _eks(r) if r.type == EKS_GROUP else _gke(r) if r.type == GKE_POOL else _aks(plan)
            out.append((pool.resource, pool.instance_type, driver))
    return out


def _image_of(plan: Plan, pool_resource: str) -> dict[str, str] | None:
    """The image reference of the plan's scale set a pool names (``compute/VirtualMachineScaleSet <name>``)."""
    for r in plan.of(AZURE_VMSS):
        if pool_resource.endswith(f" {r.name}"):
            ref = ((r.inputs.get("virtualMachineProfile") or {}).get("storageProfile") or {}).get("imageReference")
            return {str(k): str(v) for k, v in (ref or {}).items()}
    return None


def _node_image_driver(plan: Plan, pool_resource: str) -> Driver:
    """The driver the catalog records for the plan's Slurm node image (``node_images.<n>.driver``),
    credited only to a pool that runs the release it was read for (``node_images.<n>.image``)."""
    name = node_image_name(plan)
    raw = (_catalog().get("node_images") or {}).get(name or "") or {}
    version = raw.get("driver")
    ids = raw.get("sources") or []
    listed = [ids] if isinstance(ids, str) else [str(i) for i in ids]
    pinned = {str(k): str(v) for k, v in (raw.get("image") or {}).items()}
    runs = _image_of(plan, pool_resource) if pinned else None
    if version and pinned and runs != pinned:
        ref = ":".join((runs or {}).get(k, "?") for k in ("publisher", "offer", "sku", "version"))
        return Driver(None, f"{AZURE_HPC_IMAGE_DRIVER}; the pool runs {ref}, not {pinned.get('version')}", "")
    if not version:
        unrecorded = {"gcp": CLUSTER_DIRECTOR_DRIVER, "azure": AZURE_HPC_IMAGE_DRIVER}
        return Driver(None, unrecorded.get(str(plan.outputs.get("cloud")), ""), "")
    source = f"components/catalog.yaml node_images.{name} ({', '.join(listed)})"
    return Driver(_branch(str(version)), f"node image {name}: driver {version}", source)


def slurm_checks(plan: Plan) -> list[Check]:
    """Per NVIDIA GPU pool of a Slurm plan: its node image's driver runs the CUDA of the torch the
    job installs (every CUDA PyTorch builds that release with)."""
    release = ".".join(SLURM_TORCH.split(".")[:2])
    builds = TORCH_CUDA_BUILDS.get(release)
    out: list[Check] = []
    for pool in pools(plan):
        if not pool.gpu or not _nvidia(pool.instance_type):
            continue
        obj = f"{pool.resource} ({pool.instance_type})"
        check = f"GPU driver runs the CUDA of torch {SLURM_TORCH} (the Slurm job's PyPI wheel)"
        majors = sorted({int(b.split(".", 1)[0]) for b in builds or ()})
        if builds is None or any(m not in CUDA_MIN_DRIVER for m in majors):
            holds = unverified = False
            why = f"no CUDA builds recorded for torch {release}" if builds is None else "a CUDA major without a floor"
            source = f"{TORCH_CUDA_SOURCE}; {CUDA_COMPAT}"
            fix = "record them in components/liveness/driver.py TORCH_CUDA_BUILDS and CUDA_MIN_DRIVER"
        else:
            need = max(CUDA_MIN_DRIVER[m] for m in majors)
            driver = _node_image_driver(plan, pool.resource)
            wants = (
                f"torch {release} is built with CUDA {', '.join(builds)}; CUDA {majors[-1]}.x needs a driver >= {need}"
            )
            if driver.branch is None:
                holds = unverified = bool(driver.what)
                why = f"{driver.what or 'no node image driver recorded'}; {wants}"
                source = f"{TORCH_CUDA_SOURCE}; {CUDA_COMPAT}"
                fix = "" if holds else "record the node image's driver in components/catalog.yaml node_images"
            else:
                holds, unverified = driver.branch >= need, False
                why = f"{driver.what}; {wants}"
                source = f"{driver.source}; {TORCH_CUDA_SOURCE}; {CUDA_COMPAT}"
                fix = "" if holds else f"a node image with a driver >= {need} (compute.image)"
        out.append(
            Check(
                kind="node-image",
                object=obj,
                check=check,
                holds=holds,
                unverified=unverified,
                why=why,
                source=source,
                fix=fix,
            )
        )
    return out


def _rocm_of(image: str) -> tuple[str, str] | None:
    """(ROCm release, catalog path) of an image the catalog records as a ROCm one, by repository."""
    name = _repository(image)
    for runtime, raw in (_catalog().get("runtime_images") or {}).items():
        if (raw or {}).get("repository") == name and (raw or {}).get("rocm"):
            return str(raw["rocm"]), f"runtime_images.{runtime}"
    return None


def _amdgpu_installed(plan: Plan) -> str | None:
    """The amdgpu release the plan's installer script sets (its ``version=`` line), if it has one."""
    for r in plan.of(CONFIGMAP):
        if (r.inputs.get("metadata") or {}).get("name") != AMD_INSTALLER:
            continue
        script = str((r.inputs.get("data") or {}).get(AMD_INSTALLER_SCRIPT, ""))
        for line in script.splitlines():
            if line.startswith("version="):
                return line.split("=", 1)[1].strip().strip("'\"")
    return None


def _supported(version: str, lines: tuple[tuple[str, int, int], ...]) -> bool:
    head, _, patch = version.rpartition(".")
    if not patch.isdigit():
        return False
    return any(head == line and low <= int(patch) <= high for line, low, high in lines)


def amd_checks(plan: Plan, image: str) -> list[Check]:
    """Per AMD GPU pool: the amdgpu release its installer puts on the node is one AMD supports with
    the ROCm release of the job's image, for that GPU."""
    rocm = _rocm_of(_upstream(image, plan))
    if rocm is None:
        return []
    release, where = rocm
    installed = _amdgpu_installed(plan)
    out: list[Check] = []
    for pool in pools(plan):
        vendor, model = _accelerator(pool.instance_type)
        if not pool.gpu or vendor != "amd":
            continue
        lines = ROCM_AMDGPU.get(release, {}).get(model)
        obj = f"{pool.resource} ({pool.instance_type})"
        check = f"amdgpu driver runs ROCm {release} (image {image.split('@', 1)[0]}, catalog {where})"
        listed = ", ".join(f"{line}.{lo}" + (f"-{hi}" if hi != lo else "") for line, lo, hi in lines or ())
        if lines is None:
            holds, why = False, f"no amdgpu releases recorded for ROCm {release} on {model}"
            fix = f"record them from the ROCm {release} release notes in components/liveness/driver.py ROCM_AMDGPU"
        elif installed is None:
            holds, why = False, f"the plan installs no amdgpu driver (no {AMD_INSTALLER} script with a version= line)"
            fix = "the AKS amdgpu installer DaemonSet (components/k8s/aks_amd.py)"
        else:
            holds = _supported(installed, lines)
            why = f"the installer puts amdgpu {installed} on the node; ROCm {release} on {model} supports {listed}"
            fix = (
                "" if holds else f"install an amdgpu release of {listed} (components/k8s/aks_amd.py AMD_DRIVER_VERSION)"
            )
        out.append(
            Check(
                kind="node-image",
                object=obj,
                check=check,
                holds=holds,
                why=why,
                source=f"{ROCM_SOURCE}; components/catalog.yaml {where}",
                fix=fix,
            )
        )
    return out


def checks(plan: Plan, job: Job | None) -> list[Check]:
    """Per NVIDIA GPU pool: its driver runs the CUDA the job's image (or, on Slurm, its torch
    wheel) was built on."""
    if job is not None and job.scheduler == "slurm":
        return slurm_checks(plan)
    if job is None or job.scheduler != "kubernetes" or not job.image:
        return []
    cuda = _cuda_of(_upstream(job.image, plan))
    if cuda is None:
        return amd_checks(plan, job.image)
    release, where = cuda
    major = int(release.split(".", 1)[0])
    need = CUDA_MIN_DRIVER.get(major)
    out: list[Check] = []
    for resource, itype, driver in pool_drivers(plan):
        obj = f"{resource} ({itype})"
        check = f"GPU driver runs CUDA {release} (image {job.image.split('@', 1)[0]}, catalog {where})"
        if need is None:
            holds, why, source = False, f"no driver floor is recorded for CUDA {major}.x", CUDA_COMPAT
            fix = "record it in components/liveness/driver.py CUDA_MIN_DRIVER"
        else:
            holds = driver.branch is not None and driver.branch >= need
            why = f"{driver.what}; CUDA {major}.x needs a driver >= {need}"
            source = f"{driver.source}; {CUDA_COMPAT}"
            fix = "" if holds else driver.fix or f"a node image with a driver >= {need}"
        out.append(Check(kind="node-image", object=obj, check=check, holds=holds, why=why, source=source, fix=fix))
    return out
