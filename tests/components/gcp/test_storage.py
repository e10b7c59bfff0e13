"""Managed Lustre and the checkpoint bucket: sizes, protection, public access, mount description."""

from __future__ import annotations

from typing import Callable

from gpu_cluster.components.engine import OfflineRun
from tests.components.gcp.conftest import gcp_obj, gpu_pool

LUSTRE = "gcp:lustre/instance:Instance"
BUCKET = "gcp:storage/bucket:Bucket"


def test_lustre_instance_inputs_and_protection(offline: Callable[..., OfflineRun]) -> None:
    obj = gcp_obj("a3-megagpu-8g")
    obj["storage"]["lustre"] = {
        "size_gib": 54000,
        "throughput_mbps_per_tib": 500,
        "mount_point": "/data",
        "import_path": "gs://corpus/tokens/",
    }
    run = offline(obj)
    lu = run.one(LUSTRE)
    assert lu.protect
    assert lu.inputs["capacityGib"] == "54000"
    assert lu.inputs["perUnitStorageThroughput"] == "500"
    assert lu.inputs["location"] == obj["zone"]
    # Lustre on its default port 988: GKE from 1.33.2-gke.4780000 no longer needs the 6988 switch
    assert "gkeSupportEnabled" not in lu.inputs
    # the mock engine gives each resource the id "<logical name>-id": Lustre sits on the system VPC
    assert lu.inputs["network"] == "t1-network-vpc-id"
    fs = lu.inputs["filesystem"]
    assert fs.isalnum() and len(fs) <= 8
    mount = run.outputs["mount"]
    assert set(mount) == {"type", "mount_point", "dns_name", "mount_name", "mount_command", "volume_handle"}
    # The Lustre CSI driver's volume handle: <project>/<zone>/<instance id>.
    assert mount["volume_handle"].endswith(f"/{obj['zone']}/{obj['name']}-lustre")
    assert mount["type"] == "lustre" and mount["mount_point"] == "/data" and mount["mount_name"] == fs
    assert mount["dns_name"].endswith(f"@tcp:/{fs}")
    assert mount["mount_command"].endswith(f"mount -t lustre {mount['dns_name']} /data")
    storage = run.one("gpu-cluster:gcp:Storage")
    assert storage.custom is False


def test_bucket_is_private_versioned_and_protected(offline: Callable[..., OfflineRun]) -> None:
    obj = gcp_obj("a3-highgpu-8g")
    obj["storage"]["bucket_name"] = "t1-checkpoints"
    run = offline(obj)
    (b,) = [r for r in run.of_type(BUCKET) if r.name.endswith("-storage-bucket")]
    assert b.protect
    assert b.inputs["name"] == "t1-checkpoints"
    assert b.inputs["publicAccessPrevention"] == "enforced"
    assert b.inputs["uniformBucketLevelAccess"] is True
    assert b.inputs["versioning"] == {"enabled": True}
    assert b.inputs["forceDestroy"] is False
    assert run.outputs["bucket"] == "t1-checkpoints"


def test_slurm_lustre_has_no_gke_port_switch(offline: Callable[..., OfflineRun]) -> None:
    run = offline(gcp_obj("a3-ultragpu-8g", kind="slurm"))
    assert "gkeSupportEnabled" not in run.one(LUSTRE).inputs


def test_tags_reach_every_labelled_resource(offline: Callable[..., OfflineRun]) -> None:
    for kind in ("gke", "slurm"):
        run = offline(gcp_obj("a3-ultragpu-8g", kind=kind))
        seen = 0
        for r in run.resources:
            for key in ("labels", "resourceLabels"):
                lab = r.inputs.get(key)
                if isinstance(lab, dict) and r.type.startswith("gcp:"):
                    assert {"team": "ml", "cost-center": "c42"}.items() <= lab.items(), f"{r.type} {key}"
                    seen += 1
        if kind == "gke":
            pool = gpu_pool(run).inputs["nodeConfig"]["resourceLabels"]
            assert pool["team"] == "ml"
        else:
            slurm = run.one("gcp:hypercomputecluster/cluster:Cluster").inputs["orchestrator"]["slurm"]
            assert slurm["loginNodes"]["labels"]["team"] == "ml"
            assert slurm["nodeSets"][0]["computeInstance"]["labels"]["team"] == "ml"
        assert seen >= 4
