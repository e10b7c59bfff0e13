"""``submit`` on Kubernetes, down to the objects it creates: no API server runs here, so an
in-memory API records every call and plays the JobSet controller (pods appear, run, finish,
pod 0's log carries the judge's report archive). The objects it receives are the ones
``render`` writes, the ConfigMap is owned by the JobSet, and the verdict is the report's."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Mapping

import pytest

from gpu_cluster.components.contract import ClusterOutputs
from gpu_cluster.workloads.launch import bundle as code_bundle
from gpu_cluster.workloads.validate import archive, commands, kube
from tests.launch.test_render_stacks import args as job_args
from tests.launch.test_render_stacks import outputs

RUN_ID = "20261201t080000z-beef"


class FakeApi:
    """Plays the API server and the JobSet controller for one JobSet."""

    def __init__(self, report_dir: Path, nodes: int, outcome: str = "Completed") -> None:
        self.calls: list[tuple[str, Any]] = []
        self.objects: dict[str, dict[str, Any]] = {}
        self.report_dir, self.nodes, self.outcome = report_dir, nodes, outcome
        self.polls = 0

    def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.calls.append(("create_jobset", namespace))
        made = json.loads(json.dumps(body))
        made["metadata"]["uid"] = "0b5e-uid"
        self.objects["jobset"] = made
        return made

    def create_configmap(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.calls.append(("create_configmap", namespace))
        self.objects["configmap"] = json.loads(json.dumps(body))
        return self.objects["configmap"]

    def get_jobset(self, namespace: str, name: str) -> dict[str, Any]:
        self.polls += 1
        js = dict(self.objects["jobset"])
        if self.polls >= 3:
            js["status"] = {"conditions": [{"type": self.outcome, "status": "True"}]}
        return js

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        assert selector == f"{kube.NAME_LABEL}={self.objects['jobset']['metadata']['name']}"
        phase = "Pending" if self.polls < 2 else "Running" if self.polls < 3 else "Succeeded"
        name = self.objects["jobset"]["metadata"]["name"]
        return [
            {
                "metadata": {"name": f"{name}-node-0-{i}-x", "labels": {kube.INDEX_LABEL: str(i)}},
                "status": {"phase": phase},
            }
            for i in range(self.nodes)
        ]

    def pod_log(self, namespace: str, pod: str) -> str:
        if not pod.endswith("-0-0-x"):
            return "pod 1 of 2: done; pod 0 decides\n"
        out = io.StringIO()
        out.write("step 5: judge\n")
        archive.emit(self.report_dir, out)
        return out.getvalue()

    def set_owner(self, namespace: str, configmap: str, owner: Mapping[str, Any]) -> None:
        self.calls.append(("set_owner", configmap))
        assert configmap == self.objects["configmap"]["metadata"]["name"]
        self.objects["configmap"]["metadata"]["ownerReferences"] = [dict(owner)]

    def create_networkpolicy(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.calls.append(("create_networkpolicy", namespace))
        self.objects["networkpolicy"] = json.loads(json.dumps(body))
        return self.objects["networkpolicy"]

    def set_networkpolicy_owner(self, namespace: str, name: str, owner: Mapping[str, Any]) -> None:
        self.calls.append(("set_networkpolicy_owner", name))
        self.objects["networkpolicy"]["metadata"]["ownerReferences"] = [dict(owner)]

    def delete_jobset(self, namespace: str, name: str) -> None:
        self.calls.append(("delete_jobset", name))

    def check_jobset_api(self, namespace: str) -> None:
        self.calls.append(("check_jobset_api", namespace))

    def list_nodes(self, selector: str) -> list[dict[str, Any]]:
        return [
            {
                "metadata": {"name": "ip-10-0-1-5"},
                "spec": {"taints": [{"key": "gpu-cluster/validation", "value": "fail", "effect": "NoSchedule"}]},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            },
            {
                "metadata": {"name": "ip-10-0-1-6"},
                "spec": {"unschedulable": True},
                "status": {"conditions": [{"type": "Ready", "status": "False"}]},
            },
        ]


def _report(tmp_path: Path, verdict: str) -> Path:
    d = tmp_path / "pod-run"
    d.mkdir()
    (d / "report.json").write_text(json.dumps({"verdict": verdict, "nodes": []}))
    (d / "report.md").write_text(f"# Validation: {verdict}\n")
    return d


def _submit(tmp_path: Path, outs: ClusterOutputs, api: FakeApi, delete: bool) -> tuple[int, list[str]]:
    a = job_args(delete=delete, poll=0.0, fetch_to=str(tmp_path / "back"), stack="aws-h100-eks")
    r = commands.render_run(outs, a, RUN_ID)
    said: list[str] = []
    dest = tmp_path / "back" / "aws-h100-eks" / RUN_ID
    code = commands._submit_kubernetes(api, r, outs, dest, a, said.append, timeout=60)
    return code, said


@pytest.mark.parametrize("verdict,code", [("PASS", 0), ("WARN", 1), ("FAIL", 2)])
def test_submit_creates_the_rendered_objects_follows_and_returns_the_verdict(
    tmp_path: Path, verdict: str, code: int
) -> None:
    outs = outputs("aws-h100-eks")
    api = FakeApi(_report(tmp_path, verdict), outs.nodes)
    got, said = _submit(tmp_path, outs, api, delete=False)
    assert got == code
    rendered = commands.render_run(outs, job_args(), RUN_ID)
    assert rendered.jobset is not None and rendered.configmap is not None
    # Exactly the objects render writes; the ConfigMap owned by the JobSet it belongs to.
    assert api.objects["jobset"]["spec"] == rendered.jobset["spec"]
    cm = api.objects["configmap"]
    assert cm["binaryData"] == rendered.configmap["binaryData"]
    assert cm["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "name": f"gpuc-{RUN_ID}",
            "uid": "0b5e-uid",
            "blockOwnerDeletion": False,
        }
    ]
    assert cm["metadata"]["annotations"]["gpu-cluster/bundle-digest"] == code_bundle.build().digest
    # The JobSet API is checked before anything is made (a missing CRD leaves nothing behind);
    # the policy and the code exist before any pod could start; then the JobSet owns both.
    assert [c[0] for c in api.calls] == [
        "check_jobset_api",
        "create_networkpolicy",
        "create_configmap",
        "create_jobset",
        "set_owner",
        "set_networkpolicy_owner",
    ]
    assert api.objects["networkpolicy"]["spec"] == rendered.networkpolicy["spec"]  # type: ignore[index]
    assert api.objects["networkpolicy"]["metadata"]["ownerReferences"] == cm["metadata"]["ownerReferences"]
    # Progress as it happened, then the report and every pod's log on this machine.
    assert any("pods 4 Pending of 4" in s for s in said) and any("pods 4 Running of 4" in s for s in said)
    back = tmp_path / "back" / "aws-h100-eks" / RUN_ID
    assert json.loads((back / "report.json").read_text())["verdict"] == verdict
    assert len(list((back / "logs").glob("*.log"))) == outs.nodes


def test_delete_on_request_and_no_report_is_could_not_run(tmp_path: Path) -> None:
    outs = outputs("aws-h100-eks")
    empty = tmp_path / "empty"
    empty.mkdir()
    api = FakeApi(empty, outs.nodes, outcome="Failed")
    got, said = _submit(tmp_path, outs, api, delete=True)
    assert got == 3
    assert ("delete_jobset", f"gpuc-{RUN_ID}") in api.calls
    assert any("no report came back" in s for s in said)


def test_status_lists_nodes_with_their_taints() -> None:
    rows = kube.node_states(FakeApi(Path("."), 1), {"node.kubernetes.io/instance-type": "p5.48xlarge"})
    assert rows == [
        ("ip-10-0-1-5", "Ready", "gpu-cluster/validation=fail:NoSchedule"),
        ("ip-10-0-1-6", "NotReady,SchedulingDisabled", ""),
    ]


@pytest.mark.parametrize("stack", ["aws-h100-eks", "gcp-h100-gke"])
def test_the_official_client_accepts_the_stacks_kubeconfig(stack: str) -> None:
    outs = outputs(stack)
    assert outs.access.kubeconfig is not None
    api = kube.KubeApi(outs.access.kubeconfig)
    assert api._client.configuration.host == outs.access.api_endpoint


def test_archive_cut_short_brings_nothing(tmp_path: Path) -> None:
    d = _report(tmp_path, "PASS")
    out = io.StringIO()
    archive.emit(d, out)
    whole = out.getvalue()
    assert archive.extract(whole, tmp_path / "a") == ["report.json", "report.md"]
    assert archive.extract(whole.rsplit(archive.END, 1)[0], tmp_path / "b") == []
    assert archive.extract("no archive here", tmp_path / "c") == []
