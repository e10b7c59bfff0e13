"""The pairwise search after a hang, one job per pair.

A collective that hung ends every process of its job (our watchdog, or the backend's teardown at
the group's timeout), so the search cannot go on inside that job: the launcher runs each pair as
a job of its own, as Google's cluster-health-scanner does (GoogleCloudPlatform/cluster-health-scanner
at 81c525d8, 2025-10-31: ``deploy/slurm/cluster-validation.sh`` submits ``sbatch -N 2 -w a,b`` per
pair; ``src/health_runner/nccl_runner.py``'s ``health_check_with_node_pairs`` creates one job per
pair, and its second pass pairs each suspect with a node that passed). A pair that hangs again
ends only its own job. The search's logic is :mod:`workloads.validate.isolate`'s; this module runs the rounds and
reads each pair's result back from the run directory (``phase-pairs-A+B.json``, written by the
pair's job, none when it hung or failed).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Sequence

from workloads.validate import isolate, pairs

RunRound = Callable[[list[isolate.Pair]], None]
"""Run every pair of a round as its own job, at once, and return when all have ended."""


def tag(a: str, b: str) -> str:
    return f"{a}+{b}"


def pair_value(out: Path, a: str, b: str) -> float | None:
    """The pair's figure from its own job's result; None when the job left none (it hung or failed)."""
    try:
        doc = json.loads((out / f"phase-pairs-{tag(a, b)}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for row in (doc.get("pairs") or {}).get("first", []) if isinstance(doc, dict) else []:
        if len(row) == 3 and {row[0], row[1]} == {a, b}:
            return None if row[2] is None else float(row[2])
    return None


def _clear(out: Path, a: str, b: str) -> None:
    """A rerun in the same directory must not read an earlier run's result for the pair."""
    (out / f"phase-pairs-{tag(a, b)}.json").unlink(missing_ok=True)
    for p in (out / "status").glob(f"pairs-{tag(a, b)}-*.json"):
        p.unlink(missing_ok=True)


def search(
    out: Path,
    nodes: Sequence[str],
    run_round: RunRound,
    *,
    backend: str,
    floor: float | None,
    floor_fail: float | None,
    op: str,
    size: int,
    pairing: str = "topology",
) -> dict[str, Any]:
    """Run the search with one job per pair and keep its result where the judge reads it
    (``phase-pairs.json``, the shape the in-job search writes, with ``jobs: per-pair``)."""

    def measure(rnd: list[isolate.Pair]) -> dict[isolate.Pair, float | None]:
        for a, b in rnd:
            _clear(out, a, b)
        run_round(rnd)
        return {(a, b): pair_value(out, a, b) for a, b in rnd}

    iso = isolate.isolate(isolate.order(list(nodes), pairing, seed=len(nodes)), measure, floor)
    result = pairs.result_json(iso, size=size, op=op, pairing=pairing, floor_fail=floor_fail)
    result["jobs"] = "per-pair"
    doc = {"phase": "pairs", "backend": backend, "nodes": {n: {"ranks": []} for n in nodes}, "pairs": result}
    tmp = out / f".phase-pairs.json.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    os.replace(tmp, out / "phase-pairs.json")
    return result
