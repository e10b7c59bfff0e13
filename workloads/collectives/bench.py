"""Collective-communication benchmark with nccl-tests' definitions, in plain torch.

Run under torchrun, one process per GPU (or several CPU processes on gloo)::

    torchrun --nproc-per-node 8 -m gpu_cluster.workloads.collectives -o all_reduce -b 1M -e 1G -f 2

Sizes, columns and formulas are nccl-tests' (``src/common.cu``, ``doc/PERFORMANCE.md``):
the size is the whole buffer (for all_gather and reduce_scatter the gathered buffer), ``algbw``
is bytes / 1e9 / seconds and ``busbw`` is ``algbw`` times the op's factor. Time is a host
timer around ``-n`` back-to-back launches followed by one device sync; ranks are combined as
nccl-tests does by default (``-a 1``): the mean of the ranks' times, so figures compare like with
like with published nccl-tests runs; the slowest rank's time is kept beside it (``slowest_us``).
On CUDA a second pass records CUDA events per launch for min/p50/p99 (slowest rank). Where
torch has no out-of-place form (all_reduce, broadcast) that column is N/A: emulating it with a
copy would time the copy too.

Exit status: 0 all rows right, 1 some row has wrong elements, 2 bad flags, 3 a rank did not
arrive or a collective did not finish within ``--timeout`` (torchrun itself exits 1 when any
worker fails).

``--json PATH``: for one op, the object ``OpResult.to_json()`` (keys ``op``, ``world_size``,
``backend``, ``dtype``, ``rows``, ``avg_busbw_gbps``, ``peak_busbw_gbps``,
``peak_size_bytes``, ``largest_size_bytes``, ``largest_size_busbw_gbps``, ``wrong_total``);
for several ops (``-o all`` or a comma list) ``{"world_size", "backend", "wrong_total",
"results": [one such object per op]}``. Each row is ``{"size_bytes", "count", "dtype",
"in_place", "time_us", "slowest_us", "algbw_gbps", "busbw_gbps", "wrong", "event_us"}`` (``wrong`` is null
without ``-c 1``, ``event_us`` is ``{"min","p50","p99"}`` on CUDA and null elsewhere).

Test-only hooks (environment): ``GPUC_FAULT_RANK=R`` makes rank R add 1 to the first element
of every checked result (only at the sweep size ``GPUC_FAULT_SIZE`` when that is set);
``GPUC_STALL_RANK=R`` makes rank R stop before the sweep size ``GPUC_STALL_SIZE`` (default
the first size) as if its host had died.

Layout of the code: :mod:`gpu_cluster.workloads.collectives.ops` holds the per-op table (layout, busbw factor,
reduction, root, case builder), :mod:`gpu_cluster.workloads.collectives.table` the nccl-tests table and sizes,
:mod:`gpu_cluster.workloads.health.hang` the watchdog and arrival check, :mod:`gpu_cluster.workloads.collectives.measure` one row's
timing and check; this module is the harness (flags, the sweep, the output) and the command line.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
from pathlib import Path
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, TextIO

import torch
import torch.distributed as dist

from gpu_cluster.workloads.runtime import device as _device
from gpu_cluster.workloads.runtime.flags import ArgumentParser, Problems, UsageError, output_file_problem
from gpu_cluster.workloads.collectives.ops import (
    DTYPE_ALIASES,
    DTYPES,
    OPS,
    bandwidths,
    layout,
    make_case,
    redop_name,
    root_of,
)
from gpu_cluster.workloads.collectives.table import OpResult, Row, format_row, header_lines
from gpu_cluster.workloads.runtime.sizes import format_size, parse_size, size_sweep
from gpu_cluster.workloads.collectives.measure import _Hooks, measure_case
from gpu_cluster.workloads.health.hang import (
    EXIT_HANG,
    CollectiveTimeout,
    Watchdog,
    arrival_barrier,
    grace_s,
    group_timeout_s,
)

EXIT_OK = 0
EXIT_WRONG = 1
EXIT_USAGE = 2
__all__ = [
    "EXIT_HANG",
    "EXIT_OK",
    "EXIT_USAGE",
    "EXIT_WRONG",
    "CollectivesConfig",
    "UsageError",
    "main",
    "parse_args",
    "run_collectives",
    "run_op",
]


# ----------------------------------------------------------------------------- configuration


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectivesConfig:
    """What to measure; every field has been validated."""

    ops: tuple[str, ...] = ("all_reduce",)
    """Collectives to run, in order."""
    min_bytes: int | None = None
    """Smallest size; None picks 1K on gloo, 1M on GPUs."""
    max_bytes: int | None = None
    """Largest size; None picks 1M on gloo, 1G on GPUs."""
    factor: int = 2
    """Each size is the previous one times this."""
    iters: int = 20
    """Timed launches per size and placement."""
    warmup: int = 5
    """Untimed launches before each timed loop."""
    check: bool = True
    """Verify every row's result exactly after timing it."""
    dtype: str = "float32"
    """Element type (a key of ``DTYPES``)."""
    timeout_s: float = 300.0
    """Bound on one call, and on each arrival and check, of every row (a loop of n calls gets n times it)."""
    json_path: str | None = None
    """Where rank 0 writes the results as JSON."""

    def sizes(self, backend: str) -> list[int]:
        gpu = backend != "gloo"
        lo = self.min_bytes if self.min_bytes is not None else (1 << 20 if gpu else 1 << 10)
        hi = self.max_bytes if self.max_bytes is not None else (1 << 30 if gpu else 1 << 20)
        return size_sweep(lo, max(lo, hi), self.factor)


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m gpu_cluster.workloads.collectives",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "-o", "--op", default="all_reduce", help=f"one of {', '.join(OPS)}, a comma list, or 'all' (default all_reduce)"
    )
    p.add_argument("-b", "--minbytes", default=None, help="smallest size, e.g. 8, 512K, 1M")
    p.add_argument("-e", "--maxbytes", default=None, help="largest size, e.g. 1G")
    p.add_argument("-f", "--stepfactor", default="2", help="size multiplier between rows (>= 2)")
    p.add_argument("-n", "--iters", default="20", help="timed launches per row")
    p.add_argument("-w", "--warmup_iters", default="5", help="untimed launches per row")
    p.add_argument("-c", "--check", default="1", help="1: verify results exactly, 0: skip")
    p.add_argument(
        "-d", "--datatype", default="float32", help=f"one of {', '.join(DTYPES)} (or {', '.join(DTYPE_ALIASES)})"
    )
    p.add_argument(
        "-T",
        "--timeout",
        default="300",
        help="seconds one call (and each arrival and check) may take before the job ends",
    )
    p.add_argument("--json", default=None, help="write results as JSON here (rank 0)")
    return p


