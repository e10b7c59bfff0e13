"""Killing heal at any point and running it again continues without a second replacement: the
worker dies hard after each journal line in turn, and once between the cloud's answer and the
line that records it; the rerun must end HEALTHY with exactly one replacement."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpu_cluster.heal.journal import JOURNAL, read
from gpu_cluster.heal.states import State
from tests.heal.world import replacements, write_report

REPO = Path(__file__).resolve().parents[2]
FULL_RUN_LINES = 10


def worker(run_dir: Path, when: str) -> int:
    done = subprocess.run(
        [sys.executable, "-m", "tests.heal._crash_worker", str(run_dir), when],
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
