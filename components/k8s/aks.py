"""AKS-only in-cluster parts: the GPU and network operators, the Managed Lustre CSI driver and
its volume. Everything goes through the provider the caller passes in ``opts``.

Pins and values come from two public references, read 2026-12-01:

* Azure/ai-infrastructure-on-azure at a01b073 (2026-04-22),
  ``infrastructure_references/aks/scripts/deploy-aks.sh`` and ``configs/{gpu-operator,network-operator}/``
  (``AI_INFRA`` below): one set of chart and image versions tested together;
* Azure/aks-rdma-infiniband at 700dabb (2026-07-16), ``configs/`` and ``tests/setup-infra/deploy-aks.sh``
  (``AKS_RDMA``): the AMD path, which ai-infra does not cover.

The NicClusterPolicy, NodeFeatureRule and DeviceConfig are CRDs with no typed SDK, so their spec
is data; the field names are the operators'. The CRDs come with the charts, so each object waits
for its chart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal, Mapping

import pulumi
import pulumi_kubernetes as k8s

from gpu_cluster.components import nccl_topology


AI_INFRA = "Azure/ai-infrastructure-on-azure@a01b073"
AKS_RDMA = "Azure/aks-rdma-infiniband@700dabb"
LUSTRE_CSI_REF = "kubernetes-sigs/azurelustre-csi-driver@v0.4.0 (9011a5f)"

# helm repo add nvidia https://helm.ngc.nvidia.com/nvidia (AI_INFRA deploy-aks.sh).
NVIDIA_REPO = "https://helm.ngc.nvidia.com/nvidia"
NETWORK_OPERATOR_CHART = "network-operator"
NETWORK_OPERATOR_VERSION = "v26.1.0"  # AI_INFRA deploy-aks.sh NETWORK_OPERATOR_VERSION
NETWORK_OPERATOR_NAMESPACE = "network-operator"
GPU_OPERATOR_CHART = "gpu-operator"
GPU_OPERATOR_VERSION = "v26.3.0"  # AI_INFRA deploy-aks.sh GPU_OPERATOR_VERSION
GPU_OPERATOR_NAMESPACE = "gpu-operator"
# Both namespaces are labelled enforce=privileged before the charts go in (AI_INFRA and AKS_RDMA
# deploy-aks.sh: `kubectl label --overwrite ns ... pod-security.kubernetes.io/enforce=privileged`):
# the driver containers load kernel modules.
OPERATOR_POD_SECURITY = {"pod-security.kubernetes.io/enforce": "privileged"}

# configs/network-operator/values.yaml (AI_INFRA): the chart's own NFD rules off, ours below on.
NETWORK_OPERATOR_VALUES = {"nfd": {"deployNodeFeatureRules": False}}

# Tolerations. The GPU pool carries a taint (components/azure/orchestration_aks.py GPU_TAINT, the
# AKS GPU Operator page's example); neither reference taints its pool, so their values tolerate
# nothing of ours. What runs on the GPU nodes, and what each tolerates by default:
# * the network operator's NFD worker, which labels the nodes the NicClusterPolicy and the GPU
#   Operator select: master, control-plane and nvidia.com/gpu only (NETWORK_OPERATOR_REF
#   deployment/network-operator/values.yaml, node-feature-discovery.worker.tolerations). A Helm
#   value list replaces the chart's, so the chart's three are repeated with ours;
# * the NicClusterPolicy's DaemonSets (DOCA driver, SR-IOV device plugin): spec.tolerations,
#   "Tolerations to inject to the DaemonSets objects that are managed by the operator"
#   (NETWORK_OPERATOR_REF api/v1alpha1/nicclusterpolicy_types.go), none by default;
# * the GPU Operator's operands: daemonsets.tolerations, by default nvidia.com/gpu only
#   (GPU_OPERATOR_REF deployments/gpu-operator/values.yaml);
# * AMD's chart runs no NFD of its own here (AMD_OPERATOR_VALUES); the DeviceConfig's device plugin,
#   node labeller and metrics exporter: devicePluginTolerations,
#   nodeLabellerTolerations, metricsExporter.tolerations (AMD_OPERATOR_REF
#   api/v1alpha1/deviceconfig_types.go), none by default;
# * the Lustre CSI node DaemonSet tolerates every taint already (`- operator: "Exists"`,
#   deploy/csi-azurelustre-node-{jammy,noble}.yaml at LUSTRE_CSI_REF): nothing to add.
NETWORK_OPERATOR_REF = "Mellanox/network-operator@v26.1.0 (34a16f8)"
GPU_OPERATOR_REF = "NVIDIA/gpu-operator@v26.3.0"
AMD_OPERATOR_REF = "ROCm/gpu-operator@v1.4.1 (3b39804)"
NETWORK_NFD_WORKER_TOLERATIONS = (
    {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
)
GPU_OPERATOR_DAEMONSET_TOLERATIONS = ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},)
# configs/network-operator/node-feature-rule.yaml (AI_INFRA): label the nodes whose PCI devices
# are ConnectX-7 (15b3:101c, 15b3:101e); the NicClusterPolicy runs only there.
MELLANOX_LABEL = "feature.node.kubernetes.io/pci-15b3.present"
MELLANOX_DEVICE_IDS = ("101c", "101e")
# configs/network-operator/nicclusterpolicy/base/nic.yaml (AI_INFRA): the DOCA driver container
# (the operator appends -<os><version>-<arch> to the tag) and its module blacklist file.
DOCA_DRIVER = {"repository": "nvcr.io/nvidia/mellanox", "image": "doca-driver", "version": "doca3.3.0-26.01-1.0.0.0-0"}
DOCA_DRIVER_ENV = {"OFED_BLACKLIST_MODULES_FILE": "/host/etc/modprobe.d/blacklist-ofed-modules.conf"}
# Precompiled drivers, where each operator offers them for these nodes:
# * the Network Operator looks for a precompiled DOCA driver of the node's kernel first
#   (<version>-<kernel>-<os><version>-<arch>) and runs it where NVIDIA publishes one, else the image
#   that compiles the driver on the node; forcePrecompiled false keeps that fallback ("If set to true
#   and precompiled image does not exists, OFED state will be Error", NETWORK_OPERATOR_REF
#   api/v1alpha1/nicclusterpolicy_types.go:123-128; pkg/state/state_ofed.go:627-640);
# * the GPU Operator offers none here: its precompiled driver is "only supported for as a tech-preview
#   feature on ubuntu22.04 kernels" (GPU_OPERATOR_REF at 30a8bbd deployments/gpu-operator/values.yaml:
#   129-131), AKS 1.35's nodes run Ubuntu 24.04 (AKS_NODE_OS), and the operator builds the per-kernel
#   tag with no fallback when it is missing (controllers/object_controls.go resolveDriverTag). Off.
DOCA_FORCE_PRECOMPILED = False
GPU_DRIVER_PRECOMPILED = False
# configs/network-operator/nicclusterpolicy/sriov-device-plugin/sriov.yaml (AI_INFRA): one
# `rdma/ib` per InfiniBand HCA (isRdma mounts /dev/infiniband into the container).
SRIOV_PLUGIN = {
    "repository": "ghcr.io/k8snetworkplumbingwg",
    "image": "sriov-network-device-plugin",
    "version": "v3.9.0",
}
RDMA_RESOURCE_PREFIX = "rdma"
RDMA_RESOURCE_NAME = "ib"
RDMA_RESOURCE = f"{RDMA_RESOURCE_PREFIX}/{RDMA_RESOURCE_NAME}"
SRIOV_RESOURCE_LIST = {
    "resourceList": [
        {
            "resourcePrefix": RDMA_RESOURCE_PREFIX,
            "resourceName": RDMA_RESOURCE_NAME,
            "selectors": {"vendors": ["15b3"], "linkTypes": ["infiniband"], "isRdma": True},
        }
    ]
}
NIC_CLUSTER_POLICY = "nic-cluster-policy"

# configs/gpu-operator/values.yaml (AI_INFRA): NFD from the network operator, GPUDirect RDMA
# (nvidia-peermem over the DOCA driver), no MIG/vGPU/VFIO/sandbox managers. Its
# dcgmExporter.serviceMonitor is left out: it needs kube-prometheus's CRD, which this layer does
# not install. daemonsets.tolerations is the chart's default (nvidia.com/gpu, NVIDIA/gpu-operator
# deployments/gpu-operator/values.yaml) plus the GPU pool's taint, so the operands reach the pool.
GPU_OPERATOR_VALUES: dict[str, object] = {
    # The operator and validator images by the release's own tag (the chart at the git tag names
    # "main-latest" as its appVersion, deployments/gpu-operator/Chart.yaml; values.yaml 54-71 fall back
    # to it when version is unset), so what is pulled is what LAYER_IMAGES names.
    "operator": {"version": GPU_OPERATOR_VERSION},
    "validator": {"version": GPU_OPERATOR_VERSION},
    "nfd": {"enabled": False},
    "driver": {"rdma": {"enabled": True}, "usePrecompiled": GPU_DRIVER_PRECOMPILED},
    "migManager": {"enabled": False},
    "vgpuDeviceManager": {"enabled": False},
    "vfioManager": {"enabled": False},
    "sandboxDevicePlugin": {"enabled": False},
}

# AMD (AKS_RDMA tests/setup-infra/deploy-aks.sh install_amd_gpu_operator, install_cert_manager):
# helm repo add rocm https://rocm.github.io/gpu-operator; rocm/gpu-operator-charts v1.4.1 in
# kube-amd-gpu; cert-manager v1.15.1 (jetstack) first, with crds.enabled=true, "Required by AMD
# GPU Operator".
AMD_REPO = "https://rocm.github.io/gpu-operator"
AMD_OPERATOR_CHART = "gpu-operator-charts"
AMD_OPERATOR_VERSION = "v1.4.1"
AMD_OPERATOR_NAMESPACE = "kube-amd-gpu"
# configs/values/amd-gpu-operator/values.yaml (AKS_RDMA), but with one node-feature-discovery: the
# reference runs AMD's NFD beside the Network Operator's, two deployments without instance names
# that share the annotation each master keeps its labels in (node-feature-discovery docs/reference/
# master-commandline-reference.md:63-67 at 76e6cc8). The Network Operator's stays (its rule labels
# the ConnectX-7 nodes the NicClusterPolicy selects); AMD's is off ("Skip NFD installation:
# --set node-feature-discovery.enabled=false", AMD_OPERATOR_REF docs/installation/kubernetes-helm.md:127)
# and its default rule is kept (installdefaultNFDRule, values.yaml:20): the Network Operator's NFD
# applies it, its worker discovering every PCI device (node-feature-discovery source/pci/pci.go:141-148),
# so the MI300X nodes still get feature.node.kubernetes.io/amd-vgpu, which the DeviceConfig selects.
AMD_OPERATOR_VALUES: dict[str, dict[str, object] | bool] = {
    # The controller by the release's tag (values.yaml 233-237 at the git tag says "dev").
    "controllerManager": {
        "manager": {"image": {"repository": "docker.io/rocm/gpu-operator", "tag": AMD_OPERATOR_VERSION}}
    },
    "node-feature-discovery": {"enabled": False},
    "installdefaultNFDRule": True,
    "kmm": {"enabled": True},
    "crds": {"defaultCR": {"install": False}},
}
CERT_MANAGER_REPO = "https://charts.jetstack.io"
CERT_MANAGER_CHART = "cert-manager"
CERT_MANAGER_VERSION = "v1.15.1"
CERT_MANAGER_NAMESPACE = "cert-manager"
# configs/amd-device-config/deviceconfig.yaml (AKS_RDMA), with its images pinned: the reference
# names rocm/k8s-device-plugin:latest and :labeller-latest, which a later `pulumi up` would not
# reproduce, so the device plugin and labeller images are left to the operator's defaults (no
# pinned tag of them was read); the metrics exporter tag is the reference's.
AMD_DEVICE_CONFIG_SPEC: dict[str, dict[str, object]] = {
    "driver": {"enable": False, "blacklist": False},
    "devicePlugin": {"enableNodeLabeller": True},
    "metricsExporter": {
        "enable": True,
        "serviceType": "ClusterIP",
        "port": 5000,
        "image": "docker.io/rocm/device-metrics-exporter:v1.4.1",
    },
    "configManager": {"enable": False},
    "testRunner": {"enable": False},
    "selector": {"feature.node.kubernetes.io/amd-vgpu": "true"},
}
# The DeviceConfig's name (the reference's deviceconfig.yaml): the operator names what it makes after
# it, the exporter's DaemonSet pods' ``daemonset-name`` label among them (components/k8s/metrics.py).
AMD_DEVICE_CONFIG_NAME = "gpu-operator"
AMD_GPU_RESOURCE = "amd.com/gpu"
NVIDIA_GPU_RESOURCE = "nvidia.com/gpu"

# The Managed Lustre CSI driver has no Helm chart ("This is currently unsupported", charts/README.md
# at LUSTRE_CSI_REF); deploy/install-driver.sh applies these manifests, in this order, from one
# ref. v0.4.0 is the newest tag; its manifests pin their images (azurelustre-csi:v0.4.0-jammy/-noble).
LUSTRE_CSI_DRIVER = "azurelustre.csi.azure.com"
LUSTRE_CSI_BASE = "https://raw.githubusercontent.com/kubernetes-sigs/azurelustre-csi-driver/v0.4.0/deploy"
LUSTRE_CSI_MANIFESTS = (
    "rbac-csi-azurelustre-controller.yaml",
    "rbac-csi-azurelustre-node.yaml",
    "csi-azurelustre-driver.yaml",
    "csi-azurelustre-controller.yaml",
    "csi-azurelustre-node-jammy.yaml",
    "csi-azurelustre-node-noble.yaml",
)
# docs/examples/pv.yaml at LUSTRE_CSI_REF: volumeAttributes.mgs-ip-address, mount options
# noatime and flock, reclaim Retain ("Delete" is not supported in static provisioning).
LUSTRE_MOUNT_OPTIONS = ("noatime", "flock")

GpuOperator = Literal["nvidia", "amd"]

# ---------------------------------------------------------------------------------------------
# Every image the AKS layer pulls by tag, and where a pin (``images:`` of the stack, written by
# `gpu-cluster pin`, components/image_pins.py) goes. Tags are each chart's at its pin: the Network
# Operator's values.yaml (NETWORK_OPERATOR_REF: operator.repository/image with the app version v26.1.0,
# node-feature-discovery.image at lines 46-48, operator.ofedDriver.initContainer at 314-322); the GPU
# Operator's values.yaml (GPU_OPERATOR_REF at 30a8bbd: validator and operator 54-71, driver 132-134,
# driver.manager 180-184, toolkit 210-212, devicePlugin 221-223, dcgmExporter 277-279, gfd 326-328;
# disabled components left out); AMD's (AMD_OPERATOR_REF: controllerManager.manager.image 233-237,
# whose "dev" tag is replaced by the release's v1.4.1; the DeviceConfig's device plugin and node
# labeller default to rocm/k8s-device-plugin:latest and :labeller-latest, internal/kmmmodule/
# kmmmodule.go:76 and internal/nodelabeller/nodelabeller.go:54, moving tags; the init container
# docker.io/rocm/gpu-operator-utils:latest, internal/utils.go:60).
# How a digest is written: ``tag`` puts ``<tag>@<digest>`` where the chart writes repo:tag (a
# reference with both is pulled by the digest); ``version`` writes ``sha256:...`` alone where the
# operator builds the reference itself and takes a bare digest (NVIDIA/gpu-operator internal/image/
# image.go:36, Mellanox/network-operator pkg/render/render.go:106-108 and pkg/state/state_ofed.go:
# 622-642, 754-756); ``ref`` writes the whole ``repo:tag@digest`` (the DeviceConfig's image fields).
# The DOCA driver's tag is the one the operator pulls on AKS 1.35's Ubuntu 24.04 amd64 nodes (its
# version, then -<os><version>-<arch>, state_ofed.go:758-762); pinned, the operator takes that
# image as it is and no longer looks for a precompiled one (state_ofed.go:642).
PinForm = Literal["tag", "version", "ref"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerImage:
    ref: str
    """``repository:tag`` as pulled."""
    what: str
    operator: GpuOperator | None
    """Only with this GPU operator (None: every AKS stack)."""
    target: str
    """Where the pin goes: ``chart:<chart>:<values path>``, ``NicClusterPolicy:<spec path>``,
    ``DeviceConfig:<spec path>``, or ``none`` (named in the plan's images caveat only)."""
    form: PinForm = "tag"


def _tag(ref: str) -> str:
    return ref.rpartition(":")[2]


NVCR = "nvcr.io/nvidia"
AKS_NODE_OS = "ubuntu24.04"  # AKS 1.35's Ubuntu (aks-ubuntu: upgrade-os-version.md:41 at fb060ab)
LAYER_IMAGES: tuple[LayerImage, ...] = (
    LayerImage(
        ref=f"{NVCR}/cloud-native/network-operator:{NETWORK_OPERATOR_VERSION}",
        what=f"the Network Operator controller of chart {NETWORK_OPERATOR_VERSION}",
        operator=None,
        target=f"chart:{NETWORK_OPERATOR_CHART}:operator.tag",
    ),
    LayerImage(
        ref=f"{NVCR}/mellanox/node-feature-discovery:network-operator-{NETWORK_OPERATOR_VERSION}",
        what="node-feature-discovery (master, worker on every node, gc) of the Network Operator",
        operator=None,
        target=f"chart:{NETWORK_OPERATOR_CHART}:node-feature-discovery.image.tag",
    ),
    LayerImage(
        ref=f"{NVCR}/mellanox/network-operator-init-container:network-operator-{NETWORK_OPERATOR_VERSION}",
        what="the DOCA driver pod's init container (privileged, every GPU node)",
        operator=None,
        target=f"chart:{NETWORK_OPERATOR_CHART}:operator.ofedDriver.initContainer.version",
    ),
    LayerImage(
        ref=f"{DOCA_DRIVER['repository']}/{DOCA_DRIVER['image']}:{DOCA_DRIVER['version']}-{AKS_NODE_OS}-amd64",
        what="the DOCA (OFED) driver (privileged, every GPU node; where NVIDIA publishes a precompiled "
        "image for the node's kernel, the operator pulls that one instead, by tag)",
        operator=None,
        target="NicClusterPolicy:ofedDriver.version",
        form="version",
    ),
    LayerImage(
        ref=f"{SRIOV_PLUGIN['repository']}/{SRIOV_PLUGIN['image']}:{SRIOV_PLUGIN['version']}",
        what="the SR-IOV device plugin (rdma/ib, every GPU node)",
        operator=None,
        target="NicClusterPolicy:sriovDevicePlugin.version",
        form="version",
    ),
    LayerImage(
        ref=f"{NVCR}/gpu-operator:{GPU_OPERATOR_VERSION}",
        what=f"the GPU Operator controller and its validator, chart {GPU_OPERATOR_VERSION}",
        operator="nvidia",
        target=f"chart:{GPU_OPERATOR_CHART}:operator.version,validator.version",
    ),
    LayerImage(
        ref=f"{NVCR}/driver:580.126.20-{AKS_NODE_OS}",
        what="the NVIDIA driver with nvidia-peermem (privileged, every GPU node)",
        operator="nvidia",
        target=f"chart:{GPU_OPERATOR_CHART}:driver.version",
        form="version",
    ),
    LayerImage(
        ref=f"{NVCR}/cloud-native/k8s-driver-manager:v0.10.0",
        what="the GPU Operator's driver manager",
        operator="nvidia",
        target=f"chart:{GPU_OPERATOR_CHART}:driver.manager.version",
    ),
    LayerImage(
        ref=f"{NVCR}/k8s/container-toolkit:v1.19.0",
        what="the NVIDIA container toolkit (every GPU node)",
        operator="nvidia",
        target=f"chart:{GPU_OPERATOR_CHART}:toolkit.version",
    ),
    LayerImage(
        ref=f"{NVCR}/k8s-device-plugin:v0.19.0",
        what="the NVIDIA device plugin and GPU feature discovery (every GPU node)",
        operator="nvidia",
        target=f"chart:{GPU_OPERATOR_CHART}:devicePlugin.version,gfd.version",
    ),
    LayerImage(
        ref=f"{NVCR}/k8s/dcgm-exporter:4.5.1-4.8.0-distroless",
        what="the DCGM exporter (every GPU node)",
        operator="nvidia",
        target=f"chart:{GPU_OPERATOR_CHART}:dcgmExporter.version",
    ),
    LayerImage(
        ref=f"docker.io/rocm/gpu-operator:{AMD_OPERATOR_VERSION}",
        what=f"AMD's GPU operator controller, chart {AMD_OPERATOR_VERSION}",
        operator="amd",
        target=f"chart:{AMD_OPERATOR_CHART}:controllerManager.manager.image.tag",
    ),
    LayerImage(
        ref="docker.io/rocm/k8s-device-plugin:latest",
        what="AMD's device plugin (amd.com/gpu, every GPU node; the operator's default, a moving tag)",
        operator="amd",
        target="DeviceConfig:devicePlugin.devicePluginImage",
        form="ref",
    ),
    LayerImage(
        ref="docker.io/rocm/k8s-device-plugin:labeller-latest",
        what="AMD's node labeller (every GPU node; the operator's default, a moving tag)",
        operator="amd",
        target="DeviceConfig:devicePlugin.nodeLabellerImage",
        form="ref",
    ),
    LayerImage(
        ref="docker.io/rocm/device-metrics-exporter:v1.4.1",
        what="AMD's metrics exporter (every GPU node)",
        operator="amd",
        target="DeviceConfig:metricsExporter.image",
        form="ref",
    ),
    LayerImage(
        ref="docker.io/rocm/gpu-operator-utils:latest",
        what="the init container of AMD's operands (the operator's default, a moving tag)",
        operator="amd",
        target="DeviceConfig:commonConfig.initContainerImage",
        form="ref",
    ),
)
# Pulled by tag and not pinnable from here: each chart or manifest writes these references itself
# with no value that takes a digest that was read (named in the plan's images caveat).
UNPINNED_IMAGES: tuple[tuple[str, str, GpuOperator | None], ...] = (
    (
        "the Managed Lustre CSI driver's images (csi-azurelustre-controller and -node, as its v0.4.0 manifests name them)",
        "applied as published (ConfigFile); a digest would need a copy of the manifests",
        None,
    ),
    (
        f"cert-manager {CERT_MANAGER_VERSION}'s controller, webhook and cainjector",
        "its chart's image values were not read at this pin",
        "amd",
    ),
    (
        "AMD's kernel module management (KMM) operator",
        "the subchart's image values were not read at this pin",
        "amd",
    ),
)


def layer_images(operator: GpuOperator) -> tuple[LayerImage, ...]:
    return tuple(i for i in LAYER_IMAGES if i.operator in (None, operator))


def _pinned_value(img: LayerImage, digest: str) -> str:
    if img.form == "version":
        return digest
    if img.form == "ref":
        return f"{img.ref}@{digest}"
    return f"{_tag(img.ref)}@{digest}"


def _set(doc: dict[str, object], dotted: str, value: object) -> None:
    node = doc
    parts = dotted.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
        node[part] = child = dict(child)
        node = child
    node[parts[-1]] = value


def apply_pins(kind: str, name: str, doc: Mapping[str, object], pins: Mapping[str, str]) -> dict[str, object]:
    """``doc`` (chart values, or a custom resource's spec) with every pinned image of ``kind``
    (``chart``, ``NicClusterPolicy``, ``DeviceConfig``) and ``name`` (the chart) written in."""
    out: dict[str, object] = json.loads(json.dumps(dict(doc)))
    for img in LAYER_IMAGES:
        digest = pins.get(img.ref)
        if not digest:
            continue
        head, _, rest = img.target.partition(":")
        if head != kind:
            continue
        if kind == "chart":
            chart, _, rest = rest.partition(":")
            if chart != name:
                continue
        for path in rest.split(","):
            _set(out, path, _pinned_value(img, digest))
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Toleration:
    key: str
    effect: str = "NoSchedule"

    def as_value(self) -> dict[str, str]:
        return {"key": self.key, "operator": "Exists", "effect": self.effect}


def _namespace(
    name: str, ns: str, opts: pulumi.ResourceOptions, labels: Mapping[str, str] | None = None
) -> k8s.core.v1.Namespace:
    # helm.v4.Chart never creates its namespace (unlike `helm install --create-namespace`).
    return k8s.core.v1.Namespace(
        name, metadata=k8s.meta.v1.ObjectMetaArgs(name=ns, labels=dict(labels or {})), opts=opts
    )


def _after(opts: pulumi.ResourceOptions, *deps: pulumi.Resource) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=list(deps)))


