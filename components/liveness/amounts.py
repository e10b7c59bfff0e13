"""Amounts, not just names: what one pod asks of each resource against what one node of its pool
has, and what the whole job asks against what the pool holds.

A pod asking for 16 ``nvidia.com/gpu`` on an 8-GPU node, or 33 EFA devices on a 32-EFA node, names a
resource the node advertises and still stays Pending forever: the scheduler places a pod only on a
node whose allocatable covers every request (k8s-resources). So each extended resource is counted
per node from the fact that decides it (the catalog's GPUs, the launch template's EFA interfaces,
the HCAs), CPU and memory from the platform's allocatable, and the job's pods are packed onto the
pool's nodes with those amounts.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping

from gpu_cluster.components.catalog import CatalogError, InstanceType, load_catalog
from gpu_cluster.components.liveness import facts
from gpu_cluster.components.liveness.cluster import Workload, quantity
from gpu_cluster.components.liveness.facts import cite
from gpu_cluster.components.liveness.model import Check, Plan
from gpu_cluster.components.liveness.pools import Pool

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
EFA_RESOURCE = "vpc.amazonaws.com/efa"
IB_RESOURCE = "rdma/ib"


def _type(pool: Pool) -> InstanceType | None:
    try:
        return load_catalog().get(pool.instance_type)
    except CatalogError:
        return None


def per_node(plan: Plan, pool: Pool, res: str) -> tuple[float, str] | None:
    """How much of ``res`` one node of ``pool`` offers pods, with where that is read; None where no
    source here says (the check then fails saying so, never guesses)."""
    it = _type(pool)
    if it is None:
        return None
    if res in GPU_RESOURCES:
        # The device plugins advertise one unit per GPU the node presents (k8s-device-plugins).
        return float(it.accelerator.count), f"catalog {it.name} accelerator.count ({it.accelerator.source})"
    if res == EFA_RESOURCE:
        # The EFA device plugin advertises one unit per EFA device attached to the node.
        if pool.efa_devices is not None:
            return float(pool.efa_devices), f"the launch template of {pool.resource} (its efa/efa-only interfaces)"
        return float(it.network.efa_interfaces), f"catalog {it.name} network.efa_interfaces ({it.network.source})"
    if res == IB_RESOURCE:
        # One rdma/ib per InfiniBand HCA (components/k8s/aks.py SRIOV_RESOURCE_LIST, isRdma).
        return float(it.network.gpu_nics), f"catalog {it.name} network.gpu_nics ({it.network.source})"
    if res in ("cpu", "memory"):
        alloc = facts.allocatable(plan.orchestrator, pool.instance_type, it.vcpu, it.host_memory_gib)
        if alloc is None:
            return None
        return (alloc.cpu, alloc.source) if res == "cpu" else (alloc.memory_gib * 2**30, alloc.source)
    return None


def _show(res: str, v: float) -> str:
    return f"{v / 2**30:g}Gi" if res == "memory" else f"{v:g}"


def pods_per_node(plan: Plan, w: Workload, pool: Pool) -> tuple[int, str]:
    """How many of ``w``'s pods one node of ``pool`` holds (0: not one), and the resource that decides."""
    best, by = math.inf, "no resource it asks for"
    for res, amount in w.requests.items():
        ask = quantity(amount)
        have = per_node(plan, pool, res)
        if ask <= 0 or have is None:
            continue
        n = math.floor(have[0] / ask + 1e-9)
        if n < best:
            best, by = n, res
    # A job pod asks for whole nodes' worth of devices; with none it asked for, one pod a node.
    return (1 if best is math.inf else int(best)), by


def checks(plan: Plan, w: Workload, pools: list[Pool], advertised: Collection[str]) -> list[Check]:
    """Per pod: every request against one node of the pool it lands on; per job: its pods packed onto
    the pools' nodes. A resource not ``advertised`` there is left to the check that says so."""
    out: list[Check] = []
    src = cite("k8s-resources")
    pool = pools[0]
    for res, amount in sorted(w.requests.items()):
        ask = quantity(amount)
        if res in ("cpu", "memory") or ask <= 0 or res not in advertised:
            continue  # cpu and memory: the allocatable check (scheduling._fits)
        have = per_node(plan, pool, res)
        check = f"{res} x {amount} on one node of pool {pool.name}"
        if have is None:
            out.append(
                Check(
                    kind="scheduling",
                    object=w.object,
                    check=check,
                    holds=False,
                    why=f"how many {res} a {pool.instance_type or 'node'} offers is not known here",
                    source="components/liveness/amounts.py per_node",
                    fix=f"add {res} per node of {pool.instance_type} to amounts.per_node, from its source",
                )
            )
            continue
        ok = ask <= have[0]
        out.append(
            Check(
                kind="scheduling",
                object=w.object,
                check=check,
                holds=ok,
                why=f"a node has {have[0]:g} ({have[1]})"
                + ("" if ok else f": a pod asking {amount} fits no node and stays Pending"),
                source=f"{src}; {cite('k8s-device-plugins')}",
                fix="" if ok else f"ask for at most {have[0]:g} {res} per pod (split the work over more pods)",
            )
        )
    per, by = pods_per_node(plan, w, pool)
    capacity = sum(p.nodes for p in pools)
    names = ", ".join(p.name for p in pools)
    need = math.ceil(w.replicas / per) if per else math.inf
    ok = per > 0 and need <= capacity
    totals = _totals(w)
    out.append(
        Check(
            kind="scheduling",
            object=w.object,
            check=f"{w.replicas} pods fit pool(s) {names}",
            holds=ok,
            why=(
                f"{per} pod(s) a node (decided by {by}), so {need} node(s) of the {capacity} the pool(s) hold"
                + (f"; the job asks {totals} in all" if totals else "")
                if per
                else f"not one pod fits a node ({by})"
            ),
            source=f"{src}; " + ", ".join(p.resource for p in pools),
            fix="" if ok else f"grow the pool(s) to {need if per else '?'} nodes or run fewer pods",
        )
    )
    return out


def _totals(w: Workload) -> str:
    parts = [
        f"{_show(res, quantity(v) * w.replicas)} {res}"
        for res, v in sorted(w.requests.items())
        if res not in ("cpu", "memory") and quantity(v) > 0
    ]
    return ", ".join(parts)


def quota_used(requests: Mapping[str, str], replicas: int) -> dict[str, float]:
    """What ``replicas`` pods of these requests charge a namespace's quota, per resource."""
    return {res: quantity(v) * replicas for res, v in requests.items()}
