"""Every page and repository file the liveness model's facts rest on, by id, with what each says
(read 2026-12-03 unless the entry says otherwise), and how a fact cites one
(``cite("kueue-chart", 157)``). The facts themselves are in :mod:`.facts`.
"""

from __future__ import annotations

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
    "k8s-resources": (
        "kubernetes.io/docs/concepts/configuration/manage-resources-containers",
        "the scheduler places a pod only on a node where, for each resource, the requests of the pods on it plus the pod's are at most the node's allocatable; a pod no node can hold stays Pending",
    ),
    "k8s-pss": (
        "kubernetes.io/docs/concepts/security/pod-security-standards (read 2026-12-07)",
        "baseline forbids hostPath volumes, privileged containers, host namespaces and added capabilities beyond AUDIT_WRITE, CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, MKNOD, NET_BIND_SERVICE, SETFCAP, SETGID, SETPCAP, SETUID, SYS_CHROOT; restricted also allows only NET_BIND_SERVICE added, needs allowPrivilegeEscalation false, runAsNonRoot true, seccomp RuntimeDefault or Localhost, and volumes of the listed core types",
    ),
    "k8s-psa": (
        "kubernetes.io/docs/concepts/security/pod-security-admission (read 2026-12-07)",
        "the namespace label pod-security.kubernetes.io/enforce=<level> rejects a pod that violates the level at creation; audit and warn only record or warn",
    ),
    "k8s-quota": (
        "kubernetes.io/docs/concepts/policy/resource-quotas (read 2026-12-07)",
        "a pod whose requests would take the namespace past a hard limit (requests.<r>, limits.<r>, <r>, requests.nvidia.com/gpu for an extended resource, pods) is rejected at creation with 403 Forbidden",
    ),
    "k8s-limitrange": (
        "kubernetes.io/docs/concepts/policy/limit-range (read 2026-12-07)",
        "a pod whose container requests or limits exceed a LimitRange max of type Container (or the sum over its containers a Pod max) is rejected at creation",
    ),
    "k8s-pvc": (
        "kubernetes.io/docs/concepts/storage/persistent-volumes (read 2026-12-07)",
        "a pod names a PersistentVolumeClaim of its own namespace; a claim that does not exist or is not bound to a PersistentVolume leaves the pod Pending; the volume is mounted by the CSI driver the PersistentVolume names",
    ),
    "k8s-csi": (
        "kubernetes-csi.github.io/docs/csi-driver-object.html and kubernetes.io/docs/concepts/storage/volumes (csi) (read 2026-12-07)",
        "a csi volume is attached and mounted by the node plugin of its driver registered on the node; with no such driver the pod stays ContainerCreating",
    ),
    "k8s-namespace": (
        "kubernetes.io/docs/reference/access-authn-authz/admission-controllers (NamespaceLifecycle, ServiceAccount) (read 2026-12-07)",
        "an object in a namespace that does not exist is rejected; a pod naming a serviceAccountName that does not exist in its namespace is rejected by the ServiceAccount admission controller",
    ),
    "k8s-secret-volume": (
        "kubernetes.io/docs/concepts/configuration/secret (read 2026-12-07)",
        "a pod's secret volume or env secretKeyRef names a Secret of its namespace; with the Secret missing (and not optional) the pod does not start",
    ),
    "gke-gpu-toleration": (
        "cloud.google.com/kubernetes-engine/docs/how-to/gpus (Restrict scheduling with node taints) (read 2026-12-07); kubernetes/kubernetes PR 55839",
        "GKE taints GPU nodes nvidia.com/gpu:NoSchedule and applies the matching toleration to pods requesting GPUs by running the ExtendedResourceToleration admission controller",
    ),
    "gke-firewall-auto": (
        "cloud.google.com/kubernetes-engine/docs/concepts/firewall-rules (GKE cluster firewall rules) (read 2026-12-07)",
        "GKE creates gke-[cluster-name]-[cluster-hash]-all with every cluster: source the Pod CIDR, target the node tag, TCP, UDP, SCTP, ICMP, ESP, AH; it permits traffic between all Pods of the cluster",
    ),
    "efa-sg-self": (
        "docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html (Prepare an EFA-enabled security group) (read 2026-12-07); gardener/gardener-extension-provider-aws issue 1832 (fixed by PR 1833); aws/aws-ofi-nccl issue 663 (comment 2024-10-16)",
        "the EFA group needs an inbound and an outbound rule allowing all traffic with the group itself as source and destination; EFA's own (SRD) traffic is matched only by such group-referenced rules, an outbound 0.0.0.0/0 rule does not carry it",
    ),
    "al2023-python": (
        "docs.aws.amazon.com/linux/al2023/ug/python.html (Python in AL2023) (read 2026-12-07)",
        "/usr/bin/python3 is Python 3.9 for the life of AL2023; newer versions are namespaced packages (python3.11 -> /usr/bin/python3.11)",
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
    "pushgateway-chart": (
        "prometheus-community/helm-charts@4fa56e1 charts/prometheus-pushgateway/values.yaml",
        "chart 3.8.0 (read 2026-12-07): nodeSelector and tolerations are values (lines 253, 260), both empty by default; templates/_helpers.tpl writes them into the Deployment's pod",
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
    "dcgm-exporter": (
        "NVIDIA/dcgm-exporter@4.5.3-4.8.2 (691c927) deployment",
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
