"""AKS: heal killed at every journal line and on both sides of ARM calls (agentPools
deleteMachines and createOrUpdate, which act; agentPools get, machines list and get, which read),
in a process of its own that dies hard, then run again against ARM in the shapes of the AKS REST
reference 2025-10-01 and the nodes on the test Kubernetes API server (tests/heal/aks_world.py).

Asserted after every rerun, from the stand-ins' state (issue 41): no healthy node cordoned or
tainted, no healthy machine deleted (I1); one deleteMachines, of the bad machine (I2); the pool's
count as it began, restored once (I3); the new machine the one that is not in the list journalled
before the call, every page of it read (the list pages by ``nextLink``); a node the second look
clears left in service, read back (I4); a node whose pod a PodDisruptionBudget keeps never
replaced, across kills (I5); the replacement out of work (cordoned and tainted by heal) while its
revalidation ran, the AKS form of I6 (AKS takes a pool taint back from the Kubernetes API, so it
cannot register out of work: docs/heal.md); never more nodes out of service at once than the
budget (I7); a node failed with one peer for the pair's reason only is blamed, and its
replacement passed, only with a second, different cleared peer (I8); heal killed anywhere holds
the cluster's Lease (``kube-system/gpu-cluster-heal`` on the test API server, as ``gpu-cluster heal
--apply`` takes it on AKS), every rerun takes it over only as stale, naming the killed pid, and a
rerun while it is fresh refuses, naming host, pid and folder, and touches nothing (I9; the Lease's
clock is injected, never slept on)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.heal.journal import JOURNAL, read
from gpu_cluster.heal.states import State
from gpu_cluster.heal.lock import DURATION_S
from tests.heal._crash_common import lease_holder
from tests.heal._crash_common import killed_then_rerun as _killed_then_rerun
from tests.heal.aks_world import BAD, HEAL_TAINT, NAMES, SIZE, VMSS, AksPool, name_of
from tests.heal.crash_checks import assert_blamed_only_with_second_peer, checks_run, put_kept_pod
from tests.heal.recorded import Recorded
from tests.heal.world import SLOW
from tests.kubeapi import KubeApiServer

REPO = Path(__file__).resolve().parents[2]
RUN_LINES = 12
"""SUSPECT, CONFIRMED and its intent, QUARANTINED, REPLACING intent and done, JOINING, restore-intent,
restored, REVALIDATING and passed, HEALTHY."""
ARM_CALLS = ["delete-1", "put-1", *(f"pool-{k}" for k in range(1, 7))]
"""The ARM calls that change the world (deleteMachines, createOrUpdate, and each agentPools get, on
which the stand-in's pool moves on), by kind and order in an uncut run, which makes 16 calls: pools
1-6, machines lists 1-4 (two pages each), machine gets 1-4, delete 1, put 1 (asserted below). A
kill on either side of a list or a machine get cuts the run where a kill beside its neighbouring
call or journal line does, as those reads change nothing."""
ARM_KILLS = [f"{side}-{call}" for call in ARM_CALLS for side in ("before", "after")]
NEW = name_of(SIZE)
STALE = DURATION_S + 60
"""The rerun's Lease clock this far ahead of the killed run's: its Lease has lapsed."""


@pytest.fixture
def cluster() -> Iterator[tuple[Recorded, KubeApiServer]]:
    arm = Recorded(lambda path: {"error": {"code": "NotFound", "message": f"{path} not found"}})
    with KubeApiServer() as kube:
        yield arm, kube
    arm.close()


def world(tmp_path: Path, arm: Recorded, kube: KubeApiServer, failed: list[str], bad: list[str]) -> AksPool:
    pool = AksPool(arm, kube)
    doc = {"url": arm.url, "kubeconfig": kube.kubeconfig(), "bad": bad, "pair_peer": NAMES[1]}
    (tmp_path / "world.json").write_text(json.dumps(doc), encoding="utf-8")
    nodes = [
        {"node": n, "verdict": "FAIL" if n in failed else "PASS", "reasons": [SLOW] if n in failed else []}
        for n in NAMES
    ]
    report = {"verdict": "FAIL", "local": False, "instance_type": None, "nodes": nodes, "measurements": []}
    (tmp_path / "report.json").write_text(json.dumps(report), encoding="utf-8")
    return pool


def run(run_dir: Path, mode: str, when: str, offset: float = 0.0) -> tuple[int, str]:
    """Heal in a process of its own, its Lease clock ``offset`` seconds ahead; (exit code, stdout)."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.heal._aks_crash_worker", str(run_dir), mode, when, str(offset)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 2, 3, 9), done.stderr[-3000:]
    return done.returncode, done.stdout


def heal(run_dir: Path, mode: str, when: str) -> int:
    return run(run_dir, mode, when)[0]


def killed_then_rerun(run_dir: Path, kube: KubeApiServer, mode: str, kill: str) -> int:
    """Killed at ``kill`` (holding the Lease), rerun once it is stale: the rerun says it took the
    Lease over from the killed pid (I9, tests/heal/_crash_common.py)."""
    code, _ = _killed_then_rerun(lambda d, w, o=0.0: run(d, mode, w, o), run_dir, kube, kill, STALE)
    return code


