"""Azure: an AKS node replaced through its node pool, by Azure Resource Manager.

``POST .../managedClusters/{cluster}/agentPools/{pool}/deleteMachines?api-version=2025-10-01`` with
``{"machineNames": [...]}`` answers 202 with a ``location`` to poll (Azure/azure-rest-api-specs,
specification/containerservice/resource-manager/Microsoft.ContainerService/aks/stable/2025-10-01/
examples/AgentPoolsDeleteMachines.json at 76e7937; a machine's name is its node's, as that example's
``aks-nodepool1-42263519-vmss00000a`` shows). Deleting machines lowers the pool's count; the AKS
documentation pairs it with scaling the pool back to its size ("Resolve undrainable nodes": delete the
machine with ``az aks nodepool delete-machines``, then "scale the node pool to the same number of
nodes", MicrosoftDocs/azure-aks-docs upgrade-aks-cluster), which is the pool's
``agentPools createOrUpdate`` (PUT) with ``properties.count`` restored (heal journals that as its own intent, from the count it journalled
before the call, so a kill between the two calls never leaves the pool short). A machine is read with
``GET .../agentPools/{pool}/machines/{machine}`` (examples/MachineGet.json at 11b1961:
``properties.resourceId`` is the scale set VM, the node's providerID without ``azure://``), and a 404
is a machine gone. Azure's own advice is not to reimage AKS scale set VMs directly, so heal does not
(the third-party guidance quoted in the note of issue 34).

ARM has no idempotency token for these actions; the rerun's guard is the re-read (the machine
already gone, the pool already at its size). The token is the deployer's (``AZURE_ACCESS_TOKEN``,
else ``az account get-access-token``), as the Azure preflight takes it.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from gpu_cluster.heal.adapters import AdapterError, DocumentedPath, Instance, NodeState, Outcome, Progress
from gpu_cluster.components.validation_time import REPLACE_PATHS

ARM = "https://management.azure.com"
AKS_API = "2025-10-01"
POOL_LABEL = "kubernetes.azure.com/agentpool"
_CREDENTIALS = re.compile(r"--resource-group\s+(\S+)\s+--name\s+(\S+)")
_SUBSCRIPTION = re.compile(r"/subscriptions/([^/]+)/", re.IGNORECASE)


def cluster_of(kubeconfig_command: str) -> tuple[str, str]:
    """(resource group, cluster) from the stack's ``az aks get-credentials`` line (components/azure/cluster.py)."""
    m = _CREDENTIALS.search(kubeconfig_command or "")
    if not m:
        raise AdapterError(
            f"access.kubeconfig_command {kubeconfig_command!r} names no --resource-group and --name: "
            "the outputs are not an AKS stack's"
        )
    return m.group(1), m.group(2)


