"""The AKS cluster the AKS crash suite heals a node of: Azure Resource Manager for its GPU agent
pool on a loopback server (tests/heal/recorded.py), and its Kubernetes side on the test API server
(tests/kubeapi.py), both in the test process, which outlives the heal a test kills, as a cloud does.

ARM answers in the shapes of the AKS REST reference, API version 2025-10-01
(Azure/azure-rest-api-specs, specification/containerservice/resource-manager/
Microsoft.ContainerService/aks/stable/2025-10-01/examples):

- ``agentPools get`` (AgentPoolsGet.json at a2d1527): the pool's ``properties.count`` and
  ``provisioningState``;
- ``machines list`` (MachineList.json at 443f613): ``value[]`` of {id, name, type, zones,
  properties.network, properties.resourceId} and a ``nextLink`` while there are more pages (two
  machines a page here, so every list must follow it);
- ``machines get`` (MachineGet.json at 11b1961): one machine, 404 once it is gone;
- ``agentPools deleteMachines`` (AgentPoolsDeleteMachines.json at 76e7937): ``{"machineNames":
  [...]}``, answered 202 with a ``location``;
- ``agentPools createOrUpdate`` (AgentPoolsCreate_Update.json at 10936f3): PUT of the pool,
  answered 200 with the pool.

The pool moves on one step each time it is read (``agentPools get``): a machine being deleted is
gone (and its node with it), a machine being made has registered its node. A delete lowers the
count when it is accepted ("Deleting machines lowers the pool's count", gpu_cluster/heal/azure.py)
and the machine stays readable until the pool next moves on, so a heal killed after the call and
rerun still sees the machine it asked to delete. A node registers as AKS names it: the machine's
name, ``spec.providerID`` ``azure://`` and the scale set VM's resource id, and the pool label.
"""

from __future__ import annotations

from typing import Any

from tests.heal.recorded import Recorded
from tests.kubeapi import KubeApiServer, Store

SUB = "26fe00f8-9173-4872-9134-bb1d2e00343a"
RG, CLUSTER, POOL = "gpuc-rg", "train", "gpu"
API = "2025-10-01"
POOL_PATH = (
    f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.ContainerService/managedClusters/{CLUSTER}"
    f"/agentPools/{POOL}"
)
VMSS = (
    f"/subscriptions/{SUB}/resourceGroups/MC_gpuc-rg_train_eastus/providers/Microsoft.Compute"
    "/virtualMachineScaleSets/aks-gpu-25481572-vmss/virtualMachines"
)
PAGE = 2
HEAL_TAINT = "gpu-cluster.io/heal"
SIZE = 4


def name_of(n: int) -> str:
    return f"aks-gpu-25481572-vmss{n:06x}"


NAMES = [name_of(n) for n in range(SIZE)]
BAD = NAMES[0]


