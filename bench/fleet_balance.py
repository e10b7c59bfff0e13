"""Self-balancing fleet against the static split, on deliberately uneven items, side by side.

    python -m bench.fleet_balance [--ranks 2] [--items 16] [--long-s 1.0] [--short-s 0.05] [--long 4]

The items sleep (so a busy machine's CPU share does not distort the figures): ``--long`` of
them take ``--long-s`` and sit at places 0, R, 2R, ... of the sorted list (R ranks), where the
static split (item i to rank i % ranks) piles them onto rank 0; the rest take ``--short-s``.
Both schedules run the same items with ``gpu_cluster.workloads.tasks.shard`` under torchrun (CPU, gloo);
the printed wall time is the job's own (the slowest rank, from the common start to its last
item), against the ideal: total work / ranks.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._torchrun import torchrun_json


def sleep_item(inp: str, out: str) -> None:
    """The --callable each item runs: sleep the seconds its input holds, copy it."""
    with open(inp) as f:
        text = f.read()
    time.sleep(float(text.split()[0]))
    with open(out, "w") as f:
        f.write(text)


def run(schedule: str, inputs: Path, out: Path, ranks: int) -> dict[str, Any]:
    js = out.with_suffix(".json")
    job = ["--glob", str(inputs / "*.txt"), "--output-dir", str(out), "--callable", "bench.fleet_balance:sleep_item"]
    job += ["--schedule", schedule, "--json", str(js)]
    return torchrun_json("gpu_cluster.workloads.tasks.shard", job, ranks=ranks, json_path=js, what=f"{schedule} run")


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fleet_balance")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--items", type=int, default=16)
    ap.add_argument("--long", type=int, default=4, help="long items (at places 0, R, 2R, ...)")
    ap.add_argument("--long-s", type=float, default=1.0)
    ap.add_argument("--short-s", type=float, default=0.05)
    a = ap.parse_args()
    long_at = {a.ranks * k for k in range(a.long)}  # every one lands on rank 0 under i % ranks
    seconds = [a.long_s if i in long_at else a.short_s for i in range(a.items)]
    ideal = sum(seconds) / a.ranks
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        d = Path(tmp)
        (d / "in").mkdir()
        for i, s in enumerate(seconds):
            (d / "in" / f"item{i:04d}.txt").write_text(f"{s} item {i}\n")
        res = {sch: run(sch, d / "in", d / f"out-{sch}", a.ranks) for sch in ("static", "dynamic")}
    print(
        f"task fleet, {a.items} items over {a.ranks} ranks: {len(long_at)} x {a.long_s} s (all on rank 0 "
        f"under i % {a.ranks}) + {a.items - len(long_at)} x {a.short_s} s; total {sum(seconds):.2f} s, "
        f"ideal {ideal:.2f} s (total / ranks)"
    )
    print(f"{'schedule':>8}  {'wall s':>7}  {'x ideal':>7}  {'busy s per rank':<24}")
    for sch, r in res.items():
        busy = " ".join(f"{b:.2f}" for b in r["busy_s_per_rank"])
        print(f"{sch:>8}  {r['elapsed_s']:>7.2f}  {r['elapsed_s'] / ideal:>7.2f}  {busy:<24}")
    print(
        f"dynamic is {res['static']['elapsed_s'] / res['dynamic']['elapsed_s']:.2f}x faster than static; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
