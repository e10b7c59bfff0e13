"""Scheduling: each pod has a pool whose labels it selects, tolerates every taint of that pool (the
stack's and the platform's), finds every extended resource it asks for advertised there by
something that itself lands there, and fits the type's allocatable CPU and memory.

Labels that operators put on nodes (node-feature discovery, the GPU operator's deploy labels, the
network operator's driver-ready label) exist only where the operand that puts them lands: the
labels of each pool are grown to a fixed point, so a labeller that cannot land (a taint it does not
tolerate) leaves its dependants unscheduled, and the check names the whole chain.
"""

from __future__ import annotations

import re

from dataclasses import dataclass, field

from gpu_cluster.components.catalog import CatalogError, load_catalog
from gpu_cluster.components.liveness import amounts, facts
from gpu_cluster.components.liveness.cluster import Pool, Workload, quantity, selects, tolerates, untolerated
from gpu_cluster.components.liveness.facts import cite
from gpu_cluster.components.liveness.model import Check, Job, Plan

EXTENDED_PREFIXES = ("nvidia.com/", "amd.com/", "vpc.amazonaws.com/", "rdma/", "hugepages-")


def _extended(name: str) -> bool:
    return name.startswith(EXTENDED_PREFIXES) or ("/" in name and not name.startswith("kubernetes.io/"))


@dataclass(slots=True)
class PoolState:
    """What a pool has once every operand that can land on it has landed."""

    pool: Pool
    labels: dict[str, str] = field(default_factory=dict)
    label_by: dict[str, str] = field(default_factory=dict)
    drivers: dict[str, str] = field(default_factory=dict)
    advertised: dict[str, str] = field(default_factory=dict)
    """Extended resource -> who advertises it (and the source)."""
    advertiser: dict[str, Workload] = field(default_factory=dict)
    landed: set[str] = field(default_factory=set)


def lands(w: Workload, state: PoolState) -> bool:
    return selects(w, state.labels) and not untolerated(w, state.pool)


def _label_applies(lbl: facts.NodeLabel, state: PoolState) -> bool:
    pool = state.pool
    if lbl.when_vendor and lbl.when_vendor not in pool.vendors:
        return False
    after = lbl.after
    if after.startswith("driver:"):
        return after.split(":", 1)[1] in state.drivers
    if after.startswith("hca:"):
        wanted = {d for d in after.split(":", 1)[1].split(",") if d}
        return bool(wanted & set(pool.hca_devices))
    if after:
        return after in state.labels
    return True


def settle(pool_list: list[Pool], made: list[Workload]) -> dict[str, PoolState]:
    """Each pool's labels, drivers and advertised resources once every operand that can land has."""
    states = {}
    # Controllers (a Deployment anywhere in the cluster) label the nodes of every pool; the node
    # agents (DaemonSets) only the node they run on.
    controllers = [
        w
        for w in made
        if w.where == "system"
        and any(lands(w, PoolState(pool=p, labels=dict(p.labels), label_by=dict(p.label_sources))) for p in pool_list)
    ]
    for p in pool_list:
        st = PoolState(pool=p, labels=dict(p.labels), label_by=dict(p.label_sources), drivers=dict(p.drivers))
        changed = True
        while changed:
            changed = False
            for w in made:
                if w.object in st.landed or not lands(w, st):
                    continue
                st.landed.add(w.object)
                changed = True
            for w in [*made, *controllers]:
                if w.object not in st.landed and w not in controllers:
                    continue
                if w.installs_driver and w.installs_driver not in st.drivers:
                    st.drivers[w.installs_driver] = f"{w.object} ({w.source})"
                    changed = True
                for lbl in w.labels:
                    if lbl.key not in st.labels and _label_applies(lbl, st):
                        st.labels[lbl.key] = lbl.value
                        st.label_by[lbl.key] = f"{w.object} ({lbl.source})"
                        changed = True
        for w in made:
            if w.object not in st.landed:
                continue
            for res in w.advertises:
                if w.needs_driver and w.needs_driver not in st.drivers:
                    continue
                if res not in st.advertised:
                    st.advertised[res] = f"{w.object} ({w.source})"
                    st.advertiser[res] = w
        states[p.name] = st
    return states