def _chart(
    name: str,
    *,
    chart: str,
    version: str,
    repo: str,
    namespace: str,
    values: Mapping[str, object],
    opts: pulumi.ResourceOptions,
) -> k8s.helm.v4.Chart:
    """One pinned chart from its repository into its (already made) namespace."""
    return k8s.helm.v4.Chart(
        name,
        chart=chart,
        version=version,
        repository_opts=k8s.helm.v4.RepositoryOptsArgs(repo=repo),
        namespace=namespace,
        values=dict(values),
        opts=opts,
    )


def _tolerating(defaults: tuple[dict[str, str], ...], tolerations: list[Toleration]) -> list[dict[str, str]]:
    return [dict(t) for t in defaults] + [t.as_value() for t in tolerations]


def network_operator(
    name: str,
    opts: pulumi.ResourceOptions,
    tolerations: list[Toleration] | None = None,
    pins: Mapping[str, str] | None = None,
) -> list[pulumi.Resource]:
    """The NVIDIA Network Operator, the rule that labels ConnectX-7 nodes and the NicClusterPolicy
    that gives them the DOCA driver and the SR-IOV device plugin (``rdma/ib``). ``tolerations``:
    the GPU pool's taints, which its NFD worker and the policy's DaemonSets must tolerate."""
    tolerations = tolerations or []
    ns = _namespace(f"{name}-network-operator-ns", NETWORK_OPERATOR_NAMESPACE, opts, OPERATOR_POD_SECURITY)
    values: dict[str, object] = dict(NETWORK_OPERATOR_VALUES)
    if tolerations:
        values["node-feature-discovery"] = {
            "worker": {"tolerations": _tolerating(NETWORK_NFD_WORKER_TOLERATIONS, tolerations)}
        }
    chart = _chart(
        f"{name}-network-operator",
        chart=NETWORK_OPERATOR_CHART,
        version=NETWORK_OPERATOR_VERSION,
        repo=NVIDIA_REPO,
        namespace=NETWORK_OPERATOR_NAMESPACE,
        values=apply_pins("chart", NETWORK_OPERATOR_CHART, values, pins or {}),
        opts=_after(opts, ns),
    )
    rule = k8s.apiextensions.CustomResource(
        f"{name}-nfd-network-rule",
        api_version="nfd.k8s-sigs.io/v1alpha1",
        kind="NodeFeatureRule",
        metadata=k8s.meta.v1.ObjectMetaArgs(name="nfd-network-rule"),
        spec={
            "rules": [
                {
                    "name": "nfd-network-rule",
                    "labels": {MELLANOX_LABEL: "true"},
                    "matchFeatures": [
                        {
                            "feature": "pci.device",
                            "matchExpressions": {"device": {"op": "In", "value": list(MELLANOX_DEVICE_IDS)}},
                        }
                    ],
                }
            ]
        },
        opts=_after(opts, chart),
    )
    policy_spec: dict[str, object] = {
        # Only the nodes the rule labelled (nic.yaml: "so that you don't schedule pods on the
        # non-infiniband machines").
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": MELLANOX_LABEL, "operator": "In", "values": ["true"]}]}
                ]
            }
        },
        "ofedDriver": {
            **DOCA_DRIVER,
            "env": [{"name": k, "value": v} for k, v in DOCA_DRIVER_ENV.items()],
            "forcePrecompiled": DOCA_FORCE_PRECOMPILED,
        },
        "sriovDevicePlugin": {**SRIOV_PLUGIN, "config": json.dumps(SRIOV_RESOURCE_LIST, indent=2)},
        **({"tolerations": [t.as_value() for t in tolerations]} if tolerations else {}),
    }
    policy = k8s.apiextensions.CustomResource(
        f"{name}-nic-cluster-policy",
        api_version="mellanox.com/v1alpha1",
        kind="NicClusterPolicy",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=NIC_CLUSTER_POLICY),
        spec=apply_pins("NicClusterPolicy", "", policy_spec, pins or {}),
        opts=_after(opts, chart, rule),
    )
    return [ns, chart, rule, policy]


