"""Run heal on a plain Kubernetes cluster, no cloud API: heal's Kubernetes half
(gpu_cluster/heal/kubernetes.py: cordon, taint, eviction, return to service, the Lease) against the
test's Kubernetes API server, and the machines as the rehearsal's file-backed cluster
(gpu_cluster/heal/local.py: a replacement is a fresh machine record in the slot, once per token).
It holds the cluster's Lease as ``gpu-cluster heal --apply`` does (I9) and dies hard
(tests/heal/_crash_common.py) after the N-th journal line or on either side of the N-th call of a
Kubernetes method heal makes. Used by test_kube_crash_rerun.py.

    python -m tests.heal._kube_crash_worker RUN_DIR [N | before:METHOD[#N] | after:METHOD[#N] | none] [OFFSET_S]

``world.json``: the server's URL, the machines' faults ({} for a flake) and ``pair_peer``: every check
with that peer FAILs for the pair's figure (tests/heal/crash_checks.py ``pair``; I8), any other
fails a node whose machine has a fault, each check recorded in the run folder. The kubelet is played
in the engine's wait: a machine whose record is not the one its node names was re-imaged, and its
kubelet registers the node anew under its own name, with the pools' registration taint
``gpu-cluster.io/unvalidated`` (the old Node object deleted, as a node that re-registers after a
re-install is)."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

from gpu_cluster.components.contract import UNVALIDATED_TAINT_EFFECT, UNVALIDATED_TAINT_KEY
from gpu_cluster.heal import local
from gpu_cluster.heal.cli import cluster_lock
from gpu_cluster.heal.engine import POLL_S, Engine
from gpu_cluster.heal.evidence import read_report
from gpu_cluster.heal.journal import Journal
from gpu_cluster.heal.kubernetes import KubeScheduler
from gpu_cluster.heal.lock import KubeLease, LockHeld, me
from gpu_cluster.heal.platforms import PlatformError
from gpu_cluster.heal.policy import Limits
from tests.heal._crash_common import Clock, Dying, line_killer
from tests.heal.crash_checks import RecordedChecks

NODES = 4
REGISTERED = {"key": UNVALIDATED_TAINT_KEY, "value": "true", "effect": UNVALIDATED_TAINT_EFFECT}


def node(name: str, instance: str, taints: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"providerID": f"local:///{instance}", "taints": taints},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def _ask(api: str, method: str, path: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{api}{path}", data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def kubelet(api: str, world: local.LocalCluster) -> None:
    nodes = {n["metadata"]["name"]: n for n in _ask(api, "GET", "/api/v1/nodes")["items"]}
    for name, rec in world.doc["nodes"].items():
        now = nodes.get(name)
        if now is not None and now["spec"]["providerID"].endswith("/" + rec["instance"]):
            continue
        if now is not None:
            _ask(api, "DELETE", f"/api/v1/nodes/{name}")
        _ask(api, "POST", "/api/v1/nodes", node(name, rec["instance"], [REGISTERED]))


def main() -> int:
    run_dir, when = Path(sys.argv[1]), sys.argv[2]
    clock = Clock(float(sys.argv[3]) if len(sys.argv) > 3 else 0.0, POLL_S)
    spec = json.loads((run_dir / "world.json").read_text(encoding="utf-8"))
    world = local.LocalCluster.open(run_dir, NODES, spec["faults"])
    kubeconfig = (run_dir / "kubeconfig").read_text(encoding="utf-8")
    kube = KubeScheduler(kubeconfig)
    kube.core = Dying(kube.core, when)

    def wait(_s: float) -> None:
        clock.wait()
        kubelet(spec["api"], world)

    def faulty(name: str) -> bool:  # the machine the node is on now, read from the file
        return bool(json.loads(world.path.read_text(encoding="utf-8"))["nodes"][name]["faults"])

    try:
        with (
            Journal(run_dir, echo=line_killer(when), clock=clock) as j,
            cluster_lock(KubeLease(kubeconfig, me(run_dir), clock=clock.lease), True) as lost,
        ):
            e = Engine(
                cluster="train",
                journal=j,
                scheduler=kube,
                cloud=local.LocalCloud(world),
                checker=RecordedChecks(
                    run_dir, "pair" if spec.get("pair_peer") else "replace", faulty, pair_peer=spec.get("pair_peer", "")
                ),
                limits=Limits(apply=True),
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
