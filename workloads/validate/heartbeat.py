"""A line every so often while a long local phase runs: the step, the time since it began, and
where its ranks are (from the status lines they keep in the run directory), so that minutes of
work do not look like a hang.

The clock and the output are parameters: the tests drive a clock of their own, so what they
check is the lines printed for the time that passed, never how long anything took.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

EVERY_S = 15.0
# The order a rank goes through (workloads/validate/run.py RUNNING_STATES, then the end states).
STATE_ORDER = ("started", "device-ready", "fabric-ready", "joined", "finished", "error")


@dataclass(slots=True)
class Heartbeat:
    step: str
    """What the step is, as its progress line named it ("[1/6] health, ...")."""
    status_dir: Path | None = None
    """The run directory's status/ folder; None: only the elapsed time is shown."""
    phase: str = ""
    """Whose status lines to read (``<phase>-<node>-r<rank>.json``)."""
    every_s: float = EVERY_S
    clock: Callable[[], float] = time.monotonic
    out: TextIO = field(default_factory=lambda: sys.stdout)
    started: float = field(init=False)
    last: float = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.last = self.clock()

    def tick(self) -> bool:
        """Print a line if ``every_s`` has passed since the last one (or the start)."""
        now = self.clock()
        if now - self.last < self.every_s:
            return False
        self.last = now
        print(f"      ... {self.step}: {now - self.started:.0f} s elapsed; {self.ranks()}", file=self.out, flush=True)
        return True

    def ranks(self) -> str:
        """Where the phase's ranks are, from their status lines: "4 ranks: 3 joined, 1 finished"."""
        if self.status_dir is None:
            return "running"
        states: Counter[str] = Counter()
        for path in sorted(self.status_dir.glob(f"{self.phase}-*.json")):
            try:
                states[str(json.loads(path.read_text(encoding="utf-8")).get("state", "?"))] += 1
            except (OSError, ValueError):  # a line being rewritten: the next beat reads it
                continue
        if not states:
            return "no rank has reported yet (starting torchrun)"
        order = {s: i for i, s in enumerate(STATE_ORDER)}
        parts = [f"{n} {s}" for s, n in sorted(states.items(), key=lambda kv: order.get(kv[0], len(order)))]
        return f"{sum(states.values())} ranks: {', '.join(parts)}"
