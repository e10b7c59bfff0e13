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
from typing import NoReturn

from gpu_cluster.components.problems import Problem, ProblemsError

# the job entry points import these from here (the checks live with the problem type, for both sides)
from gpu_cluster.components.problems import output_dir_problem as output_dir_problem
from gpu_cluster.components.problems import output_file_problem as output_file_problem
from gpu_cluster.components.problems import Problems as _Problems

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
