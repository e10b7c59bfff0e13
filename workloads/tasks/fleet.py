"""The worker loop of a task fleet: every rank works until every item is settled.

``static``: item ``i`` goes to rank ``i % world_size``, computed alike on every rank with no
coordination, so one slow item holds up every item behind it on its rank.

``dynamic`` (the default): every rank walks the whole list (from its own ``rank / world``
point of it, so ranks start apart) and claims the next item that has no output, no failure in
this fleet and no live lease (:mod:`workloads.tasks.leases`); it skips items others hold and,
once nothing is left to claim, rescans until those are done or their leases expire. A slow item
delays only its worker: the others take the rest. Workers need not share a job: two jobs (or
independent processes) given the same list, output and state directory share the work.

Either way an item whose output exists is skipped, so a rerun redoes nothing that finished,
and outputs are published by :class:`workloads.tasks.outputs.Outputs` (never partial, never
twice). Failures are recorded in ``<state-dir>/failures-rank<R>.jsonl`` (and, dynamic, as a
marker that settles the item for the rest of this fleet; a rerun is a new fleet and retries it).

Test hook: ``GPUC_CRASH_AFTER=N`` makes rank ``GPUC_CRASH_RANK`` (default 1) do the work of its
item N+1 into the temporary file and then exit hard (``os._exit(1)``) before publishing it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch.distributed as dist

from workloads.runtime import device as devmod
from workloads.tasks.leases import Leases, this_holder
from workloads.tasks.outputs import Outputs, item_key

SCHEDULES = ("dynamic", "static")


@dataclass(kw_only=True, frozen=True, slots=True)
class Item:
    """One unit of work."""

    name: str
    """What the item is, for records and messages (the input path, or a chunk's name)."""
    final: str
    """Its output: a path, or a URI below the output root."""


@dataclass(kw_only=True, frozen=True, slots=True)
class FleetConfig:
    """How the fleet runs, whatever the items are."""

    schedule: str
    """``dynamic`` or ``static``."""
    state_dir: Path
    """Shared directory for leases and failure records."""
    lease_s: float
    """A lease expires this long after its holder's last heartbeat."""
    fleet_id: str
    """Workers with the same id are one fleet: an item failed in it is not retried in it."""
    progress_every_s: float
    """Rank 0 prints its progress this often."""


@dataclass(slots=True)
class Counts:
    done: int = 0
    """Items this rank finished and published."""
    skipped: int = 0
    """Items whose output existed when the run began (each counted by one rank)."""
    failed: int = 0
    """Items that failed on this rank."""
    duplicate: int = 0
    """Items this rank finished after another worker had published them (its copy discarded)."""
    busy_s: float = 0.0
    """Seconds spent in items."""
    wall_s: float = 0.0
    """Seconds from the common start to this rank's last item."""
    log: list[str] = field(default_factory=list)


Work = Callable[[Item, Path], "str | None"]


def process(
    items: list[Item], outputs: Outputs, fc: FleetConfig, rt: devmod.Runtime, work: Work, group: Any = None
) -> Counts:
    """Do this rank's share of ``items`` with ``work(item, tmp) -> None | error``.

    ``group``: the process group of the fleet's workers when they are not the whole job (one
    worker per model replica, ``rt`` then numbering the replicas); ``None``: every rank."""
    fc.state_dir.mkdir(parents=True, exist_ok=True)
    failures_path = fc.state_dir / f"failures-rank{rt.rank}.jsonl"
    failures_path.unlink(missing_ok=True)  # this file describes the latest run only
    crash_after = os.environ.get("GPUC_CRASH_AFTER")
    crash_here = crash_after is not None and rt.rank == int(os.environ.get("GPUC_CRASH_RANK", "1"))
    c = Counts()
    n, w = len(items), rt.world_size
    leases = Leases(fc.state_dir, fc.lease_s, this_holder(rt.rank, fc.fleet_id)) if fc.schedule == "dynamic" else None
    # What existed before anyone started, each item looked at by one rank, then a common start.
    existed = {i for i in range(rt.rank, n, w) if outputs.exists(items[i].final)}
    c.skipped = len(existed)
    if leases is not None:
        now = leases.fs_now()
        for i in existed:
            leases.sweep(item_key(items[i].final), now)
    dist.barrier(group=group)
    t0 = last = time.monotonic()
    if rt.is_main:
        how = (
            f"claimed dynamically (lease {fc.lease_s:g} s in {fc.state_dir})"
            if fc.schedule == "dynamic"
            else f"item i -> rank i % {w}"
        )
        print(f"shard_tasks: {n} items over {w} ranks, {how}", flush=True)

    def do(it: Item, key: str, leases: Leases | None) -> None:
        nonlocal last
        t_item = time.monotonic()
        tmp = outputs.work_path(it.final)
        error = work(it, tmp)
        if crash_here and c.done + c.failed == int(crash_after or 0):
            print(
                f"[rank {rt.rank}] GPUC_CRASH_AFTER={crash_after}: exiting hard with {tmp} written but not published",
                file=sys.stderr,
                flush=True,
            )
            os._exit(1)
        if error is None:
            if outputs.publish(tmp, it.final):
                c.done += 1
            else:
                c.duplicate += 1
                print(
                    f"[rank {rt.rank}] {it.final} was published by another worker meanwhile; this copy is discarded",
                    file=sys.stderr,
                    flush=True,
                )
        else:
            outputs.discard(tmp)
            c.failed += 1
            record = {"input": it.name, "output": it.final, "rank": rt.rank, "time": time.time(), "error": error}
            with open(failures_path, "a") as f:
                f.write(json.dumps(record) + "\n")
            if leases is not None:
                leases.mark_failed(key, record)
        now = time.monotonic()
        c.busy_s += now - t_item
        if rt.is_main and now - last >= fc.progress_every_s:
            last = now
            rate = (c.done + c.failed) / (now - t0)
            print(
                f"rank 0: done {c.done}, failed {c.failed}, skipped {c.skipped} of {n}, {rate:.2f} items/s", flush=True
            )

    if fc.schedule == "static":
        for i in range(rt.rank, n, w):
            if i not in existed and not outputs.exists(items[i].final):
                do(items[i], "", None)
    else:
        assert leases is not None
        try:
            start = rt.rank * n // w
            pending = [i for i in [*range(start, n), *range(start)] if i not in existed]
            while pending:
                progressed, held = False, []
                now = leases.fs_now()
                for i in pending:
                    it = items[i]
                    key = item_key(it.final)
                    if outputs.exists(it.final) or leases.failed_in_this_fleet(key):
                        continue
                    if leases.claim(key, now) is None:
                        held.append(i)  # another worker's, for now
                        continue
                    try:  # won the lease; the item may have been settled just before
                        if not (outputs.exists(it.final) or leases.failed_in_this_fleet(key)):
                            do(it, key, leases)
                            progressed = True
                    finally:
                        leases.release(key)
                    now = leases.fs_now()
                pending = held
                if pending and not progressed:
                    time.sleep(min(0.2, fc.lease_s / 4))  # wait for others to finish or expire
        finally:
            leases.close()
    c.wall_s = time.monotonic() - t0
    return c
