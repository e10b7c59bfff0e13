"""Run heal on an EKS node against moto's server (EC2 and Auto Scaling, through
``AWS_ENDPOINT_URL``) and the test's Kubernetes API server, holding the cluster's Lease as
``gpu-cluster heal --apply`` does (I9), and die hard (tests/heal/_crash_common.py) after the N-th
journal line or on either side of the N-th call of any client method heal makes: the Auto Scaling
and EC2 reads and ``terminate_instance_in_auto_scaling_group``, and the Kubernetes reads and writes
(``read_node``, ``list_node``, ``list_pod_for_all_namespaces``, ``patch_node`` for the cordon and
taint, the replacement's hold and the return to service, ``create_namespaced_pod_eviction``).
Used by test_eks_crash_rerun.py.

    python -m tests.heal._eks_crash_worker RUN_DIR [N | before:METHOD[#N] | after:METHOD[#N] | none] [OFFSET_S]

RUN_DIR holds ``world.json`` (the Kubernetes server's URL, the bad node's name, the group, the
instance the judge fails, heal's limits) and ``outputs.pickle`` (the stack's outputs, pointed at
that server). OFFSET_S moves the clock this run reads the Lease with that far ahead: a rerun
"later" (tests/heal/_crash_common.py). Every terminate call that reached moto is appended to ``terminations.jsonl`` before this
process may die. The kubelet of each new instance is played here, in the engine's wait: an instance
of the group that no node names registers as a node, with the GPU pool's registration taint, as its
kubelet would (components/aws/eks_values.py)."""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import urllib.request
from pathlib import Path
from typing import Any

from gpu_cluster.components.contract import UNVALIDATED_TAINT_EFFECT, UNVALIDATED_TAINT_KEY
from gpu_cluster.heal.aws import EksAsgCloud, clients
from gpu_cluster.heal.cli import cluster_lock
from gpu_cluster.heal.engine import POLL_S, Engine
from gpu_cluster.heal.evidence import read_report
from gpu_cluster.heal.journal import Journal
from gpu_cluster.heal.kubernetes import KubeScheduler
from gpu_cluster.heal.lock import KubeLease, LockHeld, me
from gpu_cluster.heal.platforms import KubeChecker, PlatformError
from gpu_cluster.heal.policy import Limits
from tests.heal._crash_common import Clock, Dying, line_killer

REGION = "us-east-1"
REGISTERED = {"key": UNVALIDATED_TAINT_KEY, "value": "true", "effect": UNVALIDATED_TAINT_EFFECT}


def k8s_node(name: str, instance: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"providerID": f"aws:///{REGION}a/{instance}", "taints": [REGISTERED]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


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
    clock = Clock(float(sys.argv[3]) if len(sys.argv) > 3 else 0.0, POLL_S)
    world = json.loads((run_dir / "world.json").read_text(encoding="utf-8"))
    outs = pickle.loads((run_dir / "outputs.pickle").read_bytes())
    ec2, asg = clients(REGION)
    kube = KubeScheduler(outs.access.kubeconfig)
    kube.core = Dying(kube.core, when)
    log = run_dir / "terminations.jsonl"
    lease = KubeLease(outs.access.kubeconfig, me(run_dir), clock=clock.lease)

    def wait(_s: float) -> None:
        clock.wait()
        kubelet(world["api"], asg, world["group"])

    try:
        with Journal(run_dir, echo=line_killer(when), clock=clock) as j, cluster_lock(lease, True) as lost:
            e = Engine(
                cluster="train",
                journal=j,
                scheduler=kube,
                cloud=EksAsgCloud(
                    Dying(ec2, when),
                    Dying(asg, when, log, logged=("terminate_instance_in_auto_scaling_group",)),
                ),
                checker=KubeChecker(outs, argparse.Namespace(python=None, image=world["image"]), run_dir, poll_s=0.01),
                limits=Limits(apply=True, **world.get("limits", {})),
                say=print,
                sleep=wait,
                poll_s=0.0,
                guard=lost,
            )
            return e.run(read_report(run_dir / "report.json")).code
    except (LockHeld, PlatformError) as exc:  # as `gpu-cluster heal` answers them (cli.main): exit 3
        print(f"heal: {exc}", flush=True)
        return 3


if __name__ == "__main__":
    raise SystemExit(main())
