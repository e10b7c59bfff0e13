"""Run under torchrun with 3 ranks by test_collectives: ``run_op`` on the subgroup of global
ranks 1 and 2 (so group ranks differ from global ones), then a stall inside that subgroup.

Rank 1 (the subgroup's first rank) writes ``{"ok": {op: OpResult json}, "stall": message,
"missing": [...]}`` to argv[1]."""

from __future__ import annotations

import datetime as dt
import dataclasses
import json
import os
import sys

import torch.distributed as dist

from gpu_cluster.workloads.collectives import measure as measure
from gpu_cluster.workloads.collectives import bench as col
from gpu_cluster.workloads.health import hang
from gpu_cluster.workloads.collectives import ops as ops
from gpu_cluster.workloads.runtime import device


def main(path: str) -> None:
    rt = device.setup(timeout_s=60)
    members = [1, 2]
    group = dist.new_group(ranks=members)
    side = dist.new_group(ranks=members, backend="gloo", timeout=dt.timedelta(seconds=60))
    if rt.rank not in members:
        device.teardown()
        return
    # The operations that must complete get a timeout no loaded host reaches; only the stalled one
    # is cut short, since its rank never arrives whatever the limit.
    cfg = col.CollectivesConfig(
        ops=ops.OPS, min_bytes=1 << 10, max_bytes=1 << 12, factor=4, iters=2, warmup=1, timeout_s=120.0
    )
    stalled_cfg = dataclasses.replace(cfg, timeout_s=3.0)
    doc: dict[str, object] = {
        "ok": {op: col.run_op(op, cfg, rt, side_group=side, group=group).to_json() for op in ops.OPS}
    }
    stall = measure._Hooks(fault_rank=None, fault_size=None, stall_rank=2, stall_size=None)
    try:
        col.run_op("all_reduce", stalled_cfg, rt, side_group=side, group=group, hooks=stall)
    except hang.CollectiveTimeout as exc:
        doc.update(stall=str(exc), missing=exc.missing, parsed=hang.missing_ranks(str(exc)))
    if rt.rank == 1:
        with open(path, "w") as fh:
            json.dump(doc, fh)
    sys.stdout.flush()
    # Rank 2 sleeps in the stall hook; a failing rank is what makes torchrun end it.
    os._exit(col.EXIT_HANG)


if __name__ == "__main__":
    main(sys.argv[1])
