"""AWS PCS's API on 127.0.0.1, in the shape of its service model: moto (5.2.5) implements no ``pcs``
service, so this stand-in answers ``GetComputeNodeGroup`` as botocore's ``pcs`` model (2023-02-10,
JSON 1.0, ``X-Amz-Target: AWSParallelComputingService.<operation>``) describes it. Each request is
checked against the operation's input shape (its required members), each answer carries every
required member of ``ComputeNodeGroup``, and a group it does not hold is the model's
``ResourceNotFoundException`` (``__type``, with its required ``message``, ``resourceId``,
``resourceType``). Reached through ``AWS_ENDPOINT_URL_PCS``, as a deployment reaches PCS through the
standard chain."""

from __future__ import annotations

import datetime as dt
import gzip
import json
from pathlib import Path
from typing import Any

import botocore

from tests.heal.recorded import Recorded

TARGET = "AWSParallelComputingService."


def model() -> dict[str, Any]:
    found = sorted((Path(botocore.__file__).parent / "data" / "pcs").glob("*/service-2.json*"))
    raw = found[-1].read_bytes()
    return dict(json.loads(gzip.decompress(raw) if found[-1].suffix == ".gz" else raw))


class PcsWorld:
    def __init__(self) -> None:
        self.model = model()
        self.groups: dict[tuple[str, str], dict[str, Any]] = {}
        self.server = Recorded(lambda path: {"__type": "UnknownOperationException", "message": path})
        self.server.answer_with("POST", "/", self._serve)

    @property
    def url(self) -> str:
        return self.server.url

    def add(self, cluster: str, group: str, *, name: str, low: int, high: int, purchase: str) -> dict[str, Any]:
        """A compute node group of ``cluster`` with its scaling bounds and purchase option."""
        assert purchase in self.model["shapes"]["PurchaseOption"]["enum"], purchase
        now = dt.datetime.now(dt.timezone.utc).isoformat()
        g = {
            "name": name,
            "id": group,
            "arn": f"arn:aws:pcs:us-east-1:111122223333:cluster/{cluster}/computenodegroup/{group}",
            "clusterId": cluster,
            "createdAt": now,
            "modifiedAt": now,
            "status": "ACTIVE",
            "subnetIds": ["subnet-0a1b2c3d"],
            "customLaunchTemplate": {"id": "lt-0a1b2c3d4e5f60718", "version": "1"},
            "iamInstanceProfileArn": "arn:aws:iam::111122223333:instance-profile/AWSPCS-gpu",
            "scalingConfiguration": {"minInstanceCount": low, "maxInstanceCount": high},
            "instanceConfigs": [{"instanceType": "p5.48xlarge"}],
            "purchaseOption": purchase,
        }
        missing = set(self.model["shapes"]["ComputeNodeGroup"]["required"]) - set(g)
        assert not missing, missing
        self.groups[(cluster, group)] = g
        return g

    def asked(self, operation: str) -> list[dict[str, Any]]:
        return [r["body"] for r in self.server.requests if r["headers"].get("X-Amz-Target") == f"{TARGET}{operation}"]

    def _serve(self, req: dict[str, Any]) -> tuple[int, Any]:
        target = str(req["headers"].get("X-Amz-Target", ""))
        op = target.removeprefix(TARGET)
        if not target.startswith(TARGET) or op not in self.model["operations"]:
            return 400, {"__type": "UnknownOperationException", "message": target}
        if op != "GetComputeNodeGroup":
            return 400, {"__type": "ValidationException", "message": f"{op} is not played by this stand-in"}
        body = req["body"] or {}
        shape = self.model["shapes"][self.model["operations"][op]["input"]["shape"]]
        missing = [k for k in shape["required"] if not body.get(k)]
        if missing:
            return 400, {"__type": "ValidationException", "message": f"missing {missing}"}
        g = self.groups.get((body["clusterIdentifier"], body["computeNodeGroupIdentifier"]))
        if g is None:
            return 404, {
                "__type": "ResourceNotFoundException",
                "message": "compute node group not found",
                "resourceId": body["computeNodeGroupIdentifier"],
                "resourceType": "COMPUTE_NODE_GROUP",
            }
        return 200, {"computeNodeGroup": g}

    def close(self) -> None:
        self.server.close()