def _int_flag(problems: Problems, name: str, raw: str, lo: int) -> int:
    try:
        value = int(raw)
    except ValueError:
        problems.add(name, f"{raw!r} is not an integer (allowed: an integer >= {lo})")
        return lo
    if value < lo:
        problems.add(name, f"{value} is too small (allowed: an integer >= {lo})")
    return value


def parse_args(argv: Sequence[str] | None = None) -> CollectivesConfig:
    """Flags -> config, raising :class:`UsageError` naming every bad value at once."""
    ns = build_parser().parse_args(argv)
    problems = Problems()

    raw_ops = [o.strip() for o in str(ns.op).split(",") if o.strip()]
    if raw_ops == ["all"]:
        ops: tuple[str, ...] = OPS
    else:
        bad = [o for o in raw_ops if o not in OPS]
        if bad or not raw_ops:
            problems.add("-o/--op", f"{ns.op!r} is not an op (allowed: {', '.join(OPS)}, a comma list of them, or all)")
        ops = tuple(o for o in raw_ops if o in OPS)

    sizes: dict[str, int | None] = {}
    for flag, raw in (("-b/--minbytes", ns.minbytes), ("-e/--maxbytes", ns.maxbytes)):
        if raw is None:
            sizes[flag] = None
            continue
        try:
            sizes[flag] = parse_size(raw)
            if sizes[flag] == 0:
                problems.add(flag, f"size must be at least 1 byte (got {raw!r})")
        except ValueError as exc:
            problems.add(flag, str(exc))
            sizes[flag] = None
    lo, hi = sizes["-b/--minbytes"], sizes["-e/--maxbytes"]
    if lo is not None and hi is not None and lo > hi:
        problems.add(
            "", f"-b/--minbytes {ns.minbytes} is larger than -e/--maxbytes {ns.maxbytes} (allowed: min <= max)"
        )

    factor = _int_flag(problems, "-f/--stepfactor", ns.stepfactor, 2)
    iters = _int_flag(problems, "-n/--iters", ns.iters, 1)
    warmup = _int_flag(problems, "-w/--warmup_iters", ns.warmup_iters, 0)
    if ns.check not in ("0", "1"):
        problems.add("-c/--check", f"{ns.check!r} is not allowed (allowed: 0, 1)")
    dtype = DTYPE_ALIASES.get(ns.datatype, ns.datatype)
    if dtype not in DTYPES:
        problems.add(
            "-d/--datatype",
            f"{ns.datatype!r} is not a type (allowed: {', '.join(DTYPES)}; aliases {', '.join(DTYPE_ALIASES)})",
        )
    try:
        timeout_s = float(ns.timeout)
        if not timeout_s > 0 or math.isinf(timeout_s):
            problems.add("-T/--timeout", f"{ns.timeout!r} must be a positive number of seconds")
    except ValueError:
        problems.add("-T/--timeout", f"{ns.timeout!r} is not a number of seconds")
        timeout_s = 1.0
    if ns.json and (why := output_file_problem(Path(ns.json))):
        problems.add("--json", why)  # before the sweep: a directory given as --json used to crash after it
    if problems:
        raise UsageError(problems)
    return CollectivesConfig(
        ops=ops,
        min_bytes=lo,
        max_bytes=hi,
        factor=factor,
        iters=iters,
        warmup=warmup,
        check=ns.check == "1",
        dtype=dtype,
        timeout_s=timeout_s,
        json_path=ns.json,
    )


