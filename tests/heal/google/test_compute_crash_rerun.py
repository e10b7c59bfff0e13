"""GKE's managed instance group recreate and Cluster Director's faulty-host report: heal killed at
every journal line and on both sides of the call that acts (``recreateInstances``,
``reportHostAsFaulty``), in a process of its own that dies hard, then run again against a Compute
Engine stand-in in the reference's shapes (tests/heal/google/compute_world.py). Asserted after the
rerun (issue 41): the server carried out one recreate (one report) for the incident, every ask
carrying the same requestId, which is what makes the rerun's second ask harmless (I2); the group's
target size as it began, and no call that resizes (I3); the replacement the one the group's
per-instance status says it made (``currentAction`` back to NONE with a new ``id``), or the VM on
a new host; no healthy node ever cordoned, tainted or drained, its VM untouched (I1).

And, each in a scenario of its own killed at its lines and rerun (the check's scenarios,
tests/heal/crash_checks.py), from the stand-ins' state: a node the second look clears ends in
service, read back, nothing asked of Compute Engine (I4); a node whose pod a PodDisruptionBudget
keeps (GKE) or whose Slurm job runs (Cluster Director) is never replaced, and a second FAILed node
waits for the budget of one node out of service, never drained or cordoned (I5, I7); on GKE the
recreated node registers with the pool's ``gpu-cluster.io/unvalidated`` taint (GKE puts a pool's
taints on every node it adds, "Control scheduling with node taints",
cloud.google.com/kubernetes-engine/docs/how-to/node-taints, read 2026-12-07), keeps it through its
revalidation and loses it only with heal's own marks, in the release after the check passed (I6);
a check failed with the first cleared peer for the pair's reason blames the node, and passes its
replacement, only with a second, different peer (I8); never more nodes out of service at once
than one (I7). GKE's report-and-replace label, killed at every line and on both sides of the patch
that sets it: one report for the incident, and after the revalidation the fault-behavior, status
and operation labels gone, read back from the API server; a second incident on the same node, an
old status left on it and heal killed after its label, reports anew and ends with the labels gone
(I10). On GKE (recreate and label) heal killed anywhere holds the cluster's Lease
(``kube-system/gpu-cluster-heal`` on the test API server, as ``gpu-cluster heal --apply`` takes it
on every Kubernetes stack), every rerun takes it over only as stale, naming the killed pid, and a
rerun while it is fresh refuses, naming host, pid and folder, and touches nothing (I9; the Lease's
clock injected, never slept on). Cluster Director's lock is Slurm's held job (``sbatch --hold``,
``squeue``), which the Slurm kept in a file here cannot play: tested on the real Slurm only
(tests/slurm/test_heal_lock.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.components.contract import UNVALIDATED_TAINT_EFFECT, UNVALIDATED_TAINT_KEY, UNVALIDATED_TAINT_VALUE
from gpu_cluster.heal.engine import request_uuid
from gpu_cluster.heal.journal import JOURNAL, read
from gpu_cluster.heal.states import State
from tests.heal.google.compute_world import BAD, IGM, NAMES, Compute
from tests.heal.google.test_gcp import COMPUTE, error
from tests.heal.google.test_gke_report_e2e import XID, Gke, k8s_node, node_doc, report, report_labels
from gpu_cluster.heal.gcp import OPERATION_LABEL, STATUS_LABEL
from gpu_cluster.heal.kubernetes import TAINT_KEY
from gpu_cluster.heal.lock import DURATION_S
from tests.heal._crash_common import killed_then_rerun as _killed_then_rerun
from tests.heal._crash_common import lease_holder
from tests.heal.crash_checks import assert_blamed_only_with_second_peer, checks_run, put_kept_pod
from tests.heal.recorded import Recorded
from tests.heal.vmss_world import SlurmFile, write_report
from tests.kubeapi import KubeApiServer, Store

REPO = Path(__file__).resolve().parents[3]
RUN_LINES = 10
"""SUSPECT, CONFIRMED and its intent, QUARANTINED, REPLACING intent and done, JOINING, REVALIDATING
and passed, HEALTHY."""
KILLS = ["none", "before-call", "after-call", *(str(n) for n in range(1, RUN_LINES))]
STALE = DURATION_S + 60
"""The rerun's Lease clock this far ahead of the killed run's: its Lease has lapsed."""


@pytest.fixture
def compute() -> Iterator[Compute]:
    s = Recorded(lambda path: error(404, "NOT_FOUND", f"The resource '{path}' was not found"))
    yield Compute(s)
    s.close()


def run(run_dir: Path, mode: str, when: str, scenario: str = "replace", offset: float = 0.0) -> tuple[int, str]:
    """Heal in a process of its own, its Lease clock ``offset`` seconds ahead; (exit code, stdout)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.heal.google._compute_crash_worker",
            str(run_dir),
            mode,
            when,
            scenario,
            str(offset),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 2, 3, 9), done.stderr[-3000:]
    return done.returncode, done.stdout