def _why_not(w: Workload, st: PoolState) -> str:
    parts = []
    missing = {k: v for k, v in w.node_selector.items() if st.labels.get(k) != v}
    if missing:
        parts.append("nodeSelector " + ", ".join(f"{k}={v}" for k, v in missing.items()) + " not on its nodes")
    if w.affinity and not selects(Workload(object="", where="", affinity=w.affinity), st.labels):
        terms = " or ".join(
            " and ".join(f"{k} {op} {list(v) if v else ''}".strip() for k, op, v in t) for t in w.affinity
        )
        parts.append(f"required node affinity ({terms}) not met")
    bad = untolerated(w, st.pool)
    if bad:
        parts.append("does not tolerate " + ", ".join(f"{t.text()} ({t.source})" for t in bad))
    return "; ".join(parts)


def _targets(w: Workload, states: dict[str, PoolState]) -> list[PoolState]:
    if w.where in ("gpu", "job"):
        return [s for s in states.values() if s.pool.gpu]
    return list(states.values())


def nfd_checks(states: dict[str, PoolState], made: list[Workload]) -> list[Check]:
    """One node-feature-discovery per node: two deployments without their own instance names share
    the annotation each master keeps its labels in, and each removes the other's (nfd-one-instance)."""
    out = []
    for st in states.values():
        workers = [w.object for w in made if facts.NFD_WORKER in w.object and w.object in st.landed]
        if not workers:
            continue
        check = "one node-feature-discovery on its nodes"
        src = facts.cite("nfd-one-instance")
        if len(workers) == 1:
            out.append(
                Check(
                    kind="scheduling",
                    object=f"pool {st.pool.name}",
                    check=check,
                    holds=True,
                    why=f"{workers[0]} only",
                    source=src,
                )
            )
        else:
            out.append(
                Check(
                    kind="scheduling",
                    object=f"pool {st.pool.name}",
                    check=check,
                    holds=False,
                    why=f"{len(workers)} land there: {'; '.join(workers)}",
                    source=src,
                    fix="keep one chart's NFD (turn the other's off) and keep the other's NodeFeatureRules",
                )
            )
    return out


def workload_checks(plan: Plan, pool_list: list[Pool], made: list[Workload], job_pods: list[Workload]) -> list[Check]:
    out: list[Check] = []
    states = settle(pool_list, made)
    out += nfd_checks(states, made)
    for w in [*made, *job_pods]:
        targets = _targets(w, states)
        if not targets:
            if w.where == "system":
                continue
            out.append(
                Check(
                    kind="scheduling",
                    object=w.object,
                    check="a GPU pool to run on",
                    holds=False,
                    why="the plan has no GPU node pool",
                    source=w.source,
                    fix="plan a GPU pool",
                )
            )
            continue
        landing = [s for s in targets if lands(w, s)]
        if w.where == "gpu":
            # A node DaemonSet that selects none of the GPU pool's nodes is only a problem when
            # something on the pool needs it: what it advertises, labels, installs or exports.
            for s in targets:
                if lands(w, s):
                    out.append(
                        Check(
                            kind="scheduling",
                            object=w.object,
                            check=f"runs on every node of pool {s.pool.name}",
                            holds=True,
                            why=_lands_why(w, s),
                            source=w.source,
                        )
                    )
                elif w.advertises or w.labels or w.installs_driver or w.exports:
                    out.append(
                        Check(
                            kind="scheduling",
                            object=w.object,
                            check=f"runs on every node of pool {s.pool.name}",
                            holds=False,
                            why=_why_not(w, s),
                            source=w.source,
                            fix=_fix(w, s),
                        )
                    )
            continue
        if w.where == "system":
            if landing:
                out.append(
                    Check(
                        kind="scheduling",
                        object=w.object,
                        check="a pool to run on",
                        holds=True,
                        why=f"pool {landing[0].pool.name}: {_lands_why(w, landing[0])}",
                        source=w.source,
                    )
                )
            else:
                out.append(
                    Check(
                        kind="scheduling",
                        object=w.object,
                        check="a pool to run on",
                        holds=False,
                        why="; ".join(f"pool {s.pool.name}: {_why_not(w, s)}" for s in targets),
                        source=w.source,
                        fix="give it a nodeSelector and tolerations of a pool the plan has",
                    )
                )
            continue
        # The job's pods.
        if not landing:
            out.append(
                Check(
                    kind="scheduling",
                    object=w.object,
                    check="a GPU pool whose labels it selects and whose taints it tolerates",
                    holds=False,
                    why="; ".join(f"pool {s.pool.name}: {_why_not(w, s)}" for s in targets),
                    source=f"{cite('k8s-node-affinity')}; {cite('k8s-taints')}",
                    fix=_fix(w, targets[0]),
                )
            )
            continue
        names = ", ".join(s.pool.name for s in landing)
        for s in landing:
            out.append(
                Check(
                    kind="scheduling",
                    object=w.object,
                    check=f"selects pool {s.pool.name} and tolerates its taints",
                    holds=True,
                    why=_lands_why(w, s),
                    source=f"{cite('k8s-node-affinity')}; {cite('k8s-taints')}",
                )
            )
        out += amounts.checks(plan, w, [s.pool for s in landing], landing[0].advertised)
        for res, amount in sorted(w.requests.items()):
            if not _extended(res):
                continue
            missing = [s for s in landing if res not in s.advertised]
            if missing:
                s = missing[0]
                out.append(
                    Check(
                        kind="scheduling",
                        object=w.object,
                        check=f"{res} x {amount} advertised on pool {s.pool.name}",
                        holds=False,
                        why=_not_advertised(res, s, made),
                        source=cite("k8s-device-plugins"),
                        fix=f"install what advertises {res} (a driver and a device plugin that land on the pool)",
                    )
                )
            else:
                out.append(
                    Check(
                        kind="scheduling",
                        object=w.object,
                        check=f"{res} x {amount} advertised on pool(s) {names}",
                        holds=True,
                        why=f"by {landing[0].advertised[res]}",
                        source=cite("k8s-device-plugins"),
                    )
                )
        s = landing[0]
        out.append(_fits(plan, w, s.pool))
    return out


