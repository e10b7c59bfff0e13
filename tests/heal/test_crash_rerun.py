"""Killing heal at any point and running it again continues without a second replacement: the
worker dies hard after each journal line in turn, and once between the cloud's answer and the
line that records it; the rerun must end HEALTHY with exactly one replacement."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_cluster.heal import local
from gpu_cluster.heal.journal import JOURNAL, read
from gpu_cluster.heal.states import State
from tests.heal.world import replacements, write_report

REPO = Path(__file__).resolve().parents[2]
FULL_RUN_LINES = 10


def worker(run_dir: Path, when: str, faults: str | None = None) -> int:
    done = subprocess.run(
        [sys.executable, "-m", "tests.heal._crash_worker", str(run_dir), when, *([faults] if faults else [])],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 9), done.stderr
    return done.returncode


@pytest.mark.parametrize("when", [*(str(n) for n in range(1, FULL_RUN_LINES)), "cloud"])
def test_killed_then_rerun_replaces_once(tmp_path: Path, when: str) -> None:
    write_report(tmp_path)
    assert worker(tmp_path, when) == 9
    assert worker(tmp_path, "none") == 0
    assert len(replacements(tmp_path)) == 1
    entries, notes = read(tmp_path / JOURNAL)
    assert not notes and entries[-1].state is State.HEALTHY
    # one intent to replace, however the run was cut
    assert sum(1 for e in entries if e.state is State.REPLACING and e.event == "intent") == 1
    # and a third run does nothing at all
    before = len(entries)
    assert worker(tmp_path, "none") == 0
    assert len(read(tmp_path / JOURNAL)[0]) == before


def test_the_uncut_run_writes_the_lines_the_cuts_cover(tmp_path: Path) -> None:
    write_report(tmp_path)
    assert worker(tmp_path, "none") == 0
    assert len(read(tmp_path / JOURNAL)[0]) == FULL_RUN_LINES


def test_killed_after_the_second_look_drained_it_rerun_looks_again(tmp_path: Path) -> None:
    """Severity 1, shape 1 (I1): the check ends by draining the node with the incident's own mark
    (Slurm's close_check; the local scheduler does the same); a kill before the line that says
    what the check found leaves that mark. The rerun must not read it as a failed check: it looks
    again, the instance is fine, nothing is replaced and the node is back in service."""
    write_report(tmp_path)
    assert worker(tmp_path, "check", "{}") == 9
    world = json.loads((tmp_path / local.WORLD).read_text(encoding="utf-8"))
    assert world["drained"]["local-3"].startswith(local.MARK)  # the mark the kill left
    assert worker(tmp_path, "none", "{}") == 0
    assert replacements(tmp_path) == []
    entries, notes = read(tmp_path / JOURNAL)
    assert not notes and [e.state for e in entries] == [State.SUSPECT, State.HEALTHY]
    assert not any(e.state in (State.CONFIRMED, State.QUARANTINED, State.REPLACING) for e in entries)
    assert json.loads((tmp_path / local.WORLD).read_text(encoding="utf-8"))["drained"] == {}


def test_killed_after_a_failing_second_look_rerun_confirms_by_a_check_not_the_mark(tmp_path: Path) -> None:
    """The same kill when the instance is bad: the rerun's own second look fails it, and only then
    is it quarantined and replaced, once."""
    write_report(tmp_path)
    assert worker(tmp_path, "check") == 9
    assert worker(tmp_path, "none") == 0
    assert len(replacements(tmp_path)) == 1
    entries, _ = read(tmp_path / JOURNAL)
    confirmed = [e for e in entries if e.state is State.CONFIRMED and e.event == "enter"]
    assert len(confirmed) == 1 and "failed it again" in confirmed[0].detail
    assert entries[-1].state is State.HEALTHY
