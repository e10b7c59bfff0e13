"""Azure Slurm: a node of the stack's own Slurm (components/azure/orchestration_slurm.py) replaced
through its Uniform scale set, by Azure Resource Manager (Compute REST API 2024-07-01).

The calls, each from Learn's Compute REST reference at api-version 2024-07-01 (the version the
azure-rest-api-specs examples below are filed under, specification/compute/.../ComputeRP/stable/
2024-07-01/examples/virtualMachineScaleSetExamples):

- **Virtual Machine Scale Set VMs - List**, ``GET .../virtualMachineScaleSets/{vmss}/virtualMachines``
  (learn.microsoft.com/rest/api/compute/virtual-machine-scale-set-vms/list; example
  VirtualMachineScaleSetVM_List_MaximumSet_Gen.json at 49183a6): ``value[]`` of ``instanceId``,
  ``properties.vmId``, ``properties.osProfile.computerName``, ``properties.provisioningState``, and
  a ``nextLink`` while there are more pages. A node is found by its name: a dynamic slurmd
  registers under its host name (slurm_config.py), which on a Uniform scale set is the VM's
  ``computerName`` (the prefix and the instance id, orchestration_slurm.py NODE_PREFIX).
- **Virtual Machine Scale Sets - Delete Instances**, ``POST .../virtualMachineScaleSets/{vmss}/delete``
  with ``{"instanceIds": [...]}`` (learn.microsoft.com/rest/api/compute/virtual-machine-scale-sets/
  delete-instances; "Deletes virtual machines in a VM scale set"; answers 200, or 202 with a
  ``location``: VirtualMachineScaleSet_DeleteInstances_MaximumSet_Gen.json at b3a045c). No
  ``forceDeletion`` (a preview feature, the same page).
- **Virtual Machine Scale Sets - Get** and **- Update**, ``GET`` and ``PATCH .../virtualMachineScaleSets/{vmss}``
  (learn.microsoft.com/rest/api/compute/virtual-machine-scale-sets/update, "Update a VM scale set";
  ``sku.capacity``: "Specifies the number of virtual machines in the scale set", the Sku model):
  the capacity is put back to the one journalled before the delete, as its own intent (I3).

Which VM is which: Uniform instance ids "may be reused for new instances once old instances are
deleted" (Learn, virtual-machine-scale-sets-instance-ids.md), and the computer name is made from
the id, so neither tells a new VM from the one deleted. ``vmId`` ("Azure VM unique ID") does: the
old VM is followed by its vmId, and the replacement is the one VM whose vmId was not in the scale
set before the delete (the list is journalled with the intent, I2); never "any member that is new".

Why delete and not reimage: a reimage "reimages (upgrade the operating system)" the same VM
(Virtual Machine Scale Set VMs - Reimage); nothing in it moves the VM off its host, so a GPU or
InfiniBand fault of the host stays. A deleted VM's replacement is a new VM, placed anew by the
scale set. (Redeploy "moves it to a new node", Virtual Machine Scale Sets - Redeploy, but keeps the
VM, its disk and its name; not used: the fresh OS disk of a new VM is the better start for a node
that failed, and delete is the path docs/azure.md gives by hand.)

The Slurm side: the old dynamic node stays in slurmctld, DOWN and drained with heal's mark, until
it is deleted (SchedMD dynamic_nodes.shtml at 00280e0, "Deleting Nodes": ``scontrol delete
nodename=``, "Only dynamic nodes that have no running jobs and that are not part of a reservation
can be deleted"), and it counts against ``MaxNodeCount``, which the stack sets to the scale set's
size ("the number of possible nodes that can be active in a system at a time"). So heal deletes
the old node's record (only while heal's own drain is on it) before it puts the capacity back,
in the same journalled restore. The new VM's slurmd registers itself (slurmd -Z).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol

from gpu_cluster.components.validation_time import REPLACE_PATHS
from gpu_cluster.heal.adapters import AdapterError, DocumentedPath, Instance, NodeState, Outcome, Progress
from gpu_cluster.heal.azure import Arm

# Compute REST API version of every call here (the Learn pages and examples in the module notes).
COMPUTE_API = "2024-07-01"
_SCALE_SET = re.compile(
    r"^/subscriptions/([^/]+)/resourceGroups/([^/]+)/providers/Microsoft\.Compute/virtualMachineScaleSets/([^/]+)$",
    re.IGNORECASE,
)


class Forgets(Protocol):
    """The scheduler's side of a deleted VM: drop the old dynamic node's record."""

    def forget(self, name: str, incident: str) -> Outcome: ...


def scale_set_of(resource_id: str) -> tuple[str, str, str]:
    """(subscription, resource group, scale set) from the scale set's ARM resource ID."""
    m = _SCALE_SET.match(resource_id or "")
    if not m:
        raise AdapterError(
            f"{resource_id!r} is not a virtual machine scale set's resource ID "
            "(/subscriptions/S/resourceGroups/G/providers/Microsoft.Compute/virtualMachineScaleSets/N)"
        )
    return m.group(1), m.group(2), m.group(3)