def _lands_why(w: Workload, s: PoolState) -> str:
    parts = []
    if w.node_selector:
        parts.append(
            "nodeSelector "
            + ", ".join(f"{k}={v} ({s.label_by.get(k, 'the pool')})" for k, v in sorted(w.node_selector.items()))
        )
    if w.affinity:
        parts.append("required node affinity met")
    taints = [t for t in s.pool.taints if t.effect in ("NoSchedule", "NoExecute")]
    if taints:
        parts.append(
            "tolerates "
            + ", ".join(
                f"{t.text()} ({t.source})"
                if tolerates(w.tolerations, t)
                else f"{t.text()} (the toleration the platform adds for its {t.tolerated_if_requested} request: "
                f"{cite('gke-gpu-toleration')})"
                for t in taints
            )
        )
    else:
        parts.append("the pool has no taints")
    return "; ".join(parts)


def _fix(w: Workload, s: PoolState) -> str:
    bad = untolerated(w, s.pool)
    if bad:
        return "tolerate " + ", ".join(f"{t.key} ({t.effect})" for t in bad)
    return f"select labels pool {s.pool.name} has ({', '.join(f'{k}={v}' for k, v in sorted(s.labels.items())[:6])})"


def _not_advertised(res: str, s: PoolState, made: list[Workload]) -> str:
    candidates = [w for w in made if res in w.advertises]
    if not candidates:
        return f"nothing the stack installs advertises {res} (a pod asking for it stays Pending)"
    reasons = []
    for w in candidates:
        if w.object not in s.landed:
            reasons.append(f"{w.object} does not run there: {_why_not(w, s)}")
        elif w.needs_driver and w.needs_driver not in s.drivers:
            reasons.append(
                f"{w.object} runs there but finds no {w.needs_driver} driver: nothing in the plan installs it "
                "on the pool's nodes"
            )
    return "; ".join(reasons) or f"no advertiser of {res} lands on pool {s.pool.name}"


