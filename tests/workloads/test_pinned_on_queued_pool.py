"""Checks pinned by hostname on a queued pool (issue 41 item 4): the post-hang pair search of
``validate submit`` and heal's confirm and revalidate checks, on gcp-h100-gke (multi-node
flex-start through Kueue's ProvisioningRequest admission check).

The route (workloads/validate/kube_queue.py has the sources): the main validation JobSet goes
through the stack's Kueue queue, which brings its nodes; a pinned check runs on nodes that already
exist, so it carries no ``kueue.x-k8s.io/queue-name`` label (Kueue leaves an unlabelled job alone:
``manageJobsWithoutQueueName`` defaults to false) and tolerates the pool's taints
(``cloud.google.com/gke-queued`` and ``nvidia.com/gpu``, NoSchedule, as cluster-toolkit's queued
flex-start example job does). Through the queue it would wait on a ProvisioningRequest for new
nodes that never carry the pinned names. The nodes live only while a job holds them, so a pinned
check whose node is gone, or tainted ``ToBeDeletedByClusterAutoscaler``, cannot run: one line
names the node, and no JobSet waits for it.

Against the test API server (tests/kubeapi.py) on 127.0.0.1, a test playing Kueue, the
scheduler (a pinned pod lands only on its node, if it exists and every NoSchedule taint of it is
tolerated) and the autoscaler (nodes removed after the main job ended)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.components.contract import ClusterOutputs
from gpu_cluster.heal.kubernetes import TAINT_KEY, UNSCHEDULABLE_TAINT
from gpu_cluster.heal.platforms import KubeChecker
from tests.kubeapi import KubeApiServer, Store
from tests.launch.test_render_stacks import args as job_args
from tests.launch.test_render_stacks import outputs
from tests.workloads.test_submit_kubernetes_pairs import CULPRIT_INDEX, NODES, RUN_ID, Cluster, _node
from gpu_cluster.workloads.launch import validation as vjob
from gpu_cluster.workloads.launch.jobset import HOSTNAME_LABEL, PROVREQ_PREFIX, QUEUE_LABEL
from gpu_cluster.workloads.validate import commands, kube, kube_pairs, kube_queue, pair_jobs

STACK = "gcp-h100-gke"
QUEUED_TAINT = "cloud.google.com/gke-queued"
GPU_TAINT = "nvidia.com/gpu"
# What the pool's nodes carry: GKE's GPU taint and its queued-provisioning taint (the keys,
# effect and value cluster-toolkit's queued flex-start example tolerates: examples/
# gke-consumption-options/dws-flex-start-queued-provisioning/nccl-jobset-example.yaml at 01a7a3e).
NODE_TAINTS = [
    {"key": QUEUED_TAINT, "value": "true", "effect": "NoSchedule"},
    {"key": GPU_TAINT, "value": "present", "effect": "NoSchedule"},
]


def _gke(nodes: int = NODES) -> ClusterOutputs:
    outs = dataclasses.replace(outputs(STACK), nodes=nodes)
    # The stack is the queued one: its jobs go through Kueue, its pods tolerate GKE's taints.
    assert outs.scheduler.queue and {QUEUED_TAINT, GPU_TAINT} <= set(outs.scheduler.tolerations)
    return outs


def _tolerates(pod: dict[str, Any], taints: list[dict[str, Any]]) -> bool:
    """Every NoSchedule taint is tolerated (Kubernetes "Taints and Tolerations": Exists matches any
    value of the key, Equal the value; an empty effect matches every effect)."""
    tols = pod.get("tolerations") or []

    def ok(t: dict[str, Any]) -> bool:
        return any(
            tol.get("key") == t["key"]
            and tol.get("effect", t["effect"]) in (t["effect"], "")
            and (tol.get("operator") == "Exists" or tol.get("value") == t.get("value"))
            for tol in tols
        )

    return all(ok(t) for t in taints if t["effect"] == "NoSchedule")


def _pods(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    return [rj["template"]["spec"]["template"]["spec"] for rj in manifest["spec"]["replicatedJobs"]]


# ---- what is rendered ---------------------------------------------------------------------------


def test_the_main_jobset_keeps_the_queue_and_the_pinned_ones_leave_it_with_the_pools_tolerations() -> None:
    outs = _gke()
    main = commands.render_run(outs, job_args(), RUN_ID).jobset
    assert main is not None
    # The validation JobSet is Kueue's: its nodes come through the ProvisioningRequest.
    assert main["metadata"]["labels"][QUEUE_LABEL] == outs.scheduler.queue == "gpu-jobs"
    assert any(k.startswith(PROVREQ_PREFIX) for k in main["metadata"]["annotations"])
    job = vjob.for_cluster(outs, RUN_ID, vjob_bundle(), run_args=())
    a, b = "gpuc-x-node-0-1", "gpuc-x-node-0-2"
    pair, _ = vjob.pair_jobset(outs, job, RUN_ID, a, b, hosts={a: _node(1), b: _node(2)})
    judge, _ = vjob.judge_jobset(outs, job, RUN_ID, "e30=")
    checker = KubeChecker(outs, argparse.Namespace(python=None, image=None), Path("/nonexistent"))
    heal, _ = checker.render(_node(1), _node(2), "heal-h-1-confirm-1")
    for what, manifest in (("pair", pair), ("judge", judge), ("heal", heal)):
        meta = manifest["metadata"]
        # Today's code handed these the stack's queue: Kueue would hold them for new nodes.
        assert QUEUE_LABEL not in meta["labels"], what
        assert not [k for k in meta.get("annotations") or {} if k.startswith(PROVREQ_PREFIX)], what
        for pod in _pods(manifest):
            assert _tolerates(pod, NODE_TAINTS), (what, pod.get("tolerations"))
            assert (
                pod["nodeSelector"]["cloud.google.com/gke-nodepool"]
                == outs.scheduler.node_selector["cloud.google.com/gke-nodepool"]
            )
    assert [p["nodeSelector"][HOSTNAME_LABEL] for p in _pods(pair)] == [_node(1), _node(2)]
    # heal's check also tolerates the quarantine it runs in, and is held to its two nodes.
    (pod,) = _pods(heal)
    assert {TAINT_KEY, UNSCHEDULABLE_TAINT} <= {t["key"] for t in pod["tolerations"]}
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == [{"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": [_node(1), _node(2)]}]}]


def vjob_bundle() -> Any:
    from gpu_cluster.workloads.launch.bundle import build

    return build()


def test_a_node_that_is_gone_or_being_removed_is_named_with_why() -> None:
    listed: list[dict[str, Any]] = [
        {"metadata": {"name": "n1"}, "spec": {}},
        {"metadata": {"name": "n2"}, "spec": {"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "value": "1"}]}},
    ]
    gone = kube_queue.unavailable(listed, ["n1", "n2", "n3"])
    assert gone == {"n2": "being removed by the cluster autoscaler", "n3": "gone"}
    line = kube_queue.gone_line(gone, "gpu-jobs")
    assert "n2 (being removed by the cluster autoscaler), n3 (gone)" in line and "Kueue queue gpu-jobs" in line
    assert "\n" not in line
    # Off a queued pool the line names the nodes and nothing about Kueue.
    assert kube_queue.gone_line({"n3": "gone"}, None) == "its node(s) n3 (gone)"


# ---- validate submit after a hang, against the API -----------------------------------------------


class QueuedCluster(Cluster):
    """The pairs test's cluster on a queued GKE pool: the nodes carry the pool's taints, Kueue holds
    a labelled pinned JobSet for new nodes that never come, the scheduler places a pinned pod only
    on its node if it exists and is tolerated, and the autoscaler removes ``scale_down`` once the
    main job ended (or taints them ToBeDeletedByClusterAutoscaler, ``removing``)."""

    def __init__(
        self,
        api: KubeApiServer,
        run_dir: Path,
        hosts: list[str],
        scale_down: Sequence[str] = (),
        removing: Sequence[str] = (),
        vanish_mid_round: bool = False,
    ) -> None:
        super().__init__(api, run_dir, hosts, "nccl-abort")
        self.held: list[str] = []
        self.stuck: list[str] = []
        self.vanish_mid_round = vanish_mid_round
        self.vanished: list[str] = []
        self.scale_down, self.removing = list(scale_down), list(removing)
        nodes = self.store.resource("nodes")
        pool = outputs(STACK).scheduler.node_selector
        for i in range(NODES):
            name = _node(i)
            self.store.put(
                nodes,
                "",
                {"metadata": {"name": name, "labels": {HOSTNAME_LABEL: name, **pool}}, "spec": {"taints": NODE_TAINTS}},
            )

    def run(self, store: Store, _event: str, js: dict[str, Any]) -> None:
        name = js["metadata"]["name"]
        if name != vjob.jobset_name(RUN_ID) and QUEUE_LABEL in js["metadata"]["labels"]:
            # Kueue: suspended, its ProvisioningRequest asks for new nodes; never admitted.
            self.created.append(name)
            self.held.append(name)
            return
        super().run(store, _event, js)
        if name == vjob.jobset_name(RUN_ID):
            nodes = self.store.resource("nodes")
            for n in self.scale_down:
                self.store.delete(nodes, "", n)
            for n in self.removing:
                doc = self.store.get(nodes, "", n)
                doc["spec"]["taints"] = [
                    *NODE_TAINTS,
                    {"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"},
                ]
                self.store.put(nodes, "", doc)

    def _pair(self, js: dict[str, Any]) -> None:
        nodes = self.store.resource("nodes")
        if self.vanish_mid_round and not self.vanished:
            # The autoscaler takes the first pair's second node just before its pod is placed.
            pinned = js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["nodeSelector"]
            self.vanished.append(pinned[HOSTNAME_LABEL])
            self.store.delete(nodes, "", pinned[HOSTNAME_LABEL])
        for rjob in js["spec"]["replicatedJobs"]:
            pod = rjob["template"]["spec"]["template"]["spec"]
            pinned = pod["nodeSelector"][HOSTNAME_LABEL]
            found = [n for n in self.store.list(nodes, None) if n["metadata"]["name"] == pinned]
            if not found or not _tolerates(pod, found[0]["spec"].get("taints") or []):
                self.stuck.append(js["metadata"]["name"])  # Pending for good: nothing ends it
                return
        super()._pair(js)


@pytest.fixture
def server() -> Iterator[KubeApiServer]:
    with KubeApiServer(token="t0ken") as srv:
        yield srv


def _submit(
    tmp_path: Path, server: KubeApiServer, monkeypatch: pytest.MonkeyPatch, **world: Any
) -> tuple[int, list[str], QueuedCluster, list[str]]:
    # A pair that does not end is given seconds, not the step's limit (the test's bound, not a figure).
    monkeypatch.setattr(kube_pairs, "STARTUP_S", 3.0)
    monkeypatch.setattr(pair_jobs, "step_time_limit_min", lambda cfg, timeout: 0)
    outs = _gke()
    outs = dataclasses.replace(outs, access=dataclasses.replace(outs.access, kubeconfig=server.kubeconfig()))
    hosts = list(vjob.pod_hostnames(vjob.jobset_name(RUN_ID), vjob.JOBSET_REPLICATED_JOB, NODES))
    run_dir = tmp_path / "lustre-run"
    run_dir.mkdir()
    cluster = QueuedCluster(server, run_dir, hosts, **world)
    a = job_args(delete=True, poll=0.0, fetch_to=str(tmp_path / "back"), stack=STACK)
    r = commands.render_run(outs, a, RUN_ID)
    api = kube.KubeApi(server.kubeconfig(), read_timeout_s=30)
    said: list[str] = []
    errors: list[str] = []
    try:
        code = commands._submit_kubernetes(api, r, outs, tmp_path / "back" / RUN_ID, a, said.append, timeout=120)
    except kube_queue.NodesGone as exc:
        code, errors = 3, [str(exc)]
    return code, said, cluster, errors


def test_after_a_hang_the_pairs_run_on_the_queued_pools_nodes_and_fail_only_the_bad_one(
    tmp_path: Path, server: KubeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, said, cluster, errors = _submit(tmp_path, server, monkeypatch)
    # No pair waited on Kueue or on a node it could not land on (today's code: every pair held by
    # Kueue, counted as hung, and the search blamed healthy nodes).
    assert cluster.held == [] and cluster.stuck == [] and errors == []
    report = json.loads((tmp_path / "back" / RUN_ID / "report.json").read_text())
    failed = {n["node"] for n in report["nodes"] if n["verdict"] != "PASS"}
    assert code == 2 and failed == {_node(CULPRIT_INDEX)}, said[-5:]
    assert len([n for n in cluster.created if "-p-" in n]) == 10


def test_nodes_scaled_down_after_the_main_job_end_the_search_in_one_line_naming_them(
    tmp_path: Path, server: KubeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone, going = _node(3), _node(11)
    code, said, cluster, errors = _submit(tmp_path, server, monkeypatch, scale_down=[gone], removing=[going])
    (line,) = errors
    assert code == 3 and "\n" not in line
    assert line.startswith("the pairwise search after the hang cannot run: its node(s) ")
    assert f"{going} (being removed by the cluster autoscaler)" in line and f"{gone} (gone)" in line
    assert "Kueue queue gpu-jobs" in line
    # Nothing was left waiting, and no node was blamed or tainted for a pair that could not run.
    assert [n for n in cluster.created if "-p-" in n] == [] and cluster.stuck == []
    assert not (tmp_path / "back" / RUN_ID / "report.json").exists()
    nodes = server.store.list(server.store.resource("nodes"), None)
    assert all(t["key"] != kube.TAINT["key"] for n in nodes for t in n["spec"].get("taints") or [])


def test_a_node_that_goes_during_a_round_ends_the_search_naming_it_and_blames_nobody(
    tmp_path: Path, server: KubeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, said, cluster, errors = _submit(tmp_path, server, monkeypatch, vanish_mid_round=True)
    (gone,) = cluster.vanished
    (line,) = errors
    assert code == 3 and line.startswith(f"the pairwise search after the hang cannot run: its node(s) {gone} (gone)")
    # Its pair never ran; the round's JobSets were all deleted, none counted as hung, nothing judged.
    assert len(cluster.stuck) == 1 and server.store.list(cluster.jobsets, None) == []
    assert vjob.judge_jobset_name(RUN_ID) not in cluster.created
    assert not (tmp_path / "back" / RUN_ID / "report.json").exists()


# ---- heal's check, against the API ---------------------------------------------------------------


def test_heals_check_runs_out_of_the_queue_and_says_in_one_line_when_a_node_is_gone(
    tmp_path: Path, server: KubeApiServer
) -> None:
    st = server.store
    for name in ("node-a", "node-b"):
        st.create(st.resource("nodes"), "", {"metadata": {"name": name}, "spec": {"taints": NODE_TAINTS}})
    made: list[dict[str, Any]] = []

    def controller(store: Store, event: str, js: dict[str, Any]) -> None:
        made.append(json.loads(json.dumps(js)))
        done = store.get(store.resource("jobsets"), js["metadata"]["namespace"], js["metadata"]["name"])
        done["status"] = {"conditions": [{"type": "Failed", "status": "True"}]}
        store.put(store.resource("jobsets"), js["metadata"]["namespace"], done)

    st.on("jobsets", controller, "ADDED")
    outs = _gke(4)
    outs = dataclasses.replace(outs, access=dataclasses.replace(outs.access, kubeconfig=server.kubeconfig()))
    checker = KubeChecker(outs, argparse.Namespace(python=None, image=None), tmp_path, poll_s=0.0)
    # Both nodes there: the check's JobSet is created without the queue, tolerating the pool.
    ran = checker.check("node-a", "node-b", "h-1", "confirm")
    (js,) = made
    assert QUEUE_LABEL not in js["metadata"]["labels"]
    assert all(_tolerates(p, NODE_TAINTS) for p in _pods(js))
    assert not ran.ran and "no report" in ran.detail
    # The peer scaled down: no JobSet, one line naming it.
    st.delete(st.resource("nodes"), "", "node-b")
    res = checker.check("node-a", "node-b", "h-1", "revalidate")
    assert len(made) == 1 and not res.ran and not res.passed
    assert res.detail.startswith("the revalidate check cannot run: its node(s) node-b (gone); on a queued")
    assert "\n" not in res.detail