def gpu_operator(
    name: str,
    opts: pulumi.ResourceOptions,
    tolerations: list[Toleration],
    after: list[pulumi.Resource],
    pins: Mapping[str, str] | None = None,
) -> pulumi.Resource:
    """The NVIDIA GPU Operator (driver with GPUDirect RDMA, device plugin: ``nvidia.com/gpu``).
    It waits for the network operator: the RDMA part of its driver needs the DOCA driver."""
    ns = _namespace(f"{name}-gpu-operator-ns", GPU_OPERATOR_NAMESPACE, opts, OPERATOR_POD_SECURITY)
    values = {
        **GPU_OPERATOR_VALUES,
        "daemonsets": {"tolerations": _tolerating(GPU_OPERATOR_DAEMONSET_TOLERATIONS, tolerations)},
    }
    return _chart(
        f"{name}-gpu-operator",
        chart=GPU_OPERATOR_CHART,
        version=GPU_OPERATOR_VERSION,
        repo=NVIDIA_REPO,
        namespace=GPU_OPERATOR_NAMESPACE,
        values=apply_pins("chart", GPU_OPERATOR_CHART, values, pins or {}),
        opts=_after(opts, ns, *after),
    )


def nccl_topology_configmap(
    name: str, *, namespace: pulumi.Input[str], topology: nccl_topology.Topology, opts: pulumi.ResourceOptions
) -> k8s.core.v1.ConfigMap:
    """The size's NCCL topology file in the jobs' namespace, where every job mounts it
    (components/nccl_topology.py: the reference's ConfigMap, key and mount)."""
    return k8s.core.v1.ConfigMap(
        f"{name}-nccl-topology",
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=nccl_topology.CONFIGMAP,
            namespace=namespace,
            labels={"gpu-cluster.io/nccl-topology": topology.name},
        ),
        data={nccl_topology.KEY: topology.xml()},
        opts=opts,
    )