def run_op(
    op: str,
    cfg: CollectivesConfig,
    rt: _device.Runtime,
    *,
    side_group: Any,
    group: Any = None,
    watchdog: Watchdog | None = None,
    out: TextIO | None = None,
    hooks: _Hooks | None = None,
    hosts: Sequence[str] | None = None,
    context: str = "",
) -> OpResult:
    """Measure ``op`` over ``cfg``'s sweep on ``group`` (None: the default group).
    ``hosts`` (host name by global rank) lets a timeout name the lost rank's host; ``context``
    starts every label (e.g. ``"pair a+b: "``), so a watchdog's message says where it was.

    ``side_group`` is a gloo group over the same ranks as ``group``: the arrival check, the
    start barrier and the rank combine run on it. Only ranks of ``group`` may call this.
    """
    hooks = hooks or _Hooks(fault_rank=None, fault_size=None, stall_rank=None, stall_size=None)
    dtype, type_name = DTYPES[cfg.dtype]
    n = rt.world_size if group is None else dist.get_world_size(group)
    grank = rt.rank if group is None else dist.get_rank(group)
    sizes = cfg.sizes(rt.backend)
    stall_at = hooks.stall_size if hooks.stall_size is not None else sizes[0]
    rows: list[Row] = []
    for size in sizes:
        lay = layout(op, size, torch.tensor([], dtype=dtype).element_size(), n)
        label = f"{context}{op} size {size} B ({format_size(size)})"
        if hooks.stall_rank == rt.rank and size == stall_at:
            time.sleep(3600)  # test hook: this rank's host "dies" before the size
        with watchdog.phase(f"{label} (arrival)") if watchdog else contextlib.nullcontext():
            arrival_barrier(side_group, rank=rt.rank, timeout_s=cfg.timeout_s, label=label, hosts=hosts)
        if lay.count == 0:
            if out is not None:
                out.write(f"# {size} B holds fewer than one {type_name} per rank: skipped\n")
            continue
        pair: list[Row | None] = []
        for in_place in (False, True):
            case = make_case(op, lay, in_place=in_place, rank=grank, n=n, dtype=dtype, device=rt.device, group=group)
            if case is None:
                pair.append(None)
                continue
            # Timing runs on the zeroed buffers (the speed of a collective does not depend on
            # the values); the check writes its pattern afterwards. Filling first was measured
            # (bench/collectives_overhead.py) to slow the next gloo calls by ~10 % on CPU.
            where = f"{label} {'in-place' if in_place else 'out-of-place'}"
            try:
                seconds, wrong, stats, slow = measure_case(
                    case,
                    iters=cfg.iters,
                    warmup=cfg.warmup,
                    check=cfg.check,
                    rt=rt,
                    side_group=side_group,
                    watchdog=watchdog,
                    label=where,
                    fault=hooks.fault_rank == rt.rank and hooks.fault_size in (None, size),
                )
            except RuntimeError as exc:  # gloo/NCCL timeouts and lost peers surface here
                first = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
                host = f" ({rt.hostname})" if hosts else ""
                raise CollectiveTimeout(f"{where}: failed on rank {rt.rank}{host}: {first}") from None
            algbw, busbw = bandwidths(op, lay.nbytes, seconds, n)
            row = Row(
                op=op,
                size_bytes=lay.nbytes,
                count=lay.count,
                dtype=cfg.dtype,
                in_place=in_place,
                time_us=seconds * 1e6,
                algbw_gbps=algbw,
                busbw_gbps=busbw,
                wrong=wrong,
                event_us=stats,
                slowest_us=slow * 1e6,
            )
            rows.append(row)
            pair.append(row)
            del case
        if out is not None:
            out.write(
                format_row(
                    size_bytes=lay.nbytes,
                    count=lay.count,
                    type_name=type_name,
                    redop=redop_name(op),
                    root=root_of(op),
                    out_of_place=pair[0],
                    in_place=pair[1],
                    checked=cfg.check,
                )
                + "\n"
            )
            out.flush()
    return OpResult(op=op, world_size=n, backend=rt.backend, dtype=cfg.dtype, rows=tuple(rows))


