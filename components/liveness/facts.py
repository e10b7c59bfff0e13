"""The facts the liveness model reasons with, each beside its source: the one place to add one.

* :data:`SOURCES` (in ``sources.py``): every page and repository file read, by id, with what it says that a fact rests
  on; a fact names its source id and the line where the file has lines (``cite("kueue-chart", 157)``). Custom resource APIs are in
  ``apis.py`` (a field per line of the types file); node image manifests are in the catalog
  (``components/catalog.yaml``, ``fabrics.<fabric>.image_paths`` and ``node_images``).
* platform facts: the taints and labels each platform puts on a node pool;
* :data:`CHARTS`: what each chart the stacks install runs, where, and what it advertises or labels;
* node-level providers: who puts which host path on a GPU node, and whether something the pod
  already waits for (an extended resource) comes after it;
* allocatable: how much CPU and memory each platform keeps for itself;
* network facts: the ports of Lustre per cloud, DNS, the NSG defaults.

A fact here is read from its source, never inferred: where a source was not read, the fact is
missing and the check that needs it fails saying what to read (a check that passes on a guess
would be worse than none).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpu_cluster.components.liveness.model import Plan

# Every source, and how a fact cites one, are in sources.py; read from here too.
from gpu_cluster.components.liveness.sources import SOURCES as SOURCES
from gpu_cluster.components.liveness.sources import cite as cite
from gpu_cluster.components.liveness.sources import says as says


# ---------------------------------------------------------------------------------------------
# Taints the platforms put on node pools themselves.


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str
    source: str
    """A citation (``cite(...)``), or ``the stack (<resource>)`` for one the plan sets."""
    tolerated_if_requested: str = ""
    """An extended resource whose request makes the platform add this taint's toleration to the pod
    itself (GKE's ExtendedResourceToleration admission); '' none."""

    def text(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


# GKE adds the toleration itself to a pod that requests nvidia.com/gpu (gke-gpu-toleration).
GKE_GPU_TAINT = Taint(
    "nvidia.com/gpu", "present", "NoSchedule", cite("gke-gpus"), tolerated_if_requested="nvidia.com/gpu"
)
GKE_QUEUED_TAINT = Taint("cloud.google.com/gke-queued", "true", "NoSchedule", cite("gke-queued"))
AKS_SPOT_TAINT = Taint("kubernetes.azure.com/scalesetpriority", "spot", "NoSchedule", cite("aks-spot"))

# ---------------------------------------------------------------------------------------------
# Hardware a node pool's type presents, which node-feature discovery turns into labels.

NVIDIA_PCI_VENDOR = "10de"
AMD_PCI_VENDOR = "1002"
MELLANOX_PCI_VENDOR = "15b3"
# The ConnectX-7 functions the ND v5 VMs present, as the AKS references' NodeFeatureRule matches
# them (ai-infra configs/network-operator/node-feature-rule.yaml: device In 101c, 101e).
ND_V5_HCA_DEVICES = ("101c", "101e")


# ---------------------------------------------------------------------------------------------
# What each chart (or operator-made DaemonSet) runs, where, and what it gives the node.


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeLabel:
    """A label a workload puts on the nodes it runs on, given the hardware."""

    key: str
    value: str
    when_vendor: str = ""
    """Only on nodes with a PCI device of this vendor (a GPU or HCA vendor id); '' always."""
    after: str = ""
    """Only once this resource or state is ready on the node (``driver``)."""
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Operand:
    """One DaemonSet or Deployment a chart (or an operator's custom resource) runs."""

    name: str
    where: str
    """``gpu``: must run on every GPU node; ``system``: a controller, anywhere it fits."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...] = ()
    """Required node affinity: terms (any of) of (key, operator, values) (all of)."""
    tolerations: tuple[Mapping[str, str], ...] = ()
    """The chart's default tolerations (kept or replaced as ``tolerations_value`` says)."""
    tolerations_value: str = ""
    """The chart value (dotted path) that sets its tolerations; '' none."""
    tolerations_mode: str = "replace"
    """``replace``: a value list replaces the defaults (Helm); ``append``: the template adds it to them."""
    node_selector_value: str = ""
    enabled_value: str = ""
    """A chart value that turns it off when false (dotted path; default on)."""
    advertises: tuple[str, ...] = ()
    labels: tuple[NodeLabel, ...] = ()
    needs_driver: str = ""
    """The kernel driver it needs on the node before it advertises (``nvidia``, ``amdgpu``, ``mlx5``)."""
    waits_for_driver: str = ""
    """How it waits for that driver (an init container, a node label), with its source; '' if not read."""
    installs_driver: str = ""
    """The kernel driver it installs on the node it runs on."""
    exports: tuple[str, ...] = ()
    """The metrics it exports from the node (a node exporter must land on every GPU node)."""
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Chart:
    name: str
    version: str
    operands: tuple[Operand, ...]
    source: str


_NVIDIA_PLUGIN = cite("nvidia-device-plugin")
_EFA_PLUGIN = cite("efa-device-plugin")
_GPU_OP = cite("gpu-operator")
_NET_OP = cite("network-operator")
_AMD_OP = cite("amd-operator")
_DCGM_EXPORTER = cite("dcgm-exporter")

CHARTS: dict[str, Chart] = {
    c.name: c
    for c in (
        Chart(
            name="nvidia-device-plugin",
            version="0.20.0",
            source=_NVIDIA_PLUGIN,
            operands=(
                Operand(
                    name="nvidia-device-plugin",
                    where="gpu",
                    affinity=(
                        (("feature.node.kubernetes.io/pci-10de.present", "In", ("true",)),),
                        (("feature.node.kubernetes.io/cpu-model.vendor_id", "In", ("NVIDIA",)),),
                        (("nvidia.com/gpu.present", "In", ("true",)),),
                    ),
                    tolerations=(
                        {"key": "CriticalAddonsOnly", "operator": "Exists"},
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                    ),
                    tolerations_value="tolerations",
                    advertises=("nvidia.com/gpu",),
                    needs_driver="nvidia",
                    source=f"{_NVIDIA_PLUGIN}:64-93",
                ),
            ),
        ),
        Chart(
            name="aws-efa-k8s-device-plugin",
            version="v0.5.30",
            source=_EFA_PLUGIN,
            operands=(
                Operand(
                    name="aws-efa-k8s-device-plugin",
                    where="gpu",
                    # templates/daemonset.yaml:49-62: one term per key of supportedInstanceLabels,
                    # In its values, and eks.amazonaws.com/compute-type NotIn [fargate].
                    affinity=(),
                    tolerations=({"key": "CriticalAddonsOnly", "operator": "Exists"},),
                    tolerations_value="tolerations",
                    tolerations_mode="append",
                    advertises=("vpc.amazonaws.com/efa",),
                    source=f"{_EFA_PLUGIN} values.yaml:10-13,332 and templates/daemonset.yaml:34-62",
                ),
            ),
        ),
        Chart(
            name="dcgm-exporter",
            version="4.8.2",
            source=_DCGM_EXPORTER,
            operands=(
                Operand(
                    name="dcgm-exporter",
                    where="gpu",
                    # values.yaml:150-156: no nodeSelector, a control-plane toleration; both are
                    # values (templates/daemonset.yaml:70-76), a list replacing the default (Helm).
                    tolerations=(
                        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
                    ),
                    tolerations_value="tolerations",
                    node_selector_value="nodeSelector",
                    exports=("DCGM GPU metrics (port 9400)",),
                    needs_driver="nvidia",
                    source=f"{_DCGM_EXPORTER}/values.yaml:150-156 and templates/daemonset.yaml:70-76",
                ),
            ),
        ),
        Chart(
            name="gpu-operator",
            version="v26.3.0",
            source=_GPU_OP,
            operands=(
                # The operator labels a node nvidia.com/gpu.deploy.<operand>=true when NFD has labelled
                # an NVIDIA PCI device on it (controllers/state_manager.go:115-119); its operands select
                # those labels (assets/state-device-plugin/0500_daemonset.yaml:20) and tolerate
                # daemonsets.tolerations (deployments/gpu-operator/values.yaml:41-44).
                Operand(
                    name="nvidia-driver-daemonset",
                    where="gpu",
                    node_selector={"nvidia.com/gpu.deploy.driver": "true"},
                    tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
                    tolerations_value="daemonsets.tolerations",
                    enabled_value="driver.enabled",
                    installs_driver="nvidia",
                    source=f"{_GPU_OP} deployments/gpu-operator/values.yaml:41-44",
                ),
                Operand(
                    name="nvidia-device-plugin-daemonset",
                    where="gpu",
                    node_selector={"nvidia.com/gpu.deploy.device-plugin": "true"},
                    tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
                    tolerations_value="daemonsets.tolerations",
                    advertises=("nvidia.com/gpu",),
                    needs_driver="nvidia",
                    waits_for_driver=f"its toolkit-validation init container waits for "
                    f"/run/nvidia/validations/toolkit-ready ({_GPU_OP} assets/state-device-plugin/0500_daemonset.yaml:27-31)",
                    source=f"{_GPU_OP} assets/state-device-plugin/0500_daemonset.yaml:20",
                ),
                Operand(
                    name="gpu-operator (labels)",
                    where="system",
                    labels=tuple(
                        NodeLabel(
                            key=f"nvidia.com/gpu.deploy.{op}",
                            value="true",
                            when_vendor=NVIDIA_PCI_VENDOR,
                            after="feature.node.kubernetes.io/pci-10de.present",
                            source=f"{_GPU_OP} controllers/state_manager.go:115-119",
                        )
                        for op in ("driver", "device-plugin")
                    ),
                    source=f"{_GPU_OP} controllers/state_manager.go:115-119",
                ),
            ),
        ),
        Chart(
            name="network-operator",
            version="v26.1.0",
            source=_NET_OP,
            operands=(
                # Its NFD subchart's worker labels PCI devices of classes 0300/0302 by vendor
                # (deployment/network-operator/values.yaml:95-99): an NVIDIA GPU gives pci-10de.
                Operand(
                    name="node-feature-discovery-worker",
                    where="gpu",
                    tolerations=(
                        {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                    ),
                    tolerations_value="node-feature-discovery.worker.tolerations",
                    labels=(
                        NodeLabel(
                            key="feature.node.kubernetes.io/pci-10de.present",
                            value="true",
                            when_vendor=NVIDIA_PCI_VENDOR,
                            source=f"{_NET_OP} deployment/network-operator/values.yaml:95-99",
                        ),
                    ),
                    source=f"{_NET_OP} deployment/network-operator/values.yaml:82-91",
                ),
            ),
        ),
        Chart(
            name="gpu-operator-charts",
            version="v1.4.1",
            source=_AMD_OP,
            operands=(
                # Its NFD worker (helm-charts-k8s/values.yaml:6-12) and default rule
                # (templates/gpu-nfd-default-rule.yaml:11-13) label AMD GPU functions in a VM amd-vgpu.
                Operand(
                    name="amd-node-feature-discovery-worker",
                    where="gpu",
                    tolerations=({"key": "amd-dcm", "operator": "Equal", "value": "up", "effect": "NoExecute"},),
                    tolerations_value="node-feature-discovery.worker.tolerations",
                    enabled_value="node-feature-discovery.enabled",
                    labels=(
                        NodeLabel(
                            key="feature.node.kubernetes.io/amd-vgpu",
                            value="true",
                            when_vendor=AMD_PCI_VENDOR,
                            source=f"{_AMD_OP} helm-charts-k8s/templates/gpu-nfd-default-rule.yaml:11-13; "
                            f"{cite('aks-rdma')} configs/amd-device-config/deviceconfig.yaml (ND MI300X v5 selects amd-vgpu)",
                        ),
                    ),
                    source=f"{_AMD_OP} helm-charts-k8s/values.yaml:6-12",
                ),
            ),
        ),
        # Controllers: anywhere they fit (the stacks pin them to the CPU system pool).
        Chart(
            name="jobset",
            version="0.12.0",
            source=cite("jobset-chart"),
            operands=(
                Operand(
                    name="jobset-controller-manager",
                    where="system",
                    node_selector_value="controller.nodeSelector",
                    tolerations_value="controller.tolerations",
                    source=cite("jobset-chart", "70-74"),
                ),
            ),
        ),
        Chart(
            name="prometheus-pushgateway",
            version="3.8.0",
            source=cite("pushgateway-chart"),
            operands=(
                Operand(
                    name="gpu-cluster-pushgateway",
                    where="system",
                    node_selector_value="nodeSelector",
                    tolerations_value="tolerations",
                    source=cite("pushgateway-chart", "253-260"),
                ),
            ),
        ),
        Chart(
            name="kueue",
            version="0.17.8",
            source=cite("kueue-chart"),
            operands=(
                Operand(
                    name="kueue-controller-manager",
                    where="system",
                    node_selector_value="controllerManager.nodeSelector",
                    tolerations_value="controllerManager.tolerations",
                    source=cite("kueue-chart", "93-96"),
                ),
            ),
        ),
    )
}


# NodeFeatureRules a chart installs (on by default; the value turns them off), which whatever
# node-feature-discovery runs on the node applies: its worker discovers every PCI device
# (nfd-pci-features), its master labels from every rule.
@dataclass(frozen=True, slots=True, kw_only=True)
class ChartRules:
    chart: str
    enabled_value: str
    labels: tuple[NodeLabel, ...]
    source: str


CHART_RULES: dict[str, ChartRules] = {
    "gpu-operator-charts": ChartRules(
        chart="gpu-operator-charts",
        enabled_value="installdefaultNFDRule",
        labels=(
            NodeLabel(
                key="feature.node.kubernetes.io/amd-vgpu",
                value="true",
                when_vendor=AMD_PCI_VENDOR,
                source=f"{_AMD_OP} helm-charts-k8s/templates/gpu-nfd-default-rule.yaml:1-28 (vendor 1002, MI300X VF 74b5); "
                f"values.yaml:20 installdefaultNFDRule true",
            ),
        ),
        source=f"{_AMD_OP} helm-charts-k8s/templates/gpu-nfd-default-rule.yaml",
    ),
}
# The workloads that are a node-feature-discovery worker (one per node, nfd-one-instance).
NFD_WORKER = "node-feature-discovery-worker"

# Kueue integrations on by default in chart 0.17.8 (charts/kueue/values.yaml:153-171).
KUEUE_FRAMEWORKS = ("batch/job", "jobset.x-k8s.io/jobset", "pod")
KUEUE_FRAMEWORKS_SOURCE = cite("kueue-chart", "153-171")
# The provisioning admission check's controller and GKE's queued class.
PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
QUEUED_PROVISIONING_CLASS = "queued-provisioning.gke.io"

# ---------------------------------------------------------------------------------------------
# Node-level providers: who puts which host path on a GPU node.


@dataclass(frozen=True, slots=True, kw_only=True)
class HostProvider:
    """Host paths something puts on every node of a pool, and whether a pod is already held back
    until it has (by an extended resource it asks for, advertised only afterwards)."""

    paths: tuple[str, ...]
    """Host paths (a directory covers what is below it)."""
    by: str
    """What puts them there."""
    gated_by: str = ""
    """The extended resource advertised only after they are there ('' none: the pod must wait)."""
    source: str = ""


# GKE's GPU driver, installed by GKE before its device plugin advertises nvidia.com/gpu: the
# directory and its lib64 (what GPU pods put on LD_LIBRARY_PATH as /usr/local/nvidia/lib64).
GKE_DRIVER = HostProvider(
    paths=("/home/kubernetes/bin/nvidia", "/home/kubernetes/bin/nvidia/lib64", "/home/kubernetes/bin/nvidia/bin"),
    by="GKE's GPU driver installer (gpuDriverInstallationConfig)",
    gated_by="nvidia.com/gpu",
    source=cite("gke-gpus"),
)
# What is always on a Linux node.
KERNEL_PATHS = HostProvider(paths=("/sys", "/proc/sys"), by="the kernel's sysfs and procfs", source="Linux")

# ---------------------------------------------------------------------------------------------
# Allocatable: what each platform keeps of a node's CPU and memory.


def _tiers(total: float, tiers: tuple[tuple[float, float], ...]) -> float:
    """Reserved amount for ``total`` under (upper bound, fraction) tiers, the last unbounded."""
    reserved, low = 0.0, 0.0
    for high, frac in tiers:
        if total <= low:
            break
        reserved += (min(total, high) - low) * frac
        low = high
    return reserved


_CPU_TIERS = ((1.0, 0.06), (2.0, 0.01), (4.0, 0.005), (float("inf"), 0.0025))
_GKE_MEM_TIERS = ((4.0, 0.25), (8.0, 0.20), (16.0, 0.10), (128.0, 0.06), (float("inf"), 0.02))
EVICTION_GIB = 100 / 1024
# maxPods of the EKS GPU types (eks-max-pods: ENIs x (IPv4 per ENI - 1) + 2, instance-info.jsonl).
EKS_MAX_PODS = {
    "p4d.24xlarge": 15 * 49 + 2,
    "p5.48xlarge": 2 * 49 + 2,
    "p5e.48xlarge": 2 * 49 + 2,
    "p5en.48xlarge": 4 * 49 + 2,
    "p6-b200.48xlarge": 4 * 49 + 2,
}
AKS_MAX_PODS = 250


@dataclass(frozen=True, slots=True)
class Allocatable:
    cpu: float
    memory_gib: float
    source: str


def allocatable(orchestrator: str, instance_type: str, vcpu: int, memory_gib: float) -> Allocatable | None:
    """CPU and memory a node of this type offers pods on the platform; None where not read."""
    if orchestrator == "gke":
        return Allocatable(
            vcpu - _tiers(vcpu, _CPU_TIERS),
            memory_gib - _tiers(memory_gib, _GKE_MEM_TIERS) - EVICTION_GIB,
            cite("gke-node-sizes"),
        )
    if orchestrator == "eks":
        pods = EKS_MAX_PODS.get(instance_type)
        if pods is None:
            return None
        return Allocatable(
            vcpu - _tiers(vcpu, _CPU_TIERS),
            memory_gib - (11 * pods + 255) / 1024 - EVICTION_GIB,
            f"{cite('eks-reserved')}; {cite('eks-max-pods')}",
        )
    if orchestrator == "aks":
        kube = min((20 * AKS_MAX_PODS + 50) / 1000 * 1e9 / 2**30, 0.25 * memory_gib)
        return Allocatable(
            vcpu - 0.740, memory_gib - kube - EVICTION_GIB, f"{cite('aks-reserved')}; {cite('aks-overlay-max-pods')}"
        )
    return None


# ---------------------------------------------------------------------------------------------
# Network facts.

# Lustre's ports per cloud, as the storage components cite them.
LUSTRE_PORTS: dict[str, tuple[tuple[int, int], ...]] = {
    "aws": ((988, 988), (1018, 1023)),  # components/aws/storage.py LUSTRE_PORTS
    "azure": ((988, 988), (1019, 1023)),  # components/azure/network.py LUSTRE_PORTS
    "gcp": ((988, 988),),  # components/gcp/orchestration_gke.py (Lustre CSI on its default port 988)
}
DNS_PORT = 53
# NCCL's bootstrap and socket transport listen on ports the kernel picks (ephemeral): a rule that
# allows the job's traffic must allow every TCP port between its nodes, not a list.
ALL_TCP = (1, 65535)


# ---------------------------------------------------------------------------------------------
# CSI drivers: what installs each driver a stack's PersistentVolumes name.

CSI_SOURCES = {
    "fsx.csi.aws.com": "awsdocs/amazon-eks-user-guide@4d52b4d latest/ug/storage/fsx-csi.adoc (the aws-fsx-csi-driver "
    "EKS add-on or the kubernetes-sigs/aws-fsx-csi-driver chart)",
    "lustre.csi.storage.gke.io": "docs.cloud.google.com/managed-lustre/docs/lustre-csi-driver-existing-instance "
    "(addonsConfig.lustreCsiDriverConfig.enabled, read 2026-12-01)",
    "gcsfuse.csi.storage.gke.io": "cloud.google.com/kubernetes-engine/docs/how-to/persistent-volumes/"
    "cloud-storage-fuse-csi-driver-setup (addonsConfig.gcsFuseCsiDriverConfig.enabled, read 2026-12-07)",
    "azurelustre.csi.azure.com": f"{cite('lustre-csi-azure')} (deploy/install-driver.sh applies csi-azurelustre-driver.yaml "
    "and the node DaemonSets)",
}


def csi_driver_installed(plan: Plan, driver: str) -> tuple[bool, str, str]:
    """(installed, by what or why not, source) of a CSI driver on the plan's cluster."""
    where = CSI_SOURCES.get(driver, "")
    if driver == "fsx.csi.aws.com":
        for r in plan.of("aws:eks/addon:Addon"):
            if r.inputs.get("addonName") == "aws-fsx-csi-driver":
                return True, f"the EKS add-on aws-fsx-csi-driver ({r.name})", where
        for r in plan.of("kubernetes:helm.sh/v4:Chart", "kubernetes:helm.sh/v3:Release"):
            if str(r.inputs.get("chart", "")).rsplit("/", 1)[-1] == "aws-fsx-csi-driver":
                return True, f"the chart aws-fsx-csi-driver ({r.name})", where
        return False, "neither the EKS add-on aws-fsx-csi-driver nor its chart is in the plan", where
    if driver in ("lustre.csi.storage.gke.io", "gcsfuse.csi.storage.gke.io"):
        key = "lustreCsiDriverConfig" if driver.startswith("lustre") else "gcsFuseCsiDriverConfig"
        for r in plan.of("gcp:container/cluster:Cluster"):
            if ((r.inputs.get("addonsConfig") or {}).get(key) or {}).get("enabled"):
                return True, f"the GKE cluster's addonsConfig.{key} ({r.name})", where
        return False, f"the GKE cluster's addonsConfig.{key}.enabled is not true", where
    if driver == "azurelustre.csi.azure.com":
        files = [str(r.inputs.get("file", "")) for r in plan.of("kubernetes:yaml/v2:ConfigFile")]
        node = [f for f in files if "csi-azurelustre-node" in f]
        if any(f.endswith("csi-azurelustre-driver.yaml") for f in files) and node:
            return True, "the upstream manifests (CSIDriver and node DaemonSets)", where
        return False, "the plan applies no csi-azurelustre-driver.yaml with its node DaemonSet", where
    return False, f"no fact here says what installs {driver}", "components/liveness/facts.py CSI_SOURCES"


# ---------------------------------------------------------------------------------------------
# Interpreters a node image brings, by the catalog's node image name (node_images).

NODE_PYTHONS: dict[str, dict[str, tuple[int, int]]] = {
    # The PCS sample AMI is Amazon Linux 2023: python3 is 3.9 for the life of the release.
    "pcs-al2023": {"python3": (3, 9), "python3.9": (3, 9)},
}
NODE_PYTHONS_SOURCE = cite("al2023-python")