def _fits(plan: Plan, w: Workload, pool: Pool) -> Check:
    try:
        it = load_catalog().get(pool.instance_type)
    except CatalogError:
        return Check(
            kind="scheduling",
            object=w.object,
            check=f"requests fit the allocatable CPU and memory of {pool.instance_type or 'its nodes'}",
            holds=False,
            why=f"{pool.instance_type!r} is not in the catalog: its CPU and memory are not known here",
            source="components/catalog.yaml",
            fix="add the type to the catalog",
        )
    alloc = facts.allocatable(plan.orchestrator, pool.instance_type, it.vcpu, it.host_memory_gib)
    cpu = quantity(w.requests.get("cpu", "0"))
    mem = quantity(w.requests.get("memory", "0")) / 2**30
    if alloc is None:
        return Check(
            kind="scheduling",
            object=w.object,
            check=f"requests fit the allocatable CPU and memory of {pool.instance_type}",
            holds=False,
            why=f"what {plan.orchestrator} reserves on {pool.instance_type} was not read",
            source="components/liveness/facts.py allocatable",
            fix="add the platform's reservation for the type to facts.allocatable, from its source",
        )
    holds = cpu <= alloc.cpu and mem <= alloc.memory_gib
    return Check(
        kind="scheduling",
        object=w.object,
        check=f"requests fit the allocatable CPU and memory of {pool.instance_type}",
        holds=holds,
        why=f"cpu {cpu:g} of {alloc.cpu:.2f}, memory {mem:g} GiB of {alloc.memory_gib:.1f} GiB allocatable "
        f"({it.vcpu} vCPU, {it.host_memory_gib:g} GiB less what {plan.orchestrator} keeps)",
        source=alloc.source,
        fix="" if holds else "request less CPU or memory than the node's allocatable",
    )


def slurm_checks(plan: Plan, pool_list: list[Pool], job: Job) -> list[Check]:
    """A batch script's partition is planned with enough GPU nodes, and its GPUs are schedulable."""
    out: list[Check] = []
    obj = f"batch script {job.name}"
    parts = [p for p in pool_list if p.partition and p.partition == job.partition]
    if not parts:
        out.append(
            Check(
                kind="scheduling",
                object=obj,
                check=f"partition {job.partition} exists",
                holds=False,
                why=f"no node group of the plan is in partition {job.partition!r} "
                f"(partitions: {', '.join(sorted({p.partition for p in pool_list if p.partition})) or 'none'})",
                source=", ".join(p.resource for p in pool_list) or "the plan",
                fix="submit to the stack's partition (stack output scheduler.partition)",
            )
        )
        return out
    pool = parts[0]
    out.append(
        Check(
            kind="scheduling",
            object=obj,
            check=f"partition {job.partition} has {job.nodes} GPU node(s)",
            holds=pool.gpu and pool.nodes >= job.nodes,
            why=f"{pool.resource}: up to {pool.nodes} x {pool.instance_type}",
            source=pool.resource,
            fix="" if pool.gpu and pool.nodes >= job.nodes else f"grow {pool.name} to {job.nodes} nodes",
        )
    )
    try:
        gpus = load_catalog().get(pool.instance_type).accelerator.count
    except CatalogError:
        gpus = 0
    if plan.cloud == "aws":
        source = cite("pcs-gres")
        why = f"PCS configures the node group's GPUs as GRES from the type ({gpus} per {pool.instance_type})"
    elif plan.cloud == "azure":
        # The stack's own Slurm: each node registers the GRES its slurmd --conf names (the scale
        # set's custom data, components/azure/slurm_config.py); fewer than the type has caps the job.
        from gpu_cluster.components.liveness.slurm_node import user_data

        found = re.search(r"Gres=gpu:(\d+)", user_data(plan, pool) or "")
        gpus = min(gpus, int(found.group(1))) if found else 0
        source = f"the custom data of {pool.resource} (slurmd -Z --conf Gres=gpu:N; SchedMD dynamic_nodes.shtml)"
        why = f"its nodes register {found.group(0) if found else 'no GPU GRES'} ({pool.instance_type})"
    else:
        source = cite("ct-a3ultra-slurm-job")
        why = (
            f"the reference job on an A3 Ultra Slurm cluster of the same images asks --gpus-per-node=8 "
            f"({gpus} GPUs per {pool.instance_type})"
        )
    out.append(
        Check(
            kind="scheduling",
            object=obj,
            check=f"--gpus-per-node={job.gpus_per_node} schedulable on {pool.instance_type}",
            holds=0 < job.gpus_per_node <= gpus,
            why=why,
            source=source,
            fix="" if 0 < job.gpus_per_node <= gpus else f"ask for at most {gpus} GPUs per node",
        )
    )
    return out