def heal(run_dir: Path, mode: str, when: str, scenario: str = "replace") -> int:
    return run(run_dir, mode, when, scenario)[0]


def rerun(run_dir: Path, server: KubeApiServer, mode: str, kill: str, scenario: str = "replace") -> int:
    """Killed at ``kill``, then run again: on GKE the killed heal holds the cluster's Lease and the
    rerun, once it is stale, says it took it over from the killed pid (I9,
    tests/heal/_crash_common.py); Cluster Director takes no Lease (its Slurm lock is not played here)."""
    if mode == "report":
        if kill != "none":
            assert heal(run_dir, mode, kill, scenario) == 9
        return heal(run_dir, mode, "none", scenario)
    code, _ = _killed_then_rerun(lambda d, w, o=0.0: run(d, mode, w, scenario, o), run_dir, server, kill, STALE)
    return code


class GkeNodes:
    """The GKE nodes on the test API server, every write to them watched: which nodes were ever out
    of service (cordoned or tainted by heal), the most at one time, and each node's marks after every
    write (cordon, heal's taint, the pool's registration taint). A VM the group recreates registers
    its node again with the pool's taints, as GKE does."""

    def __init__(self, server: KubeApiServer) -> None:
        self.st = server.store
        self.nodes = self.st.resource("nodes")
        self.ever_out: set[str] = set()
        self.out_at_once = 0
        self.marks: dict[str, list[tuple[bool, bool, bool]]] = {}
        for n in NAMES:
            self.st.create(self.nodes, "", k8s_node(n))
        self.st.on("nodes", self._watch)

    def _watch(self, store: Store, _type: str, obj: dict[str, Any]) -> None:
        out = set()
        for doc in store.list(self.nodes, None):
            spec, name = doc.get("spec") or {}, doc["metadata"]["name"]
            keys = {t.get("key") for t in spec.get("taints") or []}
            mark = (bool(spec.get("unschedulable")), TAINT_KEY in keys, UNVALIDATED_TAINT_KEY in keys)
            if name == obj["metadata"]["name"]:
                self.marks.setdefault(name, []).append(mark)
            if mark[0] or mark[1]:
                out.add(name)
        self.ever_out |= out
        self.out_at_once = max(self.out_at_once, len(out))

    def registered(self, name: str) -> None:
        doc = self.st.get(self.nodes, "", name)
        taint = {"key": UNVALIDATED_TAINT_KEY, "value": UNVALIDATED_TAINT_VALUE, "effect": UNVALIDATED_TAINT_EFFECT}
        doc.setdefault("spec", {})["taints"] = [*(doc["spec"].get("taints") or []), taint]
        self.st.put(self.nodes, "", doc)

    def in_service(self, name: str) -> bool:
        spec = self.st.get(self.nodes, "", name).get("spec") or {}
        return not spec.get("unschedulable") and not spec.get("taints")


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
        nodes = GkeNodes(server)
        compute.on_running = nodes.registered
        compute.write(tmp_path, kubeconfig=server.kubeconfig())
        report(tmp_path / "report.json", "health.matmul: straggler (0.61 of the median)")
        assert rerun(tmp_path, server, "mig", kill) == 0
        entries = recreated(tmp_path, compute, nodes, old)
        one_request(compute, f"{IGM}/recreateInstances", entries, kill)
        if kill == "none":  # the kill points above cover every line of an uncut run
            assert len(entries) == RUN_LINES
            assert heal(tmp_path, "mig", "none") == 0
            assert len(read(tmp_path / JOURNAL)[0]) == RUN_LINES and len(compute.done) == 1


