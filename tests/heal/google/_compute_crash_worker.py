"""Run heal against the Compute Engine stand-in (tests/heal/google/compute_world.py) and die hard
(``os._exit``, as a SIGKILL leaves things) after the N-th journal line or on either side of the call
that acts. Used by test_compute_crash_rerun.py.

    python -m tests.heal.google._compute_crash_worker RUN_DIR mig|report|label [N | before-call | after-call | none] [SCENARIO] [OFFSET_S]

``mig``: a GKE node (heal's KubeScheduler against the test's Kubernetes API server) recreated by
its pool's managed instance group (``recreateInstances``). ``report``: a Cluster Director node (a
Slurm kept in a file, tests/heal/vmss_world.py) whose host is reported (``reportHostAsFaulty``).
``label``: a GKE A3/A4 node in a reservation, reported through GKE's report-and-replace label (the
call that acts is the node patch that sets ``cloud.google.com/fault-behavior``; the test plays GKE).
The check fails the node while it runs on the bad VM (``mig``: its id) or host (``report``), and
the nodes world.json names in ``also_bad``; SCENARIO (tests/heal/crash_checks.py, ``replace`` by
default) says which checks pass, and every check is recorded in the run folder. On GKE (``mig``,
``label``) heal holds the cluster's Lease on the test Kubernetes API server, as ``gpu-cluster heal
--apply`` does on every Kubernetes stack (cli.py ``cluster_lock``, platforms.py ``build``; I9), read
with a clock OFFSET_S ahead (a rerun "later", tests/heal/_crash_common.py); a held Lease is answered
as ``gpu-cluster heal`` answers it, one line and exit 3. Cluster Director takes Slurm's held-job
lock (``sbatch --hold``, ``squeue``), which the Slurm in a file here cannot play: none is taken."""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path
from collections.abc import Callable, Mapping
from typing import Any

from google.auth.credentials import AnonymousCredentials

from gpu_cluster.heal.cli import cluster_lock
from gpu_cluster.heal.engine import Engine
from gpu_cluster.heal.evidence import read_report
from gpu_cluster.heal.gcp import FAULT_LABEL, GceReportCloud, GkeMigCloud, GkeReportCloud, compute_clients
from gpu_cluster.heal.journal import Journal
from gpu_cluster.heal.kubernetes import KubeScheduler
from gpu_cluster.heal.lock import KubeLease, LockHeld, me
from gpu_cluster.heal.platforms import PlatformError
from tests.heal._crash_common import Clock
from tests.heal.crash_checks import RecordedChecks, limits_for
from tests.heal.google.test_gcp import CLUSTER, COMPUTE, P, Z
from tests.heal.vmss_world import FakeSlurm, SlurmFile


class DyingLabels(KubeScheduler):
    """heal's KubeScheduler, dying on the asked side of the patch that sets the fault label."""

    def __init__(self, kubeconfig: str, when: str) -> None:
        super().__init__(kubeconfig)
        self.when = when

    def set_labels(self, name: str, labels: Mapping[str, str | None]) -> None:
        acts = labels.get(FAULT_LABEL) is not None
        if acts and self.when == "before-call":
            os._exit(9)
        super().set_labels(name, labels)
        if acts and self.when == "after-call":
            os._exit(9)


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


def vm_is_bad(url: str, bad: dict[str, str], by: str, also: list[str]) -> Callable[[str], bool]:
    """Whether ``node`` runs on the bad VM (by its id) or host, read from the stand-in now."""

    def is_bad(node: str) -> bool:
        if node in also:
            return True
        with urllib.request.urlopen(f"{url}{COMPUTE}/instances/{node}") as r:
            vm = json.load(r)
        seen = vm["id"] if by == "id" else vm["resourceStatus"]["physicalHost"]
        return bool(seen == bad[by])

    return is_bad


def main() -> int:
    run_dir, mode, when = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    scenario = sys.argv[4] if len(sys.argv) > 4 else "replace"
    clock = Clock(float(sys.argv[5]) if len(sys.argv) > 5 else 0.0, 0.0)  # no wait counted: sleep is a no-op
    world = json.loads((run_dir / "world.json").read_text(encoding="utf-8"))
    lines = [0]

    def echo(_line: str) -> None:
        lines[0] += 1
        if when.isdigit() and lines[0] == int(when):
            os._exit(9)  # the line is on disk: written and fsynced before it is echoed

    c = compute_clients(AnonymousCredentials(), endpoint=world["url"])  # type: ignore[no-untyped-call]
    sched: Any
    look: Callable[[str], Any] | None = None
    if mode == "mig":
        c["igm"] = Dying(c["igm"], "recreate_instances", when)
        kube = KubeScheduler(world["kubeconfig"])
        sched = kube
        cloud: Any = GkeMigCloud(c, P, Z, CLUSTER)
        by = "id"

        def taints(node: str) -> Any:
            return (kube.read(node).get("spec") or {}).get("taints") or []

        look = taints
    elif mode == "label":
        labels = DyingLabels(world["kubeconfig"], when)
        sched = labels
        cloud = GkeReportCloud(c, P, Z, labels)
        by = "host"
    else:
        c["instances"] = Dying(c["instances"], "report_host_as_faulty", when)
        sched = FakeSlurm(SlurmFile(run_dir / "slurm.json"))
        cloud = GceReportCloud(c, P, Z)
        by = "host"
    checker = RecordedChecks(
        run_dir,
        scenario,
        vm_is_bad(world["url"], world["bad"], by, world.get("also_bad", [])),
        pair_peer=world.get("pair_peer", ""),
        look=look,
    )
    lease = KubeLease(world["kubeconfig"], me(run_dir), clock=clock.lease) if mode != "report" else None
    try:
        with Journal(run_dir, echo=echo) as j, cluster_lock(lease, True) as lost:
            e = Engine(
                cluster="train",
                journal=j,
                scheduler=sched,
                cloud=cloud,
                checker=checker,
                limits=limits_for(scenario),
                say=lambda line: None,
                sleep=lambda _s: None,
                poll_s=0.0,
                guard=lost,
            )
            return e.run(read_report(run_dir / "report.json")).code
    except (LockHeld, PlatformError) as exc:  # as `gpu-cluster heal` answers them (cli.main): exit 3
        print(f"heal: {exc}", flush=True)
        return 3


if __name__ == "__main__":
    raise SystemExit(main())
