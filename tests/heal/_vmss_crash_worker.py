"""Run heal on the Azure Slurm stand-in (tests/heal/vmss_world.py: ARM on a loopback server, Slurm
in a file) and die hard (``os._exit``, as a SIGKILL leaves things: no finally, no flush) after the
N-th journal line, or on either side of a call that acts: ``before-delete``/``after-delete``
(virtualMachineScaleSets deleteInstances), ``before-patch``/``after-patch`` (the capacity's
update), ``after-forget`` (the old node deleted from Slurm). Used by
test_azure_vmss_crash_rerun.py.

    python -m tests.heal._vmss_crash_worker RUN_DIR ARM_URL [N | before-delete | ... | none] [SCENARIO]

SCENARIO is a tests/heal/crash_checks.py scenario (``replace`` by default): the check fails a node
whose VM is faulty (the Slurm file says which), and every check is recorded in the run folder.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from gpu_cluster.heal.azure import Arm
from gpu_cluster.heal.azure_vmss import VmssCloud
from gpu_cluster.heal.engine import Engine
from gpu_cluster.heal.evidence import read_report
from gpu_cluster.heal.journal import Journal
from tests.heal.crash_checks import RecordedChecks, limits_for
from tests.heal.vmss_world import SCALE_SET_ID, FakeSlurm, SlurmFile, computer_name

PAIR_PEER = computer_name(1)
"""The first cleared peer, whose pair checks FAIL in the ``pair`` scenario."""


class DyingArm(Arm):
    def __init__(self, url: str, when: str) -> None:
        super().__init__("token", url)
        self.when = when

    def call(self, method: str, path: str, body: Any = None, api_version: str = "") -> tuple[int, Any]:
        what = {"POST": "delete", "PATCH": "patch"}.get(method)
        if what and self.when == f"before-{what}":
            os._exit(9)
        got = super().call(method, path, body, api_version=api_version)
        if what and self.when == f"after-{what}":
            os._exit(9)
        return got


class DyingSlurm(FakeSlurm):
    def __init__(self, f: SlurmFile, when: str) -> None:
        super().__init__(f)
        self.when = when

    def forget(self, name: str, incident: str) -> Any:
        out = super().forget(name, incident)
        if self.when == "after-forget":
            os._exit(9)
        return out


def main() -> int:
    run_dir, url, when = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    scenario = sys.argv[4] if len(sys.argv) > 4 else "replace"
    lines = [0]

    def echo(_line: str) -> None:
        lines[0] += 1
        if when.isdigit() and lines[0] == int(when):
            os._exit(9)  # the line is on disk: written and fsynced before it is echoed

    slurm = DyingSlurm(SlurmFile(run_dir / "slurm.json"), when)
    with Journal(run_dir, echo=echo) as j:
        e = Engine(
            cluster="train",
            journal=j,
            scheduler=slurm,
            cloud=VmssCloud(DyingArm(url, when), SCALE_SET_ID, slurm),
            checker=RecordedChecks(
                run_dir, scenario, lambda n: bool(slurm.f.load()["nodes"][n]["faulty"]), pair_peer=PAIR_PEER
            ),
            limits=limits_for(scenario),
            say=lambda line: None,
            sleep=lambda s: None,
            poll_s=0.0,
        )
        return e.run(read_report(run_dir / "report.json")).code


if __name__ == "__main__":
    raise SystemExit(main())
