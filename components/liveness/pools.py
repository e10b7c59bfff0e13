"""The node pools as the scheduler will see them, one reader per platform (GKE, EKS, AKS, PCS,
Cluster Director): each pool's size, instance type, labels and taints, with what the platform
adds to them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu_cluster.components.catalog import CatalogError, load_catalog
from gpu_cluster.components.liveness import facts
from gpu_cluster.components.liveness.facts import Taint, cite
from gpu_cluster.components.liveness.model import Plan


GKE_POOL = "gcp:container/nodePool:NodePool"
EKS_GROUP = "aws:eks/nodeGroup:NodeGroup"
AKS_POOL = "azure-native:containerservice:AgentPool"
AKS_CLUSTER = "azure-native:containerservice:ManagedCluster"
PCS_GROUP = "aws-native:pcs:ComputeNodeGroup"
PCS_QUEUE = "aws-native:pcs:Queue"
CD_CLUSTER = "gcp:hypercomputecluster/cluster:Cluster"
AZURE_VMSS = "azure-native:compute:VirtualMachineScaleSet"
# The tag the Azure Slurm scale set carries naming its partition (components/azure/orchestration_slurm.py).
AZURE_PARTITION_TAG = "slurm-partition"


@dataclass(slots=True, kw_only=True)
class Pool:
    """One node pool (a node group, a Slurm partition's node set)."""

    name: str
    resource: str
    """What the plan calls it: ``gcp:container/nodePool h100-gke-gpu``."""
    instance_type: str
    nodes: int
    """How many nodes it can hold (its maximum)."""
    gpu: bool
    labels: dict[str, str] = field(default_factory=dict)
    label_sources: dict[str, str] = field(default_factory=dict)
    taints: list[Taint] = field(default_factory=list)
    vendors: tuple[str, ...] = ()
    """PCI vendors of its accelerators and HCAs (node feature discovery labels from these)."""
    hca_devices: tuple[str, ...] = ()
    drivers: dict[str, str] = field(default_factory=dict)
    """Kernel drivers the node image (or the platform) brings -> the source saying so."""
    queued: bool = False
    spot: bool = False
    subnet: str = ""
    """The id of its subnet (reachability)."""
    security_groups: tuple[str, ...] = ()
    partition: str = ""
    efa_devices: int | None = None
    """EKS: the EFA interfaces its launch template attaches (``efa`` and ``efa-only``); None where
    the plan names none (the catalog's count is then what a node has)."""

    def label(self, key: str, value: str, source: str) -> None:
        self.labels[key] = value
        self.label_sources[key] = source


def _num(v: Any) -> int:
    try:
        return int(float(v))
    except (TypeError, ValueError):
        return 0


def _catalog_hw(instance_type: str) -> tuple[bool, tuple[str, ...], tuple[str, ...]]:
    """(has GPUs, PCI vendors, HCA device ids) of a catalog type; (False, (), ()) for others."""
    try:
        it = load_catalog().get(instance_type)
    except CatalogError:
        return False, (), ()
    vendors: list[str] = []
    if it.accelerator.count:
        vendors.append(facts.NVIDIA_PCI_VENDOR if it.accelerator.vendor == "nvidia" else facts.AMD_PCI_VENDOR)
    hcas: tuple[str, ...] = ()
    if it.network.fabric == "infiniband":
        vendors.append(facts.MELLANOX_PCI_VENDOR)
        hcas = facts.ND_V5_HCA_DEVICES
    return bool(it.accelerator.count), tuple(vendors), hcas


def _gke_pools(plan: Plan) -> list[Pool]:
    out = []
    for r in plan.of(GKE_POOL):
        cfg = r.inputs.get("nodeConfig") or {}
        name = str(r.inputs.get("name") or r.name)
        itype = str(cfg.get("machineType", ""))
        accels = cfg.get("guestAccelerators") or []
        auto = r.inputs.get("autoscaling") or {}
        nodes = _num(auto.get("totalMaxNodeCount") or auto.get("maxNodeCount") or r.inputs.get("nodeCount"))
        nodes = nodes or _num(r.inputs.get("initialNodeCount"))
        gpu, vendors, hcas = _catalog_hw(itype)
        pool = Pool(
            name=name,
            resource=f"{r.type.split(':')[1]} {name}",
            instance_type=itype,
            nodes=nodes,
            gpu=bool(accels) or gpu,
            vendors=vendors,
            hca_devices=hcas,
            queued=bool((r.inputs.get("queuedProvisioning") or {}).get("enabled")),
            spot=bool(cfg.get("spot")),
            subnet=str((r.inputs.get("networkConfig") or {}).get("podRange") or ""),
        )
        for k, v in (cfg.get("labels") or {}).items():
            pool.label(k, str(v), f"the stack ({r.name} nodeConfig.labels)")
        pool.label("cloud.google.com/gke-nodepool", name, cite("gke-node-pools"))
        pool.label("node.kubernetes.io/instance-type", itype, cite("k8s-well-known"))
        for t in cfg.get("taints") or []:
            pool.taints.append(
                Taint(t.get("key", ""), t.get("value", ""), _gke_effect(t.get("effect", "")), f"the stack ({r.name})")
            )
        if accels:
            pool.label("cloud.google.com/gke-accelerator", str(accels[0].get("type", "")), cite("gke-gpus"))
            pool.taints.append(facts.GKE_GPU_TAINT)
            install = (accels[0].get("gpuDriverInstallationConfig") or {}).get("gpuDriverVersion")
            if install and install != "INSTALLATION_DISABLED":
                pool.drivers["nvidia"] = f"gpuDriverInstallationConfig.gpuDriverVersion {install} ({cite('gke-gpus')})"
        if pool.queued:
            pool.taints.append(facts.GKE_QUEUED_TAINT)
        if pool.spot:
            pool.label("cloud.google.com/gke-spot", "true", cite("gke-spot"))
        out.append(pool)
    return out


def _gke_effect(effect: str) -> str:
    # pulumi-gcp takes NO_SCHEDULE / PREFER_NO_SCHEDULE / NO_EXECUTE; Kubernetes spells them CamelCase.
    return {"NO_SCHEDULE": "NoSchedule", "PREFER_NO_SCHEDULE": "PreferNoSchedule", "NO_EXECUTE": "NoExecute"}.get(
        effect, effect
    )


def _template_network(template: Mapping[str, Any] | None) -> tuple[list[str], int | None]:
    """An EC2 launch template's security groups (its own and its network interfaces') and how many
    of its interfaces are EFA; ``None`` EFA where it names no interfaces (or there is no template)."""
    if template is None:
        return [], None
    groups = [str(g) for g in template.get("vpcSecurityGroupIds") or []]
    nics = template.get("networkInterfaces") or []
    for nic in nics:
        groups += [str(g) for g in nic.get("securityGroups") or []]
    efa = sum(1 for nic in nics if nic.get("interfaceType") in ("efa", "efa-only")) if nics else None
    return groups, efa


def _eks_pools(plan: Plan) -> list[Pool]:
    out = []
    for r in plan.of(EKS_GROUP):
        types = r.inputs.get("instanceTypes") or []
        itype = str(types[0]) if types else ""
        if not itype:
            # A capacity block's group names no type: the launch template does.
            lt = plan.ref((r.inputs.get("launchTemplate") or {}).get("id"))
            itype = str((lt.inputs if lt else {}).get("instanceType", ""))
        name = r.name
        gpu, vendors, hcas = _catalog_hw(itype)
        scale = r.inputs.get("scalingConfig") or {}
        lt = plan.ref((r.inputs.get("launchTemplate") or {}).get("id"))
        groups, efa = _template_network(lt.inputs if lt is not None else None)
        pool = Pool(
            name=name,
            resource=f"eks/nodeGroup {name}",
            instance_type=itype,
            nodes=_num(scale.get("maxSize")),
            gpu=gpu,
            vendors=vendors,
            hca_devices=hcas,
            spot=r.inputs.get("capacityType") == "SPOT",
            subnet=str((r.inputs.get("subnetIds") or [""])[0]),
            security_groups=tuple(dict.fromkeys(groups)),
            efa_devices=efa,
        )
        for k, v in (r.inputs.get("labels") or {}).items():
            pool.label(k, str(v), f"the stack ({r.name} labels)")
        pool.label("node.kubernetes.io/instance-type", itype, cite("k8s-well-known"))
        pool.label("eks.amazonaws.com/nodegroup", name, cite("eks-mng-labels"))
        pool.label(
            "eks.amazonaws.com/capacityType", str(r.inputs.get("capacityType", "ON_DEMAND")), cite("eks-mng-labels")
        )
        for t in r.inputs.get("taints") or []:
            pool.taints.append(
                Taint(t.get("key", ""), t.get("value", ""), _gke_effect(t.get("effect", "")), f"the stack ({r.name})")
            )
        if "NVIDIA" in str(r.inputs.get("amiType", "")):
            pool.drivers["nvidia"] = f"amiType {r.inputs.get('amiType')} ({cite('eks-nvidia-ami')})"
        out.append(pool)
    return out


def _aks_pools(plan: Plan) -> list[Pool]:
    out = []
    profiles: list[tuple[str, Mapping[str, Any]]] = []
    for c in plan.of(AKS_CLUSTER):
        profiles += [(c.name, p) for p in c.inputs.get("agentPoolProfiles") or []]
    profiles += [(r.name, r.inputs) for r in plan.of(AKS_POOL)]
    for res_name, p in profiles:
        name = str(p.get("agentPoolName") or p.get("name") or "")
        itype = str(p.get("vmSize", ""))
        gpu, vendors, hcas = _catalog_hw(itype)
        pool = Pool(
            name=name,
            resource=f"containerservice pool {name} ({res_name})",
            instance_type=itype,
            nodes=_num(p.get("maxCount") or p.get("count")),
            gpu=gpu,
            vendors=vendors,
            hca_devices=hcas,
            spot=str(p.get("scaleSetPriority", "")).lower() == "spot",
            subnet=str(p.get("vnetSubnetID", "")),
        )
        pool.label("agentpool", name, cite("aks-labels"))
        pool.label("node.kubernetes.io/instance-type", itype, cite("k8s-well-known"))
        # Every AKS pool here is Linux (osSKU Ubuntu); the kubelet labels its node's OS.
        pool.label("kubernetes.io/os", "linux", cite("k8s-well-known"))
        for k, v in (p.get("nodeLabels") or {}).items():
            pool.label(k, str(v), f"the stack ({res_name} nodeLabels)")
        for t in p.get("nodeTaints") or []:
            key, _, rest = str(t).partition("=")
            value, _, effect = rest.rpartition(":") if ":" in rest else ("", "", rest)
            if not effect and ":" in key:
                key, _, effect = key.partition(":")
            pool.taints.append(Taint(key, value, effect, f"the stack ({res_name} nodeTaints)"))
        if pool.spot:
            pool.taints.append(facts.AKS_SPOT_TAINT)
            pool.label("kubernetes.azure.com/scalesetpriority", "spot", cite("aks-spot"))
        driver = str((p.get("gpuProfile") or {}).get("driver", ""))
        if gpu and driver and driver != "None":
            pool.drivers["nvidia" if facts.NVIDIA_PCI_VENDOR in vendors else "amdgpu"] = f"gpuProfile.driver {driver}"
        out.append(pool)
    return out


def _pcs_pools(plan: Plan) -> list[Pool]:
    partitions: dict[str, str] = {}
    for q in plan.of(PCS_QUEUE):
        for cfg in q.inputs.get("computeNodeGroupConfigurations") or []:
            partitions[str(cfg.get("computeNodeGroupId", ""))] = str(q.inputs.get("name", q.name))
    out = []
    for r in plan.of(PCS_GROUP):
        itype = str(((r.inputs.get("instanceConfigs") or [{}])[0]).get("instanceType", ""))
        gpu, vendors, hcas = _catalog_hw(itype)
        lt = plan.ref((r.inputs.get("customLaunchTemplate") or {}).get("templateId"))
        groups, efa = _template_network(lt.inputs if lt is not None else None)
        ids = {str(r.inputs.get("awsId", "")), r.id, r.name}
        out.append(
            Pool(
                name=str(r.inputs.get("name", r.name)),
                resource=f"pcs/ComputeNodeGroup {r.inputs.get('name', r.name)}",
                instance_type=itype,
                nodes=_num((r.inputs.get("scalingConfiguration") or {}).get("maxInstanceCount")),
                gpu=gpu,
                vendors=vendors,
                hca_devices=hcas,
                subnet=str((r.inputs.get("subnetIds") or [""])[0]),
                security_groups=tuple(dict.fromkeys(groups)),
                efa_devices=efa,
                partition=next((p for i, p in partitions.items() if i in ids), ""),
            )
        )
    return out


def _cluster_director_pools(plan: Plan) -> list[Pool]:
    out = []
    for r in plan.of(CD_CLUSTER):
        slurm = (r.inputs.get("orchestrator") or {}).get("slurm") or {}
        sets = {str(n.get("id")): n for n in slurm.get("nodeSets") or []}
        itype = str(plan.outputs.get("instance_type", ""))
        gpu, vendors, hcas = _catalog_hw(itype)
        for part in slurm.get("partitions") or []:
            for set_id in part.get("nodeSetIds") or []:
                n = sets.get(str(set_id)) or {}
                out.append(
                    Pool(
                        name=str(set_id),
                        resource=f"hypercomputecluster node set {set_id}",
                        instance_type=itype,
                        nodes=_num(n.get("staticNodeCount")) + _num(n.get("maxDynamicNodeCount")),
                        gpu=gpu,
                        vendors=vendors,
                        hca_devices=hcas,
                        partition=str(part.get("id", "")),
                    )
                )
    return out


def _azure_slurm_pools(plan: Plan) -> list[Pool]:
    """The Slurm scale sets of an Azure plan: every instance registers as a dynamic node of the
    partition its tag names (components/azure/slurm_config.py)."""
    out = []
    for r in plan.of(AZURE_VMSS):
        sku = r.inputs.get("sku") or {}
        itype = str(sku.get("name", ""))
        gpu, vendors, hcas = _catalog_hw(itype)
        profile = r.inputs.get("virtualMachineProfile") or {}
        nics = (profile.get("networkProfile") or {}).get("networkInterfaceConfigurations") or []
        ips = (nics[0].get("ipConfigurations") or [{}]) if nics else [{}]
        out.append(
            Pool(
                name=r.name,
                resource=f"compute/VirtualMachineScaleSet {r.name}",
                instance_type=itype,
                nodes=_num(sku.get("capacity")),
                gpu=gpu,
                vendors=vendors,
                hca_devices=hcas,
                spot=str(profile.get("priority", "")).lower() == "spot",
                subnet=str((ips[0].get("subnet") or {}).get("id", "")),
                partition=str((r.inputs.get("tags") or {}).get(AZURE_PARTITION_TAG, "")),
            )
        )
    return out


def pools(plan: Plan) -> list[Pool]:
    return [
        *_gke_pools(plan),
        *_eks_pools(plan),
        *_aks_pools(plan),
        *_pcs_pools(plan),
        *_cluster_director_pools(plan),
        *_azure_slurm_pools(plan),
    ]
