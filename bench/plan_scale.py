"""Plan time and resource count against node count, measured side by side in one run.

    python -m bench.plan_scale [--stack aws-h100-eks] [--repeat 3]

A node group is one resource whatever its size, so the resource count must not grow with the
node count, and plan time should stay flat. Each size is planned `repeat` times, interleaved
with the others so that machine noise hits every size alike; the median is printed.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time

from components.engine import run_offline
from components.spec import read_stack_file

SIZES = (2, 16, 128, 1024)


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.plan_scale")
    ap.add_argument("--stack", default="aws-h100-eks")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    name, raw = read_stack_file(args.stack)
    times: dict[int, list[float]] = {n: [] for n in SIZES}
    counts: dict[int, int] = {}
    run_offline(name, copy.deepcopy(raw))  # warm-up: imports and first-call caches stay out of the figures
    for _ in range(args.repeat):
        for nodes in SIZES:
            cluster = copy.deepcopy(raw)
            cluster["compute"]["nodes"] = nodes
            started = time.perf_counter()
            run = run_offline(name, cluster)
            times[nodes].append(time.perf_counter() - started)
            counts[nodes] = len(run.resources)
    base_t = statistics.median(times[SIZES[0]])
    print(f"plan scale, stack {name}, median of {args.repeat} interleaved runs")
    print(f"{'nodes':>6} {'resources':>10} {'plan s':>8} {'time / 2-node time':>19}")
    for nodes in SIZES:
        t = statistics.median(times[nodes])
        print(f"{nodes:>6} {counts[nodes]:>10} {t:>8.2f} {t / base_t:>19.2f}")
    flat = len(set(counts.values())) == 1
    print(f"resource count constant across node counts: {'yes' if flat else 'NO'}")
    return 0 if flat else 1


if __name__ == "__main__":
    sys.exit(main())
