"""Recorded GCP API answers in the documented REST shapes, and a loopback server that serves them.

Shapes (field names and nesting) follow the REST references, read 2026-12:
- Compute Engine machineTypes.get, MachineType resource:
  cloud.google.com/compute/docs/reference/rest/v1/machineTypes/get
- Compute Engine reservations.get, Reservation resource (specificReservation.count, inUseCount,
  instanceProperties.machineType, status READY):
  cloud.google.com/compute/docs/reference/rest/v1/reservations/get
- Compute Engine reservations.aggregatedList (items: {"zones/<zone>": {"reservations": [...]}}
  or, for a zone with none, {"warning": {"code": "NO_RESULTS_ON_PAGE", ...}}):
  cloud.google.com/compute/docs/reference/rest/v1/reservations/aggregatedList
- Compute Engine regions.get (Region.quotas[]: metric, limit, usage) and projects.get
  (Project.quotas[]): cloud.google.com/compute/docs/reference/rest/v1/regions/get,
  .../v1/projects/get
- Service Usage services.batchGet (services[]: name, config.name, state ENABLED | DISABLED):
  cloud.google.com/service-usage/docs/reference/rest/v1/services/batchGet
- Kubernetes Engine projects.locations.getServerConfig (ServerConfig: defaultClusterVersion,
  validMasterVersions[], validNodeVersions[], channels[]: channel, defaultVersion, validVersions[],
  upgradeTargetVersion): cloud.google.com/kubernetes-engine/docs/reference/rest/v1/ServerConfig
  (read 2026-12-01); patch versions as the Regular channel's release notes of 2026-09-17 list them
- Cluster Director projects.locations.list (locations[]: name, locationId):
  cloud.google.com/cluster-director/docs/reference/rest/v1/projects.locations/list
- errors: {"error": {"code", "message", "status", "errors"[]}} (cloud.google.com/apis/design/errors;
  Compute Engine adds errors[].reason such as notFound).
Values are this test's fixture (an a3-megagpu-8g is 208 vCPUs and 8 H100 Mega GPUs, as the
catalog says); the client libraries parse them exactly as they would parse the service's answer.
"""

from __future__ import annotations

import http.server
import json
import threading
import urllib.parse
from typing import Any

PROJECT = "pf-project"
NUMBER = "123456789012"


def machine_type(zone: str, name: str, gpus: int = 8, accel: str = "nvidia-h100-mega-80gb") -> dict[str, Any]:
    return {
        "kind": "compute#machineType",
        "id": "901208",
        "creationTimestamp": "2024-01-01T00:00:00.000-08:00",
        "name": name,
        "description": f"{gpus} {accel} GPUs",
        "guestCpus": 208,
        "memoryMb": 1916928,
        "imageSpaceGb": 0,
        "maximumPersistentDisks": 128,
        "maximumPersistentDisksSizeGb": "263168",
        "zone": zone,
        "isSharedCpu": False,
        "accelerators": [{"guestAcceleratorType": accel, "guestAcceleratorCount": gpus}],
        "selfLink": f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{zone}/machineTypes/{name}",
    }


def reservation(zone: str, name: str, mtype: str, count: int, in_use: int = 0, status: str = "READY") -> dict[str, Any]:
    return {
        "kind": "compute#reservation",
        "id": "4445556667",
        "creationTimestamp": "2026-11-20T10:00:00.000-08:00",
        "name": name,
        "zone": f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{zone}",
        "selfLink": f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{zone}/reservations/{name}",
        "specificReservation": {
            "instanceProperties": {
                "machineType": mtype,
                "guestAccelerators": [{"acceleratorType": "nvidia-h200-141gb", "acceleratorCount": 8}],
                "localSsds": [{"diskSizeGb": "375", "interface": "NVME"}] * 8,
            },
            "count": str(count),
            "inUseCount": str(in_use),
            "assuredCount": str(count),
        },
        "specificReservationRequired": True,
        "status": status,
        "deploymentType": "DENSE",
    }


