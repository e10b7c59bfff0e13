"""Compute Engine as the GKE and Cluster Director crash suites stand it in: a loopback server
(tests/heal/recorded.py) in the test process, which outlives the heal a test kills, answering in the
shapes of the Compute Engine API reference as google-cloud-compute 1.48.0's REST transport sends and
parses them (tests/heal/google/test_gcp.py lists the pages):

- ``instances.get``: Instance {id, name, status, resourceStatus.physicalHost}; 404 while a recreated
  VM does not exist;
- ``instanceGroupManagers.get``: InstanceGroupManager {name, targetSize};
- ``instanceGroupManagers.listManagedInstances`` (POST, ``pageToken``): ManagedInstance {instance,
  id (empty while the instance does not exist), currentAction (NONE, RECREATING), instanceStatus};
  two a page, so every list follows ``nextPageToken``;
- ``instanceGroupManagers.recreateInstances`` and ``instances.reportHostAsFaulty`` (POST, query
  ``requestId``): an Operation {name, operationType, status PENDING | RUNNING | DONE, targetLink}.
  A request whose ``requestId`` the server has already received is ignored and answered with the
  first one's operation ("if you make the request again with the same request ID, the server can
  check if original operation with the same request ID was received, and if so, will ignore the
  second request", the compute_v1 request types' ``request_id``);
- ``zoneOperations.get``; GKE ``nodePools.get``: NodePool {name, instanceGroupUrls}.

The group's recreate advances one step each time its instances are listed, the report each time its
operation is read; the first read after the call still shows nothing (the call is queued), so a
rerun killed after the call and before its journal line asks again, with the same requestId.
``on_running`` is told the name of a VM the group has just recreated (the test registers its node
as GKE does, with the pool's taints)."""

from __future__ import annotations

import json
from pathlib import Path
from collections.abc import Callable
from typing import Any

from tests.heal.google.test_gcp import CLUSTER, COMPUTE, P, Z, error, operation
from tests.heal.recorded import Recorded

GROUP = "gke-train-gpu-1a2b3c4d-grp"
IGM = f"{COMPUTE}/instanceGroupManagers/{GROUP}"
BASE = "https://www.googleapis.com/compute/v1"
NAMES = ["gke-train-gpu-1a2b3c4d-x7k2", "gke-train-gpu-1a2b3c4d-p001", "gke-train-gpu-1a2b3c4d-p002"]
BAD = NAMES[0]
RECREATE_STEPS = [("RECREATING", "STOPPING"), ("RECREATING", ""), ("RECREATING", "PROVISIONING"), ("NONE", "RUNNING")]


