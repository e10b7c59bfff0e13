"""A whole heal of an EKS node, every seam real but the cluster: the official Kubernetes client
against the test API server (tests/kubeapi.py), boto3 against moto's server for EC2 and Auto
Scaling, and the check's JobSet as the stack renders it. The test plays what no process here can:
the JobSet controller (pods appear and finish; pod 0's log carries the judge's report archive,
FAIL for the bad instance, PASS for any other) and the kubelet of the new instance (it registers a
node whose providerID names the instance the Auto Scaling group launched)."""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.heal.aws import EksAsgCloud
from gpu_cluster.heal.engine import Engine
from gpu_cluster.heal.evidence import read_report
from gpu_cluster.heal.journal import JOURNAL, Journal, read
from gpu_cluster.heal.kubernetes import TAINT_KEY, KubeScheduler
from gpu_cluster.heal.platforms import KubeChecker
from gpu_cluster.heal.policy import Limits
from gpu_cluster.heal.states import State
from tests.heal.test_aws import REGION, aws, node_group  # noqa: F401 (fixtures)
from tests.preflight.test_aws import aws_env, moto_url  # noqa: F401 (fixtures)
from tests.heal.world import SLOW
from tests.kubeapi import KubeApiServer
from tests.launch.test_render_stacks import outputs
from gpu_cluster.workloads.validate import archive, kube

IMAGE = "public.ecr.aws/deep-learning-containers/pytorch:2.13.0-cu133-amzn2023@sha256:" + "0" * 64


