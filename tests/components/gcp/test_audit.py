"""The GCP audit trail: subnet flow logs, usage logs and lifecycle of the checkpoint bucket."""

from __future__ import annotations

from typing import Callable

from gpu_cluster.components.engine import OfflineRun
from tests.components.gcp.conftest import gcp_obj

BUCKET = "gcp:storage/bucket:Bucket"


def _named(run: OfflineRun, type_token: str, suffix: str) -> dict[str, object]:
    (found,) = [r for r in run.of_type(type_token) if r.name.endswith(suffix)]
    return found.inputs


def test_system_subnet_has_flow_logs(offline: Callable[..., OfflineRun]) -> None:
    run = offline(gcp_obj("a3-highgpu-8g"))
    subnet = _named(run, "gcp:compute/subnetwork:Subnetwork", "-network-subnet")
    assert subnet["logConfig"] == {
        "aggregationInterval": "INTERVAL_5_SEC",
        "flowSampling": 0.5,
        "metadata": "INCLUDE_ALL_METADATA",
    }


def test_flow_logs_off_with_a_reason(offline: Callable[..., OfflineRun]) -> None:
    obj = gcp_obj(
        "a3-highgpu-8g", security={"flow_logs": False, "exceptions": {"flow-logs": "short benchmark, no trail wanted"}}
    )
    subnet = _named(offline(obj), "gcp:compute/subnetwork:Subnetwork", "-network-subnet")
    assert "logConfig" not in subnet


def test_checkpoint_bucket_logs_usage_and_expires_old_versions(offline: Callable[..., OfflineRun]) -> None:
    run = offline(gcp_obj("a3-megagpu-8g", kind="slurm"))
    logs = [r for r in run.of_type(BUCKET) if r.name.endswith("-storage-logs")][0]
    assert logs.protect is True
    li = logs.inputs
    assert li["publicAccessPrevention"] == "enforced" and li["uniformBucketLevelAccess"] is True
    # Versioned (CKV_GCP_78), and a noncurrent version goes on the same 365 days as a current one.
    assert li["versioning"] == {"enabled": True}
    assert li["lifecycleRules"] == [
        {"action": {"type": "Delete"}, "condition": {"age": 365}},
        {"action": {"type": "Delete"}, "condition": {"daysSinceNoncurrentTime": 365}},
    ]
    assert "logging" not in li  # a log bucket does not log itself
    ckpt = _named(run, BUCKET, "-storage-bucket")
    assert ckpt["logging"] == {"logBucket": li["name"], "logObjectPrefix": "checkpoints"}
    assert ckpt["lifecycleRules"] == [{"action": {"type": "Delete"}, "condition": {"daysSinceNoncurrentTime": 30}}]
    writer = _named(run, "gcp:storage/bucketIAMMember:BucketIAMMember", "-storage-logs-writer")
    assert writer == {
        "bucket": li["name"],
        "role": "roles/storage.objectCreator",
        "member": "group:cloud-storage-analytics@google.com",
    }
