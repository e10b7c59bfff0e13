"""heal's Azure Slurm path against ARM answers in the shapes of the Compute REST reference at
2024-07-01 and a Slurm of dynamic nodes (tests/heal/vmss_world.py): the calls and their bodies,
a node that still runs a job is never replaced (I5), a flake the second look clears replaces
nothing (I1), more than one new VM is not guessed at (I2), and where heal finds the scale set."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.components.contract import read_outputs
from gpu_cluster.heal.adapters import AdapterError, NodeState
from gpu_cluster.heal.azure import Arm
from gpu_cluster.heal.azure_vmss import COMPUTE_API, VmssCloud, scale_set_of
from gpu_cluster.heal.engine import Engine
from gpu_cluster.heal.evidence import read_report
from gpu_cluster.heal.journal import JOURNAL, Journal, read
from gpu_cluster.heal.platforms import PlatformError, slurm_cloud
from gpu_cluster.heal.policy import Limits
from gpu_cluster.heal.slurm import SlurmScheduler, reason_for
from gpu_cluster.heal.states import State
from tests.heal.recorded import Recorded
from tests.heal.vmss_world import (
    RG,
    SCALE_SET_ID,
    SKU,
    SUB,
    VMSS_NAME,
    FakeSlurm,
    Judge,
    ScaleSet,
    SlurmFile,
    computer_name,
    write_report,
)

NAMES = [computer_name(i) for i in range(3)]
BAD = NAMES[0]


@pytest.fixture
def arm() -> Iterator[Recorded]:
    s = Recorded(lambda path: {"error": {"code": "NotFound", "message": f"{path} not found"}})
    yield s
    s.close()


def run_heal(tmp_path: Path, slurm: SlurmFile, url: str, **limits: Any) -> int:
    sched = FakeSlurm(slurm)
    with Journal(tmp_path) as j:
        e = Engine(
            cluster="train",
            journal=j,
            scheduler=sched,
            cloud=VmssCloud(Arm("token", url), SCALE_SET_ID, sched),
            checker=Judge(slurm),
            limits=Limits(**{"apply": True, **limits}),
            say=lambda line: None,
            sleep=lambda s: None,
            poll_s=0.0,
        )
        return e.run(read_report(tmp_path / "report.json")).code


def test_vmss_calls_in_the_reference_shapes(arm: Recorded, tmp_path: Path) -> None:
    slurm = SlurmFile.create(tmp_path, NAMES, max_nodes=3, bad=BAD)
    vmss = ScaleSet(arm, slurm)
    sched = FakeSlurm(slurm)
    cloud = VmssCloud(Arm("token", arm.url), SCALE_SET_ID, sched)
    sched.quarantine(BAD, "h-1", "gate")
    view = sched.node(BAD)
    inst = cloud.instance(view)
    assert inst.id == vmss.by_name(BAD)["vmId"] and "instance 0" in inst.state
    assert cloud.instance(NodeState(node="gpu00000z", present=True)).id == ""
    facts = {**cloud.prepare(view, inst), "old_instance": inst.id}
    assert facts["capacity"] == 3 and facts["mark"] == "h-1" and len(facts["before"]) == 3
    assert not cloud.progress(view, inst.id, "t", facts).started
    out = cloud.replace(view, inst, "t", "gate")
    assert out.ok and out.extra["capacity"] == 3
    (post,) = arm.made("POST")
    assert post["path"] == f"{SCALE_SET_ID}/delete" and post["body"] == {"instanceIds": ["0"]}
    assert post["query"] == {"api-version": COMPUTE_API} and post["headers"]["Authorization"] == "Bearer token"
    facts["op"] = out.extra["op"]
    assert cloud.progress(view, inst.id, "t", facts).started  # Deleting
    prog = cloud.progress(sched.node(BAD), inst.id, "t", facts)  # gone at this look
    assert prog.started and prog.new_instance == ""
    why = cloud.short_of(sched.node(BAD), facts)
    assert f"Slurm still lists {BAD}" in why and "capacity 2, 3 before" in why
    said = cloud.restore(sched.node(BAD), facts).detail
    assert "deleted from Slurm" in said and "capacity back to 3" in said
    (patch,) = arm.made("PATCH")
    assert patch["path"] == SCALE_SET_ID and patch["body"] == {"sku": {"name": SKU, "tier": "Standard", "capacity": 3}}
    prog = cloud.progress(sched.node(BAD), inst.id, "t", facts)
    assert prog.node == computer_name(3) and prog.new_instance == vmss.by_name(computer_name(3))["vmId"]
    assert cloud.short_of(sched.node(BAD), facts) == ""  # a rerun's re-read asks nothing again
    assert cloud.restore(sched.node(BAD), facts).detail == "nothing left to restore"
    assert len(arm.made("PATCH")) == 1
    # without the VMs before the call, no VM is guessed to be the new one
    assert cloud.progress(sched.node(BAD), inst.id, "t", {"capacity": 3}).new_instance == ""


def test_vmss_more_than_one_new_vm_is_escalated_not_guessed(arm: Recorded, tmp_path: Path) -> None:
    slurm = SlurmFile.create(tmp_path, NAMES, max_nodes=5, bad=BAD)
    vmss = ScaleSet(arm, slurm)
    cloud = VmssCloud(Arm("token", arm.url), SCALE_SET_ID, FakeSlurm(slurm))
    before = sorted(v["vmId"] for v in vmss.vms)
    old = vmss.by_name(BAD)["vmId"]
    vmss.vms.remove(vmss.by_name(BAD))
    vmss._make("Succeeded"), vmss._make("Succeeded")  # someone scaled the set as well
    prog = cloud.progress(NodeState(node=BAD, present=False), old, "t", {"before": before, "op": "x"})
    assert prog.new_instance == "" and "2 VMs joined" in prog.escalate


def test_vmss_node_still_running_a_job_is_not_replaced(arm: Recorded, tmp_path: Path) -> None:
    """I5: past the eviction deadline the node waits, drained, its job named; no VM is deleted."""
    slurm = SlurmFile.create(tmp_path, NAMES, max_nodes=3, bad=BAD, jobs={BAD: ["4242 train alice RUNNING"]})
    vmss = ScaleSet(arm, slurm)
    write_report(tmp_path, NAMES, BAD)
    assert run_heal(tmp_path, slurm, arm.url, evict_timeout_s=0.0) == 2
    entries, _ = read(tmp_path / JOURNAL)
    assert entries[-1].state is State.RETRY and "job 4242" in entries[-1].detail
    assert arm.made("POST") == [] and arm.made("PATCH") == [] and vmss.capacity == 3
    assert slurm.load()["drained"] == [BAD]


def test_vmss_a_flake_the_second_look_clears_replaces_nothing(arm: Recorded, tmp_path: Path) -> None:
    """I1: the report named it, but the check passes: no VM deleted, it is back in service."""
    slurm = SlurmFile.create(tmp_path, NAMES, max_nodes=3)  # no VM is faulty
    ScaleSet(arm, slurm)
    write_report(tmp_path, NAMES, BAD)
    assert run_heal(tmp_path, slurm, arm.url) == 0
    entries, _ = read(tmp_path / JOURNAL)
    assert [e.state for e in entries] == [State.SUSPECT, State.HEALTHY]
    assert arm.made("POST") == [] and arm.made("PATCH") == []
    assert slurm.load()["drained"] == [] and slurm.load()["deleted"] == []


def test_arm_refusal_of_the_delete_stops_the_incident(arm: Recorded, tmp_path: Path) -> None:
    slurm = SlurmFile.create(tmp_path, NAMES, max_nodes=3, bad=BAD)
    ScaleSet(arm, slurm)
    arm.answer("POST", f"{SCALE_SET_ID}/delete", {"error": {"code": "AuthorizationFailed"}}, status=403)
    write_report(tmp_path, NAMES, BAD)
    assert run_heal(tmp_path, slurm, arm.url) == 2
    last = read(tmp_path / JOURNAL)[0][-1]
    assert last.state is State.RETRY and "ARM POST" in last.detail and "403" in last.detail


def test_scale_set_from_the_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    assert scale_set_of(SCALE_SET_ID) == (SUB, RG, VMSS_NAME)
    with pytest.raises(AdapterError, match="not a virtual machine scale set"):
        scale_set_of("/subscriptions/x/resourceGroups/y/providers/Microsoft.Compute/virtualMachines/z")
    raw = {
        "cloud": "azure",
        "region": "eastus",
        "zone": "1",
        "orchestrator": "slurm",
        "cluster_name": "train",
        "instance_type": SKU,
        "nodes": 3,
        "gpus_per_node": 8,
        "fabric": {"type": "ib", "interfaces_per_node": 8, "placement": VMSS_NAME, "mtu": 4096, "networks": []},
        "mount": {
            "mount_point": "/lustre",
            "dns_name": "10.0.2.4",
            "mount_name": "lustrefs",
            "mount_command": "mount -t lustre 10.0.2.4@tcp:/lustrefs /lustre",
            "volume_handle": "x",
        },
        "bucket": "ckpt",
        "access": {
            "login": "slurmctl",
            "ssh_command": "ssh -p 50022 azureuser@127.0.0.1",
            "scale_set_id": SCALE_SET_ID,
        },
        "scheduler": {"kind": "slurm", "partition": "gpu"},
    }
    outs = read_outputs(raw)
    assert outs.access.scale_set_id == SCALE_SET_ID
    monkeypatch.setenv("AZURE_ACCESS_TOKEN", "token")
    cloud = slurm_cloud(outs, object())
    assert isinstance(cloud, VmssCloud) and cloud.scale_set == VMSS_NAME and "deleteInstances" in cloud.call
    del raw["access"]["scale_set_id"]  # type: ignore[attr-defined]
    with pytest.raises(PlatformError, match="access.scale_set_id"):
        slurm_cloud(read_outputs(raw), object())


class Shell:
    """scontrol's answers for one dynamic node, and the commands asked."""

    def __init__(self, reason: str) -> None:
        self.reason, self.asked, self.present = reason, [], True

    def run(self, command: str, *, check: bool = True, **_: Any) -> subprocess.CompletedProcess[bytes]:
        self.asked.append(command)
        if command.startswith("scontrol delete"):
            self.present = False
        if command.startswith("scontrol show node"):
            line = f"NodeName={BAD} NodeAddr=10.0.1.4 State=DOWN+DRAIN Reason={self.reason} [root@2026-12-07T05:00:00]"
            out = line.encode() if self.present else b""
            return subprocess.CompletedProcess(command, 0 if self.present else 1, out, b"")
        return subprocess.CompletedProcess(command, 0, b"", b"")


def test_slurm_forget_deletes_only_a_node_our_drain_holds() -> None:
    ours = Shell(reason_for("h-1", "gate"))
    assert SlurmScheduler(ours).forget(BAD, "h-1").ok  # type: ignore[arg-type]
    assert f"scontrol delete nodename={BAD}" in ours.asked
    theirs = Shell("bad fan, by hand")
    out = SlurmScheduler(theirs).forget(BAD, "h-1")  # type: ignore[arg-type]
    assert not out.ok and not any(c.startswith("scontrol delete") for c in theirs.asked)


def test_heal_help_says_what_it_does_on_azure_slurm() -> None:
    from gpu_cluster.heal.cli import build_parser

    text = " ".join(build_parser().format_help().split())
    assert "virtualMachineScaleSets deleteInstances" in text and "capacity put back" in text
    assert "cannot keep that node from taking a job" in text and "docs/heal.md" in text
