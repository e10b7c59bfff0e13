"""Which images a Kubernetes stack's in-cluster layer pulls by a tag with no published digest.

The plan lists them (components/plan_caveats.py, caveat ``images``) and ``gpu-cluster pin`` pins
them (gpu_cluster/pin.py), together with the job's own images. On GKE the list is the whole layer:
the installers and the device injector are by digest from the catalog, the Lustre CSI driver is a
GKE add-on, so what is left are the JobSet and Kueue controllers and an installer whose digest no
reference gives. On EKS it is every chart's image: the NVIDIA and EFA device plugins and JobSet
(each chart takes a pin as its image values, components/aws/orchestration_eks.py), and the EFA
exporter's node exporter (components/aws/efa_exporter.py); what EKS's
managed add-ons pull is EKS's choice, named by :func:`unpinnable`. On AKS the GPU and Network
operators, their operands (the DOCA and NVIDIA drivers among them) and AMD's operator with its
DaemonSets are listed too, each with where its pin goes (components/k8s/aks.py LAYER_IMAGES).
"""

from __future__ import annotations

from gpu_cluster.components.aws import efa_exporter
from gpu_cluster.components.aws import versions as aws_versions
from gpu_cluster.components.catalog import installer_fact, load_catalog, load_runtime_images, rxdm_fact
from gpu_cluster.components.gcp.rules import CHECKPOINT_KSA, queued_provisioning
from gpu_cluster.components.gcp.binauthz import Pulled
from gpu_cluster.components.image_pins import ImageUse, pinned
from gpu_cluster.components.k8s.addons import JOB_NAMESPACE, JOBSET_IMAGE, JOBSET_NAMESPACE, JOBSET_VERSION
from gpu_cluster.components.k8s.gke_installers import (
    NAMESPACE,
    NEEDS_DEVICE_INJECTOR,
    NRI_INJECTOR_IMAGE,
    PAUSE_IMAGE,
    PREINSTALL_IMAGE,
    installer_ref,
)
from gpu_cluster.components.k8s.kueue import KUEUE_IMAGE, KUEUE_NAMESPACE, KUEUE_VERSION
from gpu_cluster.components.k8s.metrics import PUSHGATEWAY_IMAGE, PUSHGATEWAY_VERSION, PUSHGATEWAY_STACKS
from gpu_cluster.components.spec import ClusterSpec


def aks_image_uses(spec: ClusterSpec) -> list[ImageUse]:
    """The AKS layer's images by tag that a pin reaches (the size's GPU operator's, the Network Operator's)."""
    from gpu_cluster.components.k8s.aks import GpuOperator, layer_images

    operator: GpuOperator = "amd" if spec.instance.accelerator.vendor == "amd" else "nvidia"
    return [ImageUse(i.ref, i.what) for i in layer_images(operator)]


def layer_image_uses(spec: ClusterSpec) -> list[ImageUse]:
    """The layer's images that are pulled by tag unless the stack pins them."""
    if spec.orchestration.kind == "slurm":
        return []
    uses = [ImageUse(JOBSET_IMAGE, f"the JobSet controller of chart {JOBSET_VERSION}")]
    if spec.orchestration.kind in PUSHGATEWAY_STACKS:
        uses.append(ImageUse(PUSHGATEWAY_IMAGE, f"the Pushgateway of chart {PUSHGATEWAY_VERSION}"))
    if spec.orchestration.kind == "aks":
        uses += aks_image_uses(spec)
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
        ImageUse(efa_exporter.IMAGE, "the EFA exporter's node exporter and counter writer (every GPU node)"),
    ]


def unpinnable(spec: ClusterSpec) -> list[str]:
    """What the layer pulls whose reference the stack does not choose, so no pin can name it (one
    phrase each, for the plan's images caveat)."""
    if spec.orchestration.kind == "eks":
        return [
            f"the EKS managed add-ons ({', '.join(aws_versions.MANAGED_ADDONS)}) pull the images EKS picks for the add-on "
            "version it installs (EKS keeps them compatible with the control plane)"
        ]
    if spec.orchestration.kind == "aks":
        from gpu_cluster.components.k8s.aks import UNPINNED_IMAGES

        operator = "amd" if spec.instance.accelerator.vendor == "amd" else "nvidia"
        never = [f"{what} ({why})" for what, why, op in UNPINNED_IMAGES if op in (None, operator)]
        return ["pulled by tag, and no pin reaches them from this stack: " + "; ".join(never)] if never else []
    return []


def gke_pulled_images(spec: ClusterSpec) -> list[Pulled]:
    """Every image a GKE stack's own objects and its validation job pull, with the namespace (and
    service account) of the pods that pull it: what Binary Authorization admits or refuses
    (components/gcp/binauthz.py). GKE's own system pods are not listed: the cluster's add-ons."""
    fabric = load_catalog().get(spec.compute.instance_type).network.fabric
    out: list[Pulled] = []
    installer = installer_ref(fabric, spec.orchestration.installer_image, spec.images)
    if installer is not None:
        out.append(Pulled(installer, "the NCCL plugin installer", NAMESPACE))
    out.append(Pulled(PAUSE_IMAGE, "the installer's pause container", NAMESPACE))
    if fabric == "tcpxo":
        out.append(Pulled(PREINSTALL_IMAGE, "the TCPXO pre-installation", NAMESPACE))
    if fabric in NEEDS_DEVICE_INJECTOR:
        out.append(Pulled(NRI_INJECTOR_IMAGE, "the NRI device injector", NAMESPACE))
    for use in layer_image_uses(spec):
        if use.installer:
            continue
        ns = KUEUE_NAMESPACE if use.ref == KUEUE_IMAGE else JOBSET_NAMESPACE
        out.append(Pulled(pinned(use.ref, spec.images), use.what, ns))
    job = load_runtime_images()["cuda"]
    out.append(
        Pulled(
            pinned(f"{job.repository}:{job.tag}", spec.images),
            "the validation job's pods",
            JOB_NAMESPACE,
            CHECKPOINT_KSA,
        )
    )
    rx = rxdm_fact(fabric)
    if rx is not None:
        out.append(
            Pulled(
                rx.ref if rx.digest else pinned(f"{rx.image}:{rx.tag}", spec.images),
                "the receive-datapath sidecar",
                JOB_NAMESPACE,
                CHECKPOINT_KSA,
            )
        )
    return out
