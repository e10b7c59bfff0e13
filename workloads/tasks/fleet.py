"""The worker loop of a task fleet: every rank works until every item is settled.

``static``: item ``i`` goes to rank ``i % world_size``, computed alike on every rank with no
coordination, so one slow item holds up every item behind it on its rank.

``dynamic`` (the default): the list is cut into blocks, a rank claims a block and works through
it, and a rank with no free block left steals the tail of a held one, so a slow item delays only
its worker. Workers need not share a job: two jobs (or independent processes) given the same
list, output and state directory share the work.

Either way an item whose output exists is skipped, so a rerun redoes nothing that finished,
and outputs are published by :class:`gpu_cluster.workloads.tasks.outputs.Outputs` (never partial, never
twice). Failures are recorded in ``<state-dir>/failures-rank<R>.jsonl`` (and, dynamic, as a
marker that settles the item for the rest of this fleet; a rerun is a new fleet and retries it).

The dynamic protocol
--------------------
Files, all under ``<state-dir>/leases/`` (:mod:`gpu_cluster.workloads.tasks.leases`):

- ``<item-key>.<gen>``: an item's lease (as before blocks existed), ``<item-key>.failed``;
- ``blocks-<list>/b<k>.<gen>``: block ``k``'s lease; ``blocks-<list>/done-<fleet>/b<k>``: every
  item of block ``k`` is settled, as this fleet sees it. ``<list>`` is a digest of the outputs, so
  the same list (a rerun, a second job) finds the same blocks, of ``ceil(n / MAX_BLOCKS)`` items
  each (the list alone decides, never the world size, so jobs of different sizes cut it alike).
  ``<fleet>`` is a digest of the fleet id: a rerun is a new fleet and looks at every block again
  (one output check per item, and failures of the old fleet retried); a second job with another
  fleet id walks the blocks the first marked done, checking outputs only, and does no item twice.

A worker:

1. *prescan*: looks at the outputs of its ``i % world`` share once (what existed is counted as
   skipped), then starts at its home block ``rank * blocks / world``;
2. *claims* block ``k`` (not done in this fleet, and an ``O_CREAT | O_EXCL`` lease wins) and
   *holds* it: front to back, each item that has no output and no failure in this fleet is done
   under the item's own lease; items whose lease another worker holds (thieves) are waited for at
   the end; then it creates ``done-<fleet>/b<k>`` and only then releases the block's lease. It
   goes on to ``k + 1`` while that is free;
3. otherwise *lists* the blocks' folder once (blocks done, blocks with a lease) and jumps to the
   middle of the widest run of free blocks (so it walks half a run alone before it lists again);
4. with no free block: looks at ``PROBES`` held blocks (from a point that moves each round); a
   block whose lease has expired (dead holder) is claimed and held as in 2, from its start; a
   live one is *stolen from*: from its back, past items settled or held, the thief does free items
   under their item leases until it meets one that is not free (the holder's front);
5. ends when the listing shows every block done; with blocks held and nothing to steal it waits
   (backing off) and lists again.

What each worker touches: its blocks' items (a fixed number of operations each), one listing
(a page per 1,000 names) when its run of free blocks ends (``log2`` of its share of them), and
a few probes per round at the end. Nothing walks the whole list: the work per item stays flat as
the list and the world grow (``bench/fleet_scale.py`` counts it), where walking every item's
output and lease on every rank cost ``items x ranks``.

Why it is safe (the guarantees of the item leases and the outputs, unchanged):

- *Exactly once, never partial*: every item is done only under its own lease, claimed with
  ``O_EXCL`` after its output and failure record are checked and checked again once the lease is
  won, exactly as without blocks; publishing is ``link`` (or S3/GCS create-only), which refuses an
  output that exists. Blocks only decide where a worker looks, never whether it may do an item:
  a holder and a thief racing for one item both go through its lease, and one wins.
- *A killed worker's items are taken over*: its item lease and its block lease expire (or, on
  this host, its pid is gone). A block is marked done only by its holder once every item in it
  is settled, and its lease is released only after that, so a block whose holder died is still
  listed as held, is probed (the probe point moves, so every held block is probed in turn) and
  claimed once expired; its items are then looked at again, each one's dead lease taken over. A
  dead thief held at most one item lease (its block's holder waits for that one, then takes it).
- *A rerun redoes nothing that finished*: an item with an output is settled for any worker of
  any fleet; the rerun's ``done`` folder is its own, so it walks every block once more (an output
  check per item) and redoes only what has no output, or failed in the old fleet.
- *Two jobs share the work*: their workers claim the same block leases and item leases (a block
  held by the other job is stolen from, or taken over once its lease expires).
- *Failures are not retried within the fleet*: ``<item-key>.failed`` names the fleet; an item it
  names is settled for that fleet's workers.

What it does not guarantee: a worker that stalls past the lease time (a frozen node that comes
back) may redo an item another worker took over; its copy is discarded at publishing. A worker
killed while stalled that way may leave its temporary file (no lease names it any more).

Test hook: ``GPUC_CRASH_AFTER=N`` makes rank ``GPUC_CRASH_RANK`` (default 1) do the work of its
item N+1 into the temporary file and then exit hard (``os._exit(1)``) before publishing it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import torch.distributed as dist

from gpu_cluster.workloads.runtime import device as devmod
from gpu_cluster.workloads.tasks.leases import Leases, this_holder
from gpu_cluster.workloads.tasks.outputs import Outputs, item_key

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
    existed = prescan(items, outputs, leases, rt.rank, w)
    c.skipped = len(existed)
    sweep_published_scratch(items, outputs)  # before the common start: no worker has begun
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
        # Dynamic: the lease says whose temporaries may be left (one unlink each, not a listing).
        tmp = outputs.work_path(it.final, leases.previous_pids(key) if leases is not None else None)
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
            idle_s = min(0.05, fc.lease_s / 8)
            for progressed in claim_steps(items, outputs, leases, rt.rank, w, existed, do):
                if progressed:
                    idle_s = min(0.05, fc.lease_s / 8)
                else:  # nothing to claim or steal: wait for others to finish or expire, backing off
                    time.sleep(idle_s)
                    idle_s = min(idle_s * 2, fc.lease_s / 4)
        finally:
            leases.close()
    c.wall_s = time.monotonic() - t0
    return c


def prescan(items: list[Item], outputs: Outputs, leases: Leases | None, rank: int, world: int) -> set[int]:
    """The items whose output existed before anyone started, each looked at by one rank (its
    ``i % world`` share), with any dead holder's lease on them swept away."""
    existed = {i for i in range(rank, len(items), world) if outputs.exists(items[i].final)}
    if leases is not None and existed:
        now = leases.fs_now()
        for i in existed:
            leases.sweep(item_key(items[i].final), now)
    return existed


