"""Plan time and resource count against node count, measured side by side in one run.

    python -m bench.plan_scale [--stack aws-h100-eks] [--repeat 3]

A node group is one resource whatever its size, so the resources must not grow with the node
count, but for one deliberate step: on EKS more than 450 nodes are split into several managed
node groups (components/aws/eks_sizing.py, the default "Nodes per managed node group" quota).
The check is therefore: every resource type but the EKS node group has the same count at every
size, and the node groups are as many as the split gives (plus the system group). Plan time
should stay flat. Each size is planned `repeat` times, interleaved
with the others so that machine noise hits every size alike; the median is printed.
"""

from __future__ import annotations

from typing import Any

import argparse
import copy
import statistics
import sys
import time
from collections import Counter

from gpu_cluster.components.aws.eks_sizing import node_group_sizes
from gpu_cluster.components.engine import run_offline
from gpu_cluster.components.spec import read_stack_file

SIZES = (2, 16, 128, 1024)
EKS_NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"


def expected_node_groups(raw: dict[str, object], nodes: int) -> int | None:
    """EKS managed node groups the program must make for `nodes` (GPU groups + the system group);
    None where the stack makes none (Slurm, GKE: one pool or node set whatever the size)."""
    orchestration = raw.get("orchestration")
    if raw.get("cloud") == "aws" and isinstance(orchestration, dict) and orchestration.get("kind") == "eks":
        return len(node_group_sizes(nodes)) + 1
    return None


def scale_problems(raw: dict[str, object], types: dict[int, Counter[str]]) -> list[str]:
    """What grew with the node count that should not have (empty: the plan scales)."""
    problems = []
    base = SIZES[0]
    for nodes in SIZES[1:]:
        grown = {t for t in types[base].keys() | types[nodes].keys() if types[base][t] != types[nodes][t]}
        for t in sorted(grown - {EKS_NODE_GROUP}):
            problems.append(f"{t}: {types[base][t]} at {base} nodes, {types[nodes][t]} at {nodes}")
    for nodes in SIZES:
        want = expected_node_groups(raw, nodes)
        got = types[nodes][EKS_NODE_GROUP]
        if want is None and got != types[base][EKS_NODE_GROUP]:
            problems.append(f"{EKS_NODE_GROUP}: {got} at {nodes} nodes, {types[base][EKS_NODE_GROUP]} at {base}")
        elif want is not None and got != want:
            problems.append(f"{EKS_NODE_GROUP}: {got} at {nodes} nodes (the 450-node split gives {want})")
    return problems


def at_nodes(raw: dict[str, Any], nodes: int) -> dict[str, Any]:
    """The stack with ``nodes`` GPU nodes; an AWS PCS stack also names the smallest controller size
    that manages them (PCS sizes are explicit: components/aws/rules.py PCS_SIZES)."""
    from gpu_cluster.components.aws.rules import PCS_SIZES

    cluster = copy.deepcopy(raw)
    cluster["compute"]["nodes"] = nodes
    o = cluster.get("orchestration") or {}
    if cluster.get("cloud") == "aws" and o.get("kind") == "slurm":
        instances = nodes + int(o.get("login_nodes", 1))
        o["size"] = next(size for size, most in PCS_SIZES.items() if most >= instances)
    return cluster


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.plan_scale")
    ap.add_argument("--stack", default="aws-h100-eks")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    name, raw = read_stack_file(args.stack)
    times: dict[int, list[float]] = {n: [] for n in SIZES}
    types: dict[int, Counter[str]] = {}
    run_offline(name, copy.deepcopy(raw))  # warm-up: imports and first-call caches stay out of the figures
    for _ in range(args.repeat):
        for nodes in SIZES:
            cluster = at_nodes(raw, nodes)
            started = time.perf_counter()
            run = run_offline(name, cluster)
            times[nodes].append(time.perf_counter() - started)
            types[nodes] = Counter(r.type for r in run.resources)
    base_t = statistics.median(times[SIZES[0]])
    print(f"plan scale, stack {name}, median of {args.repeat} interleaved runs")
    print(f"{'nodes':>6} {'resources':>10} {'node groups':>12} {'plan s':>8} {'time / 2-node time':>19}")
    for nodes in SIZES:
        t = statistics.median(times[nodes])
        total = sum(types[nodes].values())
        print(f"{nodes:>6} {total:>10} {types[nodes][EKS_NODE_GROUP]:>12} {t:>8.2f} {t / base_t:>19.2f}")
    problems = scale_problems(raw, types)
    for problem in problems:
        print(f"grows with the node count: {problem}")
    print(
        "resources constant across node counts, but for the EKS node-group split: " + ("yes" if not problems else "NO")
    )
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
