"""Offline runs of the real program for GCP specs; each distinct spec runs fresh once per session."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any, Callable

import pytest

from gpu_cluster.components.catalog import installer_fact, load_catalog
from gpu_cluster.components.engine import OfflineRun, Recorded, run_offline

PROJECT = "test-project"
# A global address (not a documentation range, which the spec refuses for the deployer).
DEPLOYER = "203.0.114.7/32"


# What a user puts in orchestration.installer_image where no published reference gives the
# installer's digest (gIB, TCPX): a test's value, the sha256 of a fixed string, standing for the
# digest `crane digest` would answer. Never a claim about the real image.
TEST_DIGEST = "sha256:" + hashlib.sha256(b"gpu-cluster tests: a digest the user supplies").hexdigest()


def supplied_installer(instance_type: str) -> str | None:
    """``repo:tag@TEST_DIGEST`` for a type whose catalog installer has no digest, else None."""
    fact = installer_fact(load_catalog().get(instance_type).network.fabric)
    return None if fact.digest else f"{fact.image}:{fact.tag}@{TEST_DIGEST}"


def gcp_obj(instance_type: str, kind: str = "gke", **over: Any) -> dict[str, Any]:
    """A valid cluster object for ``instance_type`` in the first zone the catalog offers it in (on
    gke with the installer image a user supplies where the catalog has no digest for it)."""
    zone = load_catalog().get(instance_type).locations[0]
    supplied = supplied_installer(instance_type) if kind == "gke" else None
    obj: dict[str, Any] = {
        "name": "t1",
        "cloud": "gcp",
        "region": zone.rsplit("-", 1)[0],
        "zone": zone,
        "compute": {"instance_type": instance_type, "nodes": 2, "capacity": {"type": "spot"}},
        "storage": {"lustre": {"size_gib": 36000, "throughput_mbps_per_tib": 250}},
        "orchestration": {
            "kind": kind,
            **({"deployer_cidrs": [DEPLOYER]} if kind == "gke" else {}),
            **({"installer_image": supplied} if supplied else {}),
        },
        "tags": {"team": "ml", "cost-center": "c42"},
    }
    for key, value in over.items():
        obj[key] = value
    return obj


def named(run: OfflineRun, type_token: str, suffix: str) -> Recorded:
    """The one resource of ``type_token`` whose logical name ends with ``suffix``."""
    found = [r for r in run.of_type(type_token) if r.name.endswith(suffix)]
    assert len(found) == 1, f"{type_token} *{suffix}: {[r.name for r in run.of_type(type_token)]}"
    return found[0]


def gpu_pool(run: OfflineRun) -> Recorded:
    return named(run, "gcp:container/nodePool:NodePool", "-compute-pool")


_CACHE: dict[str, OfflineRun] = {}


@pytest.fixture(scope="session")
def offline() -> Callable[..., OfflineRun]:
    def run(obj: dict[str, Any], project: str | None = PROJECT) -> OfflineRun:
        key = json.dumps([obj, project], sort_keys=True)
        if key not in _CACHE:
            extra = {"gcp:project": project} if project else {}
            _CACHE[key] = run_offline("test", copy.deepcopy(obj), extra_config=extra)
        return _CACHE[key]

    return run
