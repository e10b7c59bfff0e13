"""The GPU pools' registration taint (issue 41, I6) in the liveness model: on every bundled stack
whose GPU pool registers its nodes with ``gpu-cluster.io/unvalidated=true:NoSchedule``, everything
that must land on a new GPU node before its validation tolerates it (the device plugins, the DCGM
exporter, GKE's managed plugin, the validation job), and taking one toleration away fails liveness
with the taint named: the model would have caught a pool taint nothing tolerates."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from gpu_cluster.components import liveness as live
from gpu_cluster.components.contract import UNVALIDATED_TAINT_KEY
from tests.components._liveness import bundled, pod_of

TAINTED = ("aws-h100-eks", "aws-h100-capacity-block", "aws-b200-capacity-block", "gcp-h200-gke")
# Flex-start pools (components/gcp/compute.py holds_new_nodes) and AKS (docs/heal.md, I6) carry none.
UNTAINTED = ("gcp-h100-gke", "gcp-b200-gke", "azure-h100-aks", "azure-mi300x-aks")
CHART = "kubernetes:helm.sh/v4:Chart"


def _gpu_pools(stack: str) -> list[Any]:
    from gpu_cluster.components.liveness.pools import pools

    return [p for p in pools(bundled(stack).plan) if p.gpu]


@pytest.mark.parametrize("stack", TAINTED)
def test_the_gpu_pool_registers_the_taint_and_what_must_land_tolerates_it(stack: str) -> None:
    p = bundled(stack)
    (pool,) = _gpu_pools(stack)
    assert [t.text() for t in pool.taints if t.key == UNVALIDATED_TAINT_KEY] == [
        f"{UNVALIDATED_TAINT_KEY}=true:NoSchedule"
    ]
    assert p.result.holds, [f"{c.object}: {c.check}: {c.why}" for c in p.failed()]
    lands = [
        c
        for c in p.checks("scheduling")
        if "runs on every node of pool" in c.check or "tolerates its taints" in c.check
    ]
    assert lands and all(f"tolerates {UNVALIDATED_TAINT_KEY}=true:NoSchedule" in c.why for c in lands)
    assert any("JobSet" in c.object for c in lands)


@pytest.mark.parametrize("stack", UNTAINTED)
def test_pools_left_without_it_carry_none(stack: str) -> None:
    assert all(t.key != UNVALIDATED_TAINT_KEY for pool in _gpu_pools(stack) for t in pool.taints)


def _without_ours(tolerations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kept = [t for t in tolerations if t.get("key") != UNVALIDATED_TAINT_KEY]
    assert len(kept) < len(tolerations), "the mutation removes nothing: the stack changed under the test"
    return kept


def _chart_without(plan: live.Plan, chart: str) -> live.Plan:
    rows = []
    for r in plan.resources:
        if r.type == CHART and r.inputs.get("chart") == chart:
            inputs = json.loads(json.dumps(r.inputs))
            inputs["values"]["tolerations"] = _without_ours(inputs["values"]["tolerations"])
            r = live.Resource(type=r.type, name=r.name, id=r.id, inputs=inputs)
        rows.append(r)
    return replace(plan, resources=tuple(rows))


@pytest.mark.parametrize("chart", ["nvidia-device-plugin", "aws-efa-k8s-device-plugin", "dcgm-exporter"])
def test_a_node_daemonset_that_does_not_tolerate_it_fails_liveness(chart: str) -> None:
    p = bundled("aws-h100-eks")
    result = live.evaluate(_chart_without(p.plan, chart), p.job)
    failed = [c for c in result.failed if chart in c.object]
    assert not result.holds and failed and failed[0].kind == "scheduling"
    assert f"does not tolerate {UNVALIDATED_TAINT_KEY}=true:NoSchedule" in failed[0].why


@pytest.mark.parametrize("stack", ["aws-h100-eks", "gcp-h200-gke"])
def test_a_validation_job_that_does_not_tolerate_it_fails_liveness(stack: str) -> None:
    p = bundled(stack)
    assert p.job is not None
    manifests = json.loads(json.dumps(list(p.job.manifests)))
    pod = pod_of(manifests)
    pod["tolerations"] = _without_ours(pod["tolerations"])
    result = live.evaluate(p.plan, replace(p.job, manifests=tuple(manifests)))
    failed = [c for c in result.failed if "JobSet" in c.object and c.kind == "scheduling"]
    assert not result.holds and failed
    assert f"does not tolerate {UNVALIDATED_TAINT_KEY}=true:NoSchedule" in failed[0].why