def in_service(pool: AksPool, name: str) -> bool:
    doc = pool.node(name)
    assert doc is not None, name
    spec = doc.get("spec") or {}
    return not spec.get("unschedulable") and not spec.get("taints")


def replaced(tmp_path: Path, arm: Recorded, pool: AksPool, kill: str, mode: str) -> list[Any]:
    """The invariants of a run that replaced BAD, asserted from ARM's and the API server's state."""
    entries, notes = read(tmp_path / JOURNAL)
    assert not notes and entries[-1].state is State.HEALTHY, [e.line() for e in entries]
    # I2: one deleteMachines, of the bad machine; no healthy machine deleted (I1)
    assert pool.deleted == [BAD] and len(arm.made("POST")) == 1
    assert arm.made("POST")[0]["body"] == {"machineNames": [BAD]}
    assert sum(1 for e in entries if e.state is State.REPLACING and e.event == "intent") == 1
    # I3: the count as it began, put back once
    assert pool.count == SIZE and len(arm.made("PUT")) == 1
    assert arm.made("PUT")[0]["body"]["properties"]["count"] == SIZE
    # the new machine is the one not in the list journalled before the call (every page of it)
    intent = next(e for e in entries if e.state is State.REPLACING and e.event == "intent")
    assert intent.extra["before"] == sorted(f"{VMSS}/{n}" for n in range(SIZE))
    assert any("encodedToken" in r["query"] for r in arm.made("GET"))
    assert sorted(pool.names()) == sorted([*NAMES[1:], NEW])
    assert entries[-1].node == NEW and entries[-1].instance == f"{VMSS}/{SIZE}"
    # I1: no healthy node ever cordoned or tainted; every node in service now, read back
    assert pool.ever_out == {BAD, NEW}
    assert all(in_service(pool, n) for n in [*NAMES[1:], NEW])
    # I6 as AKS holds it: the replacement was out of work (heal's cordon and taint) while revalidated
    reval = [c for c in checks_run(tmp_path) if c["node"] == NEW]
    assert reval and all(c["purpose"].endswith("revalidate") for c in reval)
    for c in reval:
        assert c["seen"]["unschedulable"] and any(t["key"] == HEAL_TAINT for t in c["seen"]["taints"])
    # I7: one node out of service at a time (the old node's object goes with its machine)
    assert pool.out_at_once == 1
    return entries


@pytest.mark.parametrize("kill", ["none", *ARM_KILLS, *(str(n) for n in range(1, RUN_LINES))])
def test_aks_killed_then_rerun_deletes_one_machine_and_restores_the_count(
    tmp_path: Path, cluster: tuple[Recorded, KubeApiServer], kill: str
) -> None:
    arm, kube = cluster
    pool = world(tmp_path, arm, kube, [BAD], [BAD])
    if kill == "none":
        assert heal(tmp_path, "replace", "count") == 0
        calls = json.loads((tmp_path / "arm_calls.json").read_text())
        acts = ["pool-1", "pool-2", "pool-3", "delete-1", "pool-4", "pool-5", "put-1", "pool-6"]
        assert len(calls) == 16 and [c for c in calls if c.startswith(("pool", "delete", "put"))] == acts, calls
        assert sorted(acts) == sorted(ARM_CALLS)
    else:
        assert killed_then_rerun(tmp_path, kube, "replace", kill) == 0
    entries = replaced(tmp_path, arm, pool, kill, "replace")
    if kill == "none":  # the kill points above cover every line of an uncut run
        assert len(entries) == RUN_LINES
        assert heal(tmp_path, "replace", "none") == 0
        assert len(read(tmp_path / JOURNAL)[0]) == RUN_LINES and len(arm.made("POST")) == 1


@pytest.mark.parametrize("kill", ["none", "1", "10"])  # the line before each look: SUSPECT, REVALIDATING
def test_aks_pair_failure_killed_then_rerun_blames_only_with_a_second_peer(
    tmp_path: Path, cluster: tuple[Recorded, KubeApiServer], kill: str
) -> None:
    """I8: every check with the first cleared peer FAILs for the pair's reason; the bad node is
    blamed by the second peer, and its replacement, failed with the first, passes with the second."""
    arm, kube = cluster
    pool = world(tmp_path, arm, kube, [BAD], [BAD])
    assert killed_then_rerun(tmp_path, kube, "pair", kill) == 0
    replaced(tmp_path, arm, pool, kill, "pair")
    checks = checks_run(tmp_path)
    confirm, reval = [c for c in checks if c["node"] == BAD], [c for c in checks if c["node"] == NEW]
    assert_blamed_only_with_second_peer(checks, NAMES[1], NAMES[2], confirm, reval)
    assert NAMES[1] not in pool.ever_out and in_service(pool, NAMES[1])


