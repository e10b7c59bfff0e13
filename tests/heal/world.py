"""What the engine tests run on: the rehearsal's own file-backed cluster (gpu_cluster.heal.local),
a report written in the judge's shape, and a check that reads the instance's faults from that
file instead of starting torchrun (the torchrun check is exercised by tests/heal/test_local_e2e.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpu_cluster.heal import local
from gpu_cluster.heal.adapters import CheckResult
from gpu_cluster.heal.engine import Engine
from gpu_cluster.heal.journal import Journal
from gpu_cluster.heal.policy import Limits

SLOW = "health.matmul: straggler, 0.33 under 0.5 x the other nodes' median 191.38"


def write_report(
    run_dir: Path, nodes: int = 4, fail: dict[str, list[str]] | None = None, warn: dict[str, list[str]] | None = None
) -> Path:
    """A report.json as gpu_cluster.workloads.validate.report writes it (the keys heal reads)."""
    fail = {"local-3": [SLOW]} if fail is None else fail
    warn = warn or {}
    doc: dict[str, Any] = {
        "verdict": "FAIL" if fail else "PASS",
        "local": True,
        "instance_type": None,
        "nodes": [
            {
                "node": f"local-{i + 1}",
                "verdict": "FAIL" if f"local-{i + 1}" in fail else "WARN" if f"local-{i + 1}" in warn else "PASS",
                "reasons": fail.get(f"local-{i + 1}", warn.get(f"local-{i + 1}", [])),
            }
            for i in range(nodes)
        ],
        "measurements": [],
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "report.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


class WorldChecker:
    """Passes a node whose current instance has no fault; counts what it was asked."""

    def __init__(self, world: local.LocalCluster, fail_always: bool = False) -> None:
        self.world = world
        self.fail_always = fail_always
        self.calls: list[tuple[str, str, str]] = []

    def estimate(self) -> tuple[float, str]:
        return 600.0, "test"

    def check(self, node: str, peer: str, incident: str, purpose: str) -> CheckResult:
        self.calls.append((node, peer, purpose))
        doc = json.loads(self.world.path.read_text(encoding="utf-8"))
        faults = doc["nodes"][node]["faults"]
        faulty = bool(faults) or self.fail_always
        return CheckResult(
            ran=True,
            passed=not faulty,
            # a straggler is the node's own GPU health finding; a dead rank is not (I8)
            own="slow" in faults or self.fail_always,
            detail=f"{node} {'FAIL' if faulty else 'PASS'} with {peer}",
            figures={} if faulty else {"multi_node.all_reduce cluster": {"value": 1.0, "unit": "GB/s"}},
        )


def engine(
    run_dir: Path,
    journal: Journal,
    *,
    nodes: int = 4,
    faults: dict[str, list[str]] | None = None,
    checker: Any = None,
    say: Any = None,
    **limits: Any,
) -> tuple[Engine, local.LocalCluster]:
    world = local.LocalCluster.open(run_dir, nodes, {"local-3": ["slow"]} if faults is None else faults)
    e = Engine(
        cluster="test",
        journal=journal,
        scheduler=local.LocalScheduler(world),
        cloud=local.LocalCloud(world),
        checker=checker or WorldChecker(world),
        limits=Limits(**{"apply": True, **limits}),
        say=say or (lambda line: None),
        sleep=lambda s: None,
        poll_s=0.0,
    )
    return e, world


def replacements(run_dir: Path) -> list[dict[str, Any]]:
    doc = json.loads((run_dir / local.WORLD).read_text(encoding="utf-8"))
    return list(doc["replacements"].values())
