"""Which images a Kubernetes stack's in-cluster layer pulls by a tag with no published digest.

The plan lists them (components/plan_caveats.py, caveat ``images``) and ``gpu-cluster pin`` pins
them (gpu_cluster/pin.py), together with the job's own images. On GKE the list is the whole layer:
the installers and the device injector are by digest from the catalog, the Lustre CSI driver is a
GKE add-on, so what is left are the JobSet and Kueue controllers and an installer whose digest no
reference gives. On EKS it is every chart's image: the NVIDIA and EFA device plugins and JobSet
(each chart takes a pin as its image values, components/aws/orchestration_eks.py); what EKS's
managed add-ons pull is EKS's choice, named by :func:`unpinnable`. AKS adds its operators' images
in its own branch.
"""

from __future__ import annotations

from components.aws import versions as aws_versions
from components.catalog import installer_fact, load_catalog
from components.gcp.rules import queued_provisioning
from components.image_pins import ImageUse
from components.k8s.addons import JOBSET_IMAGE, JOBSET_VERSION
from components.k8s.kueue import KUEUE_IMAGE, KUEUE_VERSION
from components.spec import ClusterSpec


def layer_image_uses(spec: ClusterSpec) -> list[ImageUse]:
    """The layer's images that are pulled by tag unless the stack pins them."""
    if spec.orchestration.kind == "slurm":
        return []
    uses = [ImageUse(JOBSET_IMAGE, f"the JobSet controller of chart {JOBSET_VERSION}")]
    if spec.orchestration.kind == "eks":
        return [*_eks_uses(spec), *uses]
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


def _eks_uses(spec: ClusterSpec) -> list[ImageUse]:
    efa = aws_versions.efa_plugin_image(spec.region)
    host = efa.split("/", 1)[0]
    return [
        ImageUse(
            aws_versions.NVIDIA_PLUGIN_IMAGE,
            f"the NVIDIA device plugin of chart {aws_versions.NVIDIA_PLUGIN_VERSION} (every GPU node)",
        ),
        ImageUse(
            efa,
            f"the EFA device plugin of chart {aws_versions.EFA_PLUGIN_VERSION} (every GPU node; an EKS registry: "
            f"`aws ecr get-login-password --region {spec.region} | docker login --username AWS "
            f"--password-stdin {host}` before `gpu-cluster pin`)",
        ),
    ]


def unpinnable(spec: ClusterSpec) -> list[str]:
    """What the layer pulls whose reference the stack does not choose, so no pin can name it (one
    phrase each, for the plan's images caveat)."""
    if spec.orchestration.kind == "eks":
        return [
            f"the EKS managed add-ons ({', '.join(aws_versions.MANAGED_ADDONS)}) pull the images EKS picks for the add-on "
            "version it installs (EKS keeps them compatible with the control plane)"
        ]
    return []
