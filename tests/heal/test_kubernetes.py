"""heal's Kubernetes side, the official client against the test API server (tests/kubeapi.py):
cordon, our taint with the incident, eviction through the Eviction API with a PodDisruptionBudget
that refuses (429) until it allows, the return to service, the node that stands in a slot after
a replacement, and the labels GKE's report-and-replace reads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpu_cluster.heal.adapters import AdapterError
from gpu_cluster.heal.kubernetes import REASON_ANNOTATION, TAINT_KEY, KubeScheduler
from tests.kubeapi import KubeApiServer

INCIDENT = "h-0123456789"


@pytest.fixture
def server() -> Iterator[KubeApiServer]:
    with KubeApiServer() as srv:
        yield srv


def node(name: str, provider: str, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "cloud.google.com/gke-nodepool": "gpu"}},
        "spec": {
            "providerID": provider,
            "taints": taints or [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod(name: str, on: str, labels: dict[str, str] | None = None, owner: str = "ReplicaSet") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "gpu-jobs",
            "labels": labels or {},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner, "name": f"{name}-owner", "uid": "u"}],
        },
        "spec": {"nodeName": on, "containers": [{"name": "main", "image": "x"}]},
        "status": {"phase": "Running"},
    }


def world(server: KubeApiServer) -> None:
    st = server.store
    nodes = st.resource("nodes")
    st.create(nodes, "", node("ip-10-0-1-5.ec2.internal", "aws:///us-east-1a/i-0aaa"))
    st.create(nodes, "", node("ip-10-0-1-6.ec2.internal", "aws:///us-east-1a/i-0bbb"))
    pods = st.resource("pods")
    st.create(pods, "gpu-jobs", pod("trainer-0", "ip-10-0-1-5.ec2.internal", {"app": "trainer"}))
    st.create(pods, "gpu-jobs", pod("scratch", "ip-10-0-1-5.ec2.internal"))
    st.create(pods, "gpu-jobs", pod("efa-plugin-x", "ip-10-0-1-5.ec2.internal", owner="DaemonSet"))
    st.create(pods, "gpu-jobs", pod("elsewhere", "ip-10-0-1-6.ec2.internal"))
    st.create(
        st.resource("poddisruptionbudgets", "policy"),
        "gpu-jobs",
        {
            "metadata": {"name": "trainer"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "trainer"}}},
            "status": {"disruptionsAllowed": 0},
        },
    )


def test_cordon_taint_evict_with_a_budget_then_return(server: KubeApiServer) -> None:
    world(server)
    k = KubeScheduler(server.kubeconfig())
    name = "ip-10-0-1-5.ec2.internal"
    before = k.node(name)
    assert (
        before.in_service and before.ready and before.held_by is None and before.instance == "aws:///us-east-1a/i-0aaa"
    )

    first = k.quarantine(name, INCIDENT, "health.matmul: straggler, 0.33 under 0.5 x")
    assert not first.ok and first.pending
    assert "1 pod(s) still on it" in first.detail and "gpu-jobs/trainer-0" in first.detail
    doc = server.store.get(server.store.resource("nodes"), "", name)
    assert doc["spec"]["unschedulable"] is True
    assert {"key": TAINT_KEY, "value": INCIDENT, "effect": "NoSchedule"} in doc["spec"]["taints"]
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in doc["spec"]["taints"]
    assert doc["metadata"]["annotations"][REASON_ANNOTATION].startswith("health.matmul")
    left = {p["metadata"]["name"] for p in server.store.list(server.store.resource("pods"), "gpu-jobs")}
    assert left == {"trainer-0", "efa-plugin-x", "elsewhere"}  # scratch evicted; the DaemonSet's pod stays
    evictions = [r for r in server.requests if r[0] == "POST" and r[1].endswith("/eviction")]
    assert {r[1].split("/")[-2] for r in evictions} == {"trainer-0", "scratch"}
    view = k.node(name)
    assert view.held_by == INCIDENT and not view.in_service and "cordoned" in view.detail

    # the budget allows one disruption: the next ask empties the node
    pdbs = server.store.resource("poddisruptionbudgets", "policy")
    budget = server.store.get(pdbs, "gpu-jobs", "trainer")
    budget["status"]["disruptionsAllowed"] = 1
    server.store.put(pdbs, "gpu-jobs", budget)
    done = k.quarantine(name, INCIDENT, "again")
    assert done.ok, done.detail
    assert server.store.get(pdbs, "gpu-jobs", "trainer")["status"]["disruptionsAllowed"] == 0

    assert not k.release(name, "h-someone-else").ok
    back = k.release(name, INCIDENT)
    assert back.ok
    doc = server.store.get(server.store.resource("nodes"), "", name)
    assert "unschedulable" not in doc["spec"]
    assert doc["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert REASON_ANNOTATION not in (doc["metadata"].get("annotations") or {})
    assert k.node(name).in_service


def test_the_node_standing_in_the_slot_is_found_by_its_instance(server: KubeApiServer) -> None:
    world(server)
    server.store.create(
        server.store.resource("nodes"), "", node("ip-10-0-1-9.ec2.internal", "aws:///us-east-1a/i-0ccc")
    )
    k = KubeScheduler(server.kubeconfig())
    assert k.successor("ip-10-0-1-5.ec2.internal", "i-0aaa", "i-0ccc") == "ip-10-0-1-9.ec2.internal"
    assert k.successor("ip-10-0-1-5.ec2.internal", "i-0aaa", "") is None
    assert k.successor("ip-10-0-1-5.ec2.internal", "i-0aaa", "i-0ddd") is None


def test_labels_for_report_and_replace(server: KubeApiServer) -> None:
    world(server)
    k = KubeScheduler(server.kubeconfig())
    k.label("ip-10-0-1-5.ec2.internal", "cloud.google.com/fault-behavior", "PERFORMANCE")
    labels = k.labels("ip-10-0-1-5.ec2.internal")
    assert (
        labels["cloud.google.com/fault-behavior"] == "PERFORMANCE" and labels["cloud.google.com/gke-nodepool"] == "gpu"
    )


def test_an_unknown_node_and_a_refusing_server(server: KubeApiServer) -> None:
    assert not KubeScheduler(server.kubeconfig()).node("nope").present
    with KubeApiServer(token="right") as guarded:
        k = KubeScheduler(guarded.kubeconfig().replace("token: right", "token: wrong"))
        with pytest.raises(AdapterError, match="refused the credentials"):
            k.node("ip-10-0-1-5.ec2.internal")