def _event_lines(result: OpResult) -> list[str]:
    lines = ["# CUDA-event time per launch, slowest rank (us): size placement min p50 p99"]
    for r in result.rows:
        if r.event_us is not None:
            lines.append(
                f"# {r.size_bytes:12d} {'in-place' if r.in_place else 'out-of-place':>12}"
                f" {r.event_us.min:9.2f} {r.event_us.p50:9.2f} {r.event_us.p99:9.2f}"
            )
    return lines if len(lines) > 1 else []


def run_collectives(
    cfg: CollectivesConfig, rt: _device.Runtime, *, side_group: Any = None, out: TextIO | None = None
) -> list[OpResult]:
    """Run every op in ``cfg`` on the already-started default group (the validation job's
    entry point). ``out`` receives the nccl-tests table (pass it on rank 0 only).

    Raises :class:`CollectiveTimeout` when a rank does not arrive within ``cfg.timeout_s``;
    a collective that never finishes ends the process (exit 3) from a watchdog thread. Start
    the default group with a timeout of ``group_timeout_s(cfg.timeout_s)``
    so the backend's own abort does not pre-empt these messages.
    """
    if side_group is None:
        # A host-side gloo group: the arrival check and the rank combine never queue behind
        # (or on) the GPU's collectives.
        side_group = dist.new_group(backend="gloo", timeout=_dt.timedelta(seconds=cfg.timeout_s))
    # The arrival barrier has its own timeout; the watchdog waits a little longer so the
    # barrier's message, which names the ranks, is the one that gets out.
    # Its deadlines stay under the default group's timeout (main() starts it at group_timeout_s),
    # so on NCCL it speaks before the backend's teardown.
    watchdog = Watchdog(
        rank=rt.rank, limit_s=cfg.timeout_s + grace_s(cfg.timeout_s), group_timeout_s=group_timeout_s(cfg.timeout_s)
    )
    hooks = _Hooks.from_env()
    # Every rank keeps the host of every rank, so whichever rank reports a lost peer names
    # the host an operator has to look at, not just a rank number.
    hosts: list[Any] = [None] * rt.world_size
    dist.all_gather_object(hosts, (rt.hostname, str(rt.device)), group=side_group)
    host_names = [h for h, _ in hosts]
    if out is not None:
        out.write(
            f"# collectives: world size {rt.world_size}, backend {rt.backend}, "
            f"dtype {cfg.dtype}, iters {cfg.iters}, warm-up {cfg.warmup}, "
            f"check {int(cfg.check)}\n"
        )
        for r, (host, dev) in enumerate(hosts):
            out.write(f"#  Rank {r:3d} on {host} device {dev}\n")
    results = []
    try:
        for op in cfg.ops:
            if out is not None:
                out.write(f"#\n# {op}\n")
                out.write("\n".join(header_lines()) + "\n")
            result = run_op(
                op, cfg, rt, side_group=side_group, watchdog=watchdog, out=out, hooks=hooks, hosts=host_names
            )
            results.append(result)
            if out is not None:
                out.write("\n".join(result.summary_lines() + _event_lines(result)) + "\n")
                out.flush()
    finally:
        watchdog.close()
    return results


