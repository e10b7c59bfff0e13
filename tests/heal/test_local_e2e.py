"""The rehearsal as a user runs it, over real torchrun agents: ``gpu-cluster heal --local --fault
local-3:slow --apply`` validates, confirms local-3 with a cleared peer, drains it, gives its slot a
fresh instance, revalidates it with a cleared peer and returns it; a rerun on the same journal
does nothing. Three nodes, one rank each: the least that has a cleared peer besides a pair."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_cluster.heal.journal import JOURNAL, read
from gpu_cluster.heal.states import State

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def heal(out: Path, *extra: str, fault: str = "local-3:slow", nodes: str = "3") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpu_cluster.heal", "--local", "--nodes", nodes, "--fault", fault]
        + ["--out", str(out), "--timeout", "60", *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_local_rehearsal_heals_local_3_and_a_rerun_does_nothing(tmp_path: Path) -> None:
    first = heal(tmp_path, "--apply")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    entries, notes = read(tmp_path / JOURNAL)
    assert not notes and {e.node for e in entries} == {"local-3"}
    assert [e.state for e in entries if e.event == "enter"] == [
        State.SUSPECT,
        State.CONFIRMED,
        State.QUARANTINED,
        State.JOINING,
        State.REVALIDATING,
        State.HEALTHY,
    ]
    world = json.loads((tmp_path / "local-cluster.json").read_text())
    assert world["nodes"]["local-3"] == {"instance": "local-3.i1", "faults": []} and world["drained"] == {}
    # the second look failed the faulty instance, the revalidation passed the new one, both with a cleared peer
    checks = {p.name: json.loads((p / "report.json").read_text()) for p in (tmp_path / "checks").iterdir()}
    by_purpose = {name.split("-")[2]: doc for name, doc in checks.items()}
    verdicts = {p: {n["node"]: n["verdict"] for n in d["nodes"]} for p, d in by_purpose.items()}
    assert verdicts["confirm"]["local-3"] == "FAIL" and verdicts["revalidate"]["local-3"] == "PASS"
    assert json.loads((tmp_path / "report.json").read_text())["incidents"][0]["state"] == "HEALTHY"
    again = heal(tmp_path, "--apply")
    assert again.returncode == 0 and "already ended HEALTHY" in again.stdout
    assert len(read(tmp_path / JOURNAL)[0]) == len(entries)


def test_local_rehearsal_heals_a_dead_node(tmp_path: Path) -> None:
    """Issue 41 item 3: ``--fault local-3:dead`` (offered by --help) kills local-3's rank; the
    judge says "process or node died", the second look with a cleared peer cannot reach it either,
    and the slot's fresh instance passes: exit 0 with local-3 HEALTHY."""
    done = heal(tmp_path, "--apply", fault="local-3:dead", nodes="4")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    entries, notes = read(tmp_path / JOURNAL)
    assert not notes and entries[-1].state is State.HEALTHY and entries[-1].node == "local-3"
    assert "(process or node died)" in entries[0].detail
    confirmed = [e for e in entries if e.state is State.CONFIRMED and e.event == "enter"]
    assert "failed it again" in confirmed[0].detail and "process or node died" in confirmed[0].detail
    world = json.loads((tmp_path / "local-cluster.json").read_text())
    assert world["nodes"]["local-3"] == {"instance": "local-3.i1", "faults": []} and world["drained"] == {}
    assert "back in service: local-3" in done.stdout
