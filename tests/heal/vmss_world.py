"""The Azure Slurm cluster heal replaces nodes of, as the tests stand it in: the GPU scale set as
Azure Resource Manager answers for it (a loopback server, tests/heal/recorded.py, in the shapes of
the Compute REST reference at 2024-07-01: VirtualMachineScaleSetVM_List_MaximumSet_Gen.json at
49183a6 for the VM list, VirtualMachineScaleSet_DeleteInstances_MaximumSet_Gen.json at b3a045c
for the delete's 200/202, the scale set's ``sku`` {name, tier, capacity}), and its Slurm as a file
of dynamic nodes (the scheduler side heal drives through gpu_cluster/heal/slurm.py's words: the
drain reason with heal's mark, resume, scontrol delete nodename).

The cloud keeps its state in the test process, as a cloud outlives the heal that a test kills;
the Slurm file is shared with the worker process, and a new VM's slurmd registers itself in it
(slurmd -Z) the first time the VM is listed after it was made, unless MaxNodeCount (the scale
set's size, slurm_config.py) is reached, which the file records as a refusal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpu_cluster.heal.adapters import CheckResult, NodeState, Outcome
from gpu_cluster.heal.slurm import held_by, reason_for
from tests.heal.recorded import Recorded
from tests.heal.world import SLOW

SUB = "26fe00f8-9173-4872-9134-bb1d2e00343a"
RG, VMSS_NAME = "gpuc-rg", "train-orchestration-gpu"
SCALE_SET_ID = (
    f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachineScaleSets/{VMSS_NAME}"
)
SKU = "Standard_ND96isr_H100_v5"
API = "2024-07-01"
SLURM_FILE = "slurm.json"
PAGE = 2
"""VMs per page of the list, so every list follows a nextLink."""


def computer_name(instance_id: int) -> str:
    """A Uniform scale set's computer name: the prefix and the instance id in base 36, six digits
    (orchestration_slurm.py NODE_PREFIX; the list example's ``test000000``)."""
    digits, n = "", instance_id
    while True:
        n, r = divmod(n, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[r] + digits
        if n == 0:
            break
    return "gpu" + digits.rjust(6, "0")


def vm_id(serial: int) -> str:
    return f"42af9fdf-b906-4ad7-9905-{serial:012d}"


class SlurmFile:
    """The cluster's Slurm, as dynamic nodes in a JSON file: state, reason, jobs; every drain and
    delete is remembered, so a test can say which nodes heal touched."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, Any]:
        return dict(json.loads(self.path.read_text(encoding="utf-8")))

    def save(self, doc: dict[str, Any]) -> None:
        # The most nodes drained at one time, over every change (I7's budget, read by the tests).
        out = sum(1 for n in doc["nodes"].values() if n["reason"])
        doc["out_at_once"] = max(int(doc.get("out_at_once", 0)), out)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        tmp.replace(self.path)

    @classmethod
    def create(
        cls, run_dir: Path, names: list[str], max_nodes: int, bad: str = "", jobs: dict[str, list[str]] | None = None
    ) -> SlurmFile:
        """``bad``: the node whose VM's GPU is faulty (a new VM under any name is sound)."""
        f = cls(run_dir / SLURM_FILE)
        nodes = {n: {"state": "IDLE", "reason": "", "jobs": (jobs or {}).get(n, []), "faulty": n == bad} for n in names}
        f.save({"nodes": nodes, "max_nodes": max_nodes, "drained": [], "deleted": [], "refused": [], "resv": {}})
        return f

    def register(self, name: str) -> None:
        """A dynamic slurmd registering (slurmd -Z): a new node, IDLE, in service."""
        doc = self.load()
        if name not in doc["nodes"] and len(doc["nodes"]) >= doc["max_nodes"]:
            doc["refused"].append(name)
        else:
            doc["nodes"][name] = {"state": "IDLE", "reason": "", "jobs": [], "faulty": False}
        self.save(doc)

    def vm_gone(self, name: str) -> None:
        """The VM under a node was deleted: slurmctld stops hearing from it."""
        doc = self.load()
        if name in doc["nodes"]:
            doc["nodes"][name]["state"] = "DOWN"
            self.save(doc)


class FakeSlurm:
    """The Scheduler heal drives, over :class:`SlurmFile`, with slurm.py's marks."""

    kind = "slurm"

    def __init__(self, f: SlurmFile) -> None:
        self.f = f

    def node(self, name: str) -> NodeState:
        n = self.f.load()["nodes"].get(name)
        if n is None:
            return NodeState(node=name, present=False, detail=f"scontrol show node {name}: no such node")
        drained = n["reason"] != ""
        return NodeState(
            node=name,
            present=True,
            ready=n["state"] != "DOWN",
            in_service=not drained,
            held_by=held_by(n["reason"]) if drained else None,
            detail=n["state"] + ("+DRAIN" if drained else "") + (f", reason {n['reason']!r}" if drained else ""),
        )

    def quarantine(self, name: str, incident: str, why: str) -> Outcome:
        doc = self.f.load()
        n = doc["nodes"].get(name)
        if n is None:
            return Outcome(ok=False, detail=f"no node {name}")
        if held_by(n["reason"]) != incident:
            n["reason"] = reason_for(incident, why)
            doc["drained"].append(name)
            self.f.save(doc)
        if n["jobs"]:
            return Outcome(ok=False, pending=True, detail=f"draining; still running: job {n['jobs'][0]}")
        return Outcome(ok=True, detail=f"drained: {n['state']}+DRAIN")

    def release(self, name: str, incident: str) -> Outcome:
        doc = self.f.load()
        n = doc["nodes"].get(name)
        if n is None:
            return Outcome(ok=False, detail=f"no node {name}")
        if n["reason"] and held_by(n["reason"]) != incident:
            return Outcome(ok=False, detail="its drain is not this incident's")
        n["reason"] = ""
        self.f.save(doc)
        return Outcome(ok=True, detail=f"state=resume: {n['state']}")

    def successor(self, slot_node: str, old_instance: str, new_instance: str) -> str | None:
        return slot_node

    def open_for_check(self, name: str, peer: str, incident: str) -> Outcome:
        doc = self.f.load()
        doc["resv"][incident] = [name, peer]
        self.f.save(doc)
        return Outcome(ok=True, detail=f"reservation {incident} holds {name} and {peer}")

    def close_check(self, name: str, peer: str, incident: str) -> None:
        doc = self.f.load()
        doc["resv"].pop(incident, None)
        self.f.save(doc)

    def forget(self, name: str, incident: str) -> Outcome:
        doc = self.f.load()
        n = doc["nodes"].get(name)
        if n is None:
            return Outcome(ok=True, detail=f"{name} is no longer a Slurm node")
        if held_by(n["reason"]) != incident or n["jobs"] or any(name in r for r in doc["resv"].values()):
            return Outcome(ok=False, detail=f"{name} cannot be deleted: {n}")
        del doc["nodes"][name]
        doc["deleted"].append(name)
        self.f.save(doc)
        return Outcome(ok=True, detail=f"{name} deleted from Slurm (scontrol delete nodename)")


class Judge:
    """Fails a node whose VM is faulty (its GPU's own finding), passes every other: by the VM, not
    the name, as a new VM may carry the old one's name."""

    def __init__(self, f: SlurmFile) -> None:
        self.f = f

    def estimate(self) -> tuple[float, str]:
        return 60.0, "test"

    def check(self, name: str, peer: str, incident: str, purpose: str) -> CheckResult:
        ok = not self.f.load()["nodes"][name]["faulty"]
        return CheckResult(ran=True, passed=ok, own=not ok, detail=f"{name} {'PASS' if ok else 'FAIL'} with {peer}")


class ScaleSet:
    """The GPU scale set behind ARM: VMs (instanceId, vmId, computerName, provisioningState) and
    the capacity. A delete marks its VMs Deleting and lowers the capacity; they are gone at the next
    list. An update that raises the capacity makes VMs (Creating; Succeeded, and registered in
    Slurm, at the next list). ``reuse`` gives a new VM the lowest free instance id, which Uniform
    scale sets may do (virtual-machine-scale-sets-instance-ids.md)."""

    def __init__(self, arm: Recorded, slurm: SlurmFile, nodes: int = 3, reuse: bool = False) -> None:
        self.arm, self.slurm, self.reuse = arm, slurm, reuse
        self.serial = 0
        self.vms: list[dict[str, Any]] = []
        self.capacity = nodes
        self.next_id = 0
        for _ in range(nodes):
            self._make("Succeeded")
        self.deleted: list[str] = []
        path = SCALE_SET_ID
        arm.answer_with("GET", path, lambda r: (200, self.doc()))
        arm.answer_with("GET", f"{path}/virtualMachines", self._list)
        arm.answer_with("POST", f"{path}/delete", self._delete)
        arm.answer_with("PATCH", path, self._update)

    def _make(self, state: str) -> dict[str, Any]:
        used = {int(v["instanceId"]) for v in self.vms}
        iid = min(i for i in range(len(used) + 1) if i not in used) if self.reuse else self.next_id
        self.next_id = max(self.next_id, iid + 1)
        self.serial += 1
        vm = {"instanceId": str(iid), "vmId": vm_id(self.serial), "name": computer_name(iid), "state": state}
        self.vms.append(vm)
        return vm

    def doc(self) -> dict[str, Any]:
        busy = any(v["state"] in ("Deleting", "Creating") for v in self.vms)
        return {
            "id": SCALE_SET_ID,
            "name": VMSS_NAME,
            "type": "Microsoft.Compute/virtualMachineScaleSets",
            "location": "eastus",
            "sku": {"name": SKU, "tier": "Standard", "capacity": self.capacity},
            "properties": {
                "singlePlacementGroup": True,
                "orchestrationMode": "Uniform",
                "provisioningState": "Updating" if busy else "Succeeded",
            },
        }

    def vm_doc(self, vm: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": f"{VMSS_NAME}_{vm['instanceId']}",
            "id": f"{SCALE_SET_ID}/virtualMachines/{vm['instanceId']}",
            "type": "Microsoft.Compute/virtualMachines",
            "location": "eastus",
            "instanceId": vm["instanceId"],
            "sku": {"name": SKU, "tier": "Standard"},
            "properties": {
                "latestModelApplied": True,
                "vmId": vm["vmId"],
                "hardwareProfile": {"vmSize": SKU},
                "osProfile": {"computerName": vm["name"], "adminUsername": "azureuser"},
                "provisioningState": vm["state"],
            },
        }

    def _list(self, req: dict[str, Any]) -> tuple[int, Any]:
        start = int(req["query"].get("$skiptoken", "0"))
        if start == 0:  # a new look at the scale set: the VMs move on one step
            for vm in list(self.vms):
                if vm["state"] == "Deleting":
                    self.vms.remove(vm)
                    self.slurm.vm_gone(vm["name"])
                elif vm["state"] == "Creating":
                    vm["state"] = "Succeeded"
                    self.slurm.register(vm["name"])
        page = self.vms[start : start + PAGE]
        body: dict[str, Any] = {"value": [self.vm_doc(v) for v in page]}
        if start + PAGE < len(self.vms):
            body["nextLink"] = (
                f"{self.arm.url}{SCALE_SET_ID}/virtualMachines?api-version={API}&$skiptoken={start + PAGE}"
            )
        return 200, body

    def _delete(self, req: dict[str, Any]) -> tuple[int, Any]:
        for iid in req["body"]["instanceIds"]:
            for vm in self.vms:
                if vm["instanceId"] == iid and vm["state"] != "Deleting":
                    vm["state"] = "Deleting"
                    self.capacity -= 1
                    self.deleted.append(vm["vmId"])
        return 202, None

    def _update(self, req: dict[str, Any]) -> tuple[int, Any]:
        self.capacity = int(req["body"]["sku"]["capacity"])
        while sum(1 for v in self.vms if v["state"] != "Deleting") < self.capacity:
            self._make("Creating")
        return 200, self.doc()

    def by_name(self, name: str) -> dict[str, Any]:
        return next(v for v in self.vms if v["name"] == name)


def write_report(run_dir: Path, names: list[str], bad: str) -> Path:
    """A report.json as the judge writes it (the keys heal reads): ``bad`` FAILed for its own GPU."""
    doc = {
        "verdict": "FAIL",
        "local": False,
        "instance_type": SKU,
        "nodes": [
            {"node": n, "verdict": "FAIL" if n == bad else "PASS", "reasons": [SLOW] if n == bad else []} for n in names
        ],
        "measurements": [],
    }
    path = run_dir / "report.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path