@pytest.mark.parametrize("kill", ["none", "1"])
def test_aks_flake_killed_then_rerun_is_cleared_and_left_in_service(
    tmp_path: Path, cluster: tuple[Recorded, KubeApiServer], kill: str
) -> None:
    """I4: the second look passes the node: it ends in service, read back, and nothing is asked of ARM."""
    arm, kube = cluster
    pool = world(tmp_path, arm, kube, [BAD], [])
    assert killed_then_rerun(tmp_path, kube, "flake", kill) == 0
    entries, _ = read(tmp_path / JOURNAL)
    assert entries[-1].state is State.HEALTHY and entries[-1].extra["outcome"] == "cleared"
    assert "in service (read back)" in entries[-1].detail
    assert not arm.made("POST") and not arm.made("PUT") and pool.count == SIZE
    assert pool.ever_out == set() and all(in_service(pool, n) for n in NAMES)
    assert [c["node"] for c in checks_run(tmp_path)][-1] == BAD


BUSY_LINES = 6
"""The first node: SUSPECT, CONFIRMED, its intent, RETRY (work on it); the second: SUSPECT, RETRY
(the budget full). Killed after each but the last (after the last, the rerun is the uncut run's
second run, which every case makes)."""


@pytest.mark.parametrize("kill", ["none", *(str(n) for n in range(1, BUSY_LINES))])
def test_aks_busy_node_killed_then_rerun_is_never_replaced_and_the_budget_holds(
    tmp_path: Path, cluster: tuple[Recorded, KubeApiServer], kill: str
) -> None:
    """I5 and I7: the bad node runs a pod its PodDisruptionBudget keeps; a second bad node waits for
    the budget of one node out of service. Killed at every line and rerun twice: no machine deleted,
    the pod still on its node, the second node never cordoned, never two nodes out at once."""
    arm, kube = cluster
    pool = world(tmp_path, arm, kube, [BAD, NAMES[1]], [BAD, NAMES[1]])
    st = kube.store
    put_kept_pod(st, BAD)
    assert killed_then_rerun(tmp_path, kube, "busy", kill) == 2
    assert heal(tmp_path, "busy", "none") == 2
    entries, _ = read(tmp_path / JOURNAL)
    if kill == "none":
        first = entries[:BUSY_LINES]
        assert [e.state for e in first][-1] is State.RETRY and len({e.incident for e in first}) == 2
    last = {e.node: e for e in entries}
    assert last[BAD].state is State.RETRY and "train-0" in last[BAD].detail
    assert last[NAMES[1]].state is State.RETRY and "fleet budget" in last[NAMES[1]].detail
    # I5: nothing deleted, nothing resized, the pod where it ran
    assert not arm.made("POST") and not arm.made("PUT") and pool.deleted == []
    pod = st.get(st.resource("pods"), "default", "train-0")
    assert pod["spec"]["nodeName"] == BAD
    # I7: one node out at a time; the second never checked, so never cordoned
    assert pool.ever_out == {BAD} and pool.out_at_once == 1
    assert all(c["node"] != NAMES[1] for c in checks_run(tmp_path))


@pytest.mark.parametrize("kill", ["5", "after-delete-1"])
def test_aks_rerun_while_the_killed_heal_lease_is_fresh_refuses_naming_it_then_takes_over(
    tmp_path: Path, cluster: tuple[Recorded, KubeApiServer], kill: str
) -> None:
    """I9 on AKS: ``gpu-cluster heal --apply`` takes the Lease on every Kubernetes stack
    (platforms.py ``build``), and heal killed holding it leaves it. A rerun while it has not lapsed
    refuses in one line naming the holder's host, pid and folder, writes no journal line, asks ARM
    nothing and writes nothing to the API server; once it has lapsed the next rerun takes over and
    finishes, one machine deleted."""
    arm, kube = cluster
    pool = world(tmp_path, arm, kube, [BAD], [BAD])
    assert heal(tmp_path, "replace", kill) == 9
    holder = lease_holder(kube)
    assert holder, "the killed heal held the Lease"
    lines, asked = len(read(tmp_path / JOURNAL)[0]), len(arm.requests)
    writes = [r for r in kube.requests if r[0] != "GET"]
    code, out = run(tmp_path, "replace", "none", DURATION_S / 2)
    host, pid, folder = (part.split("=", 1)[1] for part in holder.split(" ", 2))
    assert code == 3 and "another gpu-cluster heal holds this cluster (Lease kube-system/gpu-cluster-heal)" in out
    assert f"host {host}, pid {pid}, folder {folder}, since" in out, out
    assert len(read(tmp_path / JOURNAL)[0]) == lines and lease_holder(kube) == holder
    assert len(arm.requests) == asked, arm.requests[asked:]
    after = [r for r in kube.requests if r[0] != "GET"]
    assert after == writes, after[len(writes) :]
    code, out = run(tmp_path, "replace", "none", STALE)
    assert code == 0 and f"pid {pid}," in out and "took over" in out
    replaced(tmp_path, arm, pool, kill, "replace")
