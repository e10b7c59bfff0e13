"""The heal journal: ``heal-journal.jsonl`` in the run directory, one JSON object a line, only
ever appended.

Every step writes its line before it acts (``event: intent``) and after (``event: done``, or the
state it moved to), each line flushed and fsynced before the next action, so a process killed at
any point leaves a journal that says what it was about to do. A rerun replays the journal into
each incident's last state and re-reads the real state before the next step (the engine's rule);
the journal alone never decides that an action happened. A last line cut short by a kill is
skipped with a note, never rewritten.

One process at a time: the journal is held with an exclusive ``flock`` while heal runs, and a
second heal on the same directory stops with one line naming the first. One healer per cluster,
whatever its folder, is the cluster's own lock (:mod:`.lock`, I9).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpu_cluster.heal.states import State, check_move

JOURNAL = "heal-journal.jsonl"


class JournalBusy(RuntimeError):
    """Another heal holds the journal."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    at: float
    cluster: str
    slot: str
    node: str
    incident: str
    state: State
    event: str = "enter"
    """``enter`` (the incident moved to ``state``), ``intent`` (about to act), ``done`` (acted)."""
    detail: str = ""
    instance: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Step-specific facts: the report the incident came from, a cloud call's token and operation,
    the revalidation figures."""

    def to_json(self) -> dict[str, Any]:
        return {
            "time": datetime.fromtimestamp(self.at, timezone.utc).isoformat(timespec="seconds"),
            "at": round(self.at, 3),
            "cluster": self.cluster,
            "slot": self.slot,
            "node": self.node,
            "instance": self.instance,
            "incident": self.incident,
            "state": self.state.value,
            "event": self.event,
            "detail": self.detail,
            **({"extra": dict(self.extra)} if self.extra else {}),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Entry:
        return cls(
            at=float(doc["at"]),
            cluster=str(doc.get("cluster", "")),
            slot=str(doc["slot"]),
            node=str(doc.get("node", "")),
            incident=str(doc["incident"]),
            state=State(doc["state"]),
            event=str(doc.get("event", "enter")),
            detail=str(doc.get("detail", "")),
            instance=str(doc.get("instance", "")),
            extra=dict(doc.get("extra") or {}),
        )

    def line(self) -> str:
        """How the entry is printed as it is written."""
        when = datetime.fromtimestamp(self.at, timezone.utc).strftime("%H:%M:%S")
        what = self.state.value + ("" if self.event == "enter" else f"/{self.event}")
        inst = f" [{self.instance}]" if self.instance else ""
        return f"  {when} {self.incident} {self.node}{inst} {what}: {self.detail}".rstrip(": ")


@dataclass(slots=True)
class Incident:
    """One incident replayed from its entries."""

    incident: str
    slot: str
    entries: list[Entry] = field(default_factory=list)

    @property
    def last(self) -> Entry:
        return self.entries[-1]

    @property
    def state(self) -> State:
        return self.last.state

    @property
    def node(self) -> str:
        return self.last.node

    @property
    def instance(self) -> str:
        return self.last.instance

    def fact(self, key: str, default: Any = None) -> Any:
        """The latest value of ``extra[key]`` in this incident."""
        for e in reversed(self.entries):
            if key in e.extra:
                return e.extra[key]
        return default

    def has(self, state: State, event: str) -> bool:
        return any(e.state is state and e.event == event for e in self.entries)


class Journal:
    """The open journal of one run directory (a context manager: it holds the lock)."""

    def __init__(self, run_dir: Path, *, echo: Any = None, clock: Any = time.time) -> None:
        self.path = run_dir / JOURNAL
        self.entries: list[Entry] = []
        self.notes: list[str] = []
        self._fd: int | None = None
        self._echo = echo
        self._clock = clock

    def __enter__(self) -> Journal:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise JournalBusy(
                f"{self.path} is held by another gpu-cluster heal: wait for it to end (or end it), then rerun"
            ) from None
        self._fd = fd
        self.entries, self.notes = read(self.path)
        # A line cut short by a kill has no newline: end it, so this run's first line starts a line
        # of its own instead of being glued to the cut one and lost with it.
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            os.write(fd, b"\n")
            os.fsync(fd)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def append(self, entry: Entry) -> Entry:
        """Check the move, write the line, flush it to disk, then keep it."""
        assert self._fd is not None, "the journal is not open"
        before = self.incident(entry.incident)
        check_move(before.state if before else None, entry.state)
        data = (json.dumps(entry.to_json(), sort_keys=False) + "\n").encode()
        os.write(self._fd, data)
        os.fsync(self._fd)
        self.entries.append(entry)
        if self._echo is not None:
            self._echo(entry.line())
        return entry

    def now(self) -> float:
        return float(self._clock())

    def incidents(self) -> list[Incident]:
        return list(_group(self.entries).values())

    def incident(self, incident: str) -> Incident | None:
        return _group(self.entries).get(incident)

    def open_incidents(self) -> list[Incident]:
        return [i for i in self.incidents() if not i.state.terminal]

    def of_slot(self, slot: str) -> list[Incident]:
        return [i for i in self.incidents() if i.slot == slot]

    def out_of_service(self) -> list[Incident]:
        """Incidents that took their node out of service and have not returned it (I7's count)."""
        return out_of_service(self.incidents())

    def requested_since(self, since: float, slot: str | None = None) -> list[Entry]:
        """Replacements asked of the cloud (their intent lines) since ``since``: what the rate
        limit and the attempts limit count. An intent counts even when the call then failed."""
        return [
            e
            for e in self.entries
            if e.state is State.REPLACING and e.event == "intent" and e.at >= since and (slot is None or e.slot == slot)
        ]


def out_of_service(incidents: list[Incident]) -> list[Incident]:
    """Incidents past their quarantine's intent whose node was not returned (HEALTHY): quarantined,
    being replaced, waiting (RETRY), or ended ESCALATED or ABANDONED with the node still marked."""
    return [i for i in incidents if i.has(State.CONFIRMED, "intent") and i.state is not State.HEALTHY]


def _group(entries: list[Entry]) -> dict[str, Incident]:
    out: dict[str, Incident] = {}
    for e in entries:
        out.setdefault(e.incident, Incident(incident=e.incident, slot=e.slot)).entries.append(e)
    return out


def read(path: Path) -> tuple[list[Entry], list[str]]:
    """Every readable entry, and a note per line that could not be read (a line cut short by a
    kill is the last one; anything else unreadable is named too, never dropped in silence)."""
    entries: list[Entry] = []
    notes: list[str] = []
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return entries, notes
    lines = raw.split(b"\n")
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entries.append(Entry.from_json(json.loads(line)))
        except (ValueError, KeyError, TypeError) as exc:
            last = n == len(lines) or (n == len(lines) - 1 and not lines[-1])
            # The start of an object that never closes: a line a kill cut (the next run ended it).
            opened = line.strip().startswith(b"{") and not line.strip().endswith(b"}")
            cut = last or (isinstance(exc, json.JSONDecodeError) and opened)
            notes.append(
                f"{path.name} line {n}: "
                + ("cut short (a heal was killed while writing it); skipped" if cut else f"unreadable ({exc}); skipped")
            )
    return entries, notes


def iter_lines(path: Path) -> Iterator[str]:
    """The journal as printed (``gpu-cluster heal --show``)."""
    entries, notes = read(path)
    for e in entries:
        yield e.line()
    yield from notes
    held = out_of_service(list(_group(entries).values()))
    yield f"out of service by heal (I7, this journal): {len(held)}" + (
        ": " + ", ".join(f"{i.node} ({i.incident}, {i.state.value})" for i in held) if held else ""
    )
