"""Flag checking shared by the job entry points: gather every problem, then stop once.

Flags arrive from argparse as strings and are converted here, so that a bad number and a
missing file are reported together instead of one per run. A problem is ``(where, reason)``;
``where`` is the flag (or file) and ``reason`` names the bad value and what is allowed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn

EXIT_USAGE = 2


class Problems:
    """Collects ``(where, reason)`` pairs while flags are converted."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, where: str, reason: str) -> None:
        self.items.append((where, reason))

    def extend(self, items: list[tuple[str, str]]) -> None:
        self.items.extend(items)

    def __bool__(self) -> bool:
        return bool(self.items)

    def integer(self, flag: str, raw: str | int, *, lo: int | None = None) -> int:
        try:
            value = int(raw)
        except (TypeError, ValueError):
            self.add(flag, f"{raw!r} is not an integer")
            return lo if lo is not None else 0
        if lo is not None and value < lo:
            self.add(flag, f"{value} is below the minimum {lo}")
        return value

    def number(self, flag: str, raw: str | float, *, gt: float | None = None, ge: float | None = None) -> float:
        try:
            value = float(raw)
        except (TypeError, ValueError):
            self.add(flag, f"{raw!r} is not a number")
            return 0.0
        if value != value or value in (float("inf"), float("-inf")):
            self.add(flag, f"{raw!r} is not a finite number")
        elif gt is not None and not value > gt:
            self.add(flag, f"{value} must be greater than {gt}")
        elif ge is not None and not value >= ge:
            self.add(flag, f"{value} must be at least {ge}")
        return value

    def exit_if_any(self) -> None:
        if self.items:
            fail(self.items)


def output_dir_problem(path: Path) -> str | None:
    """Why ``path`` cannot become a directory this process writes into, or None. Checked when
    the flags are read, so a job learns before its work, not after it, that its outputs have
    nowhere to go: ``path`` or its nearest existing ancestor must be a writable directory."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return f"{path} cannot be created: {probe} is not a directory" if probe != path \
            else f"{path} exists and is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{path} cannot be written: {probe} is not writable by this user"
    return None


def is_main_process() -> bool:
    """Rank 0 under torchrun/srun, or a plain single process; decided before any process group."""
    return os.environ.get("RANK", "0") == "0"


def fail(problems: list[tuple[str, str]]) -> NoReturn:
    """Print every problem (rank 0 only, so a 64-rank job prints each once) and exit 2."""
    if is_main_process():
        for where, reason in problems:
            print(f"error: {where}: {reason}", file=sys.stderr)
    sys.stderr.flush()
    raise SystemExit(EXIT_USAGE)
