"""A replacement takes no work until its revalidation passes (issue 41, I6). The GPU pool registers
every new node with ``gpu-cluster.io/unvalidated=true:NoSchedule`` (components/aws/eks_values.py), so
the replacement is out of work from the moment its kubelet registers it, before heal ever sees it;
heal's check pods tolerate it, and only heal's return to service after the passed revalidation
removes it. The scheduler is not simulated: every state the new node is written in is recorded,
and each one before the release carries the taint."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.components.contract import UNVALIDATED_TAINT_KEY
from gpu_cluster.heal.aws import EksAsgCloud
from gpu_cluster.heal.engine import Engine
from gpu_cluster.heal.evidence import read_report
from gpu_cluster.heal.journal import JOURNAL, Journal, read
from gpu_cluster.heal.kubernetes import TAINT_KEY, KubeScheduler, tolerations
from gpu_cluster.heal.platforms import KubeChecker
from gpu_cluster.heal.policy import Limits
from gpu_cluster.heal.states import State
from tests.heal.test_aws import aws, node_group  # noqa: F401 (fixtures)
from tests.preflight.test_aws import aws_env, moto_url  # noqa: F401 (fixtures aws uses)
from tests.heal.test_eks_e2e import IMAGE, k8s_node, play_jobsets, report
from tests.heal.test_kubernetes import node as gke_node
from tests.heal.world import SLOW
from tests.kubeapi import KubeApiServer
from tests.launch.test_render_stacks import outputs

REGISTERED = {"key": UNVALIDATED_TAINT_KEY, "value": "true", "effect": "NoSchedule"}


def test_a_registered_node_is_out_of_service_and_only_the_release_admits_it() -> None:
    with KubeApiServer() as server:
        st = server.store
        name = "gke-gpu-new"
        st.create(
            st.resource("nodes"),
            "",
            gke_node(
                name,
                "gce://p/z/gke-gpu-new",
                [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}, REGISTERED],
            ),
        )
        k = KubeScheduler(server.kubeconfig())
        view = k.node(name)
        assert view.ready and not view.in_service and view.held_by is None and "not yet validated" in view.detail
        # What heal does to a replacement it finds registered: its own marks, the registration kept.
        assert k.quarantine(name, "h-1", "replacement, not yet revalidated").ok
        assert REGISTERED in st.get(st.resource("nodes"), "", name)["spec"]["taints"]
        out = k.release(name, "h-1")
        assert out.ok and out.detail == f"uncordoned, taint removed, {UNVALIDATED_TAINT_KEY} removed"
        node = st.get(st.resource("nodes"), "", name)
        assert node["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
        assert k.node(name).in_service
    # The check's pods reach such a node.
    assert {"key": UNVALIDATED_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in tolerations()


def test_an_eks_replacement_is_out_of_work_from_registration_until_it_passes(
    tmp_path: Path,
    aws: tuple[Any, Any],  # noqa: F811
) -> None:
    ec2, asg = aws
    group, ids = node_group(ec2, asg, size=3)
    bad = ids[0]
    with KubeApiServer() as server:
        st = server.store
        names = {i: f"ip-10-0-1-{n + 5}.ec2.internal" for n, i in enumerate(ids)}
        for i, n in names.items():
            st.create(st.resource("nodes"), "", k8s_node(n, i))  # validated before: no registration taint
        st.create(st.resource("namespaces"), "", {"metadata": {"name": "gpu-jobs"}})
        checked: list[list[str]] = []

        def controller(store: Any, event: str, js: dict[str, Any]) -> None:
            import io
            import json

            from gpu_cluster.workloads.validate import archive, kube

            meta = js["metadata"]
            pod_spec = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
            pinned = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            node, peer = pinned["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
            checked.append([t["key"] for t in pod_spec["tolerations"]])
            inst = store.get(store.resource("nodes"), "", node)["spec"]["providerID"].rsplit("/", 1)[-1]
            d = tmp_path / "jobs" / meta["name"]
            d.mkdir(parents=True)
            (d / "report.json").write_text(json.dumps(report({node: [SLOW] if inst == bad else [], peer: []})))
            out = io.StringIO()
            archive.emit(d, out)
            for i in range(2):
                pod = f"{meta['name']}-node-0-{i}-x"
                labels = {kube.NAME_LABEL: meta["name"], kube.INDEX_LABEL: str(i)}
                body = {
                    "metadata": {"name": pod, "labels": labels},
                    "spec": {"containers": [{"name": "torchrun", "image": IMAGE}]},
                }
                store.create(store.resource("pods"), meta["namespace"], {**body, "status": {"phase": "Succeeded"}})
                store.set_log(meta["namespace"], pod, out.getvalue() if i == 0 else "rank 1 done\n")
            js["status"] = {"conditions": [{"type": "Completed", "status": "True"}]}
            store.put(store.resource("jobsets", "jobset.x-k8s.io"), meta["namespace"], js)

        st.on("jobsets", controller, "ADDED")
        # Every state a node is written in: (name, registration taint on, heal's taint on).
        history: list[tuple[str, bool, bool]] = []

        def record(store: Any, event: str, obj: dict[str, Any]) -> None:
            keys = {t.get("key") for t in obj.get("spec", {}).get("taints") or []}
            history.append((obj["metadata"]["name"], UNVALIDATED_TAINT_KEY in keys, TAINT_KEY in keys))

        st.on("nodes", record, "*")

        def kubelet(_seconds: float) -> None:
            """Each new instance registers as its pool makes it: with the registration taint."""
            g = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"][0]
            known = {n["spec"]["providerID"].rsplit("/", 1)[-1] for n in st.list(st.resource("nodes"), None)}
            for inst in g["Instances"]:
                if inst["InstanceId"] not in known:
                    new = k8s_node(f"ip-10-0-2-{len(known)}.ec2.internal", inst["InstanceId"])
                    new["spec"]["taints"] = [REGISTERED]
                    st.create(st.resource("nodes"), "", new)

        outs = outputs("aws-h100-eks")
        outs = dataclasses.replace(outs, access=dataclasses.replace(outs.access, kubeconfig=server.kubeconfig()))
        rpath = tmp_path / "report.json"
        import json

        rpath.write_text(json.dumps(report({names[bad]: [SLOW], **{names[i]: [] for i in ids[1:]}})))
        checker = KubeChecker(outs, argparse.Namespace(python=None, image=IMAGE), tmp_path, poll_s=0.01)
        with Journal(tmp_path) as j:
            engine = Engine(
                cluster="train",
                journal=j,
                scheduler=KubeScheduler(server.kubeconfig()),
                cloud=EksAsgCloud(ec2, asg),
                checker=checker,
                limits=Limits(apply=True),
                say=lambda line: None,
                sleep=kubelet,
                poll_s=0.0,
            )
            out = engine.run(read_report(rpath))
        entries, _ = read(tmp_path / JOURNAL)
        assert out.code == 0, [e.line() for e in entries]
        new_node = entries[-1].node
        assert entries[-1].state is State.HEALTHY and new_node not in names.values()
        mine = [h for h in history if h[0] == new_node]
        # Registered with the taint; it stayed on through heal's quarantine and the revalidation,
        # and the one write that lifted it is the last: the release that returned the node.
        assert mine[0] == (new_node, True, False)
        assert all(on for _, on, _ in mine[:-1]) and mine[-1] == (new_node, False, False), mine
        held = [e for e in entries if e.state is State.REVALIDATING and e.event == "enter"][0]
        assert "not yet validated" in held.detail
        assert "gpu-cluster.io/unvalidated removed" in entries[-1].detail
        # The revalidation's pods tolerated it (and the quarantine), so they could land there.
        assert checked and all({UNVALIDATED_TAINT_KEY, TAINT_KEY} <= set(keys) for keys in checked)


@pytest.mark.parametrize("cordoned_by_someone", [False, True])
def test_a_node_its_first_validation_failed_and_the_second_look_clears_loses_the_registration_taint(
    tmp_path: Path,
    aws: tuple[Any, Any],  # noqa: F811
    cordoned_by_someone: bool,
) -> None:
    """The node's first validation FAILed it, so it kept its registration taint (only a passed check
    removes it); heal's second look passes it. That passed check removes the taint, read back, and
    nothing else: no mark of heal's was ever on it, and a cordon someone else made stays."""
    ec2, asg = aws
    group, ids = node_group(ec2, asg, size=3)
    with KubeApiServer() as server:
        st = server.store
        names = {i: f"ip-10-0-1-{n + 5}.ec2.internal" for n, i in enumerate(ids)}
        flaky = names[ids[0]]
        for i, n in names.items():
            doc = k8s_node(n, i)
            if n == flaky:
                doc["spec"]["taints"] = [REGISTERED]
                if cordoned_by_someone:
                    doc["spec"]["unschedulable"] = True
            st.create(st.resource("nodes"), "", doc)
        st.create(st.resource("namespaces"), "", {"metadata": {"name": "gpu-jobs"}})
        jobs: list[tuple[str, list[str]]] = []
        play_jobsets(st, tmp_path, "", jobs)  # every check passes: the first FAIL was a flake
        writes: list[dict[str, Any]] = []
        st.on("nodes", lambda store, event, obj: writes.append(json.loads(json.dumps(obj))), "MODIFIED")
        outs = outputs("aws-h100-eks")
        outs = dataclasses.replace(outs, access=dataclasses.replace(outs.access, kubeconfig=server.kubeconfig()))
        rpath = tmp_path / "report.json"
        rpath.write_text(json.dumps(report({flaky: [SLOW], **{names[i]: [] for i in ids[1:]}})))
        checker = KubeChecker(outs, argparse.Namespace(python=None, image=IMAGE), tmp_path, poll_s=0.01)
        with Journal(tmp_path) as j:
            out = Engine(
                cluster="train",
                journal=j,
                scheduler=KubeScheduler(server.kubeconfig()),
                cloud=EksAsgCloud(ec2, asg),
                checker=checker,
                limits=Limits(apply=True),
                say=lambda line: None,
                poll_s=0.0,
            ).run(read_report(rpath))
        entries, _ = read(tmp_path / JOURNAL)
        assert out.code == 0 and entries[-1].state is State.HEALTHY, [e.line() for e in entries]
        assert entries[-1].extra.get("outcome") == "cleared" and len(jobs) == 1
        now = st.get(st.resource("nodes"), "", flaky)
        assert not any(t.get("key") == UNVALIDATED_TAINT_KEY for t in now["spec"].get("taints") or [])
        # one write to the node, the removal; heal's own taint never put on it
        assert [w["metadata"]["name"] for w in writes] == [flaky]
        assert bool(now["spec"].get("unschedulable")) is cordoned_by_someone
        if cordoned_by_someone:
            assert "its registration taint removed; still out of service by a mark not this incident's" in (
                entries[-1].detail
            )
        else:
            assert "its registration taint removed, back in service (read back: Ready)" in entries[-1].detail
        # the healthy nodes were never written to, and the cloud replaced nothing
        g = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"][0]
        assert sorted(i["InstanceId"] for i in g["Instances"]) == sorted(ids)
