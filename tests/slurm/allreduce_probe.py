"""Test-only job: one all_reduce across every rank, and who took part, written as JSON.

Run by the end-to-end Slurm test through the sbatch launcher (``torchrun -m
tests.slurm.allreduce_probe --out FILE``). Every rank contributes ``rank + 1``, so the sum
must be ``n (n + 1) / 2``; every rank reports its Slurm node name so the test can see the
job really spanned both nodes.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.slurm.allreduce_probe")
    parser.add_argument("--out", required=True, type=Path, help="JSON result file (written by rank 0)")
    parser.add_argument("--tag", default="", help="free text echoed into the result (quoting checks)")
    parser.add_argument(
        "--crash-on-node", default="", help="ranks on this Slurm node die (exit 3) before the all_reduce"
    )
    args = parser.parse_args(argv)
    # torch is imported after the arguments are checked: a bad command line fails in
    # milliseconds instead of after the import, on every rank.
    import torch
    import torch.distributed as dist

    from gpu_cluster.workloads.runtime.device import setup, teardown

    rt = setup(timeout_s=120)
    node = os.environ.get("SLURMD_NODENAME", "")
    print(f"allreduce_probe: rank {rt.rank} on {node} started", flush=True)
    if args.crash_on_node and node == args.crash_on_node:
        # A crash, not a clean exit: no teardown, the peers learn of it from the network.
        print(f"allreduce_probe: rank {rt.rank} on {node} crashing", flush=True)
        os._exit(3)
    try:
        value = torch.full((4,), float(rt.rank + 1), device=rt.device)
        dist.all_reduce(value)
        me = {
            "rank": rt.rank,
            "local_rank": rt.local_rank,
            "node": node,
            "hostname": rt.hostname,
            "job_id": os.environ.get("SLURM_JOB_ID", ""),
            "backend": rt.backend,
        }
        everyone: list[dict[str, object] | None] = [None] * rt.world_size
        dist.all_gather_object(everyone, me)
        if rt.is_main:
            result = {
                "world_size": rt.world_size,
                "allreduce_sum": value.tolist(),
                "expected_sum": rt.world_size * (rt.world_size + 1) / 2,
                "ranks": everyone,
                "tag": args.tag,
                "note_env": os.environ.get("GPUC_PROBE_NOTE"),
            }
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=2))
            print(f"allreduce_probe: world_size={rt.world_size} sum={value[0].item()} -> {args.out}")
    finally:
        teardown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
