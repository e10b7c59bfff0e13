"""heal's AKS calls against recorded ARM answers in the shapes of the AKS REST reference, API
version 2025-10-01 (Azure/azure-rest-api-specs .../aks/stable/2025-10-01/examples: AgentPoolsGet,
AgentPoolsDeleteMachines at 76e7937 (202 with a location), MachineGet and MachineList at 11b1961,
AgentPoolsCreate_Update): a machine deleted from its pool, the pool's count restored, the new
machine found."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.heal.adapters import AdapterError, CheckResult, NodeState, Outcome
from gpu_cluster.heal.azure import AksCloud, Arm, cluster_of, subscription_of
from gpu_cluster.heal.engine import Engine
from gpu_cluster.heal.evidence import read_report
from gpu_cluster.heal.journal import JOURNAL, Journal, read
from gpu_cluster.heal.policy import Limits
from gpu_cluster.heal.states import State
from tests.heal.recorded import Recorded
from tests.heal.world import SLOW

SUB = "26fe00f8-9173-4872-9134-bb1d2e00343a"
RG, CLUSTER, POOL = "gpuc-rg", "train", "gpu"
POOL_PATH = f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.ContainerService/managedClusters/{CLUSTER}/agentPools/{POOL}"
VMSS = f"/subscriptions/{SUB}/resourceGroups/MC_gpuc-rg_train_eastus/providers/Microsoft.Compute/virtualMachineScaleSets/aks-gpu-25481572-vmss/virtualMachines"


def machine(n: int) -> dict[str, Any]:
    name = f"aks-gpu-25481572-vmss{n:06x}"
    return {
        "id": f"{POOL_PATH}/machines/{name}",
        "name": name,
        "type": "Microsoft.ContainerService/managedClusters/agentPools/machines",
        "zones": ["1"],
        "properties": {
            "network": {"ipAddresses": [{"ip": f"10.0.0.{n + 4}", "family": "IPv4"}]},
            "resourceId": f"{VMSS}/{n}",
        },
    }


def pool(count: int, state: str = "Succeeded") -> dict[str, Any]:
    return {
        "id": POOL_PATH,
        "name": POOL,
        "type": "Microsoft.ContainerService/managedClusters/agentPools",
        "properties": {
            "count": count,
            "vmSize": "Standard_ND96isr_H100_v5",
            "osType": "Linux",
            "mode": "User",
            "type": "VirtualMachineScaleSets",
            "provisioningState": state,
        },
    }


@pytest.fixture
def arm() -> Iterator[Recorded]:
    s = Recorded(lambda path: {"error": {"code": "NotFound", "message": f"{path} not found"}})
    yield s
    s.close()


def node(n: int = 0) -> NodeState:
    return NodeState(
        node=f"aks-gpu-25481572-vmss{n:06x}",
        present=True,
        ready=True,
        instance=f"azure://{VMSS}/{n}",
        labels={"kubernetes.azure.com/agentpool": POOL},
    )


def test_aks_machine_deleted_and_the_pool_restored(arm: Recorded) -> None:
    state: dict[str, Any] = {"machines": [0, 1], "count": 2}
    arm.answer_with("GET", POOL_PATH, lambda r: (200, pool(state["count"])))
    arm.answer_with("GET", f"{POOL_PATH}/machines", lambda r: (200, {"value": [machine(n) for n in state["machines"]]}))

    def get(n: int) -> Callable[[dict[str, Any]], tuple[int, Any]]:
        return lambda r: (200, machine(n)) if n in state["machines"] else (404, {"error": {"code": "NotFound"}})

    for n in (0, 1, 2):
        arm.answer_with("GET", f"{POOL_PATH}/machines/{node(n).node}", get(n))

    def delete(req: dict[str, Any]) -> tuple[int, Any]:
        for name in req["body"]["machineNames"]:
            state["machines"] = [n for n in state["machines"] if node(n).node != name]
        state["count"] = len(state["machines"])
        return 202, None

    def put(req: dict[str, Any]) -> tuple[int, Any]:
        state["count"] = req["body"]["properties"]["count"]
        state["machines"].append(2)
        return 200, pool(state["count"], "Updating")

    arm.answer_with("POST", f"{POOL_PATH}/deleteMachines", delete)
    arm.answer_with("PUT", POOL_PATH, put)
    cloud = AksCloud(Arm("token", arm.url), SUB, RG, CLUSTER)
    inst = cloud.instance(node(0))
    assert inst.id == f"{VMSS}/0"
    assert not cloud.progress(node(0), inst.id, "t", {}).started
    before = cloud.prepare(node(0), inst)
    assert before == {"pool": POOL, "count": 2, "before": [f"{VMSS}/0", f"{VMSS}/1"]}
    assert cloud.short_of(node(0), before) == ""
    out = cloud.replace(node(0), inst, "t", "gate ecc.volatile (gpu0): 3")
    assert out.ok and out.extra == {"pool": POOL, "op": f"deleteMachines {node(0).node}"}
    (post,) = arm.made("POST")
    assert post["body"] == {"machineNames": ["aks-gpu-25481572-vmss000000"]}
    assert post["query"] == {"api-version": "2025-10-01"} and post["headers"]["Authorization"] == "Bearer token"
    prog = cloud.progress(node(0), inst.id, "t", before)  # gone, count 1, no new machine yet
    assert prog.started and prog.new_instance == ""
    assert cloud.short_of(node(0), before) == f"pool {POOL} has count 1, 2 before the replacement"
    assert "scaled back to 2" in cloud.restore(node(0), before).detail
    (put_req,) = arm.made("PUT")
    assert put_req["body"]["properties"]["count"] == 2 and "provisioningState" not in put_req["body"]["properties"]
    prog = cloud.progress(node(0), inst.id, "t", before)
    assert prog.new_instance == f"{VMSS}/2" and prog.node == "aks-gpu-25481572-vmss000002"
    # a rerun's re-read: gone and at size, nothing is asked again
    assert cloud.short_of(node(0), before) == ""
    assert len(arm.made("POST")) == 1 and len(arm.made("PUT")) == 1
    # without the machines before the call, no machine is guessed to be the new one
    assert cloud.progress(node(0), inst.id, "t", {"pool": POOL}).new_instance == ""


def test_arm_refusals_are_one_line(arm: Recorded) -> None:
    arm.answer("GET", f"{POOL_PATH}/machines/{node(0).node}", {"error": {"code": "AuthorizationFailed"}}, status=403)
    with pytest.raises(AdapterError, match="ARM GET .* 403"):
        AksCloud(Arm("token", arm.url), SUB, RG, CLUSTER).instance(node(0))


def test_cluster_and_subscription_from_the_outputs_and_the_node() -> None:
    assert cluster_of("az aks get-credentials --resource-group gpuc-rg --name train") == ("gpuc-rg", "train")
    with pytest.raises(AdapterError, match="not an AKS stack"):
        cluster_of("gcloud container clusters get-credentials train")
    assert subscription_of(node().instance) == SUB


class Killed(BaseException):
    """Stands for SIGKILL inside the run: nothing after it in this process writes the journal."""


class AksNodes:
    """The AKS cluster's Kubernetes side as heal sees it: a node per machine of the recorded pool
    (a machine is named as its node, MachineGet), cordon marks kept here; tests/heal/
    test_kubernetes.py covers the real cordon, taint and eviction."""

    kind = "kubernetes"

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state
        self.held: dict[str, str] = {}
        self.ever_held: set[str] = set()

    def _n(self, name: str) -> int | None:
        return next((n for n in self.state["machines"] if node(n).node == name), None)

    def node(self, name: str) -> NodeState:
        n = self._n(name)
        if n is None:
            return NodeState(node=name, present=False, detail="no such node")
        return NodeState(
            node=name,
            present=True,
            ready=True,
            in_service=name not in self.held,
            held_by=self.held.get(name),
            instance=node(n).instance,
            labels=node(n).labels,
            detail="cordoned" if name in self.held else "Ready",
        )

    def quarantine(self, name: str, incident: str, why: str) -> Outcome:
        self.held[name] = incident
        self.ever_held.add(name)
        return Outcome(ok=True, detail=f"cordoned and tainted by {incident}")

    def release(self, name: str, incident: str) -> Outcome:
        self.held.pop(name, None)
        return Outcome(ok=True, detail="uncordoned")

    def successor(self, slot_node: str, old_instance: str, new_instance: str) -> str | None:
        return None

    def open_for_check(self, name: str, peer: str, incident: str) -> Outcome:
        return Outcome(ok=True, detail="tolerates the taint")

    def close_check(self, name: str, peer: str, incident: str) -> None:
        return None


class Judge:
    """Fails the first machine (the bad one), passes every other."""

    def estimate(self) -> tuple[float, str]:
        return 60.0, "test"

    def check(self, name: str, peer: str, incident: str, purpose: str) -> CheckResult:
        ok = name != node(0).node
        return CheckResult(ran=True, passed=ok, detail=f"{name} {'PASS' if ok else 'FAIL'} with {peer}")


def pool_world(arm: Recorded) -> dict[str, Any]:
    """A pool of three machines whose deleteMachines is answered 202 and whose createOrUpdate brings
    a new machine once the count rises (the shapes of the 2025-10-01 examples above)."""
    state: dict[str, Any] = {"machines": [0, 1, 2], "count": 3, "next": 3}
    arm.answer_with("GET", POOL_PATH, lambda r: (200, pool(state["count"])))
    arm.answer_with("GET", f"{POOL_PATH}/machines", lambda r: (200, {"value": [machine(n) for n in state["machines"]]}))

    def get(n: int) -> Callable[[dict[str, Any]], tuple[int, Any]]:
        return lambda r: (200, machine(n)) if n in state["machines"] else (404, {"error": {"code": "NotFound"}})

    for n in range(6):
        arm.answer_with("GET", f"{POOL_PATH}/machines/{node(n).node}", get(n))

    def delete(req: dict[str, Any]) -> tuple[int, Any]:
        for name in req["body"]["machineNames"]:
            state["machines"] = [n for n in state["machines"] if node(n).node != name]
        state["count"] = len(state["machines"])
        return 202, None

    def put(req: dict[str, Any]) -> tuple[int, Any]:
        state["count"] = req["body"]["properties"]["count"]
        while len(state["machines"]) < state["count"]:
            state["machines"].append(state["next"])
            state["next"] += 1
        return 200, pool(state["count"], "Updating")

    arm.answer_with("POST", f"{POOL_PATH}/deleteMachines", delete)
    arm.answer_with("PUT", POOL_PATH, put)
    return state


AKS_RUN_LINES = 12
"""The lines of an uncut AKS heal (the kill points below): SUSPECT to HEALTHY with the pool's
restore-intent and restored lines."""


@pytest.mark.parametrize(
    "kill", ["none", "after-delete-machines", *(f"after-line-{n}" for n in range(1, AKS_RUN_LINES))]
)
def test_aks_killed_after_delete_machines_rerun_restores_the_count_and_quarantines_no_healthy_machine(
    arm: Recorded, tmp_path: Path, kill: str
) -> None:
    """Issue 41, severity 1, shape 5: killed between deleteMachines and its journal line, the rerun
    scales the pool back to the count journalled before the call, as its own journalled intent (I3),
    takes the machine that appeared after it as the replacement, and never cordons a healthy one."""
    state = pool_world(arm)
    (tmp_path / "report.json").write_text(
        json.dumps(
            {
                "verdict": "FAIL",
                "local": False,
                "instance_type": None,
                "nodes": [
                    {"node": node(n).node, "verdict": "FAIL" if n == 0 else "PASS", "reasons": [SLOW] if n == 0 else []}
                    for n in (0, 1, 2)
                ],
                "measurements": [],
            }
        )
    )
    nodes = AksNodes(state)

    class DeletesThenDies(AksCloud):
        def replace(self, *a: Any, **k: Any) -> Any:
            super().replace(*a, **k)
            raise Killed

    lines = [0]

    def echo(_line: str) -> None:
        lines[0] += 1
        if kill == f"after-line-{lines[0]}":
            raise Killed  # the line is on disk (written and fsynced before it is echoed)

    def heal(cloud: AksCloud) -> int:
        with Journal(tmp_path, echo=echo) as j:
            e = Engine(
                cluster="train",
                journal=j,
                scheduler=nodes,
                cloud=cloud,
                checker=Judge(),
                limits=Limits(apply=True),
                say=lambda line: None,
                sleep=lambda s: None,
                poll_s=0.0,
            )
            return e.run(read_report(tmp_path / "report.json")).code

    uncut = kill == "none"
    if kill == "after-delete-machines":
        with pytest.raises(Killed):
            heal(DeletesThenDies(Arm("token", arm.url), SUB, RG, CLUSTER))
        assert state["count"] == 2  # the pool one short, as the kill left it
    elif kill != "none":
        with pytest.raises(Killed):
            heal(AksCloud(Arm("token", arm.url), SUB, RG, CLUSTER))
        kill = "none"  # the rerun runs to the end
    assert heal(AksCloud(Arm("token", arm.url), SUB, RG, CLUSTER)) == 0
    entries, notes = read(tmp_path / JOURNAL)
    assert not notes and entries[-1].state is State.HEALTHY
    # I3: the pool ends at its size, restored once, by an intent journalled before the PUT
    assert state["count"] == 3 and len(arm.made("PUT")) == 1 and len(arm.made("POST")) == 1
    events = [e.event for e in entries]
    assert events.index("restore-intent") + 1 == events.index("restored")
    assert sum(1 for e in entries if e.state is State.REPLACING and e.event == "intent") == 1
    if uncut:  # the kill points above cover every line of an uncut run
        assert len(entries) == AKS_RUN_LINES
    # the replacement is the machine that appeared after the call; no healthy machine was held
    assert entries[-1].node == node(3).node and entries[-1].instance == f"{VMSS}/3"
    assert nodes.ever_held == {node(0).node, node(3).node} and nodes.held == {node(0).node: entries[0].incident}
