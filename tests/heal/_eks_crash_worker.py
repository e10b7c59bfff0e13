"""Run heal on an EKS node against moto's server (EC2 and Auto Scaling, through
``AWS_ENDPOINT_URL``) and the test's Kubernetes API server, and die hard (``os._exit``, as a SIGKILL
leaves things: no finally, no flush) after the N-th journal line, or on either side of the cloud
call that acts: ``before-terminate``/``after-terminate`` (TerminateInstanceInAutoScalingGroup), or
``after-hold`` (heal has cordoned and tainted the replacement's node, before the line that says so).
Used by test_eks_crash_rerun.py.

    python -m tests.heal._eks_crash_worker RUN_DIR [N | before-terminate | after-terminate | after-hold | none]

RUN_DIR holds ``world.json`` (the Kubernetes server's URL, the bad node's name, the group) and
``outputs.pickle`` (the stack's outputs, pointed at that server). Every terminate call that reached
moto is appended to ``terminations.jsonl`` before this process may die. The kubelet of each new
instance is played here, in the engine's sleep: an instance of the group that no node names
registers as a node, as its kubelet would."""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import urllib.request
from pathlib import Path
from typing import Any

from gpu_cluster.heal.aws import EksAsgCloud, clients
from gpu_cluster.heal.engine import Engine
from gpu_cluster.heal.evidence import read_report
from gpu_cluster.heal.journal import Journal
from gpu_cluster.heal.kubernetes import KubeScheduler
from gpu_cluster.heal.platforms import KubeChecker
from gpu_cluster.heal.policy import Limits

REGION = "us-east-1"


def k8s_node(name: str, instance: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"providerID": f"aws:///{REGION}a/{instance}"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


class DyingAsg:
    """The Auto Scaling client, dying on the asked side of the terminate call."""

    def __init__(self, asg: Any, when: str, log: Path) -> None:
        self._asg, self._when, self._log = asg, when, log

    def __getattr__(self, name: str) -> Any:
        return getattr(self._asg, name)

    def terminate_instance_in_auto_scaling_group(self, **kw: Any) -> Any:
        if self._when == "before-terminate":
            os._exit(9)
        got = self._asg.terminate_instance_in_auto_scaling_group(**kw)
        with self._log.open("a", encoding="utf-8") as f:
            f.write(json.dumps(kw) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if self._when == "after-terminate":
            os._exit(9)
        return got


class DyingKube(KubeScheduler):
    def __init__(self, kubeconfig: str, when: str, bad: str) -> None:
        super().__init__(kubeconfig)
        self._when, self._bad = when, bad

    def quarantine(self, name: str, incident: str, why: str) -> Any:
        out = super().quarantine(name, incident, why)
        if self._when == "after-hold" and name != self._bad:
            os._exit(9)
        return out


def kubelet(api: str, asg: Any, group: str) -> None:
    g = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"][0]
    with urllib.request.urlopen(f"{api}/api/v1/nodes") as r:
        nodes = json.load(r)["items"]
    known = {n["spec"]["providerID"].rsplit("/", 1)[-1] for n in nodes}
    for inst in g["Instances"]:
        if inst["InstanceId"] in known:
            continue
        body = json.dumps(k8s_node(f"ip-10-0-2-{len(nodes)}.ec2.internal", inst["InstanceId"])).encode()
        req = urllib.request.Request(
            f"{api}/api/v1/nodes", data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        urllib.request.urlopen(req).close()
        nodes.append({})


def main() -> int:
    run_dir, when = Path(sys.argv[1]), sys.argv[2]
    world = json.loads((run_dir / "world.json").read_text(encoding="utf-8"))
    outs = pickle.loads((run_dir / "outputs.pickle").read_bytes())
    lines = [0]

    def echo(_line: str) -> None:
        lines[0] += 1
        if when.isdigit() and lines[0] == int(when):
            os._exit(9)  # the line is on disk: written and fsynced before it is echoed

    ec2, asg = clients(REGION)
    with Journal(run_dir, echo=echo) as j:
        e = Engine(
            cluster="train",
            journal=j,
            scheduler=DyingKube(outs.access.kubeconfig, when, world["bad"]),
            cloud=EksAsgCloud(ec2, DyingAsg(asg, when, run_dir / "terminations.jsonl")),
            checker=KubeChecker(outs, argparse.Namespace(python=None, image=world["image"]), run_dir, poll_s=0.01),
            limits=Limits(apply=True),
            say=lambda line: None,
            sleep=lambda _s: kubelet(world["api"], asg, world["group"]),
            poll_s=0.0,
        )
        return e.run(read_report(run_dir / "report.json")).code


if __name__ == "__main__":
    raise SystemExit(main())
