"""Measuring one row of the collectives benchmark the way nccl-tests does: warm-up, a host timer
around back-to-back launches and one sync, CUDA-event times per launch on GPUs, the exact check,
and the ranks combined (their mean, as nccl-tests' default ``-a 1``, and the slowest rank).

The test-only fault hooks live here too (:class:`_Hooks`): ``GPUC_FAULT_RANK`` / ``GPUC_FAULT_SIZE``
corrupt a checked result, ``GPUC_STALL_RANK`` / ``GPUC_STALL_SIZE`` stop a rank before a size.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from gpu_cluster.workloads.runtime import device as _device
from gpu_cluster.workloads.collectives.ops import Case, count_wrong
from gpu_cluster.workloads.collectives.table import EventStats, percentile
from gpu_cluster.workloads.runtime.sizes import parse_size
from gpu_cluster.workloads.health.hang import Watchdog
from gpu_cluster.workloads.runtime.node import hang_here, stall


def host_time(
    launch: Callable[[], None],
    iters: int,
    device: torch.device,
    rearm: Callable[[int], None] | None = None,
    watchdog: Watchdog | None = None,
    what: str = "",
) -> float:
    """nccl-tests' timer: seconds per call over ``iters`` back-to-back launches and one sync.

    ``rearm(k)`` (the watchdog's) gives the next k calls the timeout once each: on the CPU a
    call returns when it is done, so each gets its own; on a GPU the launches only queue, and
    the sync at the end waits for all of them. ``watchdog`` counts the calls entered and
    completed (``what`` names them), so a hang's status lines tell the rank that stopped from
    the ranks that waited for it."""
    host = device.type == "cpu"
    if watchdog is not None and rearm is None:
        rearm = watchdog.rearm
    start = time.perf_counter()
    for _ in range(iters):
        if rearm is not None and host:
            rearm(1)
        if watchdog is not None:
            watchdog.entered(what)
        launch()
        if watchdog is not None and host:
            watchdog.done()
        stall()  # test hook: a no-op unless GPUC_INJECT_SLOW_NODE names this node
        hang_here()  # test hook: a no-op unless GPUC_INJECT_HANG_NODE names this node
    if rearm is not None and not host:
        rearm(iters)
    _device.synchronize(device)
    if watchdog is not None and not host:
        watchdog.done()
    return (time.perf_counter() - start) / iters


def event_times_us(launch: Callable[[], None], iters: int, device: torch.device) -> list[float]:
    """Per-launch CUDA-event times in microseconds (CUDA/ROCm only).

    The events sit on the current stream, which the collective's stream waits on before it
    starts and which waits on the collective before the end event: each pair spans one call.
    """
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]  # type: ignore[no-untyped-call]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]  # type: ignore[no-untyped-call]
    for start, end in zip(starts, ends):
        start.record()
        launch()
        end.record()
    torch.cuda.synchronize(device)
    return [s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends)]


def slowest(values: Sequence[float], side_group: Any) -> list[float]:
    """Element-wise max over ranks (the slowest rank decides)."""
    t = torch.tensor(list(values), dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=side_group)
    return [float(x) for x in t.tolist()]


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name, "")
    return int(raw) if raw.strip() else None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Hooks:
    """Test-only faults, read from the environment once."""

    fault_rank: int | None
    fault_size: int | None
    stall_rank: int | None
    stall_size: int | None

    @staticmethod
    def from_env() -> _Hooks:
        def size(name: str) -> int | None:
            raw = os.environ.get(name, "").strip()
            return parse_size(raw) if raw else None

        return _Hooks(
            fault_rank=_env_int("GPUC_FAULT_RANK"),
            fault_size=size("GPUC_FAULT_SIZE"),
            stall_rank=_env_int("GPUC_STALL_RANK"),
            stall_size=size("GPUC_STALL_SIZE"),
        )


def measure_case(
    case: Case,
    *,
    iters: int,
    warmup: int,
    check: bool,
    rt: _device.Runtime,
    side_group: Any,
    watchdog: Watchdog | None,
    label: str,
    fault: bool = False,
) -> tuple[float, int | None, EventStats | None, float]:
    """Warm up, time, (on GPU) event-time and check one case.

    Returns the ranks' mean seconds per call (nccl-tests ``-a 1``), wrong elements summed over
    ranks (None without ``check``), the slowest rank's event statistics (None off GPU) and the
    slowest rank's seconds per call.
    """

    def guarded(what: str, calls: int = 1) -> contextlib.AbstractContextManager[None]:
        # -T bounds one call: a loop of n launches gets n times the limit, capped under the
        # process group's own timeout (the watchdog's ceiling), so the watchdog speaks first.
        return watchdog.phase(f"{label} ({what})", calls) if watchdog else contextlib.nullcontext()

    def track(what: str, calls: int = 1) -> None:
        if watchdog is not None:
            watchdog.entered(f"{label} ({what})", calls)

    def settled() -> None:
        if watchdog is not None:
            watchdog.done()

    with guarded("warm-up", warmup + 1):
        track("warm-up", warmup)
        for _ in range(warmup):
            case.launch()
        _device.synchronize(rt.device)
        settled()
        dist.barrier(group=side_group)  # every rank starts its timer together
    with guarded("timed loop", iters):
        seconds = host_time(case.launch, iters, rt.device, watchdog=watchdog, what=f"{label} (timed loop)")
    events: list[float] = []
    if rt.device.type == "cuda":
        with guarded("event-timed loop", iters):
            track("event-timed loop", iters)
            per_call = event_times_us(case.launch, iters, rt.device)
            settled()
            events = [min(per_call), percentile(per_call, 50), percentile(per_call, 99)]
    wrong_local = 0
    if check:
        with guarded("check"):
            case.prepare()
            track("check")
            case.launch()
            _device.synchronize(rt.device)
            settled()
            if fault and case.result.numel() > 0:
                case.result.view(-1)[0] += 1
            wrong_local = count_wrong(case.result, case.expected)
    combined = slowest([seconds, *events], side_group)
    total = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(total, group=side_group)
    mean = float(total.item()) / dist.get_world_size(side_group)
    wrong_t = torch.tensor([wrong_local], dtype=torch.int64)
    dist.all_reduce(wrong_t, group=side_group)  # a fault on any rank shows on rank 0
    stats = EventStats(min=combined[1], p50=combined[2], p99=combined[3]) if events else None
    return mean, (int(wrong_t.item()) if check else None), stats, combined[0]
