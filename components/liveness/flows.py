"""What reachability checks on every cloud: the flows between the job's processes, the registries
the cluster's images come from, and the shape of a check that holds or fails.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpu_cluster.components.liveness import facts
from gpu_cluster.components.liveness.model import Check, Job, Plan

Net = ipaddress.IPv4Network | ipaddress.IPv6Network


def as_net(text: Any) -> Net | None:
    try:
        return ipaddress.ip_network(str(text), strict=False)
    except ValueError:
        return None


def within(inner: Net | None, outer: Net | None) -> bool:
    return inner is not None and outer is not None and inner.version == outer.version and inner.subnet_of(outer)  # type: ignore[arg-type]


def passed(obj: str, check: str, why: str, source: str) -> Check:
    return Check(kind="reachability", object=obj, check=check, holds=True, why=why, source=source)


def failed(obj: str, check: str, why: str, source: str, fix: str) -> Check:
    return Check(kind="reachability", object=obj, check=check, holds=False, why=why, source=source, fix=fix)


@dataclass(frozen=True, slots=True)
class Flow:
    """Traffic to check: a protocol and a port range."""

    protocol: str
    """tcp | udp | all (every protocol: EFA's SRD is not TCP)."""
    ports: tuple[int, int]
    what: str


def job_flows(job: Job | None) -> list[Flow]:
    """What the job's processes send each other: TCP on every port (the rendezvous ports are fixed,
    NCCL's bootstrap and socket connections are ephemeral), which covers the rendezvous."""
    ports = ", ".join(str(p) for p in (job.ports if job else ())) or "the rendezvous"
    return [Flow("tcp", facts.ALL_TCP, f"TCP on every port (rendezvous {ports}, NCCL bootstrap)")]


def registries(plan: Plan, job: Job | None) -> list[str]:
    """The hosts the cluster's images and charts come from: the job's pods, the plan's DaemonSets,
    its charts' repositories (a chart's own images come from where its values name)."""
    refs: list[str] = []
    pods: list[Mapping[str, Any]] = [pod for _, pod, _ in (job.pods() if job else [])]
    for r in plan.of("kubernetes:apps/v1:DaemonSet"):
        pods.append((((r.inputs.get("spec") or {}).get("template") or {}).get("spec")) or {})
    for pod in pods:
        refs += [str(c.get("image", "")) for c in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]]
    for r in plan.of("kubernetes:helm.sh/v4:Chart"):
        chart = str(r.inputs.get("chart", ""))
        repo = str((r.inputs.get("repositoryOpts") or {}).get("repo", ""))
        refs.append(chart.removeprefix("oci://") if chart.startswith("oci://") else repo.split("://", 1)[-1])
    found: set[str] = set()
    for ref in refs:
        first = ref.split("/", 1)[0] if "/" in ref else ""
        host = first if ("." in first or ":" in first) else ("docker.io" if ref else "")
        if host:
            found.add(host)
    # Sorted: which image named a host first carries no meaning, and the plan must print the same
    # line every run (it followed the resources' registration order, which is not stable).
    hosts = sorted(found)
    if job is not None and job.scheduler == "slurm":
        # The batch job makes its interpreter once with pip (workloads/launch/slurm_env.py venv_lines).
        hosts.insert(0, "pypi.org (the job's shared virtualenv)")
    return hosts


def lustre_ports(cloud: str) -> str:
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in facts.LUSTRE_PORTS[cloud])


def registry_check(hosts: list[str]) -> str:
    return f"nodes reach the registries their images come from ({', '.join(hosts) or 'none named'})"
