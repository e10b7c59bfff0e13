"""heal's AKS calls against recorded ARM answers in the shapes of the AKS REST reference, API
version 2025-10-01 (Azure/azure-rest-api-specs .../aks/stable/2025-10-01/examples: AgentPoolsGet,
AgentPoolsDeleteMachines at 76e7937 (202 with a location), MachineGet and MachineList at 11b1961,
AgentPoolsCreate_Update): a machine deleted from its pool, the pool's count restored, the new
machine found."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpu_cluster.heal.adapters import AdapterError, NodeState
from gpu_cluster.heal.azure import AksCloud, Arm, cluster_of, subscription_of
from tests.heal.recorded import Recorded

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
    state = {"machines": [0, 1], "count": 2}
    arm.answer_with("GET", POOL_PATH, lambda r: (200, pool(state["count"])))
    arm.answer_with("GET", f"{POOL_PATH}/machines", lambda r: (200, {"value": [machine(n) for n in state["machines"]]}))
    for n in (0, 1, 2):
        arm.answer_with(
            "GET",
            f"{POOL_PATH}/machines/{node(n).node}",
            lambda r, n=n: (200, machine(n)) if n in state["machines"] else (404, {"error": {"code": "NotFound"}}),
        )

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
    out = cloud.replace(node(0), inst, "t", "gate ecc.volatile (gpu0): 3")
    assert out.ok and out.extra["count"] == 2 and out.extra["pool"] == POOL
    (post,) = arm.made("POST")
    assert post["body"] == {"machineNames": ["aks-gpu-25481572-vmss000000"]}
    assert post["query"] == {"api-version": "2025-10-01"} and post["headers"]["Authorization"] == "Bearer token"
    prog = cloud.progress(node(0), inst.id, "t", out.extra)  # gone, count 1: scaled back
    assert prog.started and "scaled back to 2" in prog.detail
    (put_req,) = arm.made("PUT")
    assert put_req["body"]["properties"]["count"] == 2 and "provisioningState" not in put_req["body"]["properties"]
    prog = cloud.progress(node(0), inst.id, "t", out.extra)
    assert prog.new_instance == f"{VMSS}/2" and prog.node == "aks-gpu-25481572-vmss000002"
    # a rerun's re-read: gone and at size, nothing is asked again
    assert len(arm.made("POST")) == 1 and len(arm.made("PUT")) == 1


def test_arm_refusals_are_one_line(arm: Recorded) -> None:
    arm.answer("GET", f"{POOL_PATH}/machines/{node(0).node}", {"error": {"code": "AuthorizationFailed"}}, status=403)
    with pytest.raises(AdapterError, match="ARM GET .* 403"):
        AksCloud(Arm("token", arm.url), SUB, RG, CLUSTER).instance(node(0))


def test_cluster_and_subscription_from_the_outputs_and_the_node() -> None:
    assert cluster_of("az aks get-credentials --resource-group gpuc-rg --name train") == ("gpuc-rg", "train")
    with pytest.raises(AdapterError, match="not an AKS stack"):
        cluster_of("gcloud container clusters get-credentials train")
    assert subscription_of(node().instance) == SUB
