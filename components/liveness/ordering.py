"""Ordering: what a pod needs from node-level installers is there before its containers start.

Two ways hold a pod back: an extended resource it asks for that is advertised only once the driver
is up (the scheduler will not place it before), and an init container that waits for the
installer's paths, with a deadline, failing with one line that names what never appeared (the
gate, :data:`GATE`). Anything else the pod mounts from an installer (a plugin copied into a host
directory, devices bound under /dev) could be bound while still empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_cluster.components.liveness.cluster import Workload
from gpu_cluster.components.liveness.facts import cite
from gpu_cluster.components.liveness.model import Check, Job, Plan
from gpu_cluster.components.liveness.node_image import installer_manifest, installer_planned, resolve
from gpu_cluster.components.liveness.scheduling import PoolState

# The gate the launcher puts first among a pod's init containers (workloads/launch/pod.py
# wait_gate): it waits for every path of GATE_PATHS_ENV (a trailing "/" asks for a non-empty
# directory) until GATE_DEADLINE_ENV seconds have passed, then fails with one line naming what
# never appeared.
GATE = "wait-for-node"
GATE_PATHS_ENV = "GPUC_WAIT_FOR"
GATE_DEADLINE_ENV = "GPUC_WAIT_S"
GATE_MAX_S = 3600


def _env(c: Mapping[str, Any]) -> dict[str, str]:
    return {str(e.get("name")): str(e.get("value", "")) for e in c.get("env") or []}


def _gate_waits(gate: Mapping[str, Any], pod: Mapping[str, Any]) -> list[str]:
    """Host paths the gate waits for (its container paths through its own mounts)."""
    out = []
    for p in _env(gate).get(GATE_PATHS_ENV, "").split():
        where = resolve(pod, gate, p.rstrip("/"))
        out.append((where.host or p.rstrip("/")) + ("/" if p.endswith("/") else ""))
    return out


def _covered(host: str, waits: list[str]) -> bool:
    return any(w.rstrip("/") == host.rstrip("/") for w in waits)


def checks(plan: Plan, job: Job | None, job_pods: list[Workload], states: Mapping[str, PoolState]) -> list[Check]:
    out: list[Check] = []
    if job is None:
        return out
    if job.scheduler == "slurm":
        out.append(
            Check(
                kind="ordering",
                object=f"batch script {job.name}",
                check="what the job needs from the node is there when it starts",
                holds=True,
                why="nothing is installed on a Slurm node after it boots: the driver and the fabric's plugin are the "
                "node image's (node-image checks), and what the job looks for at start stops it naming what it "
                "looked for",
                source="the rendered batch script",
            )
        )
        return out
    fabric = str((plan.outputs.get("fabric") or {}).get("type", ""))
    manifest = installer_manifest(fabric)
    if manifest is None and (installer_planned(plan, fabric) or plan.deferred.get("installer")):
        out.append(
            Check(
                kind="ordering",
                object=f"the {fabric} NCCL plugin installer",
                check="what it leaves on the node is known, so pods can wait for it",
                holds=False,
                why=f"the catalog lists nothing it leaves (fabrics.{fabric}.installer.provides): what a pod "
                "must wait for cannot be told",
                source="components/catalog.yaml",
                fix=f"list the host paths the installer leaves under fabrics.{fabric}.installer.provides, with sources",
            )
        )
    gpu_states = [s for s in states.values() if s.pool.gpu]
    for w in job_pods:
        pod = w.pod
        inits = list(pod.get("initContainers") or [])
        containers = [*inits, *(pod.get("containers") or [])]
        # 1. Extended resources: the scheduler holds the pod until they are advertised.
        for res in sorted(r for r in w.requests if "/" in r):
            st = next((s for s in gpu_states if res in s.advertised), None)
            if st is None:
                continue  # scheduling reports it
            by = st.advertised[res]
            adv = st.advertiser.get(res)
            driver = adv.needs_driver if adv else ""
            if not driver or driver in st.pool.drivers:
                why = f"the pod is placed only once {res} is advertised ({by})"
                if driver:
                    why += f"; the {driver} driver is the node image's ({st.pool.drivers[driver]})"
                out.append(
                    Check(
                        kind="ordering",
                        object=w.object,
                        check=f"{res} ready before the pod starts",
                        holds=True,
                        why=why,
                        source=cite("k8s-device-plugins"),
                    )
                )
            elif adv is not None and adv.waits_for_driver:
                out.append(
                    Check(
                        kind="ordering",
                        object=w.object,
                        check=f"{res} ready before the pod starts",
                        holds=True,
                        why=f"{res} is advertised only after the {driver} driver ({st.drivers.get(driver, '?')}): {adv.waits_for_driver}",
                        source=cite("k8s-device-plugins"),
                    )
                )
            else:
                out.append(
                    Check(
                        kind="ordering",
                        object=w.object,
                        check=f"{res} ready before the pod starts",
                        holds=False,
                        why=f"{by} needs the {driver} driver, which {st.drivers.get(driver, 'nothing')} installs after "
                        "boot, and nothing makes it wait for it",
                        source=cite("k8s-device-plugins"),
                        fix="advertise only once the driver is loaded (an init container that waits for it)",
                    )
                )
        # 2. Host paths an installer fills: a gate must wait for them before any container binds them.
        gate_index = next((i for i, c in enumerate(inits) if c.get("name") == GATE), None)
        gate = inits[gate_index] if gate_index is not None else None
        waits = _gate_waits(gate, pod) if gate is not None else []
        deadline = _env(gate).get(GATE_DEADLINE_ENV, "") if gate is not None else ""
        needs: list[tuple[str, str, int]] = []
        for i, c in enumerate(containers):
            for m in c.get("volumeMounts") or []:
                vol: Mapping[str, Any] = next(
                    (v for v in pod.get("volumes") or [] if v.get("name") == m.get("name")), {}
                )
                host_dir = str((vol.get("hostPath") or {}).get("path", "")).rstrip("/")
                if not host_dir:
                    continue
                provided = [
                    p for p in (manifest.paths if manifest else ()) if p == host_dir or p.startswith(host_dir + "/")
                ]
                for p in provided:
                    needs.append((p, str(c.get("name")), i))
        if not needs:
            continue
        what = manifest.what if manifest else "the NCCL plugin installer"
        if gate is None:
            first = needs[0]
            out.append(
                Check(
                    kind="ordering",
                    object=w.object,
                    check=f"{what}'s paths ready before the containers bind them",
                    holds=False,
                    why=f"container {first[1]} mounts {first[0]} (put there by {what}) and no init container waits for it: "
                    "a pod placed before the installer finished binds it empty",
                    source=f"{cite('k8s-init-containers')}; {cite('gke-installers')}",
                    fix=f"put an init container {GATE!r} first that waits, with a deadline, for "
                    + ", ".join(sorted({n[0] for n in needs})),
                )
            )
            continue
        missing = sorted({p for p, _, _ in needs if not _covered(p, waits)})
        early = sorted({c for _, c, i in needs if gate_index is not None and i < gate_index})
        try:
            limit = float(deadline)
        except ValueError:
            limit = float("inf")
        problems = []
        if missing:
            problems.append(f"the gate does not wait for {', '.join(missing)}")
        if early:
            problems.append(f"container(s) {', '.join(early)} start before the gate")
        if not 0 < limit <= GATE_MAX_S:
            problems.append(f"{GATE_DEADLINE_ENV}={deadline!r} is no deadline (allowed: 1..{GATE_MAX_S} s)")
        out.append(
            Check(
                kind="ordering",
                object=w.object,
                check=f"{what}'s paths ready before the containers bind them",
                holds=not problems,
                why="; ".join(problems)
                if problems
                else f"init container {GATE} waits up to {limit:g} s for {', '.join(sorted({p for p, _, _ in needs}))} "
                "before the sidecar and the workload start, and fails naming what never appeared",
                source=f"{cite('k8s-init-containers')}; {manifest.source if manifest else cite('gke-installers')}",
                fix=""
                if not problems
                else f"have {GATE} wait, first, for every installer path the pod mounts, with a deadline",
            )
        )
    return out
