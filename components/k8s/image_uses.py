"""Which images a Kubernetes stack's in-cluster layer pulls by a tag with no published digest.

The plan lists them (components/plan_caveats.py, caveat ``images``) and ``gpu-cluster pin`` pins
them (gpu_cluster/pin.py), together with the job's own images. On GKE the list is the whole layer:
the installers and the device injector are by digest from the catalog, the Lustre CSI driver is a
GKE add-on, so what is left are the JobSet and Kueue controllers and an installer whose digest no
reference gives. On AKS the GPU and Network operators, their operands (the DOCA and NVIDIA drivers
among them) and AMD's operator with its DaemonSets are listed too, each with where its pin goes
(components/k8s/aks.py LAYER_IMAGES).
"""

from __future__ import annotations

from components.catalog import installer_fact, load_catalog
from components.gcp.rules import queued_provisioning
from components.image_pins import ImageUse
from components.k8s.addons import JOBSET_IMAGE, JOBSET_VERSION
from components.k8s.kueue import KUEUE_IMAGE, KUEUE_VERSION
from components.spec import ClusterSpec


def aks_image_uses(spec: ClusterSpec) -> list[ImageUse]:
    """The AKS layer's images by tag that a pin reaches (the size's GPU operator's, the Network Operator's)."""
    from components.k8s.aks import GpuOperator, layer_images

    operator: GpuOperator = "amd" if spec.instance.accelerator.vendor == "amd" else "nvidia"
    return [ImageUse(i.ref, i.what) for i in layer_images(operator)]


def layer_image_uses(spec: ClusterSpec) -> list[ImageUse]:
    """The layer's images that are pulled by tag unless the stack pins them."""
    if spec.orchestration.kind == "slurm":
        return []
    uses = [ImageUse(JOBSET_IMAGE, f"the JobSet controller of chart {JOBSET_VERSION}")]
    if spec.orchestration.kind == "aks":
        uses += aks_image_uses(spec)
    if spec.orchestration.kind != "gke":
        return uses
    if queued_provisioning(spec.compute.capacity.type, spec.compute.nodes):
        uses.append(ImageUse(KUEUE_IMAGE, f"the Kueue controller of chart {KUEUE_VERSION}"))
    fact = installer_fact(load_catalog().get(spec.compute.instance_type).network.fabric)
    if not fact.digest and not spec.orchestration.installer_image:
        uses.append(
            ImageUse(
                f"{fact.image}:{fact.tag}", "the NCCL plugin installer (privileged, every GPU node)", installer=True
            )
        )
    return uses
