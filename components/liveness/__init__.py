"""Liveness: will every pod the cluster needs be admitted, scheduled, reach what it must, find its
paths on the image and start after its installers? A model of what decides whether a pod runs,
evaluated offline on the plan's resources and the rendered job, each check with its source.

It is a model: it proves that the plan and the job agree with what the pinned APIs, charts and
platform pages say, not that the cloud will do what they say. A real cluster has the last word
(``validate submit``).

* ``model``: the data in (:class:`Plan`, :class:`Job`) and out (:class:`Check`, :class:`Liveness`);
* ``facts``: every fact with its source, the one place to add one; ``apis``: the custom resources'
  typed models at their pinned versions;
* ``cluster``: pools, labels, taints and workloads read from the plan, per platform;
* ``admission``, ``scheduling``, ``reachability`` (the job's NetworkPolicy in ``netpol``), ``node_image``,
  ``ordering``: the checks.

Pure: no Pulumi, no torch, nothing of ``workloads`` (tests/test_import_graph.py): the plan passes
its resources and the launcher passes the rendered job as plain data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_cluster.components.liveness import (
    admission,
    driver,
    node_image,
    objects,
    ordering,
    reachability,
    scheduling,
    slurm_node,
)
from gpu_cluster.components.liveness.cluster import job_workloads, quantity, workloads
from gpu_cluster.components.liveness.pools import pools
from gpu_cluster.components.liveness.model import (
    KINDS,
    Check,
    FoundAtStart,
    Job,
    Liveness,
    Plan,
    Resource,
    unverified_tail,
)

__all__ = [
    "KINDS",
    "Check",
    "FoundAtStart",
    "Job",
    "Liveness",
    "Plan",
    "Resource",
    "count_line",
    "evaluate",
    "plan_from_json",
    "render_lines",
    "unverified_tail",
]


def plan_from_json(doc: Mapping[str, Any]) -> Plan:
    """The plan from ``gpu-cluster plan --json``'s document (what ``validate render`` reads)."""
    caveats = (doc.get("summary") or {}).get("caveats") or []
    return Plan(
        resources=tuple(
            Resource(type=str(r["type"]), name=str(r["name"]), id=str(r.get("id", "")), inputs=r.get("inputs") or {})
            for r in doc.get("resources") or []
        ),
        outputs=doc.get("outputs") or {},
        deferred={str(c["topic"]): str(c["text"]) for c in caveats if c.get("topic") == "installer"},
    )


def count_line(live: Liveness) -> str:
    """``61 checks: admission 9/9, scheduling 30/30, ...``."""
    parts = [f"{k} {ok}/{n}" for k, (ok, n) in live.counts().items() if n]
    unverified = len(live.unverified)
    tail = unverified_tail(unverified)
    return f"{len(live.checks)} checks: {', '.join(parts)}{tail}"


def evaluate(plan: Plan, job: Job | None) -> Liveness:
    """Every check of the plan and (when given) the rendered job."""
    pool_list = pools(plan)
    made = workloads(plan)
    job_pods = job_workloads(job)
    checks: list[Check] = []
    checks += admission.api_checks(plan, job)
    checks += objects.checks(plan, job)
    requests: dict[str, float] = {}
    for w in job_pods:
        for k, v in w.requests.items():
            requests[k] = requests.get(k, 0.0) + quantity(v) * w.replicas
    checks += admission.queue_checks(plan, job, pool_list, requests)
    checks += scheduling.workload_checks(plan, pool_list, made, job_pods)
    if job is not None and job.scheduler == "slurm":
        checks += scheduling.slurm_checks(plan, pool_list, job)
        checks += slurm_node.checks(plan, pool_list, job)
    checks += reachability.checks(plan, pool_list, job)
    checks += node_image.checks(plan, job)
    checks += driver.checks(plan, job)
    states = scheduling.settle(pool_list, made)
    checks += ordering.checks(plan, job, job_pods, states)
    order = {k: i for i, k in enumerate(KINDS)}
    return Liveness(tuple(sorted(checks, key=lambda c: order[c.kind])))


def render_lines(live: Liveness, *, verbose: bool = True) -> list[str]:
    """One line per check: mark, kind, object, what it needs, why, source. Failures carry the fix."""
    lines = []
    for c in live.checks:
        if not verbose and c.holds:
            continue
        mark = ("ok? " if c.unverified else "ok  ") if c.holds else "FAIL"
        line = f"{mark} {c.kind:<12} {c.object}: {c.check} -- {c.why} [{c.source}]"
        if not c.holds and c.fix:
            line += f"; fix: {c.fix}"
        lines.append(line)
    return lines