class VmssCloud(DocumentedPath):
    name = path = "vmss-delete-instances"

    def __init__(self, arm: Arm, scale_set_id: str, slurm: Forgets) -> None:
        self.arm = arm
        self.subscription, self.rg, self.scale_set = scale_set_of(scale_set_id)
        self.slurm = slurm
        self.call = f"{REPLACE_PATHS[self.name][1]} (Compute REST API {COMPUTE_API})"

    def _path(self) -> str:
        return (
            f"/subscriptions/{self.subscription}/resourceGroups/{self.rg}/providers/Microsoft.Compute"
            f"/virtualMachineScaleSets/{self.scale_set}"
        )

    # ---- reads -----------------------------------------------------------------------------

    def read_scale_set(self) -> dict[str, Any]:
        """Virtual Machine Scale Sets - Get (2024-07-01): ``sku`` and ``properties.provisioningState``."""
        status, doc = self.arm.call("GET", self._path(), api_version=COMPUTE_API)
        if status == 404 or not doc:
            raise AdapterError(f"scale set {self.scale_set} of {self.rg} not found")
        return dict(doc)

    def vms(self) -> list[dict[str, Any]]:
        """Virtual Machine Scale Set VMs - List (2024-07-01), every page (``nextLink``)."""
        out: list[dict[str, Any]] = []
        page: str | None = f"{self._path()}/virtualMachines"
        while page:
            _, doc = self.arm.call("GET", page, api_version=COMPUTE_API)
            out.extend((doc or {}).get("value", []))
            page = (doc or {}).get("nextLink") or None
        return out

    @staticmethod
    def _vm_id(vm: Mapping[str, Any]) -> str:
        return str(vm.get("properties", {}).get("vmId", ""))

    @staticmethod
    def _computer(vm: Mapping[str, Any]) -> str:
        return str(vm.get("properties", {}).get("osProfile", {}).get("computerName", ""))

    def _by_name(self, name: str, vms: list[dict[str, Any]]) -> dict[str, Any] | None:
        # Azure keeps computerName as given; Linux host names compare without case.
        return next((vm for vm in vms if self._computer(vm).lower() == name.lower()), None)

    def _by_vm_id(self, vm_id: str, vms: list[dict[str, Any]]) -> dict[str, Any] | None:
        return next((vm for vm in vms if vm_id and self._vm_id(vm) == vm_id), None)

    def instance(self, node: NodeState) -> Instance:
        """The node's VM, identified by its ``vmId`` (an instance id can be reused; module notes)."""
        vm = self._by_name(node.node, self.vms())
        if vm is None:
            return Instance(id="", state=f"no VM named {node.node} in scale set {self.scale_set}")
        state = vm.get("properties", {}).get("provisioningState", "")
        return Instance(id=self._vm_id(vm), state=f"instance {vm.get('instanceId')} ({state})")

    # ---- the replacement -------------------------------------------------------------------

    def prepare(self, node: NodeState, instance: Instance) -> dict[str, Any]:
        """The scale set's capacity and VMs before the call, and heal's mark on the node, journalled
        with the intent: a rerun killed after the delete restores the capacity, deletes the old
        node's record only while that mark is on it, and tells the new VM from these (I2, I3)."""
        doc = self.read_scale_set()
        return {
            "scale_set": self.scale_set,
            "capacity": int(doc.get("sku", {}).get("capacity") or 0),
            "before": sorted(self._vm_id(vm) for vm in self.vms()),
            "old_node": node.node,
            "mark": node.held_by or "",
        }

    def replace(self, node: NodeState, instance: Instance, token: str, why: str) -> Outcome:
        vms = self.vms()
        vm = self._by_vm_id(instance.id, vms)
        if vm is None:
            return Outcome(ok=False, detail=f"no VM {instance.id or node.node} in scale set {self.scale_set}")
        iid = str(vm["instanceId"])
        capacity = int(self.read_scale_set().get("sku", {}).get("capacity") or 0)
        # Virtual Machine Scale Sets - Delete Instances (2024-07-01): instanceIds, no forceDeletion.
        self.arm.call("POST", f"{self._path()}/delete", {"instanceIds": [iid]}, api_version=COMPUTE_API)
        return Outcome(
            ok=True,
            detail=f"deleteInstances {iid} ({node.node}) in scale set {self.scale_set} "
            f"(capacity {capacity}, restored once it is gone)",
            extra={"capacity": capacity, "op": f"deleteInstances {iid}"},
        )

    def progress(self, node: NodeState, old: str, token: str, facts: Mapping[str, Any]) -> Progress:
        vms = self.vms()
        gone = self._by_vm_id(old, vms)
        if gone is not None:
            state = str(gone.get("properties", {}).get("provisioningState", ""))
            return Progress(
                started=bool(facts.get("op")) or state == "Deleting",
                detail=f"VM {gone.get('instanceId')} ({self._computer(gone)}) still in scale set "
                f"{self.scale_set} ({state})",
            )
        if "before" not in facts:
            return Progress(
                started=True,
                detail=f"{node.node}'s VM is gone, but the scale set's VMs before the call are not in the "
                "journal: the new VM cannot be told from the others; a person must name it",
            )
        before = set(facts["before"])
        new = [vm for vm in vms if self._vm_id(vm) not in before]
        if len(new) > 1:
            names = ", ".join(f"{vm.get('instanceId')} ({self._computer(vm)})" for vm in new)
            return Progress(
                started=True,
                escalate=f"{len(new)} VMs joined scale set {self.scale_set} since the delete ({names}): "
                "something else scaled it too, and which one stands in this slot cannot be told; "
                "a person must name it (the others are in service as Slurm registered them)",
            )
        if not new:
            return Progress(started=True, detail=f"{node.node}'s VM is gone; no new VM in {self.scale_set} yet")
        vm = new[0]
        return Progress(
            started=True,
            new_instance=self._vm_id(vm),
            node=self._computer(vm),
            detail=f"new VM {vm.get('instanceId')} ({self._computer(vm)}, "
            f"{vm.get('properties', {}).get('provisioningState', '')})",
        )

    # ---- restoring the slot (I3) -----------------------------------------------------------

    def _stale(self, node: NodeState, facts: Mapping[str, Any], vms: list[dict[str, Any]]) -> bool:
        """The old node's Slurm record, whose VM is gone, still carries heal's own mark."""
        mark = str(facts.get("mark") or "")
        old = str(facts.get("old_instance") or "")
        return (
            bool(mark and node.present and node.node == facts.get("old_node") and node.held_by == mark)
            and self._by_vm_id(old, vms) is None
        )

    def short_of(self, node: NodeState, facts: Mapping[str, Any]) -> str:
        """Why the slot must be made whole ('' when it is, or the scale set is still changing):
        the old node's record to drop, and the capacity journalled before the call to restore."""
        want = int(facts.get("capacity") or 0)
        if not want:
            return ""
        why = []
        if self._stale(node, facts, self.vms()):
            why.append(f"Slurm still lists {node.node}, whose VM is deleted")
        doc = self.read_scale_set()
        have = int(doc.get("sku", {}).get("capacity") or 0)
        if have < want and doc.get("properties", {}).get("provisioningState") == "Succeeded":
            why.append(f"scale set {self.scale_set} has capacity {have}, {want} before the replacement")
        return "; ".join(why)

    def restore(self, node: NodeState, facts: Mapping[str, Any]) -> Outcome:
        """Drop the old node's record (before the new VM can register: MaxNodeCount), then
        Virtual Machine Scale Sets - Update (2024-07-01) with ``sku.capacity`` set back, the
        sku's name and tier as read. Each part is re-read first, so a rerun asks only what is left."""
        said = []
        if self._stale(node, facts, self.vms()):
            gone = self.slurm.forget(node.node, str(facts["mark"]))
            if not gone.ok:
                raise AdapterError(f"could not drop {node.node} from Slurm: {gone.detail}")
            said.append(gone.detail)
        want = int(facts["capacity"])
        doc = self.read_scale_set()
        sku = dict(doc.get("sku", {}))
        if int(sku.get("capacity") or 0) < want:
            body = {"sku": {"name": sku.get("name"), "tier": sku.get("tier"), "capacity": want}}
            self.arm.call("PATCH", self._path(), body, api_version=COMPUTE_API)
            said.append(f"scale set {self.scale_set} capacity back to {want} (virtualMachineScaleSets update)")
        return Outcome(ok=True, detail="; ".join(said) or "nothing left to restore")
