"""Azure Slurm: heal killed at every journal line and on both sides of every call that acts (the
scale set's deleteInstances and its capacity's update, the old node's delete from Slurm), in a
process of its own that dies hard, then run again: one VM deleted, the capacity back where it
began, the old node's record gone before the new VM registers, the replacement found by the VM
list before and after (never "any new member"), and no healthy node drained (I1, I2, I3).

The cloud is ARM on a loopback server in the test process (it outlives the killed heal, as a cloud
does); Slurm is a file both processes read (tests/heal/vmss_world.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_cluster.heal.journal import JOURNAL, read
from gpu_cluster.heal.states import State
from tests.heal.recorded import Recorded
from tests.heal.vmss_world import API, SCALE_SET_ID, SKU, ScaleSet, SlurmFile, computer_name, write_report

REPO = Path(__file__).resolve().parents[2]
RUN_LINES = 12
"""SUSPECT, CONFIRMED and its intent, QUARANTINED, REPLACING intent and done, JOINING, restore-intent,
restored, REVALIDATING and passed, HEALTHY."""
NAMES = [computer_name(i) for i in range(3)]
BAD = NAMES[0]
CALLS = ["before-delete", "after-delete", "after-forget", "before-patch", "after-patch"]


@pytest.fixture
def arm() -> Iterator[Recorded]:
    s = Recorded(lambda path: {"error": {"code": "NotFound", "message": f"{path} not found"}})
    yield s
    s.close()


def heal(run_dir: Path, arm: Recorded, when: str) -> int:
    done = subprocess.run(
        [sys.executable, "-m", "tests.heal._vmss_crash_worker", str(run_dir), arm.url, when],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 9), done.stderr[-2000:]
    return done.returncode


def world(tmp_path: Path, arm: Recorded, reuse: bool = False) -> tuple[ScaleSet, SlurmFile]:
    slurm = SlurmFile.create(tmp_path, NAMES, max_nodes=3, bad=BAD)
    vmss = ScaleSet(arm, slurm, nodes=3, reuse=reuse)
    write_report(tmp_path, NAMES, BAD)
    return vmss, slurm


@pytest.mark.parametrize("kill", ["none", *CALLS, *(str(n) for n in range(1, RUN_LINES))])
def test_vmss_killed_then_rerun_deletes_one_vm_and_restores_the_capacity(
    arm: Recorded, tmp_path: Path, kill: str
) -> None:
    vmss, slurm = world(tmp_path, arm)
    old = vmss.by_name(BAD)["vmId"]
    if kill != "none":
        assert heal(tmp_path, arm, kill) == 9
    assert heal(tmp_path, arm, "none") == 0
    entries, notes = read(tmp_path / JOURNAL)
    assert not notes and entries[-1].state is State.HEALTHY
    # I2: one VM deleted, the bad one, by one call
    posts = arm.made("POST")
    assert vmss.deleted == [old] and len(posts) == 1
    assert posts[0]["body"] == {"instanceIds": ["0"]} and posts[0]["query"] == {"api-version": API}
    assert sum(1 for e in entries if e.state is State.REPLACING and e.event == "intent") == 1
    # I3: the capacity ends where it began, put back once, by an intent journalled before the call
    (patch,) = arm.made("PATCH")
    assert vmss.capacity == 3 and patch["body"] == {"sku": {"name": SKU, "tier": "Standard", "capacity": 3}}
    events = [e.event for e in entries]
    assert events.count("restore-intent") == 1
    if kill != "after-patch":  # killed after the update landed: the rerun finds it done, asks nothing
        assert events.index("restore-intent") + 1 == events.index("restored")
    # the replacement is the VM made after the delete, named as its slurmd registered
    new = vmss.vms[-1]
    assert new["vmId"] not in (old,) and entries[-1].node == new["name"] == computer_name(3)
    assert entries[-1].instance == new["vmId"]
    # Slurm: the old record dropped before the new slurmd came (MaxNodeCount), no healthy node drained
    doc = slurm.load()
    assert doc["deleted"] == [BAD] and doc["refused"] == []
    assert set(doc["drained"]) == {BAD, new["name"]}
    assert all(doc["nodes"][n]["reason"] == "" for n in doc["nodes"]) and set(doc["nodes"]) == {*NAMES[1:], new["name"]}
    # every list followed its nextLink
    assert any("$skiptoken" in r["query"] for r in arm.made("GET"))
    if kill == "none":  # the kill points above cover every line of an uncut run
        assert events.count("restored") == 1
        assert len(entries) == RUN_LINES
        # and a further run does nothing at all
        assert heal(tmp_path, arm, "none") == 0
        assert len(read(tmp_path / JOURNAL)[0]) == RUN_LINES and len(arm.made("POST")) == 1


@pytest.mark.parametrize("kill", ["after-delete", "after-patch"])
def test_vmss_rerun_with_a_reused_instance_id_finds_the_new_vm_by_its_vm_id(
    arm: Recorded, tmp_path: Path, kill: str
) -> None:
    """A Uniform scale set may give the new VM the deleted one's instance id, and so its computer
    name: the replacement is still the VM whose vmId is new, and heal ends with one delete."""
    vmss, slurm = world(tmp_path, arm, reuse=True)
    old = vmss.by_name(BAD)["vmId"]
    assert heal(tmp_path, arm, kill) == 9
    assert heal(tmp_path, arm, "none") == 0
    entries, _ = read(tmp_path / JOURNAL)
    new = vmss.by_name(BAD)
    assert entries[-1].state is State.HEALTHY and entries[-1].node == BAD and new["instanceId"] == "0"
    assert entries[-1].instance == new["vmId"] != old
    assert vmss.deleted == [old] and len(arm.made("POST")) == 1 and len(arm.made("PATCH")) == 1
    assert slurm.load()["refused"] == [] and slurm.load()["nodes"][BAD]["reason"] == ""
    assert SCALE_SET_ID in arm.made("PATCH")[0]["path"]