class AksPool:
    """The GPU pool: machines ``{n, state}`` (Succeeded, Deleting, Creating) and the count."""

    def __init__(self, arm: Recorded, kube: KubeApiServer, size: int = SIZE) -> None:
        self.arm, self.kube = arm, kube
        self.machines: list[dict[str, Any]] = [{"n": n, "state": "Succeeded"} for n in range(size)]
        self.count = size
        self.next = size
        self.deleted: list[str] = []
        """The machines deleteMachines was asked for, in order, every ask."""
        self.out_at_once = 0
        """The most nodes out of service (cordoned, or tainted by heal) at one time, after every write."""
        self.ever_out: set[str] = set()
        """Every node that was ever cordoned or tainted by heal."""
        st = kube.store
        for m in self.machines:
            st.create(st.resource("nodes"), "", self.node_doc(m["n"]))
        st.on("nodes", self._watch)
        arm.answer_with("GET", POOL_PATH, self._pool)
        arm.answer_with("PUT", POOL_PATH, self._put)
        arm.answer_with("GET", f"{POOL_PATH}/machines", self._list)
        arm.answer_with("POST", f"{POOL_PATH}/deleteMachines", self._delete)
        for n in range(size + 4):
            arm.answer_with("GET", f"{POOL_PATH}/machines/{name_of(n)}", self._get(n))

    # -- Kubernetes

    def node_doc(self, n: int) -> dict[str, Any]:
        return {
            "metadata": {
                "name": name_of(n),
                "labels": {"kubernetes.io/hostname": name_of(n), "kubernetes.azure.com/agentpool": POOL},
            },
            "spec": {"providerID": f"azure://{VMSS}/{n}"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }

    def _watch(self, store: Store, _type: str, _obj: dict[str, Any]) -> None:
        out = set()
        for doc in store.list(store.resource("nodes"), None):
            spec = doc.get("spec") or {}
            if spec.get("unschedulable") or any(t.get("key") == HEAL_TAINT for t in spec.get("taints") or []):
                out.add(doc["metadata"]["name"])
        self.ever_out |= out
        self.out_at_once = max(self.out_at_once, len(out))

    def node(self, name: str) -> dict[str, Any] | None:
        st = self.kube.store
        found = [d for d in st.list(st.resource("nodes"), None) if d["metadata"]["name"] == name]
        return found[0] if found else None

    # -- ARM

    def _doc(self, m: dict[str, Any]) -> dict[str, Any]:
        n = m["n"]
        return {
            "id": f"{POOL_PATH}/machines/{name_of(n)}",
            "name": name_of(n),
            "type": "Microsoft.ContainerService/managedClusters/agentPools/machines",
            "zones": ["1"],
            "properties": {
                "network": {"ipAddresses": [{"ip": f"10.0.0.{n + 4}", "family": "IPv4"}]},
                "resourceId": f"{VMSS}/{n}",
            },
        }

    def pool_doc(self) -> dict[str, Any]:
        busy = any(m["state"] != "Succeeded" for m in self.machines)
        return {
            "id": POOL_PATH,
            "name": POOL,
            "type": "Microsoft.ContainerService/managedClusters/agentPools",
            "properties": {
                "count": self.count,
                "vmSize": "Standard_ND96isr_H100_v5",
                "osType": "Linux",
                "mode": "User",
                "type": "VirtualMachineScaleSets",
                "provisioningState": "Updating" if busy else "Succeeded",
            },
        }

    def _pool(self, _req: dict[str, Any]) -> tuple[int, Any]:
        st = self.kube.store
        for m in list(self.machines):  # the pool moves on one step
            if m["state"] == "Deleting":
                self.machines.remove(m)
                st.delete(st.resource("nodes"), "", name_of(m["n"]))
            elif m["state"] == "Creating":
                m["state"] = "Succeeded"
                st.create(st.resource("nodes"), "", self.node_doc(m["n"]))
        return 200, self.pool_doc()

    def _put(self, req: dict[str, Any]) -> tuple[int, Any]:
        self.count = int(req["body"]["properties"]["count"])
        while sum(1 for m in self.machines if m["state"] != "Deleting") < self.count:
            self.machines.append({"n": self.next, "state": "Creating"})
            self.next += 1
        return 200, self.pool_doc()

    def _list(self, req: dict[str, Any]) -> tuple[int, Any]:
        start = int(req["query"].get("encodedToken") or 0)
        page = self.machines[start : start + PAGE]
        body: dict[str, Any] = {"value": [self._doc(m) for m in page]}
        if start + PAGE < len(self.machines):
            body["nextLink"] = f"{self.arm.url}{POOL_PATH}/machines?api-version={API}&encodedToken={start + PAGE}"
        return 200, body

    def _get(self, n: int) -> Any:
        def answer(_req: dict[str, Any]) -> tuple[int, Any]:
            m = next((m for m in self.machines if m["n"] == n), None)
            if m is None:
                return 404, {"error": {"code": "NotFound", "message": f"machine {name_of(n)} not found"}}
            return 200, self._doc(m)

        return answer

    def _delete(self, req: dict[str, Any]) -> tuple[int, Any]:
        for name in req["body"]["machineNames"]:
            self.deleted.append(name)
            for m in self.machines:
                if name_of(m["n"]) == name and m["state"] == "Succeeded":
                    m["state"] = "Deleting"
                    self.count -= 1
        return 202, None

    def names(self) -> list[str]:
        return [name_of(m["n"]) for m in self.machines]
