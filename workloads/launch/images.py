"""The image a job's pods run when ``--image`` names none: the GPU runtime's or the fabric's from
the catalog (by digest where its publisher gives one), else NGC's PyTorch image; the torch it
carries against the one the job is tested with; whether a reference is pinned.
"""

from __future__ import annotations

from components.catalog import load_catalog, load_fabric_facts, load_runtime_images
from workloads.launch.bundle import JOB_REQUIREMENTS


# The image the JobSet runs when ``submit --image`` names none: NVIDIA's public NGC PyTorch
# image (torch, NCCL, numpy, PyYAML, matplotlib). Whether its NCCL finds the fabric's net
# plugin is what the judge's transport check reports (a Socket fallback fails the run).
DEFAULT_IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"


def default_image(fabric: str, cpu: bool = False, gpu_runtime: str | None = None) -> str:
    """The GPU runtime's image where the catalog names one (``runtime_images.rocm``: NVIDIA's
    DEFAULT_IMAGE has no ROCm), else the fabric's (``fabrics.<f>.image``: by digest where its
    publisher gives one, else by tag, which ``submit`` resolves to a digest), else DEFAULT_IMAGE."""
    if cpu:
        return DEFAULT_IMAGE
    runtime_img = load_runtime_images().get(gpu_runtime or "")
    if runtime_img is not None:
        return runtime_img.ref
    img = load_fabric_facts()[1].get(fabric)
    if img is None:
        return DEFAULT_IMAGE
    return img.ref


TESTED_TORCH = next(r.split("==", 1)[1] for r in JOB_REQUIREMENTS if r.startswith("torch=="))
"""The torch the job is tested with (the Slurm job installs it; pyproject's [validate] floor)."""


def image_torch(image: str) -> str | None:
    """The torch the catalog records for ``image`` (a fabric's or a GPU runtime's image), or None
    where it records none (NGC's DEFAULT_IMAGE, a user's --image)."""
    known = [*load_runtime_images().values(), *load_fabric_facts()[1].values()]
    for img in known:
        if image.split("@", 1)[0].split(":", 1)[0] == img.repository:
            return img.torch
    return None


def image_torch_note(image: str) -> str | None:
    """A line for the user where the pods' torch is not the one the job is tested with; None where
    it is. The job's code runs on the image's own torch: nothing here has run it on another."""
    found = image_torch(image)
    if found == TESTED_TORCH:
        return None
    has = f"carries torch {found} (the catalog's record)" if found else "has a torch the catalog does not record"
    return f"image {image} {has}; the job is tested with torch {TESTED_TORCH} only"


def gpu_runtime_of(instance_type: str | None) -> str | None:
    """``cuda`` or ``rocm`` for a catalog type; None for none (a CPU cluster)."""
    return load_catalog().get(instance_type).software.gpu_runtime if instance_type else None


def pinned(image: str) -> bool:
    """``repo[:tag]@sha256:<64 hex>``: what the pods run cannot change under them."""
    _, sep, digest = image.partition("@")
    return bool(sep) and digest.startswith("sha256:") and len(digest) == 71
