"""The cluster as the scheduler will see it, read from the plan: node pools (with the labels and
taints their platform adds), the workloads that must run on them (the stack's DaemonSets, the
operands of its charts and operators, the platform's own GPU device plugin) and the rendered job's
pods. The pools are read per platform in ``pools.py``; the checks are platform-free.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_cluster.components.liveness import facts
from gpu_cluster.components.liveness.facts import NodeLabel, Operand, Taint, cite
from gpu_cluster.components.liveness.model import Job, Plan, Resource
from gpu_cluster.components.liveness.pools import Pool as Pool
from gpu_cluster.components.liveness.pools import AKS_CLUSTER, pools

K8S_DAEMONSET = "kubernetes:apps/v1:DaemonSet"
K8S_DEPLOYMENT = "kubernetes:apps/v1:Deployment"
HELM_CHART = "kubernetes:helm.sh/v4:Chart"


Term = tuple[tuple[str, str, tuple[str, ...]], ...]


@dataclass(slots=True, kw_only=True)
class Workload:
    """Pods that must run: a DaemonSet on every GPU node, a controller somewhere, the job's pods."""

    object: str
    where: str
    """``gpu``: on every node of the GPU pool; ``system``: anywhere it fits; ``job``: the job's pods."""
    node_selector: dict[str, str] = field(default_factory=dict)
    affinity: tuple[Term, ...] = ()
    tolerations: Sequence[Mapping[str, Any]] = field(default_factory=list)
    requests: dict[str, str] = field(default_factory=dict)
    """Per pod: every resource asked for (the larger of request and limit, summed over containers)."""
    replicas: int = 1
    advertises: tuple[str, ...] = ()
    labels: tuple[NodeLabel, ...] = ()
    needs_driver: str = ""
    waits_for_driver: str = ""
    installs_driver: str = ""
    exports: tuple[str, ...] = ()
    pod: Mapping[str, Any] = field(default_factory=dict)
    """The pod spec where the plan or the job has one (DaemonSets, the job)."""
    source: str = ""


def value_at(values: Mapping[str, Any] | None, path: str) -> Any:
    """A chart value by dotted path, None where unset."""
    node: Any = values or {}
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


# ---------------------------------------------------------------------------------------------
# Workloads: what the stack installs that must run, and the job's pods.


def _affinity_terms(affinity: Mapping[str, Any] | None) -> tuple[Term, ...]:
    node = (affinity or {}).get("nodeAffinity") or affinity or {}
    req = node.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = []
    for term in req.get("nodeSelectorTerms") or []:
        terms.append(
            tuple(
                (str(e.get("key", "")), str(e.get("operator", "")), tuple(str(v) for v in e.get("values") or []))
                for e in term.get("matchExpressions") or []
            )
        )
    return tuple(terms)


_QTY = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity(value: Any) -> float:
    """A Kubernetes quantity as a number (CPU in cores, memory in bytes)."""
    text = str(value).strip()
    for suffix in sorted(_QTY, key=len, reverse=True):
        if suffix and text.endswith(suffix):
            return float(text[: -len(suffix)]) * _QTY[suffix]
    return float(text)


