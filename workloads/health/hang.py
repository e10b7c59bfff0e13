"""Hang handling for collectives: a watchdog that names the stuck phase, and an arrival check
that names the ranks (and hosts) that never came.

A stuck collective blocks the main thread inside the backend, where no exception reaches it;
the :class:`Watchdog` thread ends the process with exit status 3 and the phase's name. Before
each phase, :func:`arrival_barrier` (gloo's ``monitored_barrier`` on a side group) tells a late
rank from a lost one. Used by the collectives harness and by the validation job's phases.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

import torch.distributed as dist

from gpu_cluster.workloads.runtime.device import global_rank as _global_rank

EXIT_HANG = 3


class CollectiveTimeout(Exception):
    """A rank did not arrive, or a collective did not finish, within the timeout.

    ``missing`` holds the global ranks that did not arrive, when they are known.
    """

    def __init__(self, message: str, missing: Sequence[int] = ()):
        super().__init__(message)
        self.missing = list(missing)


class Watchdog:
    """Ends the process when a phase outlives its deadline, before the process group's own
    timeout does.

    A stuck collective blocks the main thread inside the backend, where no exception can
    reach it; a second thread is the only place left that can still name what was stuck. With
    NCCL, the group's timeout tears every process down at once (``TORCH_NCCL_ASYNC_ERROR_HANDLING``,
    see :func:`gpu_cluster.workloads.runtime.device.setup`), so every deadline here is capped under
    ``group_timeout_s``: the watchdog speaks first, on every rank, with what each was doing.

    It also counts the collective calls this process enters and completes (:meth:`entered`,
    :meth:`done`): the ranks of a hung collective that entered call k+1 waited on a peer; the
    rank that never got past call k was the peer (the same reading as torch's flight recorder
    makes of its per-rank sequence numbers).
    """

    def __init__(
        self,
        *,
        rank: int,
        limit_s: float,
        group_timeout_s: float | None = None,
        out: TextIO = sys.stderr,
        on_expire: Callable[[str], None] | None = None,
    ):
        self._on_expire = on_expire
        self._rank = rank
        self._limit_s = limit_s
        self._ceiling_s = ceiling_s(group_timeout_s) if group_timeout_s is not None else None
        self._out = out
        self._lock = threading.Lock()
        self._label: str | None = None
        self._local = False
        self.expired_local = False
        """Set when the watchdog fired inside work of this rank alone (``phase(local=True)``)."""
        self._deadline = 0.0
        self._phase_limit = limit_s
        self._calls = _Calls()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="collectives-watchdog", daemon=True)
        self._thread.start()

    def _bound(self, calls: int) -> float:
        want = self._limit_s * max(1, calls)
        return want if self._ceiling_s is None else min(want, self._ceiling_s)

    @contextlib.contextmanager
    def phase(self, label: str, calls: int = 1, *, local: bool = False) -> Iterator[None]:
        """Bound ``label``: ``calls`` back-to-back launches get the limit once per call, never
        more than the ceiling under the group's timeout. ``local``: the work involves no peer (a
        GEMM and its sync, a copy): a rank stuck there is stuck on its own device, not waiting for
        another rank, and the message and :attr:`expired_local` say so."""
        self.begin(label, calls, local=local)
        try:
            yield
        finally:
            self.end()

    def begin(self, label: str, calls: int = 1, *, local: bool = False) -> None:
        """:meth:`phase` without a block, for work that starts and ends in different places (the
        process group's setup: from the device being bound to the group having formed)."""
        with self._lock:
            self._phase_limit = self._bound(calls)
            self._label, self._deadline, self._local = label, time.monotonic() + self._phase_limit, local

    def end(self) -> None:
        with self._lock:
            self._label = None

    @contextlib.contextmanager
    def bounds(self, *, limit_s: float, group_timeout_s: float) -> Iterator[None]:
        """Within the block, the limit and ceiling of a group with its own timeout (a pair's)."""
        with self._lock:
            saved = self._limit_s, self._ceiling_s
            self._limit_s, self._ceiling_s = limit_s, ceiling_s(group_timeout_s)
        try:
            yield
        finally:
            with self._lock:
                self._limit_s, self._ceiling_s = saved

    def rearm(self, calls: int = 1) -> None:
        """Within a phase: the next ``calls`` calls get the limit once each, from now."""
        with self._lock:
            if self._label is not None:
                self._phase_limit = self._bound(calls)
                self._deadline = time.monotonic() + self._phase_limit

    def entered(self, what: str, calls: int = 1) -> None:
        """``calls`` collective calls of ``what`` were launched (on a GPU: queued)."""
        with self._lock:
            self._calls.enter(what, calls)

    def done(self) -> None:
        """Every call entered so far has completed (on a GPU: after the sync)."""
        with self._lock:
            self._calls.finish()

    def progress(self) -> dict[str, Any]:
        """What this rank's status line keeps: calls entered and completed, the last one, and the
        bounded work it is inside now (``in``: the phase label, e.g. communicator init)."""
        with self._lock:
            doc = self._calls.to_json()
            if self._label is not None:
                doc["in"] = self._label
            return doc

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(0.25):
            with self._lock:
                label, late, limit = self._label, time.monotonic() > self._deadline, self._phase_limit
                local = self._local
            if label is not None and late:
                self.expired_local = local
                cause = (
                    "this rank's own device is stuck (no peer takes part)" if local else "a peer rank is stuck or gone"
                )
                message = f"collectives: rank {self._rank}: {label} did not finish within {limit:g} s; {cause}"
                self._out.write(message + "\n")
                self._out.flush()
                if self._on_expire is not None:
                    self._on_expire(message)  # e.g. the validation job's status file
                os._exit(EXIT_HANG)


class _Calls:
    """Sequence numbers of this process's collective calls, with wall-clock stamps a peer's can be
    compared with."""

    __slots__ = ("entered", "completed", "what", "entered_at", "completed_at")

    def __init__(self) -> None:
        self.entered = 0
        self.completed = 0
        self.what = ""
        self.entered_at: float | None = None
        self.completed_at: float | None = None

    def enter(self, what: str, calls: int) -> None:
        self.entered += max(0, calls)
        self.what, self.entered_at = what, time.time()

    def finish(self) -> None:
        self.completed, self.completed_at = self.entered, time.time()

    def to_json(self) -> dict[str, Any]:
        return {
            "entered": self.entered,
            "completed": self.completed,
            "what": self.what,
            "entered_at": self.entered_at,
            "completed_at": self.completed_at,
        }


def group_timeout_s(timeout_s: float) -> float:
    """The process group's timeout for a stage whose calls may each take ``timeout_s``: the arrival
    check (``timeout_s``) and the watchdog (``timeout_s + grace``) both speak before it."""
    return timeout_s + 2 * grace_s(timeout_s)


def ceiling_s(group_timeout: float) -> float:
    """The latest a watchdog may fire on a group with this timeout: far enough under it that the
    status line is written before the backend tears the process down."""
    return group_timeout - max(1.0, 0.1 * group_timeout)


def grace_s(timeout_s: float) -> float:
    """Slack between the arrival timeout, the watchdog and the process group's own timeout."""
    return max(5.0, 0.5 * timeout_s)


def missing_ranks(message: str) -> list[int] | None:
    """Ranks a message names as missing: this module's ``rank(s) 1, 3 did not arrive`` (global
    ranks) or gloo's ``Ranks 1, 3 failed to pass monitoredBarrier`` (ranks of that group)."""
    for pattern in (r"rank\(s\) ([\d, ]+) did not arrive", r"Ranks? ([\d, ]+) failed to pass monitoredBarrier"):
        m = re.search(pattern, message)
        if m is not None:
            return [int(x) for x in re.findall(r"\d+", m.group(1))]
    return None


def _where(ranks: Sequence[int], hosts: Sequence[str] | None) -> str:
    """``"; rank 1 on node-b"``: an operator drains a host, not a rank number."""
    if not hosts:
        return ""
    return "; " + ", ".join(f"rank {r} on {hosts[r] if 0 <= r < len(hosts) else '?'}" for r in ranks)


def arrival_barrier(
    side_group: Any, *, rank: int, timeout_s: float, label: str, hosts: Sequence[str] | None = None
) -> None:
    """Wait until every rank of ``side_group`` (gloo) reaches ``label``; the group's first rank
    names the ones that did not.

    Raises :class:`CollectiveTimeout` with the op, size and missing global ranks in its message
    (and in its ``missing``); with ``hosts`` (host name by global rank) each rank's host too.
    """
    try:
        dist.monitored_barrier(group=side_group, timeout=_dt.timedelta(seconds=timeout_s), wait_all_ranks=True)
    except RuntimeError as exc:
        text = str(exc)
        missing = missing_ranks(text)
        if missing is not None:
            missing = [_global_rank(side_group, r) for r in missing]
            who = ", ".join(str(r) for r in missing)
            raise CollectiveTimeout(
                f"{label}: rank(s) {who} did not arrive within {timeout_s:g} s{_where(missing, hosts)}", missing
            ) from None
        first = _global_rank(side_group, 0)
        if rank != first:
            raise CollectiveTimeout(
                f"{label}: rank {rank} arrived but lost rank {first}, which names the missing "
                f"ranks in its own message ({text.splitlines()[0][:200]}){_where([first], hosts)}"
            ) from None
        raise CollectiveTimeout(f"{label}: arrival check failed: {text.splitlines()[0][:300]}") from None
