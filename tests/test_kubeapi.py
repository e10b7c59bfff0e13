"""The test Kubernetes API server (tests/kubeapi.py), driven by the official ``kubernetes`` client
over a real socket: what a command built on the client sends is what the server must answer."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from tests.kubeapi import KubeApiServer, label_match

JOBSET = ("jobset.x-k8s.io", "v1alpha2")


@pytest.fixture
def server() -> Iterator[KubeApiServer]:
    with KubeApiServer() as srv:
        yield srv


def _clients(srv: KubeApiServer) -> tuple[client.CoreV1Api, client.CustomObjectsApi, client.ApiClient]:
    api = config.new_client_from_config_dict(yaml.safe_load(srv.kubeconfig()))
    return client.CoreV1Api(api), client.CustomObjectsApi(api), api


def _pod(name: str, labels: dict[str, str], node: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


def test_create_get_list_by_labels_and_fields(server: KubeApiServer) -> None:
    core, _, _ = _clients(server)
    core.create_namespaced_pod("jobs", _pod("a", {"app": "x", "tier": "1"}, node="n1"))
    core.create_namespaced_pod("jobs", _pod("b", {"app": "x", "tier": "2"}, node="n2"))
    core.create_namespaced_pod("other", _pod("c", {"app": "y"}))
    got = core.read_namespaced_pod("a", "jobs")
    assert got.metadata.uid and got.metadata.resource_version and got.metadata.namespace == "jobs"
    names = [p.metadata.name for p in core.list_namespaced_pod("jobs", label_selector="app=x,tier!=2").items]
    assert names == ["a"]
    assert [p.metadata.name for p in core.list_namespaced_pod("jobs", field_selector="spec.nodeName=n2").items] == ["b"]
    assert {p.metadata.name for p in core.list_pod_for_all_namespaces(label_selector="app in (x,y)").items} == {
        "a",
        "b",
        "c",
    }
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("jobs", _pod("a", {}))
    assert err.value.status == 409 and "AlreadyExists" in err.value.body
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("zzz", "jobs")
    assert err.value.status == 404 and json.loads(err.value.body)["message"] == 'pods "zzz" not found'


def test_label_selector_forms() -> None:
    labels = {"a": "1", "b": "2"}
    assert label_match("a=1,b==2", labels) and label_match("a,!c", labels) and label_match("b notin (3, 4)", labels)
    assert not label_match("a!=1", labels) and not label_match("c", labels) and not label_match("a in (2,3)", labels)


def test_patches_merge_strategic_json_and_conflicts(server: KubeApiServer) -> None:
    core, custom, _ = _clients(server)
    core.create_node(
        {
            "metadata": {"name": "n1", "labels": {"pool": "gpu"}},
            "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]},
        }
    )
    # The client sends a dict as a strategic merge patch on built-in kinds: lists are replaced here.
    core.patch_node("n1", {"spec": {"unschedulable": True, "taints": [{"key": "b", "effect": "NoSchedule"}]}})
    node = core.read_node("n1")
    assert node.spec.unschedulable and [t.key for t in node.spec.taints] == ["b"]
    core.patch_node(
        "n1", {"metadata": {"labels": {"pool": None, "x": "y"}}}, _content_type="application/merge-patch+json"
    )
    assert core.read_node("n1").metadata.labels == {"x": "y"}
    core.patch_node("n1", [{"op": "add", "path": "/metadata/labels/z", "value": "1"}])
    assert core.read_node("n1").metadata.labels == {"x": "y", "z": "1"}
    # Replace with a stale resourceVersion: 409 Conflict, as the API answers an optimistic update.
    stale = core.read_node("n1")
    core.patch_node("n1", {"metadata": {"labels": {"w": "2"}}})
    with pytest.raises(ApiException) as err:
        core.replace_node("n1", stale)
    assert err.value.status == 409 and "has been modified" in err.value.body
    # A custom resource takes a merge patch (what the client sends for a dict) but refuses a strategic
    # one (415), as the real server does.
    custom.create_namespaced_custom_object(*JOBSET, "jobs", "jobsets", {"metadata": {"name": "j"}, "spec": {}})
    custom.patch_namespaced_custom_object(*JOBSET, "jobs", "jobsets", "j", {"spec": {"suspend": True}})
    assert custom.get_namespaced_custom_object(*JOBSET, "jobs", "jobsets", "j")["spec"] == {"suspend": True}
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(
            *JOBSET, "jobs", "jobsets", "j", {"spec": {}}, _content_type="application/strategic-merge-patch+json"
        )
    assert err.value.status == 415
    # Status goes through its subresource only.
    custom.patch_namespaced_custom_object_status(
        *JOBSET,
        "jobs",
        "jobsets",
        "j",
        {"status": {"conditions": [{"type": "Completed", "status": "True"}]}},
        _content_type="application/merge-patch+json",
    )
    assert custom.get_namespaced_custom_object(*JOBSET, "jobs", "jobsets", "j")["status"]["conditions"][0]["type"] == (
        "Completed"
    )


def test_delete_takes_the_owned_objects_with_it(server: KubeApiServer) -> None:
    core, custom, _ = _clients(server)
    js = custom.create_namespaced_custom_object(*JOBSET, "jobs", "jobsets", {"metadata": {"name": "j"}, "spec": {}})
    owner = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "j", "uid": js["metadata"]["uid"]}
    core.create_namespaced_config_map("jobs", {"metadata": {"name": "code", "ownerReferences": [owner]}})
    core.create_namespaced_config_map("jobs", {"metadata": {"name": "kept"}})
    custom.delete_namespaced_custom_object(*JOBSET, "jobs", "jobsets", "j", propagation_policy="Foreground")
    assert [c.metadata.name for c in core.list_namespaced_config_map("jobs").items] == ["kept"]
    assert ("DELETE", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/jobs/jobsets/j") in [
        (m, p) for m, p, _ in server.requests
    ]


def test_pod_logs_and_a_subresource_added_by_a_test(server: KubeApiServer) -> None:
    core, _, api = _clients(server)
    core.create_namespaced_pod("jobs", _pod("a", {}))
    server.store.set_log("jobs", "a", "line 1\nline 2\n")
    # The raw answer: kubernetes 36 turns a str response into the repr of its bytes
    # (kubernetes-client/python issue 2596), so a caller reads the body itself.
    raw = core.read_namespaced_pod_log("a", "jobs", container="main", _preload_content=False)
    assert raw.data.decode() == "line 1\nline 2\n" and raw.headers["Content-Type"] == "text/plain"
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod_log("a", "jobs", container="other")
    assert err.value.status == 400
    seen: list[Any] = []

    @server.subresource("pods", "eviction", "POST")
    def evict(srv: KubeApiServer, res: Any, ns: str, name: str, req: Any) -> tuple[int, Any]:
        seen.append(req.body)
        srv.store.delete(res, ns, name)
        return 201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}

    core.create_namespaced_pod_eviction("a", "jobs", {"metadata": {"name": "a", "namespace": "jobs"}})
    assert seen and seen[0]["metadata"]["name"] == "a"
    assert core.list_namespaced_pod("jobs").items == []


def test_watch_streams_the_changes_after_the_list(server: KubeApiServer) -> None:
    _, custom, _ = _clients(server)
    custom.create_namespaced_custom_object(*JOBSET, "jobs", "jobsets", {"metadata": {"name": "j"}, "spec": {}})
    res = server.store.resource("jobsets")

    def controller() -> None:
        time.sleep(0.3)
        obj = server.store.get(res, "jobs", "j")
        obj["status"] = {"conditions": [{"type": "Completed", "status": "True"}]}
        server.store.put(res, "jobs", obj)

    threading.Thread(target=controller, daemon=True).start()
    seen = []
    w = watch.Watch()
    for event in w.stream(
        custom.list_namespaced_custom_object,
        *JOBSET,
        "jobs",
        "jobsets",
        field_selector="metadata.name=j",
        timeout_seconds=10,
    ):
        seen.append((event["type"], bool(event["object"].get("status"))))
        if event["object"].get("status"):
            w.stop()
    assert seen == [("ADDED", False), ("MODIFIED", True)]


def test_a_token_is_required_when_the_server_has_one() -> None:
    with KubeApiServer(token="s3cret") as srv:
        core, _, _ = _clients(srv)
        core.list_node()
        bad = yaml.safe_load(srv.kubeconfig())
        bad["users"][0]["user"]["token"] = "wrong"
        with pytest.raises(ApiException) as err:
            client.CoreV1Api(config.new_client_from_config_dict(bad)).list_node()
        assert err.value.status == 401


def test_unknown_resources_are_404_and_custom_ones_can_be_registered(server: KubeApiServer) -> None:
    _, custom, _ = _clients(server)
    with pytest.raises(ApiException) as err:
        custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", "jobs", "localqueues")
    assert err.value.status == 404
    server.register("kueue.x-k8s.io", "v1beta2", "clusterqueues", "ClusterQueue", namespaced=False)
    custom.create_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", {"metadata": {"name": "q"}})
    assert custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", "q")["kind"] == "ClusterQueue"
