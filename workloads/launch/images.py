"""The image a job's pods run when ``--image`` names none: the GPU runtime's or the fabric's from
the catalog (by digest where its publisher gives one), else NGC's PyTorch image; the torch it
carries against the one the job is tested with; whether a reference is pinned.
"""

from __future__ import annotations

from gpu_cluster.components.catalog import FabricImage, load_catalog, load_fabric_facts, load_runtime_images
from gpu_cluster.workloads.launch.bundle import JOB_REQUIREMENTS


# The image the JobSet runs on NVIDIA GPUs when ``submit --image`` names none and the fabric names
# no image of its own: the catalog's ``runtime_images.cuda``, NVIDIA's NGC PyTorch image (torch,
# NCCL, numpy, PyYAML, matplotlib), chosen by the torch and CUDA its release notes publish. Whether
# its NCCL finds the fabric's net plugin is what the judge's transport check reports (a Socket
# fallback fails the run).
DEFAULT_IMAGE = load_runtime_images()["cuda"].ref


def default_image(fabric: str, cpu: bool = False, gpu_runtime: str | None = None) -> str:
    """The GPU runtime's image where it is not CUDA (``runtime_images.rocm``: NVIDIA's images have
    no ROCm), else the fabric's (``fabrics.<f>.image``: by digest where its publisher gives one,
    else by tag, which ``submit`` resolves to a digest), else DEFAULT_IMAGE (``runtime_images.cuda``)."""
    if cpu:
        return DEFAULT_IMAGE
    runtime = gpu_runtime or "cuda"
    runtime_img = load_runtime_images().get(runtime)
    if runtime != "cuda" and runtime_img is not None:
        return runtime_img.ref
    img = load_fabric_facts()[1].get(fabric)
    if img is None:
        return DEFAULT_IMAGE
    return img.ref


TESTED_TORCH = next(r.split("==", 1)[1] for r in JOB_REQUIREMENTS if r.startswith("torch=="))
"""The torch the job is tested with (the Slurm job installs it; pyproject's [validate] floor)."""


def _image_fact(image: str) -> FabricImage | None:
    """The catalog's record of the image ``image`` names (by repository: any tag or digest)."""
    name = image.split("@", 1)[0]
    if ":" in name.rsplit("/", 1)[-1]:
        name = name.rsplit(":", 1)[0]
    known = [*load_runtime_images().values(), *load_fabric_facts()[1].values()]
    return next((img for img in known if img.repository == name), None)


def image_torch(image: str) -> str | None:
    """The torch the catalog records for ``image`` (a fabric's or a GPU runtime's image), or None
    where it records none (a user's --image)."""
    img = _image_fact(image)
    return img.torch if img is not None else None


def image_tested_torch(image: str) -> str | None:
    """The torch release the job's tests run on for ``image``'s torch: TESTED_TORCH (CI) where the
    image carries it, the catalog's ``tested_on`` release where the image carries a pre-release build
    of that line (``make image-torch`` runs the tests on it); None where neither."""
    img = _image_fact(image)
    if img is None:
        return None
    if img.torch == TESTED_TORCH:
        return TESTED_TORCH
    return img.tested_on or None


def image_torch_note(image: str) -> str | None:
    """A line for the user where the pods' torch is not the one CI tests the job with; None where
    it is. The job's code runs on the image's own torch."""
    found = image_torch(image)
    if found == TESTED_TORCH:
        return None
    tested = image_tested_torch(image)
    if found and tested:
        return (
            f"image {image} carries torch {found} (the catalog's record), a pre-release build of {tested}: the job "
            f"is tested on torch {TESTED_TORCH} in CI and on {tested} by `make image-torch`"
        )
    has = f"carries torch {found} (the catalog's record)" if found else "has a torch the catalog does not record"
    return f"image {image} {has}; the job is tested with torch {TESTED_TORCH} only"


def gpu_runtime_of(instance_type: str | None) -> str | None:
    """``cuda`` or ``rocm`` for a catalog type; None for none (a CPU cluster)."""
    return load_catalog().get(instance_type).software.gpu_runtime if instance_type else None


def pinned(image: str) -> bool:
    """``repo[:tag]@sha256:<64 hex>``: what the pods run cannot change under them."""
    _, sep, digest = image.partition("@")
    return bool(sep) and digest.startswith("sha256:") and len(digest) == 71
