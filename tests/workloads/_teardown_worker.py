"""One rank of test_hang_blame's emulated NCCL teardown (started once per rank, gloo).

Each rank keeps its status line the way the validation job does (gpu_cluster.workloads.validate.run.Status,
beating every second with the watchdog's count of calls), measures all_reduce with the real
harness, and has a watchdog that would speak only after the group's timeout (as before issue 22),
so it never does. NCCL's teardown is what ends every rank: once a rank has made no progress for
``GPUC_TEST_TEARDOWN_S`` (a work item older than the group's timeout), a thread ends the process
with no Python cleanup, as ``TORCH_NCCL_ASYNC_ERROR_HANDLING=3`` does. The node named by
``GPUC_INJECT_HANG_NODE`` hangs inside the timed loop (gpu_cluster.workloads.runtime.node.hang_here).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import torch.distributed as dist

from gpu_cluster.workloads.collectives import bench as col
from gpu_cluster.workloads.health import hang
from gpu_cluster.workloads.runtime import device
from gpu_cluster.workloads.runtime.node import node_name
from gpu_cluster.workloads.validate.run import Status
from gpu_cluster.workloads.validate.run_config import RunConfig

TORN_DOWN = 6  # what SIGABRT's teardown leaves; anything but the watchdog's 3


def _teardown(watchdog: hang.Watchdog, after_s: float) -> None:
    while True:
        time.sleep(0.05)
        p = watchdog.progress()
        last = max((t for t in (p["entered_at"], p["completed_at"]) if t is not None), default=None)
        if last is not None and time.time() - last > after_s:
            os._exit(TORN_DOWN)


def main(out: str) -> None:
    node = node_name()
    status = Status(RunConfig(out_dir=Path(out), phase="main"), node, int(os.environ["RANK"]))
    status.set("started")
    rt = device.setup(timeout_s=600)  # gloo's own timeout must not be what ends the ranks
    watchdog = hang.Watchdog(rank=rt.rank, limit_s=3600)
    status.calls = watchdog.progress
    status.set("joined")
    threading.Thread(target=_teardown, args=(watchdog, float(os.environ["GPUC_TEST_TEARDOWN_S"])), daemon=True).start()
    side = dist.new_group(backend="gloo")
    cfg = col.CollectivesConfig(
        ops=("all_reduce",), min_bytes=1 << 12, max_bytes=1 << 14, factor=2, iters=4, warmup=1, timeout_s=600
    )
    col.run_op("all_reduce", cfg, rt, side_group=side, watchdog=watchdog)
    status.set("finished")  # not reached: one node hangs, and the teardown ends every rank
    sys.exit(0)


if __name__ == "__main__":
    main(sys.argv[1])
