"""What the offline engine answers for GCP: the invokes the program makes and the attributes
Google computes. Answers are camelCase, as the provider returns them.

The program reads the project from config ``gcp:project``; only when that is unset does it ask
the provider (``getClientConfig``).
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

MOCK_PROJECT = "offline-project"


def _client_config(args: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": "offline",
        "project": MOCK_PROJECT,
        "region": "",
        "zone": "",
        "accessToken": "offline-token",
        "defaultLabels": {},
    }


INVOKES = {
    "gcp:organizations/getClientConfig:getClientConfig": _client_config,
}


def _autoname(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    # The provider auto-names resources given no name: the logical name plus a random suffix.
    return {} if inputs.get("name") else {"name": f"{name}-0a1b2c3"}


def _lustre(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "mountPoint": f"10.0.96.2@tcp:/{inputs.get('filesystem', 'lustre')}",
        "state": "ACTIVE",
        "name": f"projects/{MOCK_PROJECT}/locations/{inputs.get('location')}/instances/{inputs.get('instanceId')}",
    }


def _gke(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "endpoint": "10.0.0.2",
        "masterAuth": {"clusterCaCertificate": "TFMwdExTMUNSVWRKVGlCRFJWSlVTVVpKUTBGVVJTMHRMUzB0"},
    }


def _hypercompute(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    orch = copy.deepcopy(dict(inputs.get("orchestrator") or {}))
    slurm = orch.get("slurm") or {}
    login = slurm.get("loginNodes") or {}
    count = int(str(login.get("count", "0")) or 0)
    zone = login.get("zone", "zone")
    login["instances"] = [
        {"instance": f"projects/{MOCK_PROJECT}/zones/{zone}/instances/{inputs.get('clusterId')}-login-{i:03d}"}
        for i in range(1, count + 1)
    ]
    return {"orchestrator": orch}


def _service_account(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    return {"email": f"{inputs.get('accountId')}@{MOCK_PROJECT}.iam.gserviceaccount.com"}


COMPUTED = {
    "gcp:serviceaccount/account:Account": _service_account,
    "gcp:storage/bucket:Bucket": _autoname,
    "gcp:compute/resourcePolicy:ResourcePolicy": _autoname,
    "gcp:compute/router:Router": _autoname,
    "gcp:compute/globalAddress:GlobalAddress": _autoname,
    "gcp:lustre/instance:Instance": _lustre,
    "gcp:container/cluster:Cluster": _gke,
    "gcp:hypercomputecluster/cluster:Cluster": _hypercompute,
}
