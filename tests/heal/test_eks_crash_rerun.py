"""EKS: heal killed at every journal line and on both sides of every call it makes that acts
(TerminateInstanceInAutoScalingGroup; the Kubernetes cordon and taint, eviction, the replacement's
hold, the return to service) and around its reads (DescribeAutoScalingGroups,
DescribeAutoScalingInstances, DescribeScalingActivities, DescribeInstances, the Kubernetes GETs),
in a process of its own that dies hard holding the cluster's Lease; then run again once the Lease
is stale. The cloud is moto's server and the cluster the test's Kubernetes API server, both in the
test process (they outlive the killed heal, as a cloud does). Asserted after the rerun (issue 41),
each read from the stand-ins (moto's state, the API server's objects and the writes it recorded),
never from heal's journal alone:

- I1: no node of a healthy member was cordoned or tainted, no pod on one evicted, no healthy
  member terminated;
- I2: exactly one termination reached the cloud, of the bad instance, and one REPLACING intent;
- I3: the group's desired capacity is what it began at;
- I6: the replacement registered with ``gpu-cluster.io/unvalidated`` and carried it in every
  state the server recorded until the write that returned it, made only once the revalidation's
  ``passed`` line was on disk;
- I7: no recorded state of the cluster had more nodes under heal's taint than the budget;
- I8: every check with the first cleared peer FAILs for the pair's figure (the test's JobSet
  controller writes its judge's report so), so the old node is blamed, and its replacement passed,
  only on a check with a second, different cleared peer, and the first peer is never written;
- I9: the rerun took the killed heal's Lease over only as stale, naming it; a rerun while it is
  fresh refuses, naming the holder, and touches nothing;
- the replacement heal names and revalidates is the instance the group launched for this
  termination, never another member (severity 1, shape 4).

And two cases of their own, killed at each of their lines and calls: a flake the second look
clears (I4: the node ends in service, read back, no write ever made to it, nothing terminated), and
a node whose pod a PodDisruptionBudget keeps (I5: rerun past ``--evict-timeout``, never
terminated, the pod still there, the node out of new work)."""

from __future__ import annotations

import dataclasses
import json
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.components.contract import UNVALIDATED_TAINT_KEY
from gpu_cluster.heal.journal import JOURNAL, read
from gpu_cluster.heal.kubernetes import TAINT_KEY
from gpu_cluster.heal.lock import DURATION_S
from gpu_cluster.heal.policy import Limits
from gpu_cluster.heal.states import State
from tests.heal._crash_common import KILLED, lease_holder, read_log, record_nodes
from tests.heal._crash_common import killed_then_rerun as _killed_then_rerun
from tests.heal.test_aws import aws, node_group  # noqa: F401 (fixtures)
from tests.preflight.test_aws import aws_env, moto_url  # noqa: F401 (fixtures)
from tests.heal.test_eks_e2e import IMAGE, k8s_node, play_jobsets, report
from tests.heal.world import SLOW
from tests.kubeapi import KubeApiServer
from tests.launch.test_render_stacks import outputs

REPO = Path(__file__).resolve().parents[2]
RUN_LINES = 10
"""SUSPECT, CONFIRMED and its intent, QUARANTINED, REPLACING intent and done, JOINING, REVALIDATING
and passed, HEALTHY."""
STALE = DURATION_S + 60
"""The rerun's clock this far ahead of the killed run's: its Lease has lapsed."""
TERMINATE = "terminate_instance_in_auto_scaling_group"
ACTS = [
    f"{side}:{call}"
    for call in (TERMINATE, "patch_node#1", "create_namespaced_pod_eviction", "patch_node#2", "patch_node#3")
    for side in ("before", "after")
]
"""The cloud's call and every Kubernetes write of a replacement: the bad node's cordon and taint
(patch 1), its pod's eviction, the replacement's hold (patch 2) and its return to service (patch 3)."""
READS = [
    "after:describe_auto_scaling_instances#3",
    "before:describe_auto_scaling_groups#4",
    "after:describe_scaling_activities#2",
    "before:describe_instances#3",
    "after:read_node#4",
    "after:list_pod_for_all_namespaces#2",
]
"""Each kind of read but the node list, at a call spread over the run (an uncut run makes 15
read_node, 6 DescribeAutoScalingGroups, 5 DescribeAutoScalingInstances, 4 DescribeInstances, 4 pod
lists, 2 DescribeScalingActivities, 2 node lists); fewer than every call, for the suite's time (each
kill point is a process of its own)."""


