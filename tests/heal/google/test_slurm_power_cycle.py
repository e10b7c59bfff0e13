"""(In the Google process of make test: it drives Google's client library.) The Cluster Director fallback's Slurm calls against a real Slurm with power saving on (its own
small cluster: SuspendProgram stops the node's slurmd, ResumeProgram starts one, as slurm-gcp's
delete and recreate the VM): POWER_DOWN accepted on the quarantined node, the drain it clears put
back while powered down, POWER_UP asked, the resume program run. The VM's identity comes from
recorded Compute Engine answers (tests/heal/google/test_gcp.py's shapes)."""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.heal.adapters import Instance
from gpu_cluster.heal.slurm import SlurmScheduler, held_by
from tests.slurm.cluster import SlurmCluster, unavailable_reason
from gpu_cluster.workloads.validate.slurm import Shell

pytestmark = pytest.mark.slurm
INCIDENT = "h-00c0ffee00"


class PowerSaveCluster(SlurmCluster):
    def render_conf(self) -> str:
        d, slurmd = self.root, shutil.which("slurmd")
        suspend, resume = d / "suspend.sh", d / "resume.sh"
        suspend.write_text(
            f'#!/bin/bash\necho "suspend $1" >> {d}/power.log\n'
            f'for n in $(scontrol show hostnames "$1"); do kill $(cat {d}/spool/slurmd-$n.pid) 2>/dev/null; done\n'
        )
        resume.write_text(
            f'#!/bin/bash\necho "resume $1" >> {d}/power.log\n'
            f'for n in $(scontrol show hostnames "$1"); do setsid {slurmd} -N $n -f {self.conf} </dev/null >/dev/null 2>&1 & done\n'
        )
        for f in (suspend, resume):
            f.chmod(0o755)
        # SuspendTime must be a number for manual power_down to be accepted (INFINITE turns power
        # saving off: "Invalid node state specified"); an hour keeps idle nodes from suspending.
        return super().render_conf() + (
            f"SuspendProgram={suspend}\nResumeProgram={resume}\nSuspendTime=3600\nSuspendTimeout=5\nResumeTimeout=60\n"
        )

    def stop(self, timeout_s: float = 20.0) -> None:
        # A slurmd the resume program started is no child of ours and carries no marker.
        for pid_file in (self.root / "spool").glob("slurmd-*.pid"):
            try:
                os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
            except (ValueError, OSError):
                pass
        super().stop(timeout_s)


@pytest.fixture(scope="module")
def power_cluster() -> Iterator[PowerSaveCluster]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    cluster = PowerSaveCluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        cluster.cleanup_files()


def test_power_cycle_keeps_the_node_drained(power_cluster: PowerSaveCluster, tmp_path: Path) -> None:
    from google.auth.credentials import AnonymousCredentials

    from gpu_cluster.heal import gcp
    from tests.heal.google.test_gcp import COMPUTE, P, Z, error, instance
    from tests.heal.recorded import Recorded

    server = Recorded(lambda path: error(404, "NOT_FOUND", path))
    try:
        server.answer("GET", f"{COMPUTE}/instances/n2", instance("n2", "5555"))
        sched = SlurmScheduler(Shell((), power_cluster.env))
        assert sched.quarantine("n2", INCIDENT, "gate ecc.volatile (gpu1): 2 uncorrected").ok
        cloud = gcp.SlurmPowerCycleCloud(gcp.compute_clients(AnonymousCredentials(), server.url), P, Z, sched)  # type: ignore[no-untyped-call]
        node = sched.node("n2")
        old = cloud.instance(node)
        assert old.id == "5555"
        assert not cloud.progress(node, old.id, "t", {}).started
        out = cloud.replace(node, Instance(id=old.id), "t", "why")
        assert out.ok and out.extra["reason"].startswith(f"gpu-cluster heal {INCIDENT}:")
        deadline = time.monotonic() + 60
        facts: dict[str, Any] = dict(out.extra)
        while "POWER_UP asked" not in (prog := cloud.progress(node, old.id, "t", facts)).detail:
            assert prog.started and time.monotonic() < deadline, (prog, power_cluster.node("n2"))
            time.sleep(1)
        info = power_cluster.node("n2")
        flags = set(info.state.split("+"))
        assert "DRAIN" in flags and flags & {"POWERING_UP", "POWERED_DOWN"}, info
        assert held_by(info.reason) == INCIDENT
        deadline = time.monotonic() + 30
        log = power_cluster.root / "power.log"
        while "resume n2" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline
            time.sleep(0.5)
        assert log.read_text().splitlines()[:2] == ["suspend n2", "resume n2"]
        # the new VM, once slurm-gcp made it, is what the journal compares
        server.answer("GET", f"{COMPUTE}/instances/n2", instance("n2", "6666"))
        assert cloud.vms.identity(cloud.vms.get("n2")) == "6666"
    finally:
        server.close()
