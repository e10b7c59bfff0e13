"""Flag checking shared by the job entry points: gather every problem, then stop once.

Flags arrive from argparse as strings and are converted here, so that a bad number and a
missing file are reported together instead of one per run. A problem is ``(where, reason)``
(components/problems.py, the one problem type of the project); ``where`` is the flag (or file)
and ``reason`` names the bad value and what is allowed. :class:`Problems` collects while flags
are converted and exits once (``error: where: reason`` per line, exit 2); entry points that
report under their own name (``collectives: ...``) raise :class:`UsageError` instead, and their
:class:`ArgumentParser` makes argparse's own errors join the others.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import NoReturn

from components.problems import Problem, ProblemsError
from components.problems import Problems as _Problems

EXIT_USAGE = 2


class UsageError(ProblemsError):
    """Every problem found in a job's flags; the entry point prints each as ``prog: problem``."""

    def __init__(self, problems: Iterable[tuple[str, str]]) -> None:
        items = [Problem(*p) for p in problems]
        super().__init__(f"{len(items)} problem(s) in the flags:", items)

    def lines(self, prog: str) -> str:
        return "".join(f"{prog}: {p.render()}\n" for p in self.problems)


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose own errors (an unknown flag, a missing value) become a :class:`UsageError`."""

    def error(self, message: str) -> NoReturn:
        raise UsageError([("", message)])


class Problems(_Problems):
    """The shared collector with the flag converters; :meth:`exit_if_any` stops the job once."""

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
        return (
            f"{path} cannot be created: {probe} is not a directory"
            if probe != path
            else f"{path} exists and is not a directory"
        )
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{path} cannot be written: {probe} is not writable by this user"
    return None


def output_file_problem(path: Path) -> str | None:
    """Why this process cannot write the file ``path`` when its work is done (a ``--json``), or None:
    its directory must exist and be writable, and ``path`` must not be a directory."""
    if path.is_dir():
        return f"{path} is a directory (allowed: a file path)"
    parent = path.parent
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        return f"directory {parent} {what}"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{path} cannot be written: {parent} is not writable by this user"
    return None


def is_main_process() -> bool:
    """Rank 0 under torchrun/srun, or a plain single process; decided before any process group."""
    return os.environ.get("RANK", "0") == "0"


def fail(problems: Iterable[tuple[str, str]]) -> NoReturn:
    """Print every problem (rank 0 only, so a 64-rank job prints each once) and exit 2."""
    if is_main_process():
        for where, reason in problems:
            print(f"error: {where}: {reason}", file=sys.stderr)
    sys.stderr.flush()
    raise SystemExit(EXIT_USAGE)
