"""Offline runs of the real program for Azure specs; each distinct spec runs fresh once per session."""

from __future__ import annotations

import copy
import json
from typing import Any, Callable

import pytest

from gpu_cluster.components.engine import OfflineRun, Recorded, run_offline

DEPLOYER = "203.0.114.7/32"
GROUP = (
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/gpu/providers/"
    "Microsoft.Compute/capacityReservationGroups/nd-h100"
)


def azure_obj(instance_type: str = "Standard_ND96isr_H100_v5", **over: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "name": "nd",
        "cloud": "azure",
        "region": "eastus",
        "zone": "2",
        "compute": {"instance_type": instance_type, "nodes": 4},
        "storage": {"lustre": {"size_gib": 32768, "throughput_mbps_per_tib": 125}},
        "orchestration": {"kind": "aks", "deployer_cidrs": [DEPLOYER]},
        "tags": {"team": "ml"},
    }
    obj.update(over)
    return obj


def named(run: OfflineRun, type_token: str, suffix: str) -> Recorded:
    found = [r for r in run.of_type(type_token) if r.name.endswith(suffix)]
    assert len(found) == 1, f"{type_token} *{suffix}: {[r.name for r in run.of_type(type_token)]}"
    return found[0]


_RUNS: dict[str, OfflineRun] = {}


@pytest.fixture
def azure_run() -> Callable[..., OfflineRun]:
    def run(obj: dict[str, Any] | None = None) -> OfflineRun:
        obj = copy.deepcopy(obj or azure_obj())
        key = json.dumps(obj, sort_keys=True)
        if key not in _RUNS:
            _RUNS[key] = run_offline("azure-test", obj)
        return _RUNS[key]

    return run