def recreated(tmp_path: Path, compute: Compute, nodes: GkeNodes, old: dict[str, dict[str, str]]) -> list[Any]:
    """The invariants of a GKE run that recreated BAD's VM, from the stand-ins' state."""
    entries, notes = read(tmp_path / JOURNAL)
    assert not notes and entries[-1].state is State.HEALTHY, [e.line() for e in entries]
    # I2: one recreate carried out, however often it was asked, all with one requestId
    assert compute.done == [("compute.instanceGroupManagers.recreateInstances", BAD)]
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
    # I1: no healthy node ever cordoned or tainted, its VM untouched; every node in service now
    assert nodes.ever_out == {BAD} and all(nodes.in_service(n) for n in NAMES)
    assert all(compute.vms[n] == old[n] for n in NAMES[1:])
    # I6: registered with the pool's taint, kept through the revalidation, lifted only with heal's
    # own marks (one patch), after a revalidation that passed and saw it
    marks = nodes.marks[BAD]
    first = next(k for k, m in enumerate(marks) if m[2])
    lifted = next(k for k in range(first, len(marks)) if not marks[k][2])
    assert all(m[1] for m in marks[first:lifted]) and marks[lifted] == (False, False, False)
    reval = [c for c in checks_run(tmp_path) if c["node"] == BAD and c["purpose"].endswith("revalidate")]
    assert reval and reval[-1]["passed"]
    assert all(any(t["key"] == UNVALIDATED_TAINT_KEY for t in c["seen"]) for c in reval)
    # I7: one node out of service at a time
    assert nodes.out_at_once == 1
    return entries


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
    assert doc["out_at_once"] == 1  # I7
    if kill == "none":
        assert len(entries) == RUN_LINES
        assert heal(tmp_path, "report", "none") == 0
        assert len(read(tmp_path / JOURNAL)[0]) == RUN_LINES and len(compute.done) == 1


def slurm_world(tmp_path: Path, compute: Compute, scenario: str) -> SlurmFile:
    jobs = {BAD: ["4242"]} if scenario == "busy" else {}
    slurm = SlurmFile.create(tmp_path, NAMES, max_nodes=3, jobs=jobs)
    failed = [BAD, NAMES[1]] if scenario == "busy" else [BAD]
    compute.write(tmp_path, pair_peer=NAMES[1], also_bad=failed[1:])
    write_report(tmp_path, NAMES, BAD)
    if scenario == "busy":  # the report FAILs the second node too
        doc = json.loads((tmp_path / "report.json").read_text())
        doc["nodes"][1] = {**doc["nodes"][0], "node": NAMES[1]}
        (tmp_path / "report.json").write_text(json.dumps(doc))
    return slurm


def gke_world(tmp_path: Path, compute: Compute, server: KubeApiServer, scenario: str) -> GkeNodes:
    nodes = GkeNodes(server)
    compute.on_running = nodes.registered
    failed = [BAD, NAMES[1]] if scenario == "busy" else [BAD]
    compute.write(tmp_path, kubeconfig=server.kubeconfig(), pair_peer=NAMES[1], also_bad=failed[1:])
    report(tmp_path / "report.json", "health.matmul: straggler (0.61 of the median)")
    if scenario == "busy":
        doc = json.loads((tmp_path / "report.json").read_text())
        doc["nodes"][1] = {**doc["nodes"][0], "node": NAMES[1]}
        (tmp_path / "report.json").write_text(json.dumps(doc))
        put_kept_pod(server.store, BAD)
    return nodes


@pytest.mark.parametrize("kill", ["none", "1"])
@pytest.mark.parametrize("mode", ["mig", "report"])
def test_flake_killed_then_rerun_is_cleared_and_left_in_service(
    tmp_path: Path, compute: Compute, mode: str, kill: str
) -> None:
    """I4: every check passes the node the report FAILed: HEALTHY, in service read back, no call."""
    with KubeApiServer() as server:
        nodes = gke_world(tmp_path, compute, server, "flake") if mode == "mig" else None
        slurm = slurm_world(tmp_path, compute, "flake") if mode == "report" else None
        assert rerun(tmp_path, server, mode, kill, "flake") == 0
        entries, _ = read(tmp_path / JOURNAL)
        assert entries[-1].state is State.HEALTHY and entries[-1].extra["outcome"] == "cleared"
        assert "in service (read back)" in entries[-1].detail
        assert compute.done == [] and checks_run(tmp_path)[-1]["node"] == BAD
        if nodes is not None:
            assert nodes.ever_out == set() and all(nodes.in_service(n) for n in NAMES)
        if slurm is not None:
            doc = slurm.load()
            assert doc["drained"] == [] and all(doc["nodes"][n]["reason"] == "" for n in NAMES)