def pod_requests(pod: Mapping[str, Any]) -> dict[str, str]:
    """What one pod asks for: per resource the sum over its containers (of the larger of request and
    limit: an extended resource's limit is its request), and the largest of its init containers'
    when that is more (the scheduler's effective request)."""

    def one(c: Mapping[str, Any]) -> dict[str, float]:
        res = c.get("resources") or {}
        out: dict[str, float] = {}
        for part in ("requests", "limits"):
            for k, v in (res.get(part) or {}).items():
                out[k] = max(out.get(k, 0.0), quantity(v))
        return out

    total: dict[str, float] = {}
    for c in pod.get("containers") or []:
        for k, v in one(c).items():
            total[k] = total.get(k, 0.0) + v
    sidecars = [c for c in pod.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    for c in sidecars:
        for k, v in one(c).items():
            total[k] = total.get(k, 0.0) + v
    for c in pod.get("initContainers") or []:
        if c.get("restartPolicy") == "Always":
            continue
        for k, v in one(c).items():
            total[k] = max(total.get(k, 0.0), v)
    return {k: f"{v:g}" for k, v in total.items()}


def _from_pod(object_name: str, where: str, pod: Mapping[str, Any], source: str, replicas: int = 1) -> Workload:
    return Workload(
        object=object_name,
        where=where,
        node_selector={str(k): str(v) for k, v in (pod.get("nodeSelector") or {}).items()},
        affinity=_affinity_terms(pod.get("affinity")),
        tolerations=[dict(t) for t in pod.get("tolerations") or []],
        requests=pod_requests(pod),
        replicas=replicas,
        pod=pod,
        source=source,
    )


def _daemonsets(plan: Plan) -> list[Workload]:
    out = []
    for r in plan.of(K8S_DAEMONSET):
        meta = r.inputs.get("metadata") or {}
        name = str(meta.get("name") or r.name)
        pod = (((r.inputs.get("spec") or {}).get("template") or {}).get("spec")) or {}
        w = _from_pod(f"DaemonSet {meta.get('namespace', 'default')}/{name}", "gpu", pod, f"the stack ({r.name})")
        known = INSTALLERS.get(name)
        if known is not None:
            w.installs_driver = known.installs_driver
            w.exports = known.exports
            w.source = f"the stack ({r.name}); {known.source}"
        out.append(w)
    return out


def _chart_workloads(plan: Plan) -> list[Workload]:
    out = []
    for r in plan.of(HELM_CHART):
        chart_ref = str(r.inputs.get("chart", ""))
        chart = facts.CHARTS.get(chart_ref.rsplit("/", 1)[-1])
        if chart is None:
            continue
        values = r.inputs.get("values") or {}
        for op in chart.operands:
            if op.enabled_value and value_at(values, op.enabled_value) is False:
                continue
            out.append(_operand(f"chart {chart.name} {r.inputs.get('version', '')}: {op.name}", op, values, plan, r))
    return out


def _operand(object_name: str, op: Operand, values: Mapping[str, Any], plan: Plan, res: Resource) -> Workload:
    tolerations = [dict(t) for t in op.tolerations]
    given = value_at(values, op.tolerations_value) if op.tolerations_value else None
    if isinstance(given, list):
        tolerations = [*tolerations, *given] if op.tolerations_mode == "append" else [dict(t) for t in given]
    selector = dict(op.node_selector)
    if op.node_selector_value:
        selector.update({str(k): str(v) for k, v in (value_at(values, op.node_selector_value) or {}).items()})
    affinity = op.affinity
    if op.name == "aws-efa-k8s-device-plugin":
        # templates/daemonset.yaml:49-62: one term per label key, In the listed types.
        sil = value_at(values, "supportedInstanceLabels") or {}
        keys = sil.get("keys") or ["node.kubernetes.io/instance-type"]
        types = tuple(str(v) for v in sil.get("values") or ())
        affinity = tuple(
            ((str(k), "In", types), ("eks.amazonaws.com/compute-type", "NotIn", ("fargate",))) for k in keys
        )
    return Workload(
        object=object_name,
        where=op.where,
        node_selector=selector,
        affinity=affinity,
        tolerations=tolerations,
        advertises=op.advertises,
        labels=op.labels,
        needs_driver=op.needs_driver,
        waits_for_driver=op.waits_for_driver,
        installs_driver=op.installs_driver,
        exports=op.exports,
        source=op.source,
    )


def _nic_cluster_policies(plan: Plan) -> list[Workload]:
    """The DaemonSets a NicClusterPolicy makes (network operator v26.1.0 manifests/state-*)."""
    out = []
    src = cite("network-operator")
    for r in plan.of("kubernetes:mellanox.com/v1alpha1:NicClusterPolicy"):
        spec = r.inputs.get("spec") or {}
        tol = [dict(t) for t in spec.get("tolerations") or []]
        # Every state's DaemonSet appends nvidia.com/gpu to the policy's tolerations
        # (manifests/state-sriov-device-plugin/0030-sriov-dp-daemonset.yaml:43-49).
        tol.append({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
        affinity = _affinity_terms(spec.get("nodeAffinity"))
        name = f"NicClusterPolicy {(r.inputs.get('metadata') or {}).get('name', r.name)}"
        if spec.get("ofedDriver"):
            out.append(
                Workload(
                    object=f"{name}: DOCA driver DaemonSet",
                    where="gpu",
                    node_selector={"feature.node.kubernetes.io/pci-15b3.present": "true"},
                    affinity=affinity,
                    tolerations=tol,
                    installs_driver="mlx5",
                    labels=(
                        NodeLabel(
                            key="network.nvidia.com/operator.mofed.wait",
                            value="false",
                            after="driver:mlx5",
                            source=f"{src} manifests/state-sriov-device-plugin/0030-sriov-dp-daemonset.yaml:35-37",
                        ),
                    ),
                    source=f"{src} manifests/state-ofed-driver",
                )
            )
        sriov = spec.get("sriovDevicePlugin")
        if sriov:
            resources = []
            try:
                cfg = json.loads(sriov.get("config") or "{}")
            except ValueError:
                cfg = {}
            for entry in cfg.get("resourceList") or []:
                resources.append(f"{entry.get('resourcePrefix', 'intel.com')}/{entry.get('resourceName', '')}")
            out.append(
                Workload(
                    object=f"{name}: SR-IOV device plugin DaemonSet",
                    where="gpu",
                    node_selector={
                        "feature.node.kubernetes.io/pci-15b3.present": "true",
                        "network.nvidia.com/operator.mofed.wait": "false",
                    },
                    affinity=affinity,
                    tolerations=tol,
                    advertises=tuple(resources),
                    needs_driver="mlx5",
                    waits_for_driver=f"its nodeSelector network.nvidia.com/operator.mofed.wait=false, set once the DOCA "
                    f"driver is up ({src} manifests/state-sriov-device-plugin/0030-sriov-dp-daemonset.yaml:35-37)",
                    source=f"{src} manifests/state-sriov-device-plugin/0030-sriov-dp-daemonset.yaml:32-49",
                )
            )
    return out


def _node_feature_rules(plan: Plan) -> list[NodeLabel]:
    """Labels a NodeFeatureRule gives the nodes whose PCI devices it matches (NFD's master applies
    them from what its worker on the node discovered)."""
    out = []
    for r in plan.of("kubernetes:nfd.k8s-sigs.io/v1alpha1:NodeFeatureRule"):
        for rule in (r.inputs.get("spec") or {}).get("rules") or []:
            devices: tuple[str, ...] = ()
            for term in rule.get("matchFeatures") or []:
                if term.get("feature") == "pci.device":
                    dev = (term.get("matchExpressions") or {}).get("device") or {}
                    if dev.get("op") == "In":
                        devices = tuple(str(v) for v in dev.get("value") or ())
            for k, v in (rule.get("labels") or {}).items():
                out.append(
                    NodeLabel(
                        key=str(k),
                        value=str(v),
                        when_vendor=facts.MELLANOX_PCI_VENDOR,
                        after="hca:" + ",".join(devices),
                        source=f"the stack's NodeFeatureRule {rule.get('name', r.name)}",
                    )
                )
    return out


def _device_configs(plan: Plan) -> list[Workload]:
    """The DaemonSets AMD's DeviceConfig makes (ROCm/gpu-operator v1.4.1 internal/kmmmodule)."""
    out = []
    src = cite("amd-operator")
    for r in plan.of("kubernetes:amd.com/v1alpha1:DeviceConfig"):
        spec = r.inputs.get("spec") or {}
        selector = {str(k): str(v) for k, v in (spec.get("selector") or {}).items()}
        plugin = spec.get("devicePlugin") or {}
        name = f"DeviceConfig {(r.inputs.get('metadata') or {}).get('name', r.name)}"
        out.append(
            Workload(
                object=f"{name}: device plugin DaemonSet",
                where="gpu",
                node_selector=selector,
                tolerations=[dict(t) for t in plugin.get("devicePluginTolerations") or []],
                advertises=("amd.com/gpu",),
                needs_driver="amdgpu",
                waits_for_driver=f"its driver-init init container waits for /sys/class/kfd and "
                f"/sys/module/amdgpu/drivers ({src} internal/kmmmodule/kmmmodule.go:359,373-377)",
                installs_driver="amdgpu" if (spec.get("driver") or {}).get("enable") else "",
                source=f"{src} internal/kmmmodule/kmmmodule.go:341-347 (nodeSelector: spec.selector)",
            )
        )
        if plugin.get("enableNodeLabeller"):
            out.append(
                Workload(
                    object=f"{name}: node labeller DaemonSet",
                    where="gpu",
                    node_selector=selector,
                    tolerations=[dict(t) for t in plugin.get("nodeLabellerTolerations") or []],
                    source=f"{src} api/v1alpha1/deviceconfig_types.go:346",
                )
            )
        exporter = spec.get("metricsExporter") or {}
        if exporter.get("enable"):
            out.append(
                Workload(
                    object=f"{name}: metrics exporter DaemonSet",
                    where="gpu",
                    node_selector={str(k): str(v) for k, v in (exporter.get("selector") or selector).items()},
                    tolerations=[dict(t) for t in exporter.get("tolerations") or []],
                    source=f"{src} api/v1alpha1/deviceconfig_types.go:508,541",
                )
            )
    return out


def _lustre_csi(plan: Plan) -> list[Workload]:
    """The Azure Lustre CSI node DaemonSet (a ConfigFile of the upstream manifest)."""
    out = []
    for r in plan.of("kubernetes:yaml/v2:ConfigFile"):
        if str(r.inputs.get("file", "")).endswith("csi-azurelustre-node-noble.yaml"):
            out.append(
                Workload(
                    object="DaemonSet kube-system/csi-azurelustre-node (noble)",
                    where="gpu",
                    tolerations=[{"operator": "Exists"}],
                    source=cite("lustre-csi-azure"),
                )
            )
    return out


def _platform(plan: Plan, pool_list: list[Pool]) -> list[Workload]:
    """What the platform itself runs on GPU nodes that the plan does not declare."""
    out = []
    if plan.orchestrator == "gke" and any(p.gpu for p in pool_list):
        out.append(
            Workload(
                object="GKE's NVIDIA GPU device plugin (managed)",
                where="gpu",
                tolerations=[{"operator": "Exists"}],
                node_selector={},
                affinity=((("cloud.google.com/gke-accelerator", "Exists", ()),),),
                advertises=("nvidia.com/gpu",),
                needs_driver="nvidia",
                waits_for_driver=f"GKE runs it once its driver installer is done ({cite('gke-gpus')})",
                source=cite("gke-gpus"),
            )
        )
    return out


def _aks_addons(plan: Plan) -> list[Workload]:
    """What AKS itself runs on every node for what the cluster resource turns on: the Cilium agent
    (network dataplane cilium) and Container insights' agent (the omsagent add-on)."""
    out = []
    for c in plan.of(AKS_CLUSTER):
        net = c.inputs.get("networkProfile") or {}
        if str(net.get("networkDataplane", "")).lower() == "cilium":
            out.append(
                Workload(
                    object="AKS's Cilium agent (managed DaemonSet)",
                    where="gpu",
                    tolerations=[{"operator": "Exists"}],
                    source=cite("aks-cilium-agent"),
                )
            )
        oms = (c.inputs.get("addonProfiles") or {}).get("omsagent") or {}
        if oms.get("enabled"):
            out.append(
                Workload(
                    object="DaemonSet kube-system/ama-logs (Container insights, AKS add-on)",
                    where="gpu",
                    affinity=((("kubernetes.io/os", "In", ("linux",)), ("type", "NotIn", ("virtual-kubelet",))),),
                    tolerations=[
                        {"operator": "Exists", "effect": e} for e in ("NoSchedule", "NoExecute", "PreferNoSchedule")
                    ],
                    source=cite("ama-logs"),
                )
            )
    return out


def workloads(plan: Plan) -> list[Workload]:
    pool_list = pools(plan)
    made = [
        *_daemonsets(plan),
        *_chart_workloads(plan),
        *_nic_cluster_policies(plan),
        *_device_configs(plan),
        *_lustre_csi(plan),
        *_platform(plan, pool_list),
        *_aks_addons(plan),
    ]
    rules = _node_feature_rules(plan)
    if rules:
        # NFD's worker discovers the PCI devices on the node; the master labels from the rule.
        for w in made:
            if facts.NFD_WORKER in w.object and "amd" not in w.object:
                w.labels = (*w.labels, *rules)
    chart_rules = _chart_rules(plan)
    if chart_rules:
        # A chart's own rules reach the nodes through whichever NFD runs there (facts.CHART_RULES).
        for w in made:
            if facts.NFD_WORKER in w.object:
                w.labels = (*w.labels, *(lbl for lbl in chart_rules if lbl not in w.labels))
    return made


def _chart_rules(plan: Plan) -> list[NodeLabel]:
    out: list[NodeLabel] = []
    for r in plan.of(HELM_CHART):
        found = facts.CHART_RULES.get(str(r.inputs.get("chart", "")).rsplit("/", 1)[-1])
        if found is not None and value_at(r.inputs.get("values") or {}, found.enabled_value) is not False:
            out += found.labels
    return out


def job_workloads(job: Job | None) -> list[Workload]:
    if job is None or job.scheduler != "kubernetes":
        return []
    return [_from_pod(name, "job", pod, "the rendered job", replicas=count) for name, pod, count in job.pods()]


# ---------------------------------------------------------------------------------------------
# DaemonSets known by name: what an installer does on the node it runs on, or what a node agent
# exports from it (so that one landing on no GPU node fails the check, as a chart's exporter does).


@dataclass(frozen=True, slots=True, kw_only=True)
class Installer:
    installs_driver: str = ""
    exports: tuple[str, ...] = ()
    source: str = ""


INSTALLERS: dict[str, Installer] = {
    # Azure/aks-rdma-infiniband configs/amd-driver-installer: installs amdgpu-dkms and loads it.
    "install-amdgpu-driver": Installer(
        installs_driver="amdgpu",
        source=f"{cite('aks-rdma')} configs/amd-driver-installer/configmap.yaml:30-32",
    ),
    # components/aws/efa_exporter.py NAME: EFA's byte counters, scraped by the EKS stack's AMP collector.
    "gpu-cluster-efa-exporter": Installer(
        exports=("EFA byte counters (port 9100)",),
        source="components/aws/efa_exporter.py (the AMP collector's gpu-cluster-efa job)",
    ),
}


# ---------------------------------------------------------------------------------------------
# Scheduling predicates (the scheduler's, as the Kubernetes docs state them).


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Taint) -> bool:
    for t in tolerations:
        key, op = str(t.get("key", "") or ""), str(t.get("operator", "Equal") or "Equal")
        effect = str(t.get("effect", "") or "")
        if effect and effect != taint.effect:
            continue
        if not key and op == "Exists":
            return True
        if key != taint.key:
            continue
        if op == "Exists" or str(t.get("value", "") or "") == taint.value:
            return True
    return False


def _expr(labels: Mapping[str, str], key: str, op: str, values: tuple[str, ...]) -> bool:
    has = key in labels
    if op == "In":
        return has and labels[key] in values
    if op == "NotIn":
        return not has or labels[key] not in values
    if op == "Exists":
        return has
    if op == "DoesNotExist":
        return not has
    if op in ("Gt", "Lt") and has and values:
        try:
            a, b = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def selects(w: Workload, labels: Mapping[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in w.node_selector.items()):
        return False
    if w.affinity and not any(all(_expr(labels, k, op, vals) for k, op, vals in term) for term in w.affinity):
        return False
    return True


def untolerated(w: Workload, pool: Pool) -> list[Taint]:
    return [
        t
        for t in pool.taints
        if t.effect in ("NoSchedule", "NoExecute")
        and not tolerates(w.tolerations, t)
        # The platform's admission adds the toleration to a pod that asks for the resource.
        and not (t.tolerated_if_requested and quantity(w.requests.get(t.tolerated_if_requested, "0")) > 0)
    ]