@pytest.fixture
def cluster(tmp_path: Path, aws: tuple[Any, Any]) -> Iterator[dict[str, Any]]:  # noqa: F811
    """Three members of a managed node group, their nodes, a pod on each, the bad one first; every
    state of a node the server is written in recorded, with whether heal's journal held the
    revalidation's ``passed`` line at that moment."""
    ec2, asg = aws
    group, ids = node_group(ec2, asg, size=3)
    names = {i: f"ip-10-0-1-{n + 5}.ec2.internal" for n, i in enumerate(ids)}
    with KubeApiServer() as server:
        st = server.store
        for i, n in names.items():
            st.create(st.resource("nodes"), "", k8s_node(n, i))
        st.create(st.resource("namespaces"), "", {"metadata": {"name": "gpu-jobs"}})
        for n in names.values():
            st.create(
                st.resource("pods"),
                "gpu-jobs",
                {
                    "metadata": {"name": f"trainer-{n[:13]}", "labels": {"app": f"trainer-{n[:13]}"}},
                    "spec": {"nodeName": n, "containers": [{"name": "m"}]},
                },
            )
        jobs: list[tuple[str, list[str]]] = []
        checks: list[dict[str, Any]] = []
        history: list[dict[str, Any]] = []
        record_nodes(st, tmp_path / JOURNAL, TAINT_KEY, history)
        outs = outputs("aws-h100-eks")
        outs = dataclasses.replace(outs, access=dataclasses.replace(outs.access, kubeconfig=server.kubeconfig()))
        (tmp_path / "outputs.pickle").write_bytes(pickle.dumps(outs))

        def world(bad_instance: str, pair: bool = False, **limits: Any) -> None:
            """``pair``: every check with the first cleared peer FAILs for the pair's figure (I8)."""
            play_jobsets(st, tmp_path, bad_instance, jobs, pair_peer=names[ids[1]] if pair else "", checks=checks)
            w = {"api": server.url, "bad": names[ids[0]], "group": group, "image": IMAGE, "limits": limits}
            (tmp_path / "world.json").write_text(json.dumps(w))
            (tmp_path / "report.json").write_text(
                json.dumps(report({names[ids[0]]: [SLOW], **{names[i]: [] for i in ids[1:]}}))
            )

        yield {
            "server": server,
            "ec2": ec2,
            "asg": asg,
            "group": group,
            "ids": ids,
            "names": names,
            "jobs": jobs,
            "checks": checks,
            "history": history,
            "world": world,
        }


def heal(run_dir: Path, when: str, offset: float = 0.0) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.heal._eks_crash_worker", str(run_dir), when, str(offset)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode in (0, 2, 3, KILLED), done.stderr[-3000:]
    return done.returncode, done.stdout


def terminations(run_dir: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in c.items() if k != "call"} for c in read_log(run_dir / "terminations.jsonl")]


def killed_then_rerun(run_dir: Path, server: KubeApiServer, kill: str) -> tuple[int, str]:
    return _killed_then_rerun(heal, run_dir, server, kill, STALE)


def instance_states(ec2: Any) -> dict[str, str]:
    return {
        i["InstanceId"]: i["State"]["Name"] for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]
    }