PAIR_KILLS = ["none", "1", "8"]
"""Uncut, and after the line before each look that meets the first peer's pair failure: SUSPECT
(the second look runs again), REVALIDATING (the revalidation runs again)."""


@pytest.mark.parametrize("kill", PAIR_KILLS)
@pytest.mark.parametrize("mode", ["mig", "report"])
def test_pair_failure_killed_then_rerun_blames_only_with_a_second_peer(
    tmp_path: Path, compute: Compute, mode: str, kill: str
) -> None:
    """I8: every check with the first cleared peer FAILs for the pair's reason; the node is blamed
    by the second peer, and its replacement, failed with the first, passes with the second."""
    old = {n: dict(vm) for n, vm in compute.vms.items()}
    with KubeApiServer() as server:
        nodes = gke_world(tmp_path, compute, server, "pair") if mode == "mig" else None
        slurm = slurm_world(tmp_path, compute, "pair") if mode == "report" else None
        assert rerun(tmp_path, server, mode, kill, "pair") == 0
        if nodes is not None:
            recreated(tmp_path, compute, nodes, old)
            assert NAMES[1] not in nodes.ever_out
        if slurm is not None:
            assert compute.done == [("compute.instances.reportHostAsFaulty", BAD)]
            doc = slurm.load()
            assert set(doc["drained"]) == {BAD} and doc["out_at_once"] == 1
        checks = checks_run(tmp_path)
        confirm = [c for c in checks if not c["purpose"].endswith("revalidate")]
        reval = [c for c in checks if c["purpose"].endswith("revalidate")]
        assert_blamed_only_with_second_peer(checks, NAMES[1], NAMES[2], confirm, reval)


BUSY_LINES = 6
"""The first node: SUSPECT, CONFIRMED, its intent, RETRY (work on it); the second: SUSPECT, RETRY
(the budget full). Killed after the quarantine's intent, after the first node's RETRY and after the
second's SUSPECT: a kill after SUSPECT or CONFIRMED is the flake's and the pair's (above), and after
the last line the rerun is the uncut run's second run, which every case makes. (Compute Engine's
client makes each heal here take seconds to start; the AKS and Azure Slurm suites kill at every line.)"""


@pytest.mark.parametrize("kill", ["none", "3", "4", "5"])
@pytest.mark.parametrize("mode", ["mig", "report"])
def test_busy_node_killed_then_rerun_is_never_replaced_and_the_budget_holds(
    tmp_path: Path, compute: Compute, mode: str, kill: str
) -> None:
    """I5 and I7: work stays on the bad node (a pod its PodDisruptionBudget keeps, a Slurm job); a
    second FAILed node waits for the budget of one node out of service. Killed at every line and
    rerun twice: nothing asked of Compute Engine, the work where it ran, the second node never
    cordoned or drained, never two nodes out at once."""
    old = {n: dict(vm) for n, vm in compute.vms.items()}
    with KubeApiServer() as server:
        nodes = gke_world(tmp_path, compute, server, "busy") if mode == "mig" else None
        slurm = slurm_world(tmp_path, compute, "busy") if mode == "report" else None
        assert rerun(tmp_path, server, mode, kill, "busy") == 2
        assert heal(tmp_path, mode, "none", "busy") == 2
        entries, _ = read(tmp_path / JOURNAL)
        last = {e.node: e for e in entries}
        assert last[BAD].state is State.RETRY and last[NAMES[1]].state is State.RETRY
        assert "fleet budget" in last[NAMES[1]].detail
        assert compute.done == [] and compute.vms == old
        assert all(c["node"] != NAMES[1] for c in checks_run(tmp_path))
        if nodes is not None:
            assert "train-0" in last[BAD].detail
            pod = server.store.get(server.store.resource("pods"), "default", "train-0")
            assert pod["spec"]["nodeName"] == BAD
            assert nodes.ever_out == {BAD} and nodes.out_at_once == 1
        if slurm is not None:
            assert "4242" in last[BAD].detail
            doc = slurm.load()
            assert doc["nodes"][BAD]["jobs"] == ["4242"] and doc["nodes"][BAD]["reason"]
            assert set(doc["drained"]) == {BAD} and doc["out_at_once"] == 1


