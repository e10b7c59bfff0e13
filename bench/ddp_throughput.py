"""DDP training throughput at 1 and 2 ranks, measured side by side in one run.

    python -m bench.ddp_throughput [--steps 30] [--d-model 128] [--n-layers 4] [--seq-len 64]

Launches ``gpu_cluster.workloads.train.ddp`` with torchrun on CPU (gloo, one thread per rank so both runs
get the same compute per rank) at 1 rank and then at 2 ranks on the same synthetic shards,
and prints tokens/s (the job's own figure: median step of the slowest rank) and the scaling
ratio of total throughput. On a shared machine the ratio is only as good as the spare cores:
the load average is printed with it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench._torchrun import torchrun_json
from gpu_cluster.workloads.train.data import write_synthetic


def run(ranks: int, data: Path, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    job = ["--data", str(data / "train-*.bin"), "--vocab-size", "256", "--seq-len", str(args.seq_len)]
    job += ["--d-model", str(args.d_model), "--n-layers", str(args.n_layers), "--n-heads", "4"]
    job += ["--batch-size", str(args.batch_size), "--steps", str(args.steps), "--log-every", str(args.steps)]
    job += ["--json", str(out)]
    return torchrun_json("gpu_cluster.workloads.train.ddp", job, ranks=ranks, json_path=out, what=f"{ranks}-rank run")


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ddp_throughput")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--n-layers", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddp-bench-") as tmp:
        d = Path(tmp)
        # Enough windows that 2 ranks x batch x steps stays inside one epoch.
        need = 2 * args.batch_size * args.steps * args.seq_len + 1
        write_synthetic(out=d / "data", shards=2, tokens_per_shard=need // 2 + args.seq_len + 1, vocab=256, seed=0)
        load_before = os.getloadavg()[0]
        results = {n: run(n, d / "data", d / f"r{n}.json", args) for n in (1, 2)}
        load_after = os.getloadavg()[0]
    m = results[1]["model"]
    print(
        f"DDP throughput, CPU gloo, 1 thread/rank: GPT d_model {m['d_model']}, {m['n_layers']} layers, "
        f"seq {m['seq_len']}, {m['params']:,} params, batch {args.batch_size}/rank, {args.steps} steps "
        f"(median step of the slowest rank, first step excluded)"
    )
    print(f"{'ranks':>5}  {'tokens/s total':>14}  {'tokens/s/rank':>13}  {'step p50 ms':>11}")
    for n, r in results.items():
        print(
            f"{n:>5}  {r['tokens_per_s_total']:>14.0f}  {r['tokens_per_s_per_gpu']:>13.0f}  "
            f"{1e3 * r['step_time_p50_s']:>11.1f}"
        )
    ratio = results[2]["tokens_per_s_total"] / results[1]["tokens_per_s_total"]
    print(
        f"scaling 1 -> 2 ranks: {ratio:.2f}x total tokens/s ({100 * ratio / 2:.0f}% efficiency); "
        f"{os.cpu_count()} CPUs, load average {load_before:.1f} before, {load_after:.1f} after"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