@pytest.mark.parametrize("kill", ["none", *ACTS, *READS, *(str(n) for n in range(1, RUN_LINES))])
def test_eks_killed_then_rerun_terminates_once_and_names_the_launched_instance(
    tmp_path: Path, cluster: dict[str, Any], kill: str
) -> None:
    ec2, asg, group, ids, names = (cluster[k] for k in ("ec2", "asg", "group", "ids", "names"))
    server = cluster["server"]
    st = server.store
    bad = ids[0]
    cluster["world"](bad, pair=True)
    code, _ = killed_then_rerun(tmp_path, server, kill)
    entries, notes = read(tmp_path / JOURNAL)
    assert code == 0 and not notes and entries[-1].state is State.HEALTHY, [e.line() for e in entries]
    # I2: one termination reached the cloud, the bad instance's, desired capacity kept
    assert terminations(tmp_path) == [{"InstanceId": bad, "ShouldDecrementDesiredCapacity": False}]
    assert sum(1 for e in entries if e.state is State.REPLACING and e.event == "intent") == 1
    now = instance_states(ec2)
    assert {i for i, s in now.items() if s in ("shutting-down", "terminated")} == {bad}
    # I3: the group is the size it began at, its healthy members still in it
    g = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"][0]
    members = {i["InstanceId"] for i in g["Instances"]}
    assert g["DesiredCapacity"] == 3 and len(members) == 3 and set(ids[1:]) <= members
    # the replacement is the instance the group launched for this termination, and its node
    (launched,) = members - set(ids)
    assert entries[-1].instance == launched and entries[-1].slot == names[bad]
    new_node = entries[-1].node
    assert st.get(st.resource("nodes"), "", new_node)["spec"]["providerID"].endswith(f"/{launched}")
    assert {e.node for e in entries} == {names[bad], new_node}
    # I1: no healthy member's node cordoned or tainted, no pod on one evicted; nothing ever written to one
    history = cluster["history"]
    for i in ids[1:]:
        healthy = st.get(st.resource("nodes"), "", names[i])
        assert not healthy["spec"].get("unschedulable") and not healthy["spec"].get("taints"), names[i]
        assert st.list(st.resource("pods"), "gpu-jobs", fields=f"spec.nodeName={names[i]}"), names[i]
        assert not [h for h in history if h["node"] == names[i]], names[i]
    # I6: registered out of work, and out of it in every state until the one write that returned it,
    # made after the revalidation's passed line was on disk
    mine = [h for h in history if h["node"] == new_node]
    assert mine[0]["keys"] == {UNVALIDATED_TAINT_KEY} and not mine[0]["passed"], mine
    assert all(UNVALIDATED_TAINT_KEY in h["keys"] for h in mine[:-1]), mine
    assert not mine[-1]["keys"] and not mine[-1]["cordoned"] and mine[-1]["passed"], mine
    new = st.get(st.resource("nodes"), "", new_node)
    assert not new["spec"].get("unschedulable") and not new["spec"].get("taints")
    # I7: never more nodes under heal's taint than the budget (the old node keeps its marks; its
    # instance is gone)
    assert max(h["held"] for h in history) <= Limits().max_out
    # I8: every check with the first cleared peer FAILed for the pair's figure, never the node's
    # own; the old node blamed, and its replacement passed, only on a check with the second peer;
    # the first peer never taken out
    first, second = names[ids[1]], names[ids[2]]
    ran = cluster["checks"]
    assert all(not c["passed"] and not c["own"] for c in ran if c["peer"] == first), ran
    confirm = [c for c in ran if c["node"] == names[bad]]
    assert [(c["peer"], c["passed"], c["own"]) for c in confirm[-2:]] == [(first, False, False), (second, False, True)]
    assert [(c["peer"], c["passed"]) for c in ran if c["node"] == new_node][-2:] == [(first, False), (second, True)]
    assert not [h for h in history if h["node"] == first] and not st.get(st.resource("nodes"), "", first)["spec"].get(
        "taints"
    )
    if kill == "none":  # the kill points above cover every line of an uncut run
        assert len(entries) == RUN_LINES
        # and a further run does nothing at all
        assert heal(tmp_path, "none")[0] == 0
        assert len(read(tmp_path / JOURNAL)[0]) == RUN_LINES and len(terminations(tmp_path)) == 1


@pytest.mark.parametrize("kill", ["5", "after:patch_node#2"])
def test_eks_rerun_while_the_killed_heal_lease_is_fresh_refuses_naming_it_then_takes_over(
    tmp_path: Path, cluster: dict[str, Any], kill: str
) -> None:
    """I9: the killed heal's Lease has not lapsed: the rerun refuses in one line naming the
    holder's host, pid and folder, writes no journal line and makes no write to the cluster or
    the cloud; once it has lapsed the next rerun takes over and finishes."""
    server = cluster["server"]
    cluster["world"](cluster["ids"][0])
    assert heal(tmp_path, kill)[0] == KILLED
    holder = lease_holder(server)
    lines, writes = len(read(tmp_path / JOURNAL)[0]), [r for r in server.requests if r[0] != "GET"]
    code, out = heal(tmp_path, "none", DURATION_S / 2)
    host, pid, folder = (part.split("=", 1)[1] for part in holder.split(" ", 2))
    assert code == 3 and "another gpu-cluster heal holds this cluster (Lease kube-system/gpu-cluster-heal)" in out
    assert f"host {host}, pid {pid}, folder {folder}, since" in out, out
    assert len(read(tmp_path / JOURNAL)[0]) == lines and lease_holder(server) == holder
    after = [r for r in server.requests if r[0] != "GET"]
    assert after == writes, after[len(writes) :]
    code, out = heal(tmp_path, "none", STALE)
    assert code == 0 and f"pid {pid}," in out and "took over" in out
    assert read(tmp_path / JOURNAL)[0][-1].state is State.HEALTHY and len(terminations(tmp_path)) == 1


