"""The local run's heartbeat: a line per interval of the clock it is given, naming the step,
the time since it began and where the ranks are (from their status lines). A clock of the
test's own: what is checked is what is printed for the time that passed, not how long it took."""

from __future__ import annotations

import io
import json
from pathlib import Path

from gpu_cluster.workloads.validate.heartbeat import Heartbeat


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_line_per_interval_with_step_elapsed_and_ranks(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.mkdir()
    clock, out = Clock(), io.StringIO()
    beat = Heartbeat("phase main", status_dir=status, phase="main", every_s=15.0, clock=clock, out=out)
    clock.now += 14.9
    assert not beat.tick() and out.getvalue() == ""
    clock.now += 0.2
    assert beat.tick()
    assert out.getvalue().splitlines()[-1] == (
        "      ... phase main: 15 s elapsed; no rank has reported yet (starting torchrun)"
    )
    for rank, state in enumerate(("joined", "joined", "finished", "device-ready")):
        (status / f"main-local-1-r{rank}.json").write_text(json.dumps({"state": state}))
    (status / "storage-local-1-r0.json").write_text(json.dumps({"state": "error"}))  # another phase's
    (status / "main-local-2-r9.json").write_text("{")  # being rewritten: skipped this beat
    clock.now += 10.0
    assert not beat.tick()  # 10 s since the last line
    clock.now += 20.0
    assert beat.tick()
    assert out.getvalue().splitlines()[-1] == (
        "      ... phase main: 45 s elapsed; 4 ranks: 1 device-ready, 2 joined, 1 finished"
    )


def test_without_a_status_folder_only_the_time() -> None:
    clock, out = Clock(), io.StringIO()
    beat = Heartbeat("ddp", every_s=5.0, clock=clock, out=out)
    clock.now += 61.0
    assert beat.tick() and out.getvalue() == "      ... ddp: 61 s elapsed; running\n"