@pytest.mark.parametrize("kill", KILLS)
def test_gke_report_label_killed_then_rerun_reports_once_and_the_labels_go(tmp_path: Path, kill: str) -> None:
    """I10, on GKE's report-and-replace path (the test plays GKE as test_gke_report_e2e.py does)."""
    compute = Recorded(lambda path: error(404, "NOT_FOUND", f"The resource '{path}' was not found"))
    try:
        with KubeApiServer() as server:
            nodes = GkeNodes(server)
            gke = Gke(server, compute)
            gke.vm()

            def world() -> None:  # the check fails the node on the host it is on now
                doc = {"url": compute.url, "kubeconfig": server.kubeconfig(), "bad": {"host": gke.host}}
                (tmp_path / "world.json").write_text(json.dumps(doc), encoding="utf-8")

            world()
            report(tmp_path / "report.json", XID)
            assert rerun(tmp_path, server, "label", kill) == 0
            entries, notes = read(tmp_path / JOURNAL)
            assert not notes and entries[-1].state is State.HEALTHY, [e.line() for e in entries]
            assert gke.reports == 1 and gke.host != "/a1/b0/c0"
            assert report_labels(server) == {} and "removed (read back)" in entries[-1].detail
            assert nodes.ever_out == {BAD} and all(nodes.in_service(n) for n in NAMES)
            assert nodes.out_at_once == 1
            if kill != "none":
                return
            assert len(entries) == RUN_LINES  # the kill points above cover every line of an uncut run
            # a second incident on the same node, an old status left on it, heal killed after its label
            node = node_doc(server)
            node["metadata"]["labels"].update({STATUS_LABEL: "OperationDone", OPERATION_LABEL: "operation-old"})
            server.store.put(server.store.resource("nodes"), "", node)
            world()
            report(tmp_path / "report.json", XID + " again")
            assert heal(tmp_path, "label", "after-call") == 9
            assert gke.reports == 2  # the label landed and GKE reported; the rerun must not label again
            code, out = run(tmp_path, "label", "none", offset=STALE)
            assert code == 0 and "took over" in out, out
            entries, _ = read(tmp_path / JOURNAL)
            assert len({e.incident for e in entries}) == 2 and entries[-1].state is State.HEALTHY
            assert gke.reports == 2 and report_labels(server) == {}
            assert all(nodes.in_service(n) for n in NAMES) and nodes.ever_out == {BAD}
    finally:
        compute.close()


@pytest.mark.parametrize("kill", ["5", "after-call"])
def test_gke_rerun_while_the_killed_heal_lease_is_fresh_refuses_naming_it_then_takes_over(
    tmp_path: Path, compute: Compute, kill: str
) -> None:
    """I9 on GKE: heal killed holding the Lease; a rerun while it has not lapsed refuses in one line
    naming the holder's host, pid and folder, writes no journal line, asks Compute Engine nothing
    and writes nothing to the API server; once it has lapsed the next rerun takes over and
    finishes, one recreate carried out."""
    old = {n: dict(vm) for n, vm in compute.vms.items()}
    with KubeApiServer() as server:
        nodes = GkeNodes(server)
        compute.on_running = nodes.registered
        compute.write(tmp_path, kubeconfig=server.kubeconfig())
        report(tmp_path / "report.json", "health.matmul: straggler (0.61 of the median)")
        assert heal(tmp_path, "mig", kill) == 9
        holder = lease_holder(server)
        assert holder, "the killed heal held the Lease"
        lines, asked = len(read(tmp_path / JOURNAL)[0]), len(compute.s.requests)
        writes = [r for r in server.requests if r[0] != "GET"]
        code, out = run(tmp_path, "mig", "none", offset=DURATION_S / 2)
        host, pid, folder = (part.split("=", 1)[1] for part in holder.split(" ", 2))
        assert code == 3 and "another gpu-cluster heal holds this cluster (Lease kube-system/gpu-cluster-heal)" in out
        assert f"host {host}, pid {pid}, folder {folder}, since" in out, out
        assert len(read(tmp_path / JOURNAL)[0]) == lines and lease_holder(server) == holder
        assert len(compute.s.requests) == asked, compute.s.requests[asked:]
        after = [r for r in server.requests if r[0] != "GET"]
        assert after == writes, after[len(writes) :]
        code, out = run(tmp_path, "mig", "none", offset=STALE)
        assert code == 0 and f"pid {pid}," in out and "took over" in out
        recreated(tmp_path, compute, nodes, old)
