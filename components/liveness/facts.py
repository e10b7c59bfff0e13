"""The facts the liveness model reasons with, each beside its source: the one place to add one.

* :data:`SOURCES`: every page and repository file read, by id, with what it says that a fact rests
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

# ---------------------------------------------------------------------------------------------
# Sources (read 2026-12-03 unless the entry says otherwise).

SOURCES: dict[str, tuple[str, str]] = {
    # Kubernetes
    "k8s-taints": (
        "kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration",
        "a toleration matches a taint with the same key and effect, operator Exists or Equal with the same value; an empty key with Exists matches every taint; an empty effect matches every effect",
    ),
    "k8s-node-affinity": (
        "kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node",
        "nodeSelector: every label; requiredDuringSchedulingIgnoredDuringExecution: any nodeSelectorTerm, all of its matchExpressions",
    ),
    "k8s-device-plugins": (
        "kubernetes.io/docs/concepts/extend-kubernetes/compute-storage-net/device-plugins",
        "a node advertises an extended resource once a device plugin registers it; a pod asking for one is scheduled only where it is advertised",
    ),
    "k8s-crd-pruning": (
        "kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions",
        "Field pruning: fields not in a structural schema are dropped",
    ),
    "k8s-init-containers": (
        "kubernetes.io/docs/concepts/workloads/pods/init-containers",
        "init containers run one after another, each to completion, before the app containers start; a failed one fails a restartPolicy: Never pod",
    ),
    "k8s-well-known": (
        "kubernetes.io/docs/reference/labels-annotations-taints",
        "kubernetes.io/metadata.name on every namespace, node.kubernetes.io/instance-type, kubernetes.io/hostname on every node",
    ),
    "k8s-configmap-volume": (
        "kubernetes.io/docs/concepts/storage/volumes (configMap)",
        "a configMap volume presents each key as a file named by the key (items map keys to other paths); the ConfigMap must exist in the pod's namespace before the pod can start",
    ),
    "k8s-netpol": (
        "kubernetes.io/docs/concepts/services-networking/network-policies",
        "a pod selected by an Ingress policy admits only what some policy's from/ports allow",
    ),
    "k8s-owners": (
        "kubernetes.io/docs/concepts/overview/working-with-objects/owners-dependents",
        "Kubernetes sets metadata.ownerReferences itself on objects that depend on ReplicaSets, DaemonSets, Deployments, Jobs, CronJobs and ReplicationControllers: a Job's pods have their Job as owner",
    ),
    "ct-a3ultra-slurm-job": (
        "GoogleCloudPlatform/cluster-toolkit@2123ba5 examples/machine-learning/a3-ultragpu-8g/nccl-tests/run-nccl-tests.sh:19",
        "#SBATCH --gpus-per-node=8 on an A3 Ultra Slurm partition: the scheduler holds the GPUs as GRES",
    ),
    # Kueue
    "kueue-chart": (
        "kubernetes-sigs/kueue@v0.17.8 (818686e) charts/kueue/values.yaml",
        "",
    ),
    "jobset-chart": (
        "kubernetes-sigs/jobset@v0.12.0 (f22e565) charts/jobset/values.yaml",
        "",
    ),
    "kueue-provisioning": (
        "kubernetes-sigs/kueue@v0.17.8 (818686e) site/content/en/docs/concepts/admission_check/provisioning_request.md",
        "",
    ),
    "kueue-provisioning-example": (
        "kubernetes-sigs/kueue@v0.17.8 (818686e) site/static/examples/provisioning/provisioning-setup.yaml",
        "",
    ),
    "kueue-pr-7490": (
        "kubernetes-sigs/kueue PR 7490",
        "v1beta2 ClusterQueue: admissionChecks replaced by admissionChecksStrategy",
    ),
    # GKE
    "gke-gpus": (
        "cloud.google.com/kubernetes-engine/docs/how-to/gpus",
        "Standard node pools: GKE taints GPU nodes nvidia.com/gpu=present:NoSchedule, labels them cloud.google.com/gke-accelerator=<type>, installs the driver under /home/kubernetes/bin/nvidia with gpuDriverInstallationConfig and runs the device plugin that advertises nvidia.com/gpu",
    ),
    "gke-node-pools": (
        "cloud.google.com/kubernetes-engine/docs/concepts/node-pools",
        "every node carries cloud.google.com/gke-nodepool=<pool name>",
    ),
    "gke-queued": (
        "GoogleCloudPlatform/cluster-toolkit@1047080 modules/compute/gke-node-pool/main.tf; cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest",
        "queued provisioning: GKE applies the cloud.google.com/gke-queued=true:NoSchedule taint itself; a queued pool gets nodes only through a ProvisioningRequest of class queued-provisioning.gke.io",
    ),
    "gke-spot": (
        "cloud.google.com/kubernetes-engine/docs/concepts/spot-vms",
        "GKE labels Spot nodes cloud.google.com/gke-spot=true; it adds no taint unless the pool is given one",
    ),
    "gke-node-sizes": (
        "cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes",
        "reserved CPU: 6% of the first core, 1% of the next, 0.5% of the next 2, 0.25% above 4; memory: 25% of the first 4 GiB, 20% of the next 4, 10% of the next 8, 6% of the next 112, 2% above 128 GiB, and 100 MiB for eviction",
    ),
    "gke-private": (
        "cloud.google.com/kubernetes-engine/docs/concepts/network-isolation",
        "nodes of a cluster with private nodes reach the control plane on its private endpoint",
    ),
    "gke-dataplane-v2": (
        "cloud.google.com/kubernetes-engine/docs/concepts/dataplane-v2",
        "in clusters with GKE Dataplane V2 (datapathProvider ADVANCED_DATAPATH) Kubernetes NetworkPolicy is always on, enforced by anetd (Cilium, eBPF) on every node",
    ),
    "gcp-firewall": (
        "cloud.google.com/firewall/docs/firewalls",
        "every VPC has an implied deny of ingress and an implied allow of egress; a rule applies to the VPC it is in",
    ),
    # EKS / AWS
    "eks-endpoint": (
        "docs.aws.amazon.com/eks/latest/userguide/cluster-endpoint.html",
        "with private access on, nodes in the VPC reach the API server through the private endpoint",
    ),
    "eks-netpol": (
        "awsdocs/amazon-eks-user-guide@d9a9cba latest/ug/networking/cni-network-policy-configure.adoc",
        'the VPC CNI enforces NetworkPolicy once the vpc-cni add-on\'s configuration values hold "enableNetworkPolicy": "true" (Step 2, Step 4); the chart\'s default is "false" (aws/amazon-vpc-cni-k8s@b521883 charts/aws-vpc-cni/values.yaml:126)',
    ),
    "eks-netpol-limits": (
        "awsdocs/amazon-eks-user-guide@4670bd1 latest/ug/networking/cni-network-policy.adoc",
        "Considerations: policies apply only to pods with metadata.ownerReferences (not to standalone pods); at most 24 unique port combinations per protocol in each ingress or egress selector; only the pod's primary interface eth0; Linux EC2 nodes only",
    ),
    "eks-nvidia-ami": (
        "docs.aws.amazon.com/eks/latest/userguide/ml-eks-optimized-ami.html",
        "the AL2023 NVIDIA accelerated AMI carries the NVIDIA driver and container toolkit; the NVIDIA device plugin advertises nvidia.com/gpu",
    ),
    "eks-mng-labels": (
        "docs.aws.amazon.com/eks/latest/userguide/managed-node-groups.html",
        "managed nodes carry eks.amazonaws.com/nodegroup and eks.amazonaws.com/capacityType; no taint unless the group is given one",
    ),
    "eks-reserved": (
        "awslabs/amazon-eks-ami@81fec2e nodeadm/internal/kubelet/config.go:410-444",
        "CPU reserved: 6% of the first core, 1% of the second, 0.5% of cores 3-4, 0.25% above; memory 11 MiB x maxPods + 255 MiB; eviction at 100Mi, line 111",
    ),
    "eks-max-pods": (
        "awslabs/amazon-eks-ami@81fec2e nodeadm/internal/kubelet/eni_max_pods.go:77, nodeadm/internal/kubelet/instance-info.jsonl",
        "maxPods = ENIs x (IPv4 per ENI - 1) + 2",
    ),
    "efa-sg": (
        "docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html",
        "an EFA security group allows all traffic in from and out to itself",
    ),
    "pcs-gres": (
        "docs.aws.amazon.com/pcs/latest/userguide/slurm-versions_release-notes.html; docs.aws.amazon.com/pcs/latest/APIReference/API_ComputeNodeGroupSlurmConfiguration.html",
        "PCS enables Slurm GRES autodetection on compute node groups with GPUs and merges a GPU record it derives from the instance type",
    ),
    "pcs-networking": (
        "docs.aws.amazon.com/pcs/latest/userguide/working-with_networking_sg.html",
        "the cluster's security group must let nodes and the controller reach each other",
    ),
    # AKS / Azure
    "aks-authorized-ranges": (
        "MicrosoftDocs/azure-aks-docs@fb060ab articles/aks/api-server-authorized-ip-ranges.md:45",
        "include the cluster egress IP: firewall, NAT gateway or other, by outbound type",
    ),
    "aks-overlay-nsg": (
        "MicrosoftDocs/azure-aks-docs@fb060ab articles/aks/concepts-network-azure-cni-overlay.md:96-102",
        "pod traffic is not encapsulated and subnet NSG rules apply: allow Node CIDR to Pod CIDR and Pod CIDR to Pod CIDR, all ports and protocols, DNS included",
    ),
    "aks-overlay-max-pods": (
        "MicrosoftDocs/azure-aks-docs@fb060ab articles/aks/concepts-network-azure-cni-overlay.md:108-116",
        "maximum pods per node: default and maximum 250",
    ),
    "aks-spot": (
        "MicrosoftDocs/azure-aks-docs@fb060ab articles/aks/spot-node-pool.md:41",
        "a Spot pool has the kubernetes.azure.com/scalesetpriority=spot:NoSchedule taint",
    ),
    "aks-amd": (
        "MicrosoftDocs/azure-aks-docs@fb060ab articles/aks/use-amd-gpus.md:49",
        "AKS neither installs nor automates the GPU driver or the device plugin on AMD pools",
    ),
    "aks-labels": (
        "Azure/ai-infrastructure-on-azure@a01b073 infrastructure_references/aks/scripts/deploy-aks.sh",
        "nodes carry agentpool=<pool name>",
    ),
    "aks-reserved": (
        "MicrosoftDocs/azure-aks-docs@fb060ab articles/aks/node-resource-reservations.md:29,38",
        "CPU: 740 millicores from 64 cores, the table's last column; memory: the lesser of 20 MB x max pods + 50 MB and 25%, plus 100Mi for eviction",
    ),
    "aks-ubuntu": (
        "MicrosoftDocs/azure-aks-docs@fb060ab articles/aks/upgrade-os-version.md:41",
        "os SKU Ubuntu is 22.04 up to Kubernetes 1.34 and 24.04 from 1.35",
    ),
    "aks-cilium": (
        "MicrosoftDocs/azure-aks-docs@fb060ab articles/aks/azure-cni-powered-by-cilium.md:62,110",
        "Cilium enforces network policies, no separate engine; policies can't use ipBlock to allow access to node or pod IPs",
    ),
    "aks-cilium-agent": (
        "MicrosoftDocs/azure-aks-docs@fb060ab articles/aks/container-network-security-fqdn-filtering-concepts.md:26; "
        "cilium/cilium@c547745 install/kubernetes/cilium/values.yaml (tolerations)",
        "the Cilium agent runs as a DaemonSet on every node of an Azure CNI Powered by Cilium cluster; Cilium's chart "
        "tolerates every taint by default ([{operator: Exists}]); AKS's own manifest of it is not published",
    ),
    "ama-logs": (
        "microsoft/Docker-Provider@056cc95 kubernetes/ama-logs.yaml",
        "DaemonSet ama-logs: nodeAffinity kubernetes.io/os In [linux], type NotIn [virtual-kubelet]; tolerations "
        "operator Exists for NoSchedule, NoExecute and PreferNoSchedule",
    ),
    "nfd-one-instance": (
        "kubernetes-sigs/node-feature-discovery@76e6cc8 docs/get-started/introduction.md:41,110; "
        "docs/reference/master-commandline-reference.md:63-67",
        "one nfd-worker on each node; a master records the labels it manages in nfd.node.kubernetes.io/feature-labels, "
        "a second deployment needs its own -instance name or the two share that annotation",
    ),
    "nfd-pci-features": (
        "kubernetes-sigs/node-feature-discovery@76e6cc8 source/pci/pci.go:116-148",
        "the pci source discovers every PCI device (pci.device); deviceClassWhitelist filters only the labels it makes itself",
    ),
    "azure-nsg": (
        "learn.microsoft.com/azure/virtual-network/network-security-groups-overview",
        "default rules: AllowVnetInBound 65000, AllowAzureLoadBalancerInBound 65001, DenyAllInBound 65500; AllowVnetOutBound 65000, AllowInternetOutBound 65001, DenyAllOutBound 65500; VirtualNetwork is the VNet's address space",
    ),
    "azure-nat": (
        "learn.microsoft.com/azure/nat-gateway/nat-overview",
        "a subnet with a NAT gateway sends all its outbound internet traffic from the gateway's public IPs",
    ),
    # Operators and charts
    "nvidia-device-plugin": (
        "NVIDIA/k8s-device-plugin@v0.20.0 (1b826ac) deployments/helm/nvidia-device-plugin/values.yaml",
        "",
    ),
    "efa-device-plugin": (
        "aws/eks-charts@5239609 stable/aws-efa-k8s-device-plugin (chart v0.5.30)",
        "",
    ),
    "gpu-operator": (
        "NVIDIA/gpu-operator@v26.3.0 (30a8bbd)",
        "",
    ),
    "network-operator": (
        "Mellanox/network-operator@v26.1.0 (34a16f8)",
        "",
    ),
    "amd-operator": (
        "ROCm/gpu-operator@v1.4.1 (3b39804)",
        "",
    ),
    "aks-rdma": (
        "Azure/aks-rdma-infiniband@700dabb",
        "",
    ),
    "ai-infra": (
        "Azure/ai-infrastructure-on-azure@a01b073",
        "",
    ),
    "lustre-csi-azure": (
        "kubernetes-sigs/azurelustre-csi-driver@v0.4.0 (9011a5f) deploy/csi-azurelustre-node-noble.yaml",
        "tolerations: operator Exists",
    ),
    "gke-installers": (
        "GoogleCloudPlatform/container-engine-accelerators@992db81 gpudirect-tcpxo/nccl-tcpxo-installer.yaml, gpudirect-rdma/nccl-rdma-installer.yaml",
        "the installer copies the plugin into /home/kubernetes/bin/nvidia/lib64; gIB also its tree into /home/kubernetes/bin/gib; TCPXO's pre-installation binds /dev/aperture_devices",
    ),
    "tcpxo-env-profile": (
        "google/nccl-plugin-gpudirect-tcpxo tcpxo_scripts/nccl-env-profile.sh at v1.0.15",
        "the tuner and guest-config files are read from NCCL_LIB_DIR, where the installer puts them",
    ),
}


def cite(source_id: str, line: int | str | None = None, path: str = "") -> str:
    """Where a source is, with a file and line where it has them: ``owner/repo@ref path:line``."""
    base = SOURCES[source_id][0]
    if path:
        base = f"{base} {path}"
    return f"{base}:{line}" if line is not None else base


def says(source_id: str) -> str:
    """What the source says that a fact rests on."""
    return SOURCES[source_id][1]


# ---------------------------------------------------------------------------------------------
# Taints the platforms put on node pools themselves.


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str
    source: str
    """A citation (``cite(...)``), or ``the stack (<resource>)`` for one the plan sets."""

    def text(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


GKE_GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule", cite("gke-gpus"))
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