class Compute:
    def __init__(self, server: Recorded, on_running: Callable[[str], None] | None = None) -> None:
        self.s = server
        self.on_running = on_running
        self.vms = {n: {"id": str(1000 + k), "host": f"/a1/b{k}/c0", "status": "RUNNING"} for k, n in enumerate(NAMES)}
        self.bad = {"id": self.vms[BAD]["id"], "host": self.vms[BAD]["host"]}
        self.action = dict.fromkeys(NAMES, "NONE")
        self.target_size = len(NAMES)
        self.ops: dict[str, dict[str, Any]] = {}
        self.by_request: dict[str, str] = {}
        self.done: list[tuple[str, str]] = []
        """(operationType, instance) of every request the server carried out: one per requestId."""
        self.steps: dict[str, int] = {}
        self.serial = 5000
        for n in NAMES:
            server.answer_with("GET", f"{COMPUTE}/instances/{n}", self._get(n))
            server.answer_with("POST", f"{COMPUTE}/instances/{n}/reportHostAsFaulty", self._report(n))
        server.answer_with(
            "GET",
            IGM,
            lambda req: (200, {"kind": "compute#instanceGroupManager", "name": GROUP, "targetSize": self.target_size}),
        )
        server.answer_with("POST", f"{IGM}/listManagedInstances", self._list)
        server.answer_with("POST", f"{IGM}/recreateInstances", self._recreate)
        server.answer(
            "GET",
            f"/v1/projects/{P}/locations/{Z}/clusters/{CLUSTER}/nodePools/gpu",
            {
                "name": "gpu",
                "instanceGroupUrls": [f"{BASE}/projects/{P}/zones/{Z}/instanceGroupManagers/{GROUP}"],
                "status": "RUNNING",
            },
        )

    def write(self, run_dir: Path, **more: Any) -> None:
        (run_dir / "world.json").write_text(json.dumps({"url": self.s.url, "bad": self.bad, **more}))

    def _vm(self, n: str) -> dict[str, Any]:
        vm = self.vms[n]
        return {
            "kind": "compute#instance",
            "id": vm["id"],
            "name": n,
            "zone": f"{BASE}/projects/{P}/zones/{Z}",
            "machineType": f"{BASE}/projects/{P}/zones/{Z}/machineTypes/a3-ultragpu-8g",
            "status": vm["status"],
            "resourceStatus": {"physicalHost": vm["host"]},
            "selfLink": f"{BASE}/projects/{P}/zones/{Z}/instances/{n}",
        }

    def _get(self, n: str) -> Any:
        def answer(req: dict[str, Any]) -> tuple[int, Any]:
            if not self.vms[n]["id"]:
                return 404, error(
                    404, "NOT_FOUND", f"The resource 'projects/{P}/zones/{Z}/instances/{n}' was not found"
                )
            return 200, self._vm(n)

        return answer

    def _op(self, kind: str, target: str, req: dict[str, Any]) -> tuple[int, Any]:
        rid = req["query"].get("requestId", "")
        if rid in self.by_request:  # the same request again: ignored, the first one's operation
            return 200, self._op_doc(self.by_request[rid])
        name = f"operation-{kind.rsplit('.', 1)[-1]}-{len(self.ops) + 1}"
        self.ops[name] = {"kind": kind, "target": target, "status": "PENDING"}
        if rid:
            self.by_request[rid] = name
        self.done.append((kind, target))
        self.steps[name] = -1
        self.s.answer_with("GET", f"{COMPUTE}/operations/{name}", lambda _r: self._read_op(name))
        return 200, self._op_doc(name)

    def _op_doc(self, name: str) -> dict[str, Any]:
        op = self.ops[name]
        return operation(name, op["kind"], op["status"], target=op["target"])

    def _recreate(self, req: dict[str, Any]) -> tuple[int, Any]:
        (url,) = req["body"]["instances"]
        return self._op("compute.instanceGroupManagers.recreateInstances", url.rsplit("/", 1)[-1], req)

    def _report(self, n: str) -> Any:
        return lambda req: self._op("compute.instances.reportHostAsFaulty", n, req)

    def _list(self, req: dict[str, Any]) -> tuple[int, Any]:
        page = int(req["query"].get("pageToken") or 0)
        if page == 0:
            for name, op in self.ops.items():
                if op["kind"].endswith("recreateInstances") and op["status"] != "DONE":
                    self._step_recreate(name, op)
        rows = [
            {
                "instance": f"{BASE}/projects/{P}/zones/{Z}/instances/{n}",
                "currentAction": self.action[n],
                **({"id": self.vms[n]["id"], "instanceStatus": self.vms[n]["status"]} if self.vms[n]["id"] else {}),
            }
            for n in NAMES
        ]
        doc: dict[str, Any] = {"managedInstances": rows[page * 2 : page * 2 + 2]}
        if page * 2 + 2 < len(rows):
            doc["nextPageToken"] = str(page + 1)
        return 200, doc

    def _step_recreate(self, name: str, op: dict[str, Any]) -> None:
        self.steps[name] += 1
        k = self.steps[name]
        if k == 0:
            return  # queued: nothing shows yet
        n = op["target"]
        action, status = RECREATE_STEPS[min(k - 1, len(RECREATE_STEPS) - 1)]
        self.action[n] = action
        op["status"] = "DONE" if action == "NONE" else "RUNNING"
        if status == "":
            self.vms[n].update(id="", status="")
        elif status == "PROVISIONING" and not self.vms[n]["id"]:
            self.serial += 1
            self.vms[n].update(id=str(self.serial), status=status, host=f"/a9/b{self.serial}/c1")
        else:
            self.vms[n]["status"] = status
        if action == "NONE" and self.on_running is not None:
            self.on_running(n)

    def _read_op(self, name: str) -> tuple[int, Any]:
        op = self.ops[name]
        if op["kind"].endswith("reportHostAsFaulty") and op["status"] != "DONE":
            self.steps[name] += 1
            n = op["target"]
            if self.steps[name] == 1:
                op["status"] = "RUNNING"
                self.vms[n]["status"] = "REPAIRING"
            elif self.steps[name] >= 2:
                op["status"] = "DONE"
                self.serial += 1
                self.vms[n].update(status="RUNNING", host=f"/a9/b{self.serial}/c1")
        return 200, self._op_doc(name)
