"""GKE's managed instance group recreate and Cluster Director's faulty-host report: heal killed at
every journal line and on both sides of the call that acts (``recreateInstances``,
``reportHostAsFaulty``), in a process of its own that dies hard, then run again against a Compute
Engine stand-in in the reference's shapes (tests/heal/google/compute_world.py). Asserted after the
rerun (issue 41): the server carried out one recreate (one report) for the incident, every ask
carrying the same requestId, which is what makes the rerun's second ask harmless (I2); the group's
target size as it began, and no call that resizes (I3); the replacement the one the group's
per-instance status says it made (``currentAction`` back to NONE with a new ``id``), or the VM on
a new host; no healthy node cordoned, tainted or drained, its VM untouched (I1)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_cluster.heal.engine import request_uuid
from gpu_cluster.heal.journal import JOURNAL, read
from gpu_cluster.heal.states import State
from tests.heal.google.compute_world import BAD, IGM, NAMES, Compute
from tests.heal.google.test_gcp import COMPUTE, error
from tests.heal.google.test_gke_report_e2e import k8s_node, report
from tests.heal.recorded import Recorded
from tests.heal.vmss_world import SlurmFile, write_report
from tests.kubeapi import KubeApiServer

REPO = Path(__file__).resolve().parents[3]
RUN_LINES = 10
"""SUSPECT, CONFIRMED and its intent, QUARANTINED, REPLACING intent and done, JOINING, REVALIDATING
and passed, HEALTHY."""
KILLS = ["none", "before-call", "after-call", *(str(n) for n in range(1, RUN_LINES))]


@pytest.fixture
def compute() -> Iterator[Compute]:
    s = Recorded(lambda path: error(404, "NOT_FOUND", f"The resource '{path}' was not found"))
    yield Compute(s)
    s.close()


def heal(run_dir: Path, mode: str, when: str) -> int:
    done = subprocess.run(
        [sys.executable, "-m", "tests.heal.google._compute_crash_worker", str(run_dir), mode, when],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 9), done.stderr[-3000:]
    return done.returncode


def one_request(compute: Compute, path: str, entries: list, kill: str) -> None:  # type: ignore[type-arg]
    """Every ask of the call carried the incident's first attempt's token as its requestId; killed
    after the call and before its line, the rerun (which cannot see the queued call) asks again, and
    the server ignores it."""
    token = next(e.extra["token"] for e in entries if e.state is State.REPLACING and e.event == "intent")
    asks = [r for r in compute.s.made("POST") if r["path"] == path]
    assert asks and {r["query"]["requestId"] for r in asks} == {request_uuid(token)}
    assert sum(1 for e in entries if e.state is State.REPLACING and e.event == "intent") == 1
    assert len(asks) == (2 if kill == "after-call" else 1)


@pytest.mark.parametrize("kill", KILLS)
def test_gke_mig_killed_then_rerun_recreates_once_and_names_the_groups_instance(
    tmp_path: Path, compute: Compute, kill: str
) -> None:
    old = {n: dict(vm) for n, vm in compute.vms.items()}
    with KubeApiServer() as server:
        st = server.store
        for n in NAMES:
            st.create(st.resource("nodes"), "", k8s_node(n))
        compute.write(tmp_path, kubeconfig=server.kubeconfig())
        report(tmp_path / "report.json", "health.matmul: straggler (0.61 of the median)")
        if kill != "none":
            assert heal(tmp_path, "mig", kill) == 9
        assert heal(tmp_path, "mig", "none") == 0
        entries, notes = read(tmp_path / JOURNAL)
        assert not notes and entries[-1].state is State.HEALTHY, [e.line() for e in entries]
        # I2: one recreate carried out, however often it was asked, all with one requestId
        assert compute.done == [("compute.instanceGroupManagers.recreateInstances", BAD)]
        one_request(compute, f"{IGM}/recreateInstances", entries, kill)
        # I3: the target size as it began and as journalled before the call; nothing resized
        assert compute.target_size == 3
        assert next(e.extra["target_size"] for e in entries if e.event == "intent" and "target_size" in e.extra) == 3
        assert {r["path"] for r in compute.s.made("POST")} <= {
            f"{IGM}/recreateInstances",
            f"{IGM}/listManagedInstances",
        }
        # the replacement: the group's instance of the node's name, with the id the group gave it
        new = compute.vms[BAD]
        assert compute.action[BAD] == "NONE" and new["id"] != old[BAD]["id"]
        assert entries[-1].node == entries[-1].slot == BAD and entries[-1].instance == f"{new['id']}@{new['host']}"
        # I1: no healthy node cordoned or tainted, its VM untouched; the node back in service
        for n in NAMES:
            spec = st.get(st.resource("nodes"), "", n)["spec"]
            assert not spec.get("unschedulable") and not spec.get("taints"), n
        assert all(compute.vms[n] == old[n] for n in NAMES[1:])
        if kill == "none":  # the kill points above cover every line of an uncut run
            assert len(entries) == RUN_LINES
            assert heal(tmp_path, "mig", "none") == 0
            assert len(read(tmp_path / JOURNAL)[0]) == RUN_LINES and len(compute.done) == 1


@pytest.mark.parametrize("kill", KILLS)
def test_cluster_director_report_killed_then_rerun_reports_once(tmp_path: Path, compute: Compute, kill: str) -> None:
    old = {n: dict(vm) for n, vm in compute.vms.items()}
    SlurmFile.create(tmp_path, NAMES, max_nodes=3)
    compute.write(tmp_path)
    write_report(tmp_path, NAMES, BAD)
    if kill != "none":
        assert heal(tmp_path, "report", kill) == 9
    assert heal(tmp_path, "report", "none") == 0
    entries, notes = read(tmp_path / JOURNAL)
    assert not notes and entries[-1].state is State.HEALTHY, [e.line() for e in entries]
    # I2: one report carried out, all asks with one requestId, as the reference's body
    assert compute.done == [("compute.instances.reportHostAsFaulty", BAD)]
    path = f"{COMPUTE}/instances/{BAD}/reportHostAsFaulty"
    one_request(compute, path, entries, kill)
    body = [r for r in compute.s.made("POST") if r["path"] == path][0]["body"]
    assert body["disruptionSchedule"] == "IMMEDIATE" and body["faultReasons"][0]["behavior"] == "PERFORMANCE"
    # the same VM on a new host; no healthy node drained, its VM untouched
    new = compute.vms[BAD]
    assert new["id"] == old[BAD]["id"] and new["host"] != old[BAD]["host"] and new["status"] == "RUNNING"
    assert entries[-1].node == BAD and entries[-1].instance == f"{new['id']}@{new['host']}"
    doc = SlurmFile(tmp_path / "slurm.json").load()
    assert set(doc["drained"]) == {BAD} and all(doc["nodes"][n]["reason"] == "" for n in NAMES)
    assert all(compute.vms[n] == old[n] for n in NAMES[1:])
    if kill == "none":
        assert len(entries) == RUN_LINES
        assert heal(tmp_path, "report", "none") == 0
        assert len(read(tmp_path / JOURNAL)[0]) == RUN_LINES and len(compute.done) == 1
