"""Metadata operations per item of the dynamic fleet, at two list sizes, side by side.

    python -m bench.fleet_scale [--items 1000,100000] [--ranks 8,512] [--dir /dev/shm]

Each case runs the real :func:`gpu_cluster.workloads.tasks.fleet.claim_steps` of every rank (its own
:class:`Leases`, one shared :class:`Outputs`) over synthetic items that take no time, on a tmpfs
folder: ranks are lightweight workers in this one process, advanced one step each in turn
(a deterministic round-robin, so the figures repeat). Each item's work writes its temporary file
and publishes it as :func:`gpu_cluster.workloads.tasks.fleet.process` does.

What is counted: every call that reaches the file system while the fleet runs, at the ``os`` and
``io`` layer that ``Outputs`` and ``Leases`` (and pathlib under them) go through: stat, open
(also of a file read or written), mkdir, unlink, link, symlink, rename/replace, utime, fsync
and directory listings (one per 1,000 entries returned, as an S3 LIST or a Lustre readdir page
returns many names at once). On Lustre each is an RPC to a metadata or object server; on S3 a
request. Reads and writes of data are not counted. The figure is operations per item, and the
ratio between the largest and the smallest list at each rank count; the fleet scales when that
ratio stays near 1 (done: within 2x at 512 ranks).
"""

from __future__ import annotations

import argparse
import builtins
import collections
import io
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpu_cluster.workloads.tasks import fleet
from gpu_cluster.workloads.tasks.leases import Holder, Leases
from gpu_cluster.workloads.tasks.outputs import Outputs

COUNTED = ("stat", "lstat", "open", "mkdir", "unlink", "link", "symlink", "replace", "rename", "utime", "fsync")


@contextmanager
def counting() -> Iterator[collections.Counter[str]]:
    """Count the file-system calls made inside the block, by kind."""
    ops: collections.Counter[str] = collections.Counter()
    saved: dict[tuple[Any, str], Any] = {}

    def wrap(mod: Any, name: str, kind: str) -> None:
        real = getattr(mod, name)
        saved[(mod, name)] = real

        def counted(*a: Any, **kw: Any) -> Any:
            ops[kind] += 1
            return real(*a, **kw)

        setattr(mod, name, counted)

    for name in COUNTED:
        wrap(os, name, name)
    for mod in (io, builtins):  # open() of a path; not of a descriptor (os.fdopen), already counted
        real_open = mod.open
        saved[(mod, "open")] = real_open

        def opened(file: Any, *a: Any, _real: Any = real_open, **kw: Any) -> Any:
            if not isinstance(file, int):
                ops["open"] += 1
            return _real(file, *a, **kw)

        setattr(mod, "open", opened)
    real_scandir = os.scandir
    saved[(os, "scandir")] = real_scandir

    class Listing:
        def __init__(self, path: Any) -> None:
            self._it = real_scandir(path)
            self._seen = 0
            ops["list"] += 1

        def __enter__(self) -> "Listing":
            return self

        def __exit__(self, *exc: object) -> None:
            self._it.close()

        def __iter__(self) -> "Listing":
            return self

        def __next__(self) -> os.DirEntry[str]:
            e = next(self._it)
            self._seen += 1
            if self._seen % 1000 == 0:
                ops["list"] += 1  # the next page
            return e

        def close(self) -> None:
            self._it.close()

    os.scandir = Listing  # type: ignore[assignment]
    try:
        yield ops
    finally:
        for (mod, name), real in saved.items():
            setattr(mod, name, real)


def simulate(n: int, ranks: int, base: Path) -> tuple[collections.Counter[str], int, int]:
    """Run ``ranks`` workers over ``n`` items; the operations, the outputs published, the rounds."""
    out, state = base / "out", base / "state"
    out.mkdir()
    items = [fleet.Item(name=f"item{i}", final=str(out / f"item{i:06d}.out")) for i in range(n)]
    outputs = Outputs(str(out))
    # A lease that cannot expire during the run: no worker here dies, and none waits on the clock.
    leases = [Leases(state, 3600.0, Holder(host="bench", pid=os.getpid(), rank=r, fleet="bench")) for r in range(ranks)]
    published = 0

    def do(it: fleet.Item, key: str, ls: Leases) -> None:
        nonlocal published
        tmp = outputs.work_path(it.final, ls.previous_pids(key))
        with open(tmp, "w") as f:
            f.write(it.name)
        published += outputs.publish(tmp, it.final)

    with counting() as ops:
        existed = [fleet.prescan(items, outputs, leases[r], r, ranks) for r in range(ranks)]
        workers = {r: fleet.claim_steps(items, outputs, leases[r], r, ranks, existed[r], do) for r in range(ranks)}
        rounds = 0
        while workers:
            rounds += 1
            for r in list(workers):
                try:
                    next(workers[r])
                except StopIteration:
                    del workers[r]
    for ls in leases:
        ls.close()
    return ops, published, rounds


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fleet_scale")
    ap.add_argument("--items", default="1000,100000", help="list sizes, comma-separated (default 1000,100000)")
    ap.add_argument("--ranks", default="8,512", help="rank counts, comma-separated (default 8,512)")
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None, help="a tmpfs folder")
    a = ap.parse_args()
    sizes = [int(x) for x in a.items.split(",")]
    world = [int(x) for x in a.ranks.split(",")]
    print(f"dynamic fleet, file-system operations per item (blocks of ceil(n / {fleet.MAX_BLOCKS}) items)")
    print(f"{'items':>8} {'ranks':>6} {'ops':>10} {'ops/item':>9} {'rounds':>7}  by kind (per item)")
    per: dict[tuple[int, int], float] = {}
    worst = 0.0
    for w in world:
        for n in sizes:
            base = Path(tempfile.mkdtemp(prefix="fleet-scale-", dir=a.dir))
            try:
                t = time.monotonic()
                ops, published, rounds = simulate(n, w, base)
                secs = time.monotonic() - t
            finally:
                shutil.rmtree(base, ignore_errors=True)
            if published != n:
                print(f"error: {n} items over {w} ranks published {published} outputs", file=sys.stderr)
                return 2
            total = sum(ops.values())
            per[(n, w)] = total / n
            kinds = " ".join(f"{k} {v / n:.2f}" for k, v in ops.most_common())
            print(f"{n:>8} {w:>6} {total:>10} {total / n:>9.2f} {rounds:>7}  {kinds}  ({secs:.1f} s)", flush=True)
        lo, hi = min(sizes), max(sizes)
        ratio = per[(hi, w)] / per[(lo, w)]
        worst = max(worst, ratio, 1 / ratio)
        print(f"  {w} ranks: ops/item at {hi} items / at {lo} items = {ratio:.2f}")
    print(f"largest ratio between the scales: {worst:.2f} (flat within 2x: {'yes' if worst <= 2 else 'NO'})")
    return 0 if worst <= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
