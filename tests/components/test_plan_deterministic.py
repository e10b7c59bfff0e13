"""The offline plan prints the same bytes on every run of the same commit: users diff it before
``pulumi up``. Two runs used to list resources and liveness checks in a different order (Pulumi's
mock engine records a registration when its inputs resolve, on the SDK's own threads), and an AKS
reachability check named its registries in whichever order the resources came."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_cluster.components.engine import run_offline
from gpu_cluster.components.spec import read_stack_file

ROOT = Path(__file__).resolve().parents[2]
# Two hash seeds, so that a set of strings iterated into the output shows as well.
SEEDS = ("1", "4242")
# The one line that measures the clock: what the plan prints around it must not move.
TIMING = "  planned in"


def _plan_twice(stack: str) -> list[tuple[str, str]]:
    """``gpu-cluster plan STACK --json -`` once per seed, both at once: (text, JSON) of each. With
    ``--json -`` the JSON is stdout and the text plan stderr."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "gpu_cluster", "plan", stack, "--json", "-"],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": seed},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in SEEDS
    ]
    outs = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr[-2000:]
        timed = [line for line in stderr.splitlines(keepends=True) if line.startswith(TIMING)]
        assert len(timed) == 1, timed
        outs.append((stderr.replace(timed[0], ""), stdout))
    return outs


@pytest.mark.parametrize(
    ("stack", "registries"),
    [
        # Kubernetes, and the check whose registries changed order.
        ("azure-mi300x-aks", "registries their images come from (docker.io, ghcr.io, "),
        ("aws-h200-slurm", None),
    ],
)
def test_plan_under_another_hash_seed_prints_the_same_bytes(stack: str, registries: str | None) -> None:
    (text_a, json_a), (text_b, json_b) = _plan_twice(stack)
    assert text_a == text_b
    assert json_a == json_b
    doc = json.loads(json_a)
    assert len(doc["resources"]) > 20, "too few resources to show an order"
    assert len(doc["summary"]["liveness"]["checks"]) > 10, "too few checks to show an order"
    if registries is not None:
        assert registries in text_a


def test_recorded_resources_follow_their_parents_and_dependencies() -> None:
    """The declared order the engine now keeps puts every resource after its parent and after what
    it waits for (``engine.replacements`` reads them in that order)."""
    name, raw = read_stack_file("azure-mi300x-aks")
    run = run_offline(name, raw)
    known = set(run.by_urn())
    seen: set[str] = set()
    late = []
    for r in run.resources:
        late += [(r.name, d) for d in (r.parent, *r.dependencies) if d in known and d not in seen]
        seen.add(r.urn)
    assert len(run.resources) > 20
    assert late == []
