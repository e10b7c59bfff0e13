"""One way to report a problem: where it is, what is wrong with the value there, what is allowed.

Every reader of user input collects problems instead of stopping at the first, then reports them
all at once, so a user fixes a stack file, a launch spec or a command line in one pass:

* the cluster description (``gpu_cluster.components.spec``: ``SpecError``), with the per-cloud rules;
* the stack outputs (``gpu_cluster.components.contract``: ``OutputsError``);
* the online preflight (``gpu_cluster.components.preflight``);
* the launchers (``gpu_cluster.workloads.launch.common``: ``LaunchSpecError``);
* every job's flags (``gpu_cluster.workloads.runtime.flags``, ``gpu_cluster.workloads.collectives``, ``gpu_cluster.workloads.health.gpu``) and
  the validation command's arguments (``gpu_cluster.workloads.validate``).

A :class:`Problem` is ``(path, reason)``: ``path`` is the config path, spec field or flag
(``storage.lustre.size_gib``, ``nodes``, ``-b/--minbytes``), ``reason`` names the bad value and
ends with what is allowed (``"... (allowed: 1..2048)"``; :meth:`Problems.add` writes that tail
from ``allowed=``). It is a tuple, so ``for path, reason in problems`` and comparisons with plain
pairs keep working. Pure standard library: both sides of the project import it
(tests/test_import_graph.py, workloads/launch/bundle.py SHARED).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple


class Problem(NamedTuple):
    path: str
    """Where: a config path, a spec field or a flag; empty for a problem of the whole input."""
    reason: str
    """What is wrong, naming the bad value, and what is allowed."""

    def render(self) -> str:
        """``path: reason`` (the reason alone when there is no path)."""
        return f"{self.path}: {self.reason}" if self.path else self.reason


def with_allowed(reason: str, allowed: str | None) -> str:
    """``reason (allowed: ...)``: the one spelling of the allowed tail."""
    return f"{reason} (allowed: {allowed})" if allowed is not None else reason


class Problems:
    """Collects problems while input is read; readers and checkers add, the caller raises once."""

    def __init__(self, items: Iterable[tuple[str, str]] = ()) -> None:
        self.items: list[Problem] = [Problem(*p) for p in items]

    def add(self, path: str, reason: str, allowed: str | None = None) -> None:
        self.items.append(Problem(path, with_allowed(reason, allowed)))

    def extend(self, items: Iterable[tuple[str, str]]) -> None:
        self.items.extend(Problem(*p) for p in items)

    def replace_last(self, path: str, reason: str) -> None:
        """Swap the last problem for a clearer one (a reader's generic words for a known mistake)."""
        self.items[-1] = Problem(path, reason)

    def __bool__(self) -> bool:
        return bool(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Problem]:
        return iter(self.items)


class ProblemsError(ValueError):
    """Every problem found in one input, under a heading; ``problems`` holds them as :class:`Problem`."""

    def __init__(self, heading: str, problems: Iterable[tuple[str, str]]) -> None:
        self.heading = heading
        self.problems: list[Problem] = [Problem(*p) for p in problems]
        super().__init__(self.render())

    def render(self, indent: str = "  ") -> str:
        return "\n".join([self.heading, *(indent + p.render() for p in self.problems)])

    def fields(self) -> list[str]:
        """The paths that failed, in the order found."""
        return [p.path for p in self.problems]


# Output paths are checked before any work, on both sides (the plan's --json, a job's --json): a
# user learns in a second, not after a minute's plan or an hour's job, that the result has nowhere to go.
def _cannot_write_in(directory: Path) -> str | None:
    """Why no file can be made in ``directory``, or None: tried, not read from the mode bits (root
    passes every access check, yet sysfs, a read-only mount or a full quota refuse it the file)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".gpuc-write-probe-", dir=directory)
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    os.close(fd)
    os.unlink(probe)
    return None


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
    if why := _cannot_write_in(probe):
        return f"{path} cannot be written: {probe} is not writable by this user ({why})"
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
    if why := _cannot_write_in(parent):
        return f"{path} cannot be written: {parent} is not writable by this user ({why})"
    return None
