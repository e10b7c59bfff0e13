"""Only a passed check admits a GPU node to work (issue 41, I6): its pool registers it with
``gpu-cluster.io/unvalidated=true:NoSchedule`` (components/aws/eks_values.py, components/gcp/compute.py),
and ``validate submit`` removes that taint from each node its report passed, reading the node back;
a node the judge FAILed (or could not measure) keeps it. Against the test API server
(tests/kubeapi.py) through the official client: the scheduler is not simulated, so what is asserted
is the taint a fresh node carries before the verdict, after a PASS and after a FAIL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.components.contract import UNVALIDATED_TAINT_KEY
from gpu_cluster.workloads.validate import kube, kube_submit
from tests.kubeapi import KubeApiServer

REGISTERED = {"key": UNVALIDATED_TAINT_KEY, "value": "true", "effect": "NoSchedule"}
GKE_GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
VERDICTS = {"ip-pass": "PASS", "ip-warn": "WARN", "ip-fail": "FAIL", "ip-unknown": "UNKNOWN"}


@pytest.fixture
def server() -> Iterator[KubeApiServer]:
    with KubeApiServer() as srv:
        yield srv


def fresh(server: KubeApiServer, name: str) -> None:
    """A node as its kubelet registers it in a pool of ours: the pool's taints on it."""
    st = server.store
    st.create(st.resource("nodes"), "", {"metadata": {"name": name}, "spec": {"taints": [GKE_GPU, REGISTERED]}})


def taints(server: KubeApiServer, name: str) -> list[dict[str, Any]]:
    return list(server.store.get(server.store.resource("nodes"), "", name)["spec"].get("taints") or [])


def fetched(dest: Path, nodes: dict[str, str], unplaced: tuple[str, ...] = ()) -> None:
    """A report as submit has it after naming the nodes: each with the pod that ran there."""
    rows = [
        {"node": n, "pod": f"gpuc-x-node-0-{i}", "verdict": v, "reasons": []} for i, (n, v) in enumerate(nodes.items())
    ]
    rows += [{"node": p, "verdict": "PASS", "reasons": []} for p in unplaced]
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "report.json").write_text(json.dumps({"verdict": "FAIL", "nodes": rows}))
    (dest / "report.md").write_text("# report\n")


def test_a_fresh_node_keeps_the_taint_until_its_check_passes_and_a_failed_one_keeps_it(
    tmp_path: Path, server: KubeApiServer
) -> None:
    for name in VERDICTS:
        fresh(server, name)
    # Before any verdict every new node is out of work.
    assert all(REGISTERED in taints(server, n) for n in VERDICTS)
    dest = tmp_path / "run"
    fetched(dest, VERDICTS, unplaced=("gpuc-x-node-0-9",))
    api = kube.KubeApi(server.kubeconfig())
    said: list[str] = []
    kube_submit._admit_passed(api, dest, said.append)
    kube_submit._taint_failed(api, dest, said.append)
    # PASS and WARN (above every fail floor) are admitted; the platform's own taint stays.
    for name in ("ip-pass", "ip-warn"):
        assert taints(server, name) == [GKE_GPU], name
        assert f"{name}: passed; {UNVALIDATED_TAINT_KEY} taint removed (read back): it takes work now" in said
    # FAIL keeps the registration taint and gains the judge's; a node not measured keeps it too.
    assert taints(server, "ip-fail") == [GKE_GPU, REGISTERED, kube.TAINT]
    assert taints(server, "ip-unknown") == [GKE_GPU, REGISTERED]
    doc = json.loads((dest / "report.json").read_text())
    assert doc["admitted"] == ["ip-pass", "ip-warn"] and doc["drained"] == ["ip-fail"]
    assert (
        "Admitted to work (no gpu-cluster.io/unvalidated taint): ip-pass, ip-warn." in (dest / "report.md").read_text()
    )
    # A second submit of the same nodes patches nothing: they are read, found admitted, left alone.
    patches = sum(1 for m, p, _ in server.requests if m == "PATCH" and "/nodes/" in p)
    said.clear()
    kube_submit._admit_passed(api, dest, said.append)
    assert sum(1 for m, p, _ in server.requests if m == "PATCH" and "/nodes/" in p) == patches and said == []


def test_a_taint_that_comes_back_is_reported_not_counted_as_admitted(tmp_path: Path, server: KubeApiServer) -> None:
    """Admission is said only after reading the node back: a controller that puts the taint back
    (as AKS does to taints of its pool API, use-node-taints.md) leaves the node out of work, said so."""
    fresh(server, "ip-pass")

    def put_back(store: Any, event: str, obj: dict[str, Any]) -> None:
        if REGISTERED not in (obj["spec"].get("taints") or []):
            obj["spec"]["taints"] = [*(obj["spec"].get("taints") or []), REGISTERED]
            store.put(store.resource("nodes"), "", obj)

    server.store.on("nodes", put_back, "MODIFIED")
    dest = tmp_path / "run"
    fetched(dest, {"ip-pass": "PASS"})
    said: list[str] = []
    kube_submit._admit_passed(kube.KubeApi(server.kubeconfig()), dest, said.append)
    assert REGISTERED in taints(server, "ip-pass")
    assert said == [
        f"ip-pass: passed, but its {UNVALIDATED_TAINT_KEY} taint is still on it after removing it: remove it by hand"
    ]
    assert "admitted" not in json.loads((dest / "report.json").read_text())