def results_json(results: Sequence[OpResult], rt: _device.Runtime) -> dict[str, Any]:
    """One op: its object. Several: ``{"world_size", "backend", "wrong_total", "results"}``."""
    if len(results) == 1:
        return results[0].to_json()
    return {
        "world_size": rt.world_size,
        "backend": rt.backend,
        "wrong_total": sum(r.wrong_total for r in results),
        "results": [r.to_json() for r in results],
    }


def cap_to_memory(cfg: CollectivesConfig, device_bytes: int | None, backend: str) -> tuple[CollectivesConfig, str]:
    """-e reduced to what fits on the smallest GPU, with nccl-tests' own notice; unchanged off GPU."""
    hi = cfg.sizes(backend)[-1]
    if device_bytes is None or hi <= (cap := _device.memory_cap(device_bytes, cfg.check)):
        return cfg, ""
    lo = min(cfg.sizes(backend)[0], cap)
    return replace(cfg, min_bytes=lo, max_bytes=cap), f"#\n# Reducing maxBytes to {cap} due to memory limitation\n"


def main(argv: Sequence[str] | None = None) -> int:
    is_main = os.environ.get("RANK", "0") == "0"
    try:
        cfg = parse_args(argv)
    except UsageError as exc:
        if is_main:
            sys.stderr.write(exc.lines("collectives"))
        return EXIT_USAGE
    # The backend's own timeout (NCCL's watchdog aborts the process) comes last, after the
    # arrival barrier and our watchdog have had the chance to name the op, size and ranks.
    rt = _device.setup(timeout_s=group_timeout_s(cfg.timeout_s))
    out = sys.stdout if rt.is_main else None
    cfg, note = cap_to_memory(cfg, _device.smallest_device_memory(rt), rt.backend)
    if note and out is not None:
        out.write(note)
    try:
        results = run_collectives(cfg, rt, out=out)
    except CollectiveTimeout as exc:
        sys.stderr.write(f"collectives: {exc}\n")
        sys.stderr.flush()
        if rt.is_main and cfg.json_path:
            with open(cfg.json_path, "w") as fh:
                json.dump({"error": str(exc), "world_size": rt.world_size, "backend": rt.backend}, fh, indent=2)
        # Tearing the group down would wait on the rank that never came.
        os._exit(EXIT_HANG)
    wrong = sum(r.wrong_total for r in results)
    if rt.is_main:
        if cfg.json_path:
            with open(cfg.json_path, "w") as fh:
                json.dump(results_json(results, rt), fh, indent=2)
        if wrong:
            sys.stderr.write(f"collectives: {wrong} wrong elements; see the #wrong columns\n")
            sys.stderr.flush()
    # Every rank exits with the same status, and torchrun stops the others as soon as one exits
    # nonzero: without this meeting a peer's exit could end rank 0 before its report was out
    # (seen once in the fresh-clone CI: the JSON written, the stderr line missing).
    if dist.is_initialized():
        dist.barrier()
    _device.teardown()
    return EXIT_WRONG if wrong else EXIT_OK


if __name__ == "__main__":
    from gpu_cluster.workloads.runtime.device import exit_process

    exit_process(main())
