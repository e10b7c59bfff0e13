"""Run heal on the AKS stand-in (tests/heal/aks_world.py: ARM on a loopback server, the nodes on the
test Kubernetes API server) and die hard (``os._exit``, as a SIGKILL leaves things: no finally, no
flush) after the N-th journal line, or on either side of the K-th ARM call of a kind:
``before-delete-1``/``after-delete-1`` (agentPools deleteMachines), ``-put-`` (agentPools
createOrUpdate), ``-pool-`` (agentPools get), ``-list-`` (machines list, each page),
``-machine-`` (machines get). Used by test_aks_crash_rerun.py.

    python -m tests.heal._aks_crash_worker RUN_DIR MODE [N | before-KIND-K | after-KIND-K | none | count] [OFFSET_S]

MODE is a tests/heal/crash_checks.py scenario; world.json in RUN_DIR holds the ARM URL, the
kubeconfig and the nodes the check fails. Heal holds the cluster's Lease on the test Kubernetes API
server as ``gpu-cluster heal --apply`` does on AKS (cli.py ``cluster_lock``, platforms.py ``build``:
every Kubernetes stack takes ``KubeLease``; I9), read with a clock OFFSET_S ahead: a rerun "later"
(tests/heal/_crash_common.py). A held Lease is answered as ``gpu-cluster heal`` answers it: one line, exit 3.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from gpu_cluster.heal.azure import AksCloud, Arm
from gpu_cluster.heal.cli import cluster_lock
from gpu_cluster.heal.engine import Engine
from gpu_cluster.heal.evidence import read_report
from gpu_cluster.heal.journal import Journal
from gpu_cluster.heal.kubernetes import KubeScheduler
from gpu_cluster.heal.lock import KubeLease, LockHeld, me
from gpu_cluster.heal.platforms import PlatformError
from tests.heal._crash_common import Clock
from tests.heal.aks_world import CLUSTER, RG, SUB
from tests.heal.crash_checks import RecordedChecks, limits_for


def kind_of(method: str, path: str) -> str:
    if method == "POST":
        return "delete"
    if method == "PUT":
        return "put"
    if "/machines/" in path.split("?")[0]:
        return "machine"
    if "/machines" in path:
        return "list"
    return "pool"


class DyingArm(Arm):
    def __init__(self, url: str, when: str) -> None:
        super().__init__("token", url)
        self.when = when
        self.seen: dict[str, int] = {}
        self.calls: list[str] = []
        """Every call, in order, as ``KIND-K``."""

    def call(self, method: str, path: str, body: Any = None, api_version: str = "2025-10-01") -> tuple[int, Any]:
        kind = kind_of(method, path)
        self.seen[kind] = k = self.seen.get(kind, 0) + 1
        self.calls.append(f"{kind}-{k}")
        if self.when == f"before-{kind}-{k}":
            os._exit(9)
        got = super().call(method, path, body, api_version=api_version)
        if self.when == f"after-{kind}-{k}":
            os._exit(9)
        return got


def main() -> int:
    run_dir, mode, when = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    clock = Clock(float(sys.argv[4]) if len(sys.argv) > 4 else 0.0, 0.0)  # no wait counted: sleep is a no-op
    world = json.loads((run_dir / "world.json").read_text(encoding="utf-8"))
    lines = [0]

    def echo(_line: str) -> None:
        lines[0] += 1
        if when.isdigit() and lines[0] == int(when):
            os._exit(9)  # the line is on disk: written and fsynced before it is echoed

    sched = KubeScheduler(world["kubeconfig"])

    def look(node: str) -> dict[str, Any]:
        spec = sched.read(node).get("spec") or {}
        return {"unschedulable": bool(spec.get("unschedulable")), "taints": spec.get("taints") or []}

    checks = RecordedChecks(run_dir, mode, lambda n: n in world["bad"], pair_peer=world["pair_peer"], look=look)
    arm = DyingArm(world["url"], when)
    lease = KubeLease(world["kubeconfig"], me(run_dir), clock=clock.lease)
    try:
        with Journal(run_dir, echo=echo) as j, cluster_lock(lease, True) as lost:
            e = Engine(
                cluster="train",
                journal=j,
                scheduler=sched,
                cloud=AksCloud(arm, SUB, RG, CLUSTER),
                checker=checks,
                limits=limits_for(mode),
                say=lambda line: None,
                sleep=lambda s: None,
                poll_s=0.0,
                guard=lost,
            )
            code = e.run(read_report(run_dir / "report.json")).code
    except (LockHeld, PlatformError) as exc:  # as `gpu-cluster heal` answers them (cli.main): exit 3
        print(f"heal: {exc}", flush=True)
        return 3
    if when == "count":
        (run_dir / "arm_calls.json").write_text(json.dumps(arm.calls))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
