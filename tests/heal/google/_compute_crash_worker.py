"""Run heal against the Compute Engine stand-in (tests/heal/google/compute_world.py) and die hard
(``os._exit``, as a SIGKILL leaves things) after the N-th journal line or on either side of the call
that acts. Used by test_compute_crash_rerun.py.

    python -m tests.heal.google._compute_crash_worker RUN_DIR mig|report [N | before-call | after-call | none]

``mig``: a GKE node (heal's KubeScheduler against the test's Kubernetes API server) recreated by
its pool's managed instance group (``recreateInstances``). ``report``: a Cluster Director node (a
Slurm kept in a file, tests/heal/vmss_world.py) whose host is reported (``reportHostAsFaulty``).
The check fails the node while it runs on the bad VM (``mig``: its id) or host (``report``)."""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path
from typing import Any

from google.auth.credentials import AnonymousCredentials

from gpu_cluster.heal.adapters import CheckResult
from gpu_cluster.heal.engine import Engine
from gpu_cluster.heal.evidence import read_report
from gpu_cluster.heal.gcp import GceReportCloud, GkeMigCloud, compute_clients
from gpu_cluster.heal.journal import Journal
from gpu_cluster.heal.kubernetes import KubeScheduler
from gpu_cluster.heal.policy import Limits
from tests.heal.google.test_gcp import CLUSTER, COMPUTE, P, Z
from tests.heal.vmss_world import FakeSlurm, SlurmFile


class Dying:
    """A compute_v1 client, dying on the asked side of its call that acts."""

    def __init__(self, client: Any, method: str, when: str) -> None:
        self._c, self._method, self._when = client, method, when

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._c, name)
        if name != self._method:
            return real

        def call(**kw: Any) -> Any:
            if self._when == "before-call":
                os._exit(9)
            got = real(**kw)
            if self._when == "after-call":
                os._exit(9)
            return got

        return call


class VmChecker:
    def __init__(self, url: str, bad: dict[str, str], by: str) -> None:
        self.url, self.bad, self.by = url, bad, by

    def estimate(self) -> tuple[float, str]:
        return 600.0, "test"

    def check(self, node: str, peer: str, incident: str, purpose: str) -> CheckResult:
        with urllib.request.urlopen(f"{self.url}{COMPUTE}/instances/{node}") as r:
            vm = json.load(r)
        seen = vm["id"] if self.by == "id" else vm["resourceStatus"]["physicalHost"]
        bad = seen == self.bad[self.by]
        return CheckResult(ran=True, passed=not bad, own=bad, detail=f"{node} on {seen}")


def main() -> int:
    run_dir, mode, when = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    world = json.loads((run_dir / "world.json").read_text(encoding="utf-8"))
    lines = [0]

    def echo(_line: str) -> None:
        lines[0] += 1
        if when.isdigit() and lines[0] == int(when):
            os._exit(9)  # the line is on disk: written and fsynced before it is echoed

    c = compute_clients(AnonymousCredentials(), endpoint=world["url"])  # type: ignore[no-untyped-call]
    sched: Any
    if mode == "mig":
        c["igm"] = Dying(c["igm"], "recreate_instances", when)
        sched = KubeScheduler(world["kubeconfig"])
        cloud: Any = GkeMigCloud(c, P, Z, CLUSTER)
        checker = VmChecker(world["url"], world["bad"], "id")
    else:
        c["instances"] = Dying(c["instances"], "report_host_as_faulty", when)
        sched = FakeSlurm(SlurmFile(run_dir / "slurm.json"))
        cloud = GceReportCloud(c, P, Z)
        checker = VmChecker(world["url"], world["bad"], "host")
    with Journal(run_dir, echo=echo) as j:
        e = Engine(
            cluster="train",
            journal=j,
            scheduler=sched,
            cloud=cloud,
            checker=checker,
            limits=Limits(apply=True),
            say=lambda line: None,
            sleep=lambda _s: None,
            poll_s=0.0,
        )
        return e.run(read_report(run_dir / "report.json")).code


if __name__ == "__main__":
    raise SystemExit(main())