@pytest.mark.parametrize("kill", ["none", "1", "before:read_node#2"])
def test_eks_flake_killed_then_rerun_is_cleared_and_in_service(
    tmp_path: Path, cluster: dict[str, Any], kill: str
) -> None:
    """I4: the second look passes the node (no instance is bad): killed at its first line or
    around its reads, the rerun ends HEALTHY, cleared; read back from the API the node is in
    service, uncordoned and untainted; no write was ever made to it and nothing terminated."""
    ids, names, server = cluster["ids"], cluster["names"], cluster["server"]
    st = server.store
    cluster["world"]("")
    code, _ = killed_then_rerun(tmp_path, server, kill)
    entries, _ = read(tmp_path / JOURNAL)
    assert code == 0 and [e.state for e in entries] == [State.SUSPECT, State.HEALTHY], [e.line() for e in entries]
    assert entries[-1].extra.get("outcome") == "cleared" and "in service (read back)" in entries[-1].detail
    node = st.get(st.resource("nodes"), "", names[ids[0]])
    assert not node["spec"].get("unschedulable") and not node["spec"].get("taints")
    # no node written (the check's own objects, its ConfigMap and NetworkPolicy, are not the node's)
    touched = [r for r in server.requests if r[0] != "GET" and r[1].startswith("/api/v1/nodes") or "eviction" in r[1]]
    assert not cluster["history"] and not touched, touched
    assert terminations(tmp_path) == [] and set(instance_states(cluster["ec2"]).values()) == {"running"}
    assert st.list(st.resource("pods"), "gpu-jobs", fields=f"spec.nodeName={names[ids[0]]}")


@pytest.mark.parametrize("kill", ["none", "1", "3", "before:create_namespaced_pod_eviction", "after:patch_node#1"])
def test_eks_busy_node_killed_then_rerun_past_the_evict_timeout_is_never_terminated(
    tmp_path: Path, cluster: dict[str, Any], kill: str
) -> None:
    """I5: the bad node's pod is kept by a PodDisruptionBudget that allows no disruption. Killed
    at each line before the wait and around the cordon and the eviction, rerun, waiting its polls
    past ``--evict-timeout`` (counted from the first time heal took it out): the incident waits in
    RETRY naming the pod; the pod is still on the node, which stays cordoned and
    tainted (out of new work); no termination reached moto."""
    ids, names, server = cluster["ids"], cluster["names"], cluster["server"]
    st = server.store
    bad = names[ids[0]]
    pod = f"trainer-{bad[:13]}"
    st.create(
        st.resource("poddisruptionbudgets", "policy"),
        "gpu-jobs",
        {
            "metadata": {"name": "trainer"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": pod}}},
            "status": {"disruptionsAllowed": 0},
        },
    )
    timeout = 120.0  # eight of the engine's polls, each counted, none slept
    cluster["world"](ids[0], evict_timeout_s=timeout)
    if kill != "none":
        assert heal(tmp_path, kill)[0] == KILLED
    code, out = heal(tmp_path, "none", STALE)
    entries, _ = read(tmp_path / JOURNAL)
    assert code == 2 and entries[-1].state is State.RETRY, [e.line() for e in entries]
    assert f"not empty after {timeout:.0f} s" in entries[-1].detail and f"gpu-jobs/{pod}" in entries[-1].detail
    assert not any(e.state in (State.QUARANTINED, State.REPLACING) for e in entries)
    assert terminations(tmp_path) == [] and set(instance_states(cluster["ec2"]).values()) == {"running"}
    assert st.get(st.resource("pods"), "gpu-jobs", pod)["spec"]["nodeName"] == bad
    node = st.get(st.resource("nodes"), "", bad)
    assert node["spec"]["unschedulable"] and any(t["key"] == TAINT_KEY for t in node["spec"]["taints"])
    # I1 beside it: no other node written
    assert {h["node"] for h in cluster["history"]} == {bad}
