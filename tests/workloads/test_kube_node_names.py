"""A Kubernetes report, once fetched by ``submit``, names nodes as the scheduler does (each pod's
``spec.nodeName`` from the API), so two runs whose pods had different names compare node by node:
``validate diff`` lines them up and a GPU's lifetime ECC count is compared with the last run's."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gpu_cluster.workloads.launch import validation as vjob
from gpu_cluster.workloads.validate import kube, kube_submit
from gpu_cluster.workloads.validate.diff import diff_reports

NODES = ["ip-10-0-0-10", "ip-10-0-0-11"]


class Api:
    """The one call the naming makes: the JobSet's pods, each with its index and node."""

    def __init__(self, jobset: str) -> None:
        self.jobset = jobset

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        assert selector == f"{kube.NAME_LABEL}={self.jobset}"
        return [
            {"metadata": {"labels": {kube.INDEX_LABEL: str(i)}}, "spec": {"nodeName": node}}
            for i, node in enumerate(NODES)
        ]


def _report(jobset: str, ecc: int, tflops: float) -> dict[str, Any]:
    pods = vjob.pod_hostnames(jobset, vjob.JOBSET_REPLICATED_JOB, len(NODES))
    return {
        "verdict": "PASS",
        "nodes": [{"node": p, "verdict": "PASS", "reasons": []} for p in pods],
        "measurements": [
            {"check": "health.matmul", "scope": f"gpu:{p}/0", "value": tflops, "unit": "TFLOP/s", "verdict": "PASS"}
            for p in pods
        ],
        "gate": [{"node": p, "ecc_aggregate": {"gpu0": ecc if i == 1 else 0}} for i, p in enumerate(pods)],
        "stack": {p: {"nccl": "2.27.7"} for p in pods},
    }


def _fetch(back: Path, run_id: str, ecc: int, tflops: float = 700.0) -> dict[str, Any]:
    jobset = vjob.jobset_name(run_id)
    dest = back / run_id
    dest.mkdir(parents=True)
    (dest / "report.json").write_text(json.dumps(_report(jobset, ecc, tflops)))
    (dest / "report.md").write_text("# report\n")
    said: list[str] = []
    kube_submit._name_nodes(Api(jobset), "gpu-jobs", jobset, len(NODES), dest, said.append)
    doc = json.loads((dest / "report.json").read_text())
    doc["_said"] = said
    return doc


def test_reports_name_nodes_and_two_runs_compare_node_by_node(tmp_path: Path) -> None:
    back = tmp_path / "back"
    old = _fetch(back, "20261201t000000z-aaaa", ecc=2)
    assert [n["node"] for n in old["nodes"]] == NODES and set(old["stack"]) == set(NODES)
    assert old["nodes"][0]["pod"] == vjob.pod_hostnames(vjob.jobset_name("20261201t000000z-aaaa"), "node", 2)[0]
    assert {m["scope"] for m in old["measurements"]} == {f"gpu:{n}/0" for n in NODES}
    assert old["verdict"] == "PASS"  # the first run: its ECC counts are the baseline
    # The earlier run's files are older than anything the next run fetches.
    for f in (back / "20261201t000000z-aaaa").iterdir():
        os.utime(f, (1_000_000_000, 1_000_000_000))
    new = _fetch(back, "20261202t000000z-bbbb", ecc=5, tflops=500.0)
    # Different pods, the same nodes: the diff lines them up, and the ECC count went up on one GPU.
    d = diff_reports(old, new)
    assert not d.nodes_added and not d.nodes_removed and not d.only_old
    assert d.only_new == [f"gate.ecc.aggregate gpu:{NODES[1]}/0"]
    assert sorted(f.scope for f in d.regressions) == [f"gpu:{n}/0" for n in NODES]
    assert [n["node"] for n in new["nodes"]] == NODES
    ecc = [m for m in new["measurements"] if m["check"] == "gate.ecc.aggregate"]
    assert [m["scope"] for m in ecc] == [f"gpu:{NODES[1]}/0"] and ecc[0]["verdict"] == "WARN"
    assert "3 new uncorrectable ECC error(s) since run 20261201t000000z-aaaa (lifetime 2 -> 5)" in ecc[0]["detail"]
    assert new["verdict"] == "WARN" and {n["node"]: n["verdict"] for n in new["nodes"]}[NODES[1]] == "WARN"
    assert "## Kubernetes nodes" in (back / "20261202t000000z-bbbb" / "report.md").read_text()


def test_heal_acts_on_the_node_a_kubernetes_report_names(tmp_path: Path) -> None:
    """The fetched report names the FAIL node as the scheduler does, so heal finds that node through
    the Kubernetes API (tests/kubeapi.py) and quarantines it; a pod name there would have been
    refused as a node the scheduler does not know."""
    from gpu_cluster.heal.evidence import read_report
    from gpu_cluster.heal.kubernetes import TAINT_KEY, KubeScheduler
    from tests.heal.test_kubernetes import node as kube_node
    from tests.kubeapi import KubeApiServer

    run_id = "20261203t000000z-cccc"
    jobset = vjob.jobset_name(run_id)
    dest = tmp_path / run_id
    dest.mkdir()
    doc = _report(jobset, ecc=0, tflops=700.0)
    bad_pod = doc["nodes"][1]["node"]
    doc["verdict"] = "FAIL"
    doc["nodes"][1] = {"node": bad_pod, "verdict": "FAIL", "reasons": ["gate ecc.volatile (gpu0): 3"]}
    (dest / "report.json").write_text(json.dumps(doc))
    (dest / "report.md").write_text("# report\n")
    kube_submit._name_nodes(Api(jobset), "gpu-jobs", jobset, len(NODES), dest, lambda _line: None)

    ev = read_report(dest / "report.json")
    (finding,) = [f for f in ev.findings if f.actionable]
    acted = [finding.node]
    assert acted == [NODES[1]], ev.findings
    with KubeApiServer() as server:
        for i, name in enumerate(NODES):
            server.store.create(server.store.resource("nodes"), "", kube_node(name, f"aws:///us-east-1a/i-0{i}"))
        k = KubeScheduler(server.kubeconfig())
        assert k.node(acted[0]).present
        out = k.quarantine(acted[0], "h-0123456789", finding.why)
        assert out.ok, out.detail
        taints = server.store.get(server.store.resource("nodes"), "", NODES[1])["spec"]["taints"]
        assert {"key": TAINT_KEY, "value": "h-0123456789", "effect": "NoSchedule"} in taints