def sweep_published_scratch(items: list[Item], outputs: Outputs) -> int:
    """Remove this node's scratch folders of items whose output exists; how many.

    A worker killed between its upload and its clean-up (torchrun's SIGTERM to the survivors of a
    crashed rank can land there) leaves its temporary beside an output that exists, and no later
    claim reaches it: the item is skipped. A folder whose output does not exist is kept: the item
    is redone, and its claim removes it. Scratch is usually empty: the items' keys are computed
    only when it is not."""
    left = outputs.leftover_keys()
    if not left:
        return 0
    by_key = {item_key(it.final): it.final for it in items}
    dropped = 0
    for key in left:
        final = by_key.get(key)
        if final is not None and outputs.exists(final):
            outputs.drop_scratch(key)
            dropped += 1
    return dropped


MAX_BLOCKS = 4096
"""A list is cut into at most this many blocks (of ``ceil(n / MAX_BLOCKS)`` items each). It depends
on the list alone, so every worker of every job that shares the state directory cuts it alike."""


@dataclass(kw_only=True, frozen=True, slots=True)
class Blocks:
    """The list cut into blocks: block ``k`` is items ``[k * size, min(n, (k + 1) * size))``."""

    n: int
    size: int
    count: int
    folder: str
    """The blocks' subfolder of the lease directory, named after the list (a rerun of the same list
    finds the same blocks; another list gets its own)."""

    @staticmethod
    def of(items: list[Item], max_blocks: int = MAX_BLOCKS) -> "Blocks":
        n = len(items)
        size = max(1, -(-n // max_blocks))
        digest = hashlib.sha256("\n".join(it.final for it in items).encode()).hexdigest()[:16]
        return Blocks(n=n, size=size, count=-(-n // size), folder=f"blocks-{digest}")

    def key(self, k: int) -> str:
        return f"{self.folder}/b{k}"

    def span(self, k: int) -> range:
        return range(k * self.size, min(self.n, (k + 1) * self.size))


DID, SETTLED, HELD = "did", "settled", "held"

PROBES = 1
"""Held blocks a worker with nothing else to do looks at per round (taking over a dead holder's
block or stealing from a live one's tail), from a point that moves on every round."""


def claim_steps(
    items: list[Item],
    outputs: Outputs,
    leases: Leases,
    rank: int,
    world: int,
    existed: set[int],
    do: Callable[[Item, str, Leases], None],
    max_blocks: int = MAX_BLOCKS,
) -> Iterator[bool]:
    """One worker's part of the block protocol (the module docstring), as steps: it yields after
    each item it looked at (True) and whenever it found nothing to do (False: the caller waits),
    so :func:`process` runs it with sleeps and a benchmark can run many workers in one process.
    It returns once every block is done. ``max_blocks`` is for tests (blocks of several items
    in a short list); every worker sharing a state directory must use the same."""
    bl = Blocks.of(items, max_blocks)
    folder = leases.dir / bl.folder
    done_dir = folder / f"done-{hashlib.sha256(leases.me.fleet.encode()).hexdigest()[:16]}"
    done_dir.mkdir(parents=True, exist_ok=True)

    def settle(i: int, now: float | None = None) -> str:
        """Item ``i`` under its own lease: DID (this worker did it now), SETTLED (it has an
        output, or failed in this fleet) or HELD (another worker holds its lease). ``now``: the
        file system's clock read once for a round of probes (older is safe: a lease then looks
        younger, never expired too soon)."""
        it = items[i]
        key = item_key(it.final)
        if i in existed or outputs.exists(it.final) or leases.failed_in_this_fleet(key):
            return SETTLED
        if leases.claim(key, now) is None:
            return HELD
        try:  # won the lease; the item may have been settled just before
            if outputs.exists(it.final) or leases.failed_in_this_fleet(key):
                return SETTLED
            do(it, key, leases)
            return DID
        finally:
            leases.release(key)

    def done_path(k: int) -> Path:
        return done_dir / f"b{k}"

    def hold(k: int) -> Iterator[bool]:
        """Work through block ``k``, whose lease this worker holds, front to back; wait for the
        items thieves hold; then mark it done and let its lease go."""
        waiting = []
        for i in bl.span(k):
            if settle(i) == HELD:
                waiting.append(i)
            yield True
        while waiting:
            waiting = [i for i in waiting if settle(i) == HELD]
            if waiting:
                yield False
        done_path(k).touch()
        leases.release(bl.key(k))

    def steal(k: int, now: float) -> Iterator[bool]:
        """Take the items of block ``k`` that its live holder has not reached, back to front: pass
        over the tail others settled or hold, then do free items until one is not free."""
        span = reversed(bl.span(k))
        for i in span:
            if settle(i, now) == DID:
                yield True
                break
        else:
            return
        for i in span:
            if settle(i, now) != DID:
                return
            yield True

    def claim(k: int, now: float | None = None, take_over: bool = True) -> bool:
        return not done_path(k).exists() and leases.claim(bl.key(k), now, take_over) is not None

    k = rank * bl.count // world  # home: workers of one job start apart
    rounds = 0
    while True:
        # Forward from where we are, while the next block is free (one held, even by a dead
        # worker, ends the run: the probes below judge leases).
        while k < bl.count and claim(k, take_over=False):
            yield from hold(k)
            k += 1
        done, held = _block_states(folder, done_dir)
        free = [b for b in range(bl.count) if b not in done and b not in held]
        if free:
            k = _middle_of_widest_run(free, rank)
            continue
        if not held:
            return
        # Every block is done or held: take over a dead holder's, or steal from a live one's tail.
        order = sorted(held, key=lambda b: (b - k) % bl.count)
        start = (rank + rounds * PROBES) % len(order)
        rounds += 1
        progressed = False
        now = leases.fs_now()
        for b in [*order[start:], *order[:start]][:PROBES]:
            if claim(b, now):  # its holder's lease expired (or it was done and released since the listing)
                yield from hold(b)
                progressed = True
                break
            for step in steal(b, now):
                progressed = True
                yield step
            if progressed:
                break
        if not progressed:
            yield False


def _middle_of_widest_run(free: list[int], rank: int) -> int:
    """Where to claim next among the ``free`` blocks (ascending): the middle of the widest run of
    consecutive free blocks (ties broken by rank, so workers that list at once part ways). The
    front half stays with whoever works up to it; this worker walks the back half alone, so a
    worker lists again after about ``log2`` of its share of blocks, not after every block (which
    is what taking the first free block, right at another worker's front, would cost)."""
    runs: list[tuple[int, int]] = []
    lo = prev = free[0]
    for b in free[1:]:
        if b != prev + 1:
            runs.append((lo, prev + 1))
            lo = b
        prev = b
    runs.append((lo, prev + 1))
    widest = max(hi - lo for lo, hi in runs)
    ties = [r for r in runs if r[1] - r[0] == widest]
    lo, hi = ties[rank % len(ties)]
    return (lo + hi) // 2 if hi - lo > 1 else lo


def _block_states(folder: Path, done_dir: Path) -> tuple[set[int], set[int]]:
    """Blocks done in this fleet, and blocks with a lease (of any fleet) not done in it: one
    listing of the fleet's ``done`` folder and one of the blocks' lease folder."""
    done = _block_numbers(done_dir, "")
    return done, _block_numbers(folder, ".") - done


def _block_numbers(folder: Path, sep: str) -> set[int]:
    out: set[int] = set()
    with os.scandir(folder) as it:
        for e in it:
            stem = e.name.split(".", 1)[0] if sep else e.name
            if stem.startswith("b") and stem[1:].isdigit() and (not sep or sep in e.name):
                out.add(int(stem[1:]))
    return out