class Arm:
    """Azure Resource Manager over HTTPS with a bearer token."""

    def __init__(self, token: str, base: str = ARM) -> None:
        self._token = token
        self.base = base.rstrip("/")

    @classmethod
    def from_environment(cls) -> Arm:
        token = os.environ.get("AZURE_ACCESS_TOKEN")
        if not token:
            import subprocess

            try:
                done = subprocess.run(
                    [
                        "az",
                        "account",
                        "get-access-token",
                        "--resource",
                        ARM + "/",
                        "--query",
                        "accessToken",
                        "-o",
                        "tsv",
                    ],
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise AdapterError(
                    f"no Azure credentials: set AZURE_ACCESS_TOKEN, or install the Azure CLI and az login ({exc})"
                ) from None
            if done.returncode != 0 or not done.stdout.strip():
                raise AdapterError(
                    f"`az account get-access-token` failed ({done.stderr.strip()[:200]}); run `az login`"
                )
            token = done.stdout.strip()
        return cls(token)

    def call(self, method: str, path: str, body: Any = None, api_version: str = AKS_API) -> tuple[int, Any]:
        """``path`` under ARM with ``api_version``; or a list's ``nextLink`` as ARM gave it (a whole
        URL that carries its own query, on this ARM only)."""
        if path.startswith(self.base + "/"):
            url = path
        else:
            url = f"{self.base}{path}?{urllib.parse.urlencode({'api-version': api_version})}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            url,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return 404, None
            text = exc.read().decode(errors="replace")[:300]
            raise AdapterError(f"ARM {method} {path}: {exc.code} {text}") from None
        except (OSError, ValueError) as exc:
            raise AdapterError(f"ARM {method} {path}: {exc}") from None


class AksCloud(DocumentedPath):
    name = path = "aks-delete-machines"

    def __init__(self, arm: Arm, subscription: str, resource_group: str, cluster: str) -> None:
        self.arm = arm
        self.subscription, self.rg, self.cluster = subscription, resource_group, cluster
        self.call = f"{REPLACE_PATHS[self.name][1]} (AKS REST API {AKS_API})"

    def _pool_path(self, pool: str) -> str:
        return (
            f"/subscriptions/{self.subscription}/resourceGroups/{self.rg}/providers/Microsoft.ContainerService"
            f"/managedClusters/{self.cluster}/agentPools/{pool}"
        )

    def pool_of(self, node: NodeState) -> str:
        pool = node.labels.get(POOL_LABEL, "")
        if not pool:
            raise AdapterError(f"{node.node} has no {POOL_LABEL} label: not an AKS node pool's node")
        return pool

    def instance(self, node: NodeState) -> Instance:
        status, machine = self.arm.call("GET", f"{self._pool_path(self.pool_of(node))}/machines/{node.node}")
        if status == 404 or not machine:
            return Instance(id="", state="no such machine")
        return Instance(id=str(machine["properties"]["resourceId"]), state="present")

    def machines(self, pool: str) -> list[str]:
        return sorted(self.named(pool))

    def named(self, pool: str) -> dict[str, str]:
        """resourceId -> machine name (the node's name) of every machine in the pool, every page of
        the list: it pages by ``nextLink`` (examples/MachineList.json at 443f613). A list cut at its
        first page would leave machines out of the ones journalled before the call, and a healthy one
        could then be taken for the replacement."""
        out: dict[str, str] = {}
        page: str | None = f"{self._pool_path(pool)}/machines"
        while page:
            _, got = self.arm.call("GET", page)
            out.update({str(m["properties"]["resourceId"]): str(m["name"]) for m in (got or {}).get("value", [])})
            page = (got or {}).get("nextLink") or None
        return out

    def prepare(self, node: NodeState, instance: Instance) -> dict[str, Any]:
        """The pool, its count and its machines before the call (journalled with the intent: a rerun
        killed after deleteMachines restores the count and tells the new machine from these)."""
        pool = self.pool_of(node)
        status, doc = self.arm.call("GET", self._pool_path(pool))
        if status == 404 or not doc:
            return {}
        return {"pool": pool, "count": int(doc["properties"]["count"]), "before": self.machines(pool)}

    def short_of(self, node: NodeState, facts: Mapping[str, Any]) -> str:
        """Why the pool must be scaled back ('' when it is at its size, or still changing): the
        count journalled before the call is what it is restored to (I3)."""
        want, pool = int(facts.get("count") or 0), str(facts.get("pool") or "")
        if not want or not pool:
            return ""
        _, doc = self.arm.call("GET", self._pool_path(pool))
        props = (doc or {}).get("properties", {})
        have = int(props.get("count", want))
        if have < want and props.get("provisioningState") == "Succeeded":
            return f"pool {pool} has count {have}, {want} before the replacement"
        return ""

    def restore(self, node: NodeState, facts: Mapping[str, Any]) -> Outcome:
        """``agentPools createOrUpdate`` with ``properties.count`` set back (the pool as read, less
        its read-only provisioningState). The same count again is harmless on a rerun."""
        want, pool = int(facts["count"]), str(facts["pool"])
        _, doc = self.arm.call("GET", self._pool_path(pool))
        props = dict((doc or {}).get("properties", {}))
        props.pop("provisioningState", None)
        self.arm.call("PUT", self._pool_path(pool), {"properties": {**props, "count": want}})
        return Outcome(ok=True, detail=f"pool {pool} scaled back to {want} (agentPools createOrUpdate)")

    def replace(self, node: NodeState, instance: Instance, token: str, why: str) -> Outcome:
        pool = self.pool_of(node)
        status, doc = self.arm.call("GET", self._pool_path(pool))
        if status == 404 or not doc:
            return Outcome(ok=False, detail=f"agent pool {pool} of {self.cluster} not found")
        count = int(doc["properties"]["count"])
        self.arm.call("POST", f"{self._pool_path(pool)}/deleteMachines", {"machineNames": [node.node]})
        # The count and the machines stay those journalled with the intent (prepare): a later line's
        # facts win, and a count read after an earlier, killed ask had lowered it would leave the
        # pool short (I3).
        return Outcome(
            ok=True,
            detail=f"deleteMachines {node.node} in pool {pool} (count {count} now; restored once it is gone)",
            extra={"pool": pool, "op": f"deleteMachines {node.node}"},
        )

    def progress(self, node: NodeState, old: str, token: str, facts: Mapping[str, Any]) -> Progress:
        pool = str(facts.get("pool") or self.pool_of(node))
        status, _machine = self.arm.call("GET", f"{self._pool_path(pool)}/machines/{node.node}")
        if status != 404:
            if facts.get("op"):
                return Progress(started=True, detail=f"{node.node} still in pool {pool}, being deleted")
            # Killed after deleteMachines and before its line: the machine is still listed while
            # it is deleted, but the call already lowered the pool's count below the one journalled
            # before it; asking again would reach a machine the pool may already have dropped.
            want = int(facts.get("count") or 0)
            _, doc = self.arm.call("GET", self._pool_path(pool))
            have = int(((doc or {}).get("properties") or {}).get("count", want))
            if want and have < want:
                return Progress(
                    started=True,
                    detail=f"{node.node} still in pool {pool}, whose count is {have}, {want} before the call: "
                    "its deleteMachines was accepted",
                )
            return Progress(started=False, detail=f"{node.node} still in pool {pool}")
        _, doc = self.arm.call("GET", self._pool_path(pool))
        props = (doc or {}).get("properties", {})
        if "before" not in facts:
            # Never "any machine that is new": without the machines before the call, a healthy one
            # could be taken for the replacement and quarantined.
            return Progress(
                started=True,
                detail=f"{node.node} gone from pool {pool}, but its machines before the call are not in the "
                "journal: the new machine cannot be told from the others; a person must name it",
            )
        now = self.named(pool)
        new = sorted(m for m in now if m not in set(facts["before"]))
        return Progress(
            started=True,
            new_instance=new[0] if new else "",
            node=now[new[0]] if new else "",
            detail=f"{node.node} gone; pool {pool} count {props.get('count')} ({props.get('provisioningState')})",
        )


def subscription_of(provider_id: str) -> str:
    m = _SUBSCRIPTION.search(provider_id)
    if not m:
        raise AdapterError(f"providerID {provider_id!r} names no subscription: not an AKS node")
    return m.group(1)
