"""``submit`` on Kubernetes after a hang, through the official client against the test API server
(tests/kubeapi.py) on 127.0.0.1, a test playing the JobSet controller, the kubelet and the pods:
what each pod would do is done by this project's own code on a run directory in the exact shapes
the phases leave (tests/workloads/hang_fabricate.py), standing in for the cluster's Lustre.

16 x p5.48xlarge (EKS), one node bad. After a GPU hang (NCCL's abort, or our watchdog first) and a
CPU hang, the main JobSet ends at its pairs gate, submit runs one JobSet per pair, then the judge's
JobSet, and the report FAILs exactly the bad pod's node, which alone is tainted. A rendezvous one
pod never joined (its image never pulled) FAILs that pod alone without any pair."""

from __future__ import annotations

import io
import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.components.contract import ClusterOutputs
from tests.kubeapi import KubeApiServer, Store
from tests.launch.test_render_stacks import args as job_args
from tests.launch.test_render_stacks import outputs
from tests.workloads import hang_fabricate
from tests.workloads.hang_fabricate import agent_logs, main_statuses
from gpu_cluster.workloads.launch import validation as vjob
from gpu_cluster.workloads.validate import archive, commands, kube, pair_jobs
from gpu_cluster.workloads.validate.__main__ import judge_and_report

RUN_ID = "20261203t101500z-c0de"
NODES = 16
CULPRIT_INDEX = 6
INDEX = kube.INDEX_LABEL
RJOB = "jobset.sigs.k8s.io/replicatedjob-name"


def _node(i: int) -> str:
    return f"ip-10-0-0-{10 + i}"


class Cluster:
    """Plays the controllers: a JobSet, once created, runs at once; its pods' work is this
    project's code on ``run_dir``."""

    def __init__(self, api: KubeApiServer, run_dir: Path, hosts: list[str], scenario: str) -> None:
        self.api, self.run_dir, self.hosts, self.scenario = api, run_dir, hosts, scenario
        self.store = api.store
        self.culprit = hosts[CULPRIT_INDEX]
        self.jobsets = self.store.resource("jobsets")
        self.pods = self.store.resource("pods")
        self.created: list[str] = []
        for i in range(NODES):
            self.store.put(self.store.resource("nodes"), "", {"metadata": {"name": _node(i)}, "spec": {}})
        self.store.on("jobsets", self.run, "ADDED")

    def _pod(self, js: dict[str, Any], rjob: str, index: int, node: str | None, phase: str, log: str) -> None:
        ns, name = js["metadata"]["namespace"], js["metadata"]["name"]
        pod_name = f"{name}-{rjob}-0-{index}-x{index}"
        owner = {"apiVersion": kube.API_VERSION, "kind": "JobSet", "name": name, "uid": js["metadata"]["uid"]}
        pod = {
            "metadata": {
                "name": pod_name,
                "labels": {kube.NAME_LABEL: name, INDEX: str(index), RJOB: rjob},
                "ownerReferences": [owner],
            },
            "spec": {"containers": [{"name": "torchrun", "image": "x"}], **({"nodeName": node} if node else {})},
            "status": {"phase": phase},
        }
        self.store.put(self.pods, ns, pod)
        self.store.set_log(ns, pod_name, log)

    def _end(self, js: dict[str, Any], how: str) -> None:
        done = self.store.get(self.jobsets, js["metadata"]["namespace"], js["metadata"]["name"])
        done["status"] = {"conditions": [{"type": how, "status": "True"}]}
        self.store.put(self.jobsets, js["metadata"]["namespace"], done)

    def run(self, store: Store, _event: str, js: dict[str, Any]) -> None:
        name = js["metadata"]["name"]
        self.created.append(name)
        if name == vjob.jobset_name(RUN_ID):
            self._main(js)
        elif name == vjob.judge_jobset_name(RUN_ID):
            self._judge(js)
        else:
            self._pair(js)

    def _main(self, js: dict[str, Any]) -> None:
        if self.scenario == "rendezvous":
            # The culprit's pod is on its node, its image never pulls; the others waited at the
            # rendezvous, gave up, and pod 0 judged.
            agent_logs(self.run_dir, self.hosts, self.culprit, pod_lines=True)
            out = io.StringIO()
            code = judge_and_report(self.run_dir, "p5.48xlarge", self.hosts, False, False, 1.0)
            archive.emit(self.run_dir, out)
            for i in range(NODES):
                phase = "Pending" if i == CULPRIT_INDEX else "Failed" if i == 0 and code else "Succeeded"
                self._pod(js, "node", i, _node(i), phase, out.getvalue() if i == 0 else "")
            self._end(js, "Failed" if code else "Completed")
            return
        main_statuses(self.run_dir, self.hosts, 8, self.culprit, self.scenario)  # type: ignore[arg-type]
        for i in range(NODES):
            said: list[str] = []
            assert pair_jobs.gate(self.run_dir, self.hosts, 8, i, wait_s=5, say=said.append) == vjob.PAIRS_NEEDED_EXIT
            self._pod(js, "node", i, _node(i), "Succeeded", "\n".join(said) + "\n")
        self._end(js, "Completed")

    def _pair(self, js: dict[str, Any]) -> None:
        sides = {}
        for rjob in js["spec"]["replicatedJobs"]:
            pod = rjob["template"]["spec"]["template"]["spec"]
            env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
            sides[rjob["name"]] = (env["GPUC_NODE_NAME"], pod["nodeSelector"]["kubernetes.io/hostname"])
        (a, node_a), (b, node_b) = sides["a"], sides["b"]
        # Pinned where the main job's pods ran.
        assert node_a == _node(self.hosts.index(a)) and node_b == _node(self.hosts.index(b))
        hung = self.culprit in (a, b)
        log_a = "" if hung else pair_jobs.RESULT + json.dumps({"pair": f"{a}+{b}", "value": 479.5}) + "\n"
        self._pod(js, "a", 0, node_a, "Failed" if hung else "Succeeded", log_a)
        self._pod(js, "b", 0, node_b, "Failed" if hung else "Succeeded", "")
        self._end(js, "Failed" if hung else "Completed")

    def _judge(self, js: dict[str, Any]) -> None:
        (rjob,) = js["spec"]["replicatedJobs"]
        script = rjob["template"]["spec"]["template"]["spec"]["containers"][0]["command"][2]
        m = re.search(r"record-pairs --out (\S+) --result (\S+)", script)
        assert m is not None
        pair_jobs.record(self.run_dir, shlex.split(m.group(2))[0])
        judge_args = re.search(r"-m gpu_cluster\.workloads\.validate judge (.*) --print-archive", script)
        assert judge_args is not None and "--expect-nodes " + ",".join(self.hosts) in judge_args.group(1)
        code = judge_and_report(self.run_dir, "p5.48xlarge", self.hosts, False, False, 1.0)
        out = io.StringIO()
        archive.emit(self.run_dir, out)
        self._pod(js, "judge", 0, _node(0), "Failed" if code else "Succeeded", out.getvalue())
        self._end(js, "Failed" if code else "Completed")