def aggregated_reservations(by_scope: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    items: dict[str, Any] = {}
    for scope, found in by_scope.items():
        items[scope] = (
            {"reservations": found}
            if found
            else {
                "warning": {
                    "code": "NO_RESULTS_ON_PAGE",
                    "message": f"There are no results for scope '{scope}' on this page.",
                    "data": [{"key": "scope", "value": scope}],
                }
            }
        )
    return {
        "kind": "compute#reservationAggregatedList",
        "id": f"projects/{PROJECT}/aggregated/reservations",
        "items": items,
        "selfLink": f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/aggregated/reservations",
    }


def quotas(*items: tuple[str, float, float]) -> list[dict[str, Any]]:
    return [{"metric": m, "limit": limit, "usage": usage} for m, limit, usage in items]


def region(name: str, *items: tuple[str, float, float]) -> dict[str, Any]:
    return {
        "kind": "compute#region",
        "id": "1000",
        "name": name,
        "status": "UP",
        "selfLink": f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/regions/{name}",
        "quotas": quotas(("CPUS", 2400, 0), *items),
    }


def project(*items: tuple[str, float, float]) -> dict[str, Any]:
    return {"kind": "compute#project", "id": NUMBER, "name": PROJECT, "quotas": quotas(("SNAPSHOTS", 5000, 0), *items)}


def services(states: dict[str, str]) -> dict[str, Any]:
    return {
        "services": [
            {
                "name": f"projects/{NUMBER}/services/{api}",
                "parent": f"projects/{NUMBER}",
                "config": {"name": api, "title": api.split(".")[0]},
                "state": state,
            }
            for api, state in states.items()
        ]
    }


def server_config(regular: tuple[str, ...] = ("1.35.8-gke.1036000", "1.35.6-gke.1127000")) -> dict[str, Any]:
    """getServerConfig for a zone: the REGULAR channel offers ``regular`` (newest first), its default
    the first; the RAPID channel one minor ahead."""
    rapid = ("1.36.4-gke.1000000", *regular)
    return {
        "defaultClusterVersion": regular[0],
        "validNodeVersions": list(rapid),
        "defaultImageType": "COS_CONTAINERD",
        "validImageTypes": ["COS_CONTAINERD", "UBUNTU_CONTAINERD"],
        "validMasterVersions": list(rapid),
        "channels": [
            {
                "channel": "RAPID",
                "defaultVersion": rapid[0],
                "validVersions": list(rapid),
                "upgradeTargetVersion": rapid[0],
            },
            {
                "channel": "REGULAR",
                "defaultVersion": regular[0],
                "validVersions": list(regular),
                "upgradeTargetVersion": regular[0],
            },
        ],
    }


def locations(*regions: str) -> dict[str, Any]:
    return {"locations": [{"name": f"projects/{PROJECT}/locations/{r}", "locationId": r} for r in regions]}


def error(code: int, status: str, message: str, reason: str = "") -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message, "status": status}
    if reason:
        body["errors"] = [{"message": message, "domain": "global", "reason": reason}]
    return {"error": body}


class Recorded:
    """A loopback HTTP server: GET path -> (status, JSON body); every request is kept."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, Any]] = {}
        self.requests: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                path = urllib.parse.urlsplit(self.path).path
                outer.requests.append(self.path)
                status, body = outer.answers.get(path, (404, error(404, "NOT_FOUND", f"no recording for {path}")))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, path: str, body: Any, status: int = 200) -> None:
        self.answers[path] = (status, body)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def binauthz_policy(
    default: str = "ALWAYS_ALLOW",
    enforcement: str = "ENFORCED_BLOCK_AND_AUDIT_LOG",
    allow: tuple[str, ...] = (),
    namespaces: dict[str, str] | None = None,
) -> dict[str, Any]:
    """projects.getPolicy (Binary Authorization v1 REST; Policy in googleapis
    google/cloud/binaryauthorization/v1/resources.proto at 3597f7d, camelCase in JSON). The default a
    project has before its owner edits it is ALWAYS_ALLOW, enforced (cloud.google.com/binary-
    authorization/docs/configuring-policy-cli, the exported default policy)."""
    return {
        "name": f"projects/{PROJECT}/policy",
        "globalPolicyEvaluationMode": "ENABLE",
        "admissionWhitelistPatterns": [{"namePattern": p} for p in allow],
        "defaultAdmissionRule": {"evaluationMode": default, "enforcementMode": enforcement},
        **(
            {
                "kubernetesNamespaceAdmissionRules": {
                    ns: {"evaluationMode": mode, "enforcementMode": enforcement} for ns, mode in namespaces.items()
                }
            }
            if namespaces
            else {}
        ),
        "updateTime": "2026-12-01T00:00:00Z",
    }
