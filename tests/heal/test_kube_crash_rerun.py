"""Kubernetes without a cloud API: heal's Kubernetes half (gpu_cluster/heal/kubernetes.py) against
the test's Kubernetes API server, the machines the rehearsal's file-backed cluster
(tests/heal/_kube_crash_worker.py). Heal is killed at every journal line and on both sides of every
Kubernetes write (the bad node's cordon and taint, its pod's eviction, the re-registered node's
hold, its return to service) and around its GETs, in a process of its own that dies hard holding the
cluster's Lease, then run again once the Lease is stale. Asserted after the rerun (issue 41), from
the server's objects and the writes it recorded and the machines' file:

- I1: no other node written, cordoned or tainted, no pod on one evicted;
- I2: one replacement of the bad machine, one REPLACING intent;
- I6: the node re-registered with ``gpu-cluster.io/unvalidated`` and carried it in every state the
  server recorded until the write that returned it, made once the revalidation's ``passed`` line
  was on disk;
- I7: never more nodes under heal's taint than the budget;
- I8: every check with the first cleared peer FAILs for the pair's figure, so the node is blamed,
  and passed on its new machine, only on a check with a second, different cleared peer;
- I9: the rerun took the killed heal's Lease over only as stale, naming its pid.

And a flake the second look clears (I4), killed at its first line and around its reads: HEALTHY,
the node in service read back, never written, no machine replaced. (No pool here, so no I3.)"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.components.contract import UNVALIDATED_TAINT_KEY
from gpu_cluster.heal import local
from gpu_cluster.heal.journal import JOURNAL, read
from gpu_cluster.heal.kubernetes import TAINT_KEY
from gpu_cluster.heal.lock import DURATION_S
from gpu_cluster.heal.policy import Limits
from gpu_cluster.heal.states import State
from tests.heal._crash_common import KILLED, killed_then_rerun, record_nodes
from tests.heal.crash_checks import checks_run
from tests.heal._kube_crash_worker import NODES, node
from tests.heal.world import write_report
from tests.kubeapi import KubeApiServer

REPO = Path(__file__).resolve().parents[2]
RUN_LINES = 10
STALE = DURATION_S + 60
BAD = "local-3"
FIRST, SECOND = "local-1", "local-2"
"""The cleared peers heal pairs with, in the report's order: every check with the first FAILs for the
pair's figure (I8)."""
WRITES = [
    f"{side}:{call}"
    for call in ("patch_node#1", "create_namespaced_pod_eviction", "patch_node#2", "patch_node#3")
    for side in ("before", "after")
]
READS = ["after:read_node#3", "before:read_node#9", "after:list_node", "before:list_pod_for_all_namespaces#2"]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Four nodes on their machines, a pod on each; every node state the server is written in recorded."""
    with KubeApiServer() as server:
        st = server.store
        for i in range(NODES):
            st.create(st.resource("nodes"), "", node(f"local-{i + 1}", f"local-{i + 1}.i0", []))
        st.create(st.resource("namespaces"), "", {"metadata": {"name": "jobs"}})
        for i in range(NODES):
            st.create(
                st.resource("pods"),
                "jobs",
                {
                    "metadata": {"name": f"work-{i + 1}"},
                    "spec": {"nodeName": f"local-{i + 1}", "containers": [{"name": "m"}]},
                },
            )
        history: list[dict[str, Any]] = []
        record_nodes(st, tmp_path / JOURNAL, TAINT_KEY, history)
        (tmp_path / "kubeconfig").write_text(server.kubeconfig())
        write_report(tmp_path, NODES)

        def world(faults: dict[str, list[str]], pair_peer: str = "") -> None:
            doc = {"api": server.url, "faults": faults, "pair_peer": pair_peer}
            (tmp_path / "world.json").write_text(json.dumps(doc))

        yield {"server": server, "history": history, "world": world}


def heal(run_dir: Path, when: str, offset: float = 0.0) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.heal._kube_crash_worker", str(run_dir), when, str(offset)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 2, 3, KILLED), done.stderr[-3000:]
    return done.returncode, done.stdout


def machines(run_dir: Path) -> dict[str, Any]:
    return dict(json.loads((run_dir / local.WORLD).read_text(encoding="utf-8")))


@pytest.mark.parametrize("kill", ["none", *WRITES, *READS, *(str(n) for n in range(1, RUN_LINES))])
def test_kube_killed_then_rerun_replaces_once_and_holds_the_new_node_until_it_passes(
    tmp_path: Path, cluster: dict[str, Any], kill: str
) -> None:
    server, history = cluster["server"], cluster["history"]
    st = server.store
    cluster["world"]({BAD: ["slow"]}, pair_peer=FIRST)
    code, _ = killed_then_rerun(heal, tmp_path, server, kill, STALE)
    entries, notes = read(tmp_path / JOURNAL)
    assert code == 0 and not notes and entries[-1].state is State.HEALTHY, [e.line() for e in entries]
    # I2: one replacement of the bad machine
    reps = list(machines(tmp_path)["replacements"].values())
    assert [(r["node"], r["old"], r["new"]) for r in reps] == [(BAD, f"{BAD}.i0", f"{BAD}.i1")]
    assert sum(1 for e in entries if e.state is State.REPLACING and e.event == "intent") == 1
    assert entries[-1].node == BAD and entries[-1].instance == f"{BAD}.i1"
    # I1: no other node ever written, its pod still on it
    assert {h["node"] for h in history} == {BAD}
    for i in range(NODES):
        name = f"local-{i + 1}"
        if name != BAD:
            assert st.get(st.resource("pods"), "jobs", f"work-{i + 1}")["spec"]["nodeName"] == name
    # the bad node's pod was evicted through the Eviction API
    assert not st.list(st.resource("pods"), "jobs", fields=f"spec.nodeName={BAD}")
    # I6: registered out of work on its new machine, and out of it until the one write that returned
    # it, made after the revalidation's passed line was on disk
    fresh = [h for h in history if h["event"] == "ADDED"]
    assert len(fresh) == 1 and fresh[0]["keys"] == {UNVALIDATED_TAINT_KEY}, history
    mine = history[history.index(fresh[0]) :]
    assert all(UNVALIDATED_TAINT_KEY in h["keys"] and not h["passed"] for h in mine[:-1]), mine
    assert not mine[-1]["keys"] and not mine[-1]["cordoned"] and mine[-1]["passed"], mine
    now = st.get(st.resource("nodes"), "", BAD)
    assert not now["spec"].get("unschedulable") and not now["spec"].get("taints")
    assert now["spec"]["providerID"] == f"local:///{BAD}.i1"
    # I7
    assert max(h["held"] for h in history) <= Limits().max_out
    # I8: every check with the first cleared peer FAILed for the pair's figure, never the node's own;
    # the node blamed on its old machine, and passed on its new one, only with the second peer; the
    # first peer never written (I1 above: no node but BAD)
    ran = checks_run(tmp_path)
    assert all(not c["passed"] and not c["own"] for c in ran if c["peer"] == FIRST), ran
    confirm = [c for c in ran if not c["purpose"].endswith("revalidate")]
    assert [(c["peer"], c["passed"], c["own"]) for c in confirm[-2:]] == [(FIRST, False, False), (SECOND, False, True)]
    reval = [c for c in ran if c["purpose"].endswith("revalidate")]
    assert [(c["peer"], c["passed"]) for c in reval[-2:]] == [(FIRST, False), (SECOND, True)], ran
    if kill == "none":  # the kill points above cover every line of an uncut run
        assert len(entries) == RUN_LINES
        assert heal(tmp_path, "none")[0] == 0 and len(read(tmp_path / JOURNAL)[0]) == RUN_LINES


@pytest.mark.parametrize("kill", ["none", "1", "after:read_node#1", "before:read_node#2"])
def test_kube_flake_killed_then_rerun_is_cleared_and_in_service(
    tmp_path: Path, cluster: dict[str, Any], kill: str
) -> None:
    """I4: no machine is faulty, the second look passes the node: killed at its first line or
    around its reads, the rerun ends HEALTHY, cleared, and the node read back from the API is in
    service, uncordoned and untainted, never written; no machine replaced."""
    server = cluster["server"]
    st = server.store
    cluster["world"]({})
    code, _ = killed_then_rerun(heal, tmp_path, server, kill, STALE)
    entries, _ = read(tmp_path / JOURNAL)
    assert code == 0 and [e.state for e in entries] == [State.SUSPECT, State.HEALTHY], [e.line() for e in entries]
    assert entries[-1].extra.get("outcome") == "cleared" and "in service (read back)" in entries[-1].detail
    got = st.get(st.resource("nodes"), "", BAD)
    assert not got["spec"].get("unschedulable") and not got["spec"].get("taints")
    assert cluster["history"] == [] and machines(tmp_path)["replacements"] == {}
    assert [r for r in server.requests if r[0] in ("PATCH", "DELETE") or "eviction" in r[1]] == []
