"""Run heal on an AWS PCS Slurm node against moto's server (EC2, through ``AWS_ENDPOINT_URL``) and
a Slurm kept in a file, and die hard (tests/heal/_crash_common.py) after the N-th journal line or
on either side of the N-th call of an EC2 method heal makes (``before:terminate_instances``,
``after:describe_instances#3``). Used by test_pcs_crash_rerun.py.

    python -m tests.heal._pcs_crash_worker RUN_DIR [N | before:METHOD[#N] | after:METHOD[#N] | none]

``world.json`` names the instance the judge fails (none: a flake the second look clears), a peer
whose pairing fails any node for the pair's reason (I8), and heal's limits.

The compute node group is played in the engine's sleep, as PCS keeps a static group at its minimum
count ("AWS PCS efficiently launches, manages, and terminates compute nodes ... according to these
settings", PCS user guide, Create compute node groups): for a static node whose instance is gone it
launches one tagged ``aws:pcs:compute-node-group-id`` at a new address, and the node registers
again under its own name at that address (slurmd tells slurmctld its address; the node's record,
drain included, is slurmctld's and stays). Every TerminateInstances that reached moto is appended
to ``terminations.jsonl`` before this process may die."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from gpu_cluster.heal.adapters import CheckResult, NodeState
from gpu_cluster.heal.aws import PCS_TAG, PcsCloud, clients
from gpu_cluster.heal.engine import POLL_S, Engine
from gpu_cluster.heal.evidence import read_report
from gpu_cluster.heal.journal import Journal
from gpu_cluster.heal.policy import Limits
from tests.heal._crash_common import Clock, Dying, append, line_killer
from tests.heal.vmss_world import FakeSlurm, SlurmFile

REGION = "us-east-1"
GROUP_ID = "pcs_8f2ks01a9c"


class PcsSlurm(FakeSlurm):
    """FakeSlurm with each node's NodeAddr, which is how heal finds a PCS node's instance."""

    def node(self, name: str) -> NodeState:
        view = super().node(name)
        n = self.f.load()["nodes"].get(name)
        if n is None:
            return view
        return NodeState(
            node=view.node,
            present=view.present,
            ready=view.ready,
            in_service=view.in_service,
            held_by=view.held_by,
            address=str(n.get("addr", "")),
            detail=view.detail,
        )


class Judge:
    """Fails the node while the faulty instance is behind it (a finding of its own), passes it on
    any other; paired with the ``blamed`` peer, any node FAILs for the pair's figure (not its own)."""

    def __init__(self, f: SlurmFile, bad_instance: str, blamed: str = "") -> None:
        self.f, self.bad, self.blamed = f, bad_instance, blamed
        self.log = f.path.with_name("checks.jsonl")

    def estimate(self) -> tuple[float, str]:
        return 60.0, "test"

    def check(self, name: str, peer: str, incident: str, purpose: str) -> CheckResult:
        if peer == self.blamed:
            out = CheckResult(ran=True, passed=False, own=False, detail=f"{name} FAIL with {peer}: the pair's figure")
        else:
            ok = self.f.load()["nodes"][name].get("instance") != self.bad
            out = CheckResult(ran=True, passed=ok, own=not ok, detail=f"{name} {'PASS' if ok else 'FAIL'} with {peer}")
        append(self.log, {"node": name, "peer": peer, "purpose": purpose, "passed": out.passed})
        return out


def launch(ec2: Any, world: dict[str, Any], addr: str) -> str:
    tags = [{"ResourceType": "instance", "Tags": [{"Key": PCS_TAG, "Value": GROUP_ID}]}]
    got = ec2.run_instances(
        ImageId=world["ami"],
        InstanceType="p5.48xlarge",
        MinCount=1,
        MaxCount=1,
        SubnetId=world["subnet"],
        PrivateIpAddress=addr,
        TagSpecifications=tags,
    )
    return str(got["Instances"][0]["InstanceId"])


def node_group(ec2: Any, f: SlurmFile, world: dict[str, Any]) -> None:
    """The compute node group keeping its static nodes: a node whose instance is gone goes DOWN in
    Slurm, and the group launches a new instance, which registers under the node's name."""
    doc = f.load()
    for name, n in doc["nodes"].items():
        got = ec2.describe_instances(InstanceIds=[n["instance"]])["Reservations"][0]["Instances"][0]
        if got["State"]["Name"] in ("pending", "running"):
            continue
        doc["launched"] = doc.get("launched", 0) + 1
        addr = f"10.1.1.{100 + doc['launched']}"
        n.update(instance=launch(ec2, world, addr), addr=addr, state="IDLE")
    f.save(doc)


class DyingEc2(Dying):
    """moto's EC2, dying at the kill point, logging TerminateInstances, and noting each method asked."""

    def __init__(self, ec2: Any, when: str, log: Path) -> None:
        super().__init__(ec2, when, log, logged=("terminate_instances",))
        self.asked: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.asked.append(name)
        return super().__getattr__(name)


def engine(run_dir: Path, j: Journal, ec2: Any, when: str = "none", clock: Clock | None = None) -> Engine:
    world = json.loads((run_dir / "world.json").read_text(encoding="utf-8"))
    f = SlurmFile(run_dir / "slurm.json")
    clock = clock or Clock(0.0, POLL_S)

    def wait(_s: float) -> None:
        clock.wait()
        node_group(ec2, f, world)

    return Engine(
        cluster="train",
        journal=j,
        scheduler=PcsSlurm(f),
        cloud=PcsCloud(DyingEc2(ec2, when, run_dir / "terminations.jsonl")),
        checker=Judge(f, world["bad_instance"], world.get("blamed", "")),
        limits=Limits(apply=True, **world.get("limits", {})),
        say=lambda line: None,
        sleep=wait,
        poll_s=0.0,
    )


def main() -> int:
    run_dir, when = Path(sys.argv[1]), sys.argv[2]
    clock = Clock(0.0, POLL_S)
    with Journal(run_dir, echo=line_killer(when), clock=clock) as j:
        return engine(run_dir, j, clients(REGION)[0], when, clock).run(read_report(run_dir / "report.json")).code


if __name__ == "__main__":
    raise SystemExit(main())
