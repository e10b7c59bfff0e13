"""EKS: heal killed at every journal line and on both sides of the call that acts
(TerminateInstanceInAutoScalingGroup), and once after it has cordoned and tainted the replacement
before the line that says so, in a process of its own that dies hard; then run again. The cloud is
moto's server and the cluster the test's Kubernetes API server, both in the test process (they
outlive the killed heal, as a cloud does). Asserted after the rerun (issue 41):

- I1: no node of a healthy member was cordoned or tainted, no pod on one evicted, no healthy
  member terminated;
- I2: exactly one termination reached the cloud, of the bad instance, and one REPLACING intent;
- I3: the group's desired capacity is what it began at;
- the replacement heal names and revalidates is the instance the group launched for this
  termination, never another member (severity 1, shape 4)."""

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

from gpu_cluster.heal.journal import JOURNAL, read
from gpu_cluster.heal.kubernetes import TAINT_KEY
from gpu_cluster.heal.states import State
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
CALLS = ["before-terminate", "after-terminate", "after-hold"]


@pytest.fixture
def cluster(tmp_path: Path, aws: tuple[Any, Any]) -> Iterator[dict[str, Any]]:  # noqa: F811
    """Three members of a managed node group, their nodes, a pod on each, the bad one first."""
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
                {"metadata": {"name": f"trainer-{n[:13]}"}, "spec": {"nodeName": n, "containers": [{"name": "m"}]}},
            )
        jobs: list[tuple[str, list[str]]] = []
        play_jobsets(st, tmp_path, ids[0], jobs)
        outs = outputs("aws-h100-eks")
        outs = dataclasses.replace(outs, access=dataclasses.replace(outs.access, kubeconfig=server.kubeconfig()))
        (tmp_path / "outputs.pickle").write_bytes(pickle.dumps(outs))
        world = {"api": server.url, "bad": names[ids[0]], "group": group, "image": IMAGE}
        (tmp_path / "world.json").write_text(json.dumps(world))
        (tmp_path / "report.json").write_text(
            json.dumps(report({names[ids[0]]: [SLOW], **{names[i]: [] for i in ids[1:]}}))
        )
        yield {"server": server, "ec2": ec2, "asg": asg, "group": group, "ids": ids, "names": names, "jobs": jobs}


def heal(run_dir: Path, when: str) -> int:
    done = subprocess.run(
        [sys.executable, "-m", "tests.heal._eks_crash_worker", str(run_dir), when],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode in (0, 9), done.stderr[-3000:]
    return done.returncode


def terminations(run_dir: Path) -> list[dict[str, Any]]:
    log = run_dir / "terminations.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("kill", ["none", *CALLS, *(str(n) for n in range(1, RUN_LINES))])
def test_eks_killed_then_rerun_terminates_once_and_names_the_launched_instance(
    tmp_path: Path, cluster: dict[str, Any], kill: str
) -> None:
    ec2, asg, group, ids, names = (cluster[k] for k in ("ec2", "asg", "group", "ids", "names"))
    st = cluster["server"].store
    bad = ids[0]
    if kill != "none":
        assert heal(tmp_path, kill) == 9
    assert heal(tmp_path, "none") == 0
    entries, notes = read(tmp_path / JOURNAL)
    assert not notes and entries[-1].state is State.HEALTHY, [e.line() for e in entries]
    # I2: one termination reached the cloud, the bad instance's, desired capacity kept
    assert terminations(tmp_path) == [{"InstanceId": bad, "ShouldDecrementDesiredCapacity": False}]
    assert sum(1 for e in entries if e.state is State.REPLACING and e.event == "intent") == 1
    gone = {
        i["InstanceId"]
        for r in ec2.describe_instances()["Reservations"]
        for i in r["Instances"]
        if i["State"]["Name"] in ("shutting-down", "terminated")
    }
    assert gone == {bad}
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
    # I1: no healthy member's node cordoned or tainted, no pod on one evicted
    for i in ids[1:]:
        healthy = st.get(st.resource("nodes"), "", names[i])
        assert not healthy["spec"].get("unschedulable") and not healthy["spec"].get("taints"), names[i]
        assert st.list(st.resource("pods"), "gpu-jobs", fields=f"spec.nodeName={names[i]}"), names[i]
    # the replacement was held until it passed, then returned
    new = st.get(st.resource("nodes"), "", new_node)
    assert not new["spec"].get("unschedulable") and not any(
        t["key"] == TAINT_KEY for t in new["spec"].get("taints") or []
    )
    if kill == "none":  # the kill points above cover every line of an uncut run
        assert len(entries) == RUN_LINES
        # and a further run does nothing at all
        assert heal(tmp_path, "none") == 0
        assert len(read(tmp_path / JOURNAL)[0]) == RUN_LINES and len(terminations(tmp_path)) == 1
