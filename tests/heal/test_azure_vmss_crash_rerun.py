"""Azure Slurm: heal killed at every journal line and on both sides of every call that acts (the
scale set's deleteInstances and its capacity's update, the old node's delete from Slurm), in a
process of its own that dies hard, then run again: one VM deleted, the capacity back where it
began, the old node's record gone before the new VM registers, the replacement found by the VM
list before and after (never "any new member"), and no healthy node ever drained (I1, I2, I3), never
more than one node out of service at once (I7). In scenarios of their own (tests/heal/
crash_checks.py), killed at their lines and rerun: a node the second look clears ends in service,
read back, no VM touched (I4); a node whose Slurm job runs is never replaced and a second FAILed
node waits for the budget of one, never drained (I5, I7); a check failed with the first cleared
peer for the pair's reason blames the node, and passes its replacement, only with a second,
different peer (I8). I6 does not hold on Slurm (docs/heal.md): the new VM's slurmd registers in
service, and heal drains it when it sees it.

The cloud is ARM on a loopback server in the test process (it outlives the killed heal, as a cloud
does); Slurm is a file both processes read (tests/heal/vmss_world.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_cluster.heal.journal import JOURNAL, read
from gpu_cluster.heal.states import State
from tests.heal.crash_checks import assert_blamed_only_with_second_peer, checks_run
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


def heal(run_dir: Path, arm: Recorded, when: str, scenario: str = "replace") -> int:
    done = subprocess.run(
        [sys.executable, "-m", "tests.heal._vmss_crash_worker", str(run_dir), arm.url, when, scenario],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 2, 9), done.stderr[-2000:]
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
    assert set(doc["drained"]) == {BAD, new["name"]} and doc["out_at_once"] == 1
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


@pytest.mark.parametrize("kill", ["none", "1"])
def test_vmss_flake_killed_then_rerun_is_cleared_and_left_in_service(arm: Recorded, tmp_path: Path, kill: str) -> None:
    """I4: every check passes the node the report FAILed: HEALTHY, in service read back, no VM touched."""
    vmss, slurm = world(tmp_path, arm)
    if kill != "none":
        assert heal(tmp_path, arm, kill, "flake") == 9
    assert heal(tmp_path, arm, "none", "flake") == 0
    entries, _ = read(tmp_path / JOURNAL)
    assert entries[-1].state is State.HEALTHY and entries[-1].extra["outcome"] == "cleared"
    assert "in service (read back)" in entries[-1].detail
    assert not arm.made("POST") and not arm.made("PATCH") and vmss.deleted == [] and vmss.capacity == 3
    doc = slurm.load()
    assert doc["drained"] == [] and all(doc["nodes"][n]["reason"] == "" for n in NAMES)
    assert checks_run(tmp_path)[-1]["node"] == BAD


@pytest.mark.parametrize("kill", ["none", "1", "10"])  # the line before each look: SUSPECT, REVALIDATING
def test_vmss_pair_failure_killed_then_rerun_blames_only_with_a_second_peer(
    arm: Recorded, tmp_path: Path, kill: str
) -> None:
    """I8: every check with the first cleared peer FAILs for the pair's reason; the node is blamed
    by the second peer, and its replacement, failed with the first, passes with the second."""
    vmss, slurm = world(tmp_path, arm)
    if kill != "none":
        assert heal(tmp_path, arm, kill, "pair") == 9
    assert heal(tmp_path, arm, "none", "pair") == 0
    entries, _ = read(tmp_path / JOURNAL)
    new = vmss.vms[-1]
    assert entries[-1].state is State.HEALTHY and entries[-1].node == new["name"]
    assert len(vmss.deleted) == 1 and vmss.capacity == 3
    doc = slurm.load()
    assert set(doc["drained"]) == {BAD, new["name"]} and doc["out_at_once"] == 1
    checks = checks_run(tmp_path)
    confirm, reval = [c for c in checks if c["node"] == BAD], [c for c in checks if c["node"] == new["name"]]
    assert_blamed_only_with_second_peer(checks, NAMES[1], NAMES[2], confirm, reval)


BUSY_LINES = 6
"""The first node: SUSPECT, CONFIRMED, its intent, RETRY (its job runs); the second: SUSPECT, RETRY
(the budget full). Killed after each but the last (after the last, the rerun is the uncut run's
second run, which every case makes)."""


@pytest.mark.parametrize("kill", ["none", *(str(n) for n in range(1, BUSY_LINES))])
def test_vmss_busy_node_killed_then_rerun_is_never_replaced_and_the_budget_holds(
    arm: Recorded, tmp_path: Path, kill: str
) -> None:
    """I5 and I7: a Slurm job runs on the bad node; a second FAILed node waits for the budget of one
    node out of service. Killed at every line and rerun twice: no VM deleted, the capacity as it
    was, the job on its node, the second node never drained, never two nodes out at once."""
    slurm = SlurmFile.create(tmp_path, NAMES, max_nodes=3, bad=BAD, jobs={BAD: ["4242"]})
    doc = slurm.load()
    doc["nodes"][NAMES[1]]["faulty"] = True
    slurm.save(doc)
    vmss = ScaleSet(arm, slurm, nodes=3)
    report = write_report(tmp_path, NAMES, BAD)
    rep = json.loads(report.read_text())
    rep["nodes"][1] = {**rep["nodes"][0], "node": NAMES[1]}
    report.write_text(json.dumps(rep))
    if kill != "none":
        assert heal(tmp_path, arm, kill, "busy") == 9
    assert heal(tmp_path, arm, "none", "busy") == 2
    assert heal(tmp_path, arm, "none", "busy") == 2
    entries, _ = read(tmp_path / JOURNAL)
    last = {e.node: e for e in entries}
    assert last[BAD].state is State.RETRY and "4242" in last[BAD].detail
    assert last[NAMES[1]].state is State.RETRY and "fleet budget" in last[NAMES[1]].detail
    assert not arm.made("POST") and not arm.made("PATCH") and vmss.deleted == [] and vmss.capacity == 3
    doc = slurm.load()
    assert doc["nodes"][BAD]["jobs"] == ["4242"] and doc["nodes"][BAD]["reason"]
    assert set(doc["drained"]) == {BAD} and doc["out_at_once"] == 1 and doc["deleted"] == []
    assert all(c["node"] != NAMES[1] for c in checks_run(tmp_path))
