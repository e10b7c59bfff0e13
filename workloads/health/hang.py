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

from workloads.runtime.device import global_rank as _global_rank

EXIT_HANG = 3


class CollectiveTimeout(Exception):
    """A rank did not arrive, or a collective did not finish, within the timeout.

    ``missing`` holds the global ranks that did not arrive, when they are known.
    """

    def __init__(self, message: str, missing: Sequence[int] = ()):
        super().__init__(message)
        self.missing = list(missing)


class Watchdog:
    """Ends the process when a phase outlives its deadline.

    A stuck collective blocks the main thread inside the backend, where no exception can
    reach it; a second thread is the only place left that can still name what was stuck.
    """

    def __init__(
        self, *, rank: int, limit_s: float, out: TextIO = sys.stderr, on_expire: Callable[[str], None] | None = None
    ):
        self._on_expire = on_expire
        self._rank = rank
        self._limit_s = limit_s
        self._out = out
        self._lock = threading.Lock()
        self._label: str | None = None
        self._deadline = 0.0
        self._phase_limit = limit_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="collectives-watchdog", daemon=True)
        self._thread.start()

    @contextlib.contextmanager
    def phase(self, label: str, calls: int = 1) -> Iterator[None]:
        """Bound ``label``: ``calls`` back-to-back launches get the limit once per call."""
        with self._lock:
            self._label, self._deadline = label, time.monotonic() + self._limit_s * max(1, calls)
            self._phase_limit = self._limit_s * max(1, calls)
        try:
            yield
        finally:
            with self._lock:
                self._label = None

    def rearm(self, calls: int = 1) -> None:
        """Within a phase: the next ``calls`` calls get the limit once each, from now."""
        with self._lock:
            if self._label is not None:
                self._deadline = time.monotonic() + self._limit_s * max(1, calls)
                self._phase_limit = self._limit_s * max(1, calls)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(0.25):
            with self._lock:
                label, late, limit = self._label, time.monotonic() > self._deadline, self._phase_limit
            if label is not None and late:
                message = (
                    f"collectives: rank {self._rank}: {label} did not finish within "
                    f"{limit:g} s; a peer rank is stuck or gone"
                )
                self._out.write(message + "\n")
                self._out.flush()
                if self._on_expire is not None:
                    self._on_expire(message)  # e.g. the validation job's status file
                os._exit(EXIT_HANG)


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
