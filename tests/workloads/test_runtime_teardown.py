"""devmod.teardown() lets go of what a failing rank's frames held before it destroys the group.

A usage error every rank finds (a refused resume) raises SystemExit deep in the run, and the
``finally`` that tears the group down runs while that exception's frames still hold the model
and its device mesh. Destroyed later, at the interpreter's exit, gloo died in C++ ("terminate
called without an active exception") 1 run in 10 under load. Here, in a process of its own
(a one-rank gloo group), an object with a reference cycle, like a module with hooks, is held
only by a finished frame of the exception: alive before teardown, collected by it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import weakref
import torch.distributed as dist
from torch._C._distributed_c10d import HashStore
from gpu_cluster.workloads.runtime import device

dist.init_process_group("gloo", store=HashStore(), rank=0, world_size=1)


class Held:
    pass


ref = None


def deep():
    global ref
    held = Held()
    held.me = held  # a cycle: refcounting alone never frees it
    ref = weakref.ref(held)
    raise SystemExit(2)


try:
    deep()
finally:
    print("before", "alive" if ref() is not None else "gone", flush=True)
    device.teardown()
    print("after", "alive" if ref() is not None else "gone", dist.is_initialized(), flush=True)
"""


def test_teardown_collects_what_the_exception_held_then_destroys_the_group() -> None:
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert r.returncode == 2, r.stderr
    # torch 2.9's gloo prints "[Gloo] Rank 0 is connected to 0 peer ranks..." on stdout: not ours.
    lines = [ln for ln in r.stdout.splitlines() if not ln.startswith("[Gloo] ")]
    assert lines == ["before alive", "after gone False"], (r.stdout, r.stderr)