def lustre_csi(name: str, opts: pulumi.ResourceOptions) -> list[pulumi.Resource]:
    """The Azure Lustre CSI driver's manifests, each a ConfigFile applied after the one before
    (install-driver.sh's order: RBAC, the CSIDriver, the controller, the node DaemonSets)."""
    made: list[pulumi.Resource] = []
    for manifest in LUSTRE_CSI_MANIFESTS:
        made.append(
            k8s.yaml.v2.ConfigFile(
                f"{name}-{manifest.removesuffix('.yaml')}",
                file=f"{LUSTRE_CSI_BASE}/{manifest}",
                opts=_after(opts, *made[-1:]),
            )
        )
    return made


def lustre_volume(
    name: str,
    *,
    claim_name: str,
    namespace: pulumi.Input[str],
    volume_handle: pulumi.Input[str],
    mgs_address: pulumi.Input[str],
    size_gib: int,
    opts: pulumi.ResourceOptions,
) -> k8s.core.v1.PersistentVolumeClaim:
    """A statically provisioned PV for the stack's Managed Lustre file system (Pulumi owns its
    life; Kubernetes only mounts it, AZURE.md §3.5) and its claim in the jobs' namespace."""
    pv = k8s.core.v1.PersistentVolume(
        f"{name}-lustre-pv",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=claim_name),
        spec=k8s.core.v1.PersistentVolumeSpecArgs(
            access_modes=["ReadWriteMany"],
            capacity={"storage": f"{size_gib}Gi"},
            # Retain: deleting the claim must never reach the (protected) file system.
            persistent_volume_reclaim_policy="Retain",
            storage_class_name="",
            volume_mode="Filesystem",
            mount_options=list(LUSTRE_MOUNT_OPTIONS),
            csi=k8s.core.v1.CSIPersistentVolumeSourceArgs(
                driver=LUSTRE_CSI_DRIVER,
                # "Make sure this VolumeID is unique in the cluster": the file system's ARM id is.
                volume_handle=volume_handle,
                volume_attributes={"mgs-ip-address": mgs_address},
            ),
        ),
        opts=opts,
    )
    return k8s.core.v1.PersistentVolumeClaim(
        f"{name}-lustre-pvc",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=claim_name, namespace=namespace),
        spec=k8s.core.v1.PersistentVolumeClaimSpecArgs(
            access_modes=["ReadWriteMany"],
            storage_class_name="",
            volume_name=claim_name,
            resources=k8s.core.v1.VolumeResourceRequirementsArgs(requests={"storage": f"{size_gib}Gi"}),
        ),
        opts=_after(opts, pv),
    )