@pytest.fixture
def server() -> Iterator[KubeApiServer]:
    with KubeApiServer(token="t0ken") as srv:
        yield srv


def _submit(tmp_path: Path, server: KubeApiServer, scenario: str) -> tuple[int, list[str], Cluster, ClusterOutputs]:
    outs = replace(outputs("aws-h100-eks"), nodes=NODES)
    hosts = list(vjob.pod_hostnames(vjob.jobset_name(RUN_ID), vjob.JOBSET_REPLICATED_JOB, NODES))
    run_dir = tmp_path / "lustre-run"
    run_dir.mkdir()
    cluster = Cluster(server, run_dir, hosts, scenario)
    a = job_args(delete=True, poll=0.0, fetch_to=str(tmp_path / "back"), stack="aws-h100-eks")
    r = commands.render_run(outs, a, RUN_ID)
    api = kube.KubeApi(server.kubeconfig(), read_timeout_s=30)
    said: list[str] = []
    dest = tmp_path / "back" / RUN_ID
    code = commands._submit_kubernetes(api, r, outs, dest, a, said.append, timeout=120)
    return code, said, cluster, outs


def _tainted(server: KubeApiServer) -> list[str]:
    nodes = server.store.list(server.store.resource("nodes"), None)
    return sorted(n["metadata"]["name"] for n in nodes if (n.get("spec") or {}).get("taints"))


