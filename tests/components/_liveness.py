"""Plans with their liveness, each stack planned once per test session (the plan is the slow part)."""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass
from typing import Any

from gpu_cluster.components import liveness as live
from gpu_cluster.components.engine import OfflineRun, run_offline
from gpu_cluster.components.plan import liveness_plan
from gpu_cluster.components.spec import ClusterSpec, default_name, parse_spec, read_stack_file
from gpu_cluster.plan import render_job


@dataclass(frozen=True)
class Planned:
    spec: ClusterSpec
    run: OfflineRun
    plan: live.Plan
    job: live.Job | None
    result: live.Liveness

    def failed(self) -> list[live.Check]:
        return list(self.result.failed)

    def checks(self, kind: str, text: str = "") -> list[live.Check]:
        return [c for c in self.result.checks if c.kind == kind and text in f"{c.object}: {c.check}"]


def plan_raw(name: str, raw: dict[str, Any]) -> Planned:
    spec = parse_spec(raw, default_name=default_name(name), deployer_placeholder=True)
    run = run_offline(name, raw)
    plan = liveness_plan(run, spec)
    job = render_job(run, spec)
    return Planned(spec, run, plan, job, live.evaluate(plan, job))


@functools.cache
def _bundled(stack: str) -> Planned:
    name, raw = read_stack_file(stack)
    return plan_raw(name, raw)


def bundled(stack: str) -> Planned:
    return _bundled(stack)


def raw_of(stack: str, **over: Any) -> tuple[str, dict[str, Any]]:
    """A bundled stack's cluster object with ``over`` merged into its sections (``compute={...}``)."""
    name, raw = read_stack_file(stack)
    raw = copy.deepcopy(raw)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    return name, raw


def mutate_plan(plan: live.Plan, type_: str, name: str, edit: Any) -> live.Plan:
    """The plan with one resource's inputs edited (a deep copy; ``edit`` changes them in place)."""
    res = []
    for r in plan.resources:
        if r.type == type_ and r.name == name:
            inputs = json.loads(json.dumps(r.inputs))
            edit(inputs)
            r = live.Resource(type=r.type, name=r.name, id=r.id, inputs=inputs)
        res.append(r)
    return live.Plan(resources=tuple(res), outputs=plan.outputs, deferred=plan.deferred)


def mutate_job(job: live.Job, edit: Any, **fields: Any) -> live.Job:
    """The job with its manifests deep-copied and edited, and ``fields`` replaced."""
    from dataclasses import replace

    manifests = json.loads(json.dumps(list(job.manifests)))
    edit(manifests)
    return replace(job, manifests=tuple(manifests), **fields)


def pod_of(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    js = next(m for m in manifests if m["kind"] == "JobSet")
    pod: dict[str, Any] = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return pod