def k8s_node(name: str, instance: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"providerID": f"aws:///{REGION}a/{instance}"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def report(nodes: dict[str, list[str]]) -> dict[str, Any]:
    return {
        "verdict": "FAIL" if any(nodes.values()) else "PASS",
        "local": False,
        "instance_type": "p5.48xlarge",
        "nodes": [{"node": n, "verdict": "FAIL" if r else "PASS", "reasons": r} for n, r in nodes.items()],
        "measurements": [
            {"check": "multi_node.all_reduce", "scope": "cluster", "value": 431.0, "unit": "GB/s", "verdict": "PASS"}
        ],
    }


def play_jobsets(
    st: Any,
    tmp_path: Path,
    bad: str,
    jobs: list[tuple[str, list[str]]],
    *,
    pair_peer: str = "",
    checks: list[dict[str, Any]] | None = None,
) -> None:
    """Play the JobSet controller: each check's pods appear and finish, pod 0's log carrying the
    judge's report archive (FAIL for the node on ``bad``, PASS for any other); ``jobs`` gets each
    JobSet's name and its pods' toleration keys. ``pair_peer``: a check pinned with that node as the
    peer FAILs for the pair's figure alone (both nodes PASS, the multi-node figure FAILs: not the
    node's own, I8); ``checks`` gets each check's node, peer and whether its report FAILed the node."""

    def controller(store: Any, event: str, js: dict[str, Any]) -> None:
        if event != "ADDED":
            return
        meta = js["metadata"]
        pod_spec = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        pinned = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        node, peer = pinned["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
        jobs.append((meta["name"], [t["key"] for t in pod_spec["tolerations"]]))
        inst = store.get(store.resource("nodes"), "", node)["spec"]["providerID"].rsplit("/", 1)[-1]
        d = tmp_path / "jobs" / meta["name"]
        d.mkdir(parents=True, exist_ok=True)
        if peer == pair_peer:
            doc = report({node: [], peer: []})
            doc["verdict"] = "FAIL"
            doc["measurements"][0].update(value=172.0, verdict="FAIL")
        else:
            doc = report({node: [SLOW] if inst == bad else [], peer: []})
        if checks is not None:
            own = peer != pair_peer and inst == bad
            checks.append({"node": node, "peer": peer, "passed": doc["verdict"] == "PASS", "own": own})
        (d / "report.json").write_text(json.dumps(doc))
        out = io.StringIO()
        archive.emit(d, out)
        for i in range(2):
            pod = f"{meta['name']}-node-0-{i}-x"
            labels = {kube.NAME_LABEL: meta["name"], kube.INDEX_LABEL: str(i)}
            store.create(
                store.resource("pods"),
                meta["namespace"],
                {
                    "metadata": {"name": pod, "labels": labels},
                    "spec": {"containers": [{"name": "torchrun", "image": IMAGE}]},
                    "status": {"phase": "Succeeded"},
                },
            )
            store.set_log(meta["namespace"], pod, out.getvalue() if i == 0 else "rank 1 done\n")
        js["status"] = {"conditions": [{"type": "Completed", "status": "True"}]}
        store.put(store.resource("jobsets", "jobset.x-k8s.io"), meta["namespace"], js)

    st.on("jobsets", controller, "ADDED")


class Killed(BaseException):
    """Stands for SIGKILL inside the run: nothing after it in this process writes the journal."""


class TerminatesThenDies(EksAsgCloud):
    """The Auto Scaling call is made, and heal dies before the line that records it."""

    def replace(self, *a: Any, **k: Any) -> Any:
        super().replace(*a, **k)
        raise Killed


@pytest.mark.parametrize(
    ("kill", "skew"), [("none", 0.0), ("after-terminate", 0.0), ("none", 600.0), ("after-terminate", -600.0)]
)
def test_an_eks_node_healed_end_to_end(tmp_path: Path, aws: tuple[Any, Any], kill: str, skew: float) -> None:  # noqa: F811
    """With ``after-terminate`` (issue 41, severity 1, shape 4): killed between
    TerminateInstanceInAutoScalingGroup and its journal line, the rerun must take the instance the
    group launched for this termination as the replacement, never another member of the group
    (which it would cordon and evict). ``skew``: heal's clock (the journal's, injected) that far
    ahead of moto's, or behind: the replacement is still the one launched for the termination, told
    by AWS's own times (moto's server lists no scaling activity, so the fall-back is what runs)."""
    ec2, asg = aws
    group, ids = node_group(ec2, asg, size=3)
    bad = ids[0]
    with KubeApiServer() as server:
        st = server.store
        names = {i: f"ip-10-0-1-{n + 5}.ec2.internal" for n, i in enumerate(ids)}
        for i, n in names.items():
            st.create(st.resource("nodes"), "", k8s_node(n, i))
        st.create(st.resource("namespaces"), "", {"metadata": {"name": "gpu-jobs"}})
        st.create(
            st.resource("pods"),
            "gpu-jobs",
            {
                "metadata": {"name": "trainer-0"},
                "spec": {"nodeName": names[bad], "containers": [{"name": "m", "image": "x"}]},
            },
        )
        jobs: list[tuple[str, list[str]]] = []
        play_jobsets(st, tmp_path, bad, jobs)

        def kubelet(_seconds: float) -> None:
            """Each new instance of the group registers as a node, as its kubelet would."""
            g = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"][0]
            known = {n["spec"]["providerID"].rsplit("/", 1)[-1] for n in st.list(st.resource("nodes"), None)}
            for inst in g["Instances"]:
                if inst["InstanceId"] not in known:
                    st.create(
                        st.resource("nodes"), "", k8s_node(f"ip-10-0-2-{len(known)}.ec2.internal", inst["InstanceId"])
                    )

        outs = outputs("aws-h100-eks")
        outs = dataclasses.replace(outs, access=dataclasses.replace(outs.access, kubeconfig=server.kubeconfig()))
        rpath = tmp_path / "report.json"
        rpath.write_text(json.dumps(report({names[bad]: [SLOW], **{names[i]: [] for i in ids[1:]}})))
        checker = KubeChecker(outs, argparse.Namespace(python=None, image=IMAGE), tmp_path, poll_s=0.01)

        def heal(cloud: EksAsgCloud) -> Any:
            with Journal(tmp_path, clock=lambda: time.time() + skew) as j:
                engine = Engine(
                    cluster="train",
                    journal=j,
                    scheduler=KubeScheduler(server.kubeconfig()),
                    cloud=cloud,
                    checker=checker,
                    limits=Limits(apply=True),
                    say=lambda line: None,
                    sleep=kubelet,
                    poll_s=0.0,
                )
                return engine.run(read_report(rpath))

        if kill == "after-terminate":
            with pytest.raises(Killed):
                heal(TerminatesThenDies(ec2, asg))
            cut = read(tmp_path / JOURNAL)[0]
            assert cut[-1].state is State.REPLACING and cut[-1].event == "intent"
            # the group launched one already, in moto's server as the call returns
            g = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"][0]
            (launched,) = {i["InstanceId"] for i in g["Instances"]} - set(ids)
        out = heal(EksAsgCloud(ec2, asg))
        entries, _ = read(tmp_path / JOURNAL)
        assert out.code == 0, [e.line() for e in entries]
        assert [e.state for e in entries if e.event == "enter"] == [
            State.SUSPECT,
            State.CONFIRMED,
            State.QUARANTINED,
            State.JOINING,
            State.REVALIDATING,
            State.HEALTHY,
        ]
        new_node = entries[-1].node
        assert new_node != names[bad] and entries[-1].slot == names[bad]
        assert entries[-1].instance not in ids
        if kill == "after-terminate":
            assert entries[-1].instance == launched
            assert sum(1 for e in entries if e.state is State.REPLACING and e.event == "intent") == 1
        # no healthy member of the group was ever taken out of service (I1)
        for i in ids[1:]:
            healthy = st.get(st.resource("nodes"), "", names[i])
            assert not healthy["spec"].get("unschedulable") and not healthy["spec"].get("taints"), names[i]
        assert {e.node for e in entries} == {names[bad], new_node}
        # the group kept its size; the bad instance is gone from it
        g = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"][0]
        assert g["DesiredCapacity"] == 3 and bad not in {i["InstanceId"] for i in g["Instances"]}
        # the old node is still cordoned and tainted by the incident (its instance is gone; EKS removes it)
        old = st.get(st.resource("nodes"), "", names[bad])
        assert old["spec"]["unschedulable"] is True and any(t["key"] == TAINT_KEY for t in old["spec"]["taints"])
        assert [
            p["metadata"]["name"]
            for p in st.list(st.resource("pods"), "gpu-jobs", fields=f"spec.nodeName={names[bad]}")
        ] == []
        # two checks, each pinned to its pair and tolerating the quarantine
        assert len(jobs) == 2 and all(set(t) >= {TAINT_KEY, "node.kubernetes.io/unschedulable"} for _, t in jobs)
        # the new node was held out of service from the moment it joined until it passed
        held = [e for e in entries if e.state is State.REVALIDATING and e.event == "enter"][0]
        assert "tainted by" in held.detail and "cordoned" in held.detail
        new = st.get(st.resource("nodes"), "", new_node)
        assert not new["spec"].get("unschedulable") and not any(
            t["key"] == TAINT_KEY for t in new["spec"].get("taints") or []
        )


@pytest.mark.parametrize("stack", ["aws-h100-eks", "gcp-h100-gke", "azure-h100-aks"])
def test_the_check_is_the_stacks_job_on_two_nodes(stack: str, tmp_path: Path) -> None:
    checker = KubeChecker(outputs(stack), argparse.Namespace(python=None, image=None), tmp_path)
    manifest, policy = checker.render("node-a", "node-b", "heal-h-1-confirm-1")
    rj = manifest["spec"]["replicatedJobs"]
    pod = rj[0]["template"]["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a", "node-b"]}]}
    ]
    keys = {t["key"] for t in pod["tolerations"]}
    assert {TAINT_KEY, "node.kubernetes.io/unschedulable"} <= keys
    # the stack's own tolerations stay (GKE's GPU taint)
    assert set(outputs(stack).scheduler.tolerations) <= keys
    text = json.dumps(manifest)
    assert "--pairwise" in text and "never" in text and "--sweep-min" in text
    assert sum(r["replicas"] * r["template"]["spec"].get("parallelism", 1) for r in rj) == 2
    assert policy["kind"] == "NetworkPolicy"