@pytest.mark.parametrize("scenario", ["nccl-abort", "watchdog", "cpu-hang"])
def test_a_hang_runs_one_jobset_per_pair_and_fails_and_taints_only_the_bad_node(
    tmp_path: Path, server: KubeApiServer, scenario: str
) -> None:
    code, said, cluster, outs = _submit(tmp_path, server, scenario)
    dest = tmp_path / "back" / RUN_ID
    report = json.loads((dest / "report.json").read_text())
    verdicts = {n["node"]: n["verdict"] for n in report["nodes"]}
    # The report names Kubernetes nodes (spec.nodeName), each pod's name kept beside it.
    assert code == 2 and {n for n, v in verdicts.items() if v != "PASS"} == {_node(CULPRIT_INDEX)}, verdicts
    assert set(verdicts) == {_node(i) for i in range(NODES)}
    assert {n["node"]: n["pod"] for n in report["nodes"]}[_node(CULPRIT_INDEX)] == cluster.culprit
    assert report["pods"][cluster.culprit] == _node(CULPRIT_INDEX)
    scopes = [m["scope"] for m in report["measurements"] if str(m["scope"]).startswith(("node:", "gpu:", "pair:"))]
    assert not [sc for sc in scopes if "gpuc-" in sc], scopes
    # heal reads the nodes it acts on from the report: Kubernetes nodes, the culprit and the cleared.
    from gpu_cluster.heal.evidence import read_report

    evidence = read_report(dest)
    assert evidence.failed == [_node(CULPRIT_INDEX)]
    assert set(evidence.cleared) == {_node(i) for i in range(NODES)} - {_node(CULPRIT_INDEX)}
    # 8 pairs in the first round, then the culprit and its partner each with a known-good node.
    pairs = [n for n in cluster.created if "-p-" in n]
    assert len(pairs) == 10 and cluster.created[0] == vjob.jobset_name(RUN_ID)
    assert cluster.created[-1] == vjob.judge_jobset_name(RUN_ID)
    assert json.loads((dest / "phase-pairs.json").read_text())["pairs"]["bad"].keys() == {cluster.culprit}
    # Only the culprit's node is tainted, and the report says so.
    assert _tainted(server) == [_node(CULPRIT_INDEX)] and report["drained"] == [_node(CULPRIT_INDEX)]
    node = server.store.get(server.store.resource("nodes"), "", _node(CULPRIT_INDEX))
    assert node["spec"]["taints"] == [kube.TAINT]
    # Each pair JobSet was watched to its end and deleted with its pods; with --delete nothing is left.
    reqs = server.requests
    assert any(q.get("watch", "").lower() == "true" and "jobsets" in p for _, p, q in reqs)
    assert server.store.list(cluster.jobsets, None) == [] and server.store.list(cluster.pods, None) == []
    policies = [p for m, p, _ in reqs if m == "POST" and p.endswith("/networkpolicies")]
    assert len(policies) == 1 + 10 + 1
    assert any("jobset gpuc-" in s and "-judge" in s for s in said)


def test_a_rendezvous_one_pod_never_joined_fails_its_node_alone_without_pairs(
    tmp_path: Path, server: KubeApiServer
) -> None:
    # The real agents' rendezvous runs before the API is asked (its answer would wait on them).
    hang_fabricate._agent_logs()
    code, said, cluster, outs = _submit(tmp_path, server, "rendezvous")
    report = json.loads((tmp_path / "back" / RUN_ID / "report.json").read_text())
    verdicts = {n["node"]: n for n in report["nodes"]}
    culprit = _node(CULPRIT_INDEX)
    assert code == 2 and {n for n, v in verdicts.items() if v["verdict"] != "PASS"} == {culprit}
    assert "never started" in verdicts[culprit]["reasons"][0] and verdicts[culprit]["pod"] == cluster.culprit
    assert cluster.created == [vjob.jobset_name(RUN_ID)]
    assert _tainted(server) == [_node(CULPRIT_INDEX)]


def test_the_gate_is_a_step_on_every_pod_that_ends_the_jobset_and_runs_in_bash(tmp_path: Path) -> None:
    """The rendered pod script runs the gate on every pod (no pod-0 guard), and its pairs status
    ends the script with 0 before the next step: run by bash with stand-ins for python and
    torchrun that record each step and exit with the gate's status."""
    import subprocess

    outs = outputs("aws-h100-eks")
    r = commands.render_run(outs, job_args(python=str(tmp_path / "py")), RUN_ID)
    assert r.jobset is not None
    script = r.jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["command"][
        2
    ]
    script = script.replace("$$", "$")  # what Kubernetes hands bash
    fake = tmp_path / "py"
    log = tmp_path / "steps"
    fake.write_text(
        f'#!/bin/sh\ncase "$*" in *socket.getaddrinfo*) exit 0;; esac\necho "$*" >> {log}\n'
        f'case "$*" in *pair-gate*) exit {vjob.PAIRS_NEEDED_EXIT};; esac\nexit 0\n'
    )
    fake.chmod(0o755)
    work = tmp_path / "fsx"
    script = script.replace(outs.mount.mount_point, str(work)).replace("/opt/gpuc-bundle", str(tmp_path))
    script = script.replace(vjob.POD_CODE_DIR, str(tmp_path / "code"))  # nothing outside tmp_path is touched
    script = script.replace("tar -xzf", ": tar -xzf")
    # The image's EFA libraries, which the script finds at start (catalog fabrics.efa.pod.found_at_start).
    efa = tmp_path / "amazon"
    for lib in ("efa/lib64/libfabric.so.1", "ofi-nccl/lib64/libnccl-net-ofi.so"):
        (efa / lib).parent.mkdir(parents=True, exist_ok=True)
        (efa / lib).touch()
    script = script.replace("/opt/amazon/", f"{efa}/")
    for index in ("0", "3"):
        log.unlink(missing_ok=True)
        done = subprocess.run(
            ["bash", "-c", script],
            env={"PATH": "/usr/bin:/bin", "JOB_COMPLETION_INDEX": index},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        steps = log.read_text().splitlines()
        assert "torch.distributed.run" in steps[0] and "pair-gate" in steps[1] and len(steps) == 2, steps
        assert "ends the job here" in done.stdout
