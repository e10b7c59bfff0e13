"""Storage pillar: FSx for Lustre PERSISTENT_2, its data repository, the checkpoint bucket."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_cluster.components.spec import SpecError
from tests.components.aws._offline import AWS_STACKS, in_pillar, one, run

FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_lustre(stack: str) -> None:
    result, spec = run(stack)
    lustre = spec.storage.lustre
    fs = one(result, FSX, "-storage-lustre")
    i = fs.inputs
    assert i["deploymentType"] == "PERSISTENT_2"
    assert i["storageCapacity"] == lustre.size_gib
    assert i["perUnitStorageThroughput"] == lustre.throughput_mbps_per_tib
    assert i["fileSystemTypeVersion"] == "2.15"
    assert i["dataCompressionType"] == "LZ4"
    assert i["metadataConfiguration"] == {"mode": "AUTOMATIC"}
    assert fs.protect is True
    node_subnet = one(result, "aws:ec2/subnet:Subnet", "-network-nodes").name + "-id"
    assert i["subnetIds"] == node_subnet
    lustre_sg = one(result, "aws:ec2/securityGroup:SecurityGroup", "-storage-lustre").name + "-id"
    assert i["securityGroupIds"] == [lustre_sg]
    # None of the bundled stacks names a key, so the stack's own customer key encrypts it.
    key = one(result, "aws:kms/key:Key", "-storage-lustre-key")
    assert i["kmsKeyId"] == key.inputs["arn"] and key.protect is True

    efa_sg = one(result, "aws:ec2/securityGroup:SecurityGroup", "-interconnect-efa").name + "-id"
    rules = in_pillar(result, "Storage", "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    by_direction: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for r in rules:
        key = (r.inputs["referencedSecurityGroupId"], r.inputs["securityGroupId"])
        by_direction.setdefault(key, []).append((r.inputs["fromPort"], r.inputs["toPort"]))
    lustre_ports = [(988, 988), (1018, 1023)]
    # nodes -> servers, servers -> servers, servers -> nodes; nothing from an address range.
    assert {k: sorted(v) for k, v in by_direction.items()} == {
        (efa_sg, lustre_sg): lustre_ports,
        (lustre_sg, lustre_sg): lustre_ports,
        (lustre_sg, efa_sg): lustre_ports,
    }
    assert all(r.inputs["ipProtocol"] == "tcp" and "cidrIpv4" not in r.inputs for r in rules)

    mount = result.outputs["mount"]
    assert mount == {
        "type": "lustre",
        "mount_point": lustre.mount_point,
        "dns_name": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
        "mount_name": "abcdefgh",
        # The FSx CSI driver's volume handle: the file system's id.
        "volume_handle": one(result, "aws:fsx/lustreFileSystem:LustreFileSystem", "-storage-lustre").name + "-id",
        "mount_command": f"mount -t lustre -o relatime,flock "
        f"fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com@tcp:/abcdefgh {lustre.mount_point}",
    }


OWN_BUCKET = "s3://my-own-training-data/tokens/"


def _with_import(export: bool) -> Any:
    def edit(raw: dict[str, Any]) -> None:
        raw["storage"]["lustre"]["import_path"] = OWN_BUCKET
        if export:
            raw["storage"]["lustre"]["export_path"] = OWN_BUCKET

    return edit


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_no_bundled_stack_points_at_a_bucket_it_does_not_own(stack: str) -> None:
    """A bundled stack must come up in any account: it links the file system to no bucket that
    the stack neither creates nor can know exists (issue 13 item 3)."""
    result, spec = run(stack)
    lustre = spec.storage.lustre
    assert lustre.import_path is None and lustre.export_path is None
    assert result.of_type(DRA) == []
    # The only buckets the stack touches are the ones it creates (checkpoints, and its log bucket).
    assert sorted(b.name for b in result.of_type("aws:s3/bucket:Bucket")) == [
        f"{spec.name}-network-logs",
        f"{spec.name}-storage-checkpoints",
    ]


@pytest.mark.parametrize("export", [False, True])
def test_data_repository_for_a_bucket_the_user_names(export: bool) -> None:
    result, spec = run("aws-h100-eks", _with_import(export))
    lustre = spec.storage.lustre
    (dra,) = result.of_type(DRA)
    assert dra.inputs["dataRepositoryPath"] == lustre.import_path == OWN_BUCKET
    assert dra.inputs["fileSystemId"] == one(result, FSX, "-storage-lustre").name + "-id"
    assert dra.inputs["batchImportMetaDataOnCreate"] is True
    s3 = dra.inputs["s3"]
    assert s3["autoImportPolicy"]["events"] == ["NEW", "CHANGED", "DELETED"]
    assert ("autoExportPolicy" in s3) is export


def test_export_path_must_be_the_import_path() -> None:
    def edit(raw: dict[str, Any]) -> None:
        _with_import(False)(raw)
        raw["storage"]["lustre"]["export_path"] = "s3://elsewhere/out/"

    # A spec problem like any other: named with its path, before any resource, no traceback.
    with pytest.raises(SpecError) as info:
        run("aws-h100-eks", edit)
    assert [p for p, r in info.value.problems if "same S3 prefix" in r] == ["storage.lustre.export_path"]


def test_customer_key_reaches_file_system_and_bucket() -> None:
    key = "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-3333-4444-555555555555"

    def edit(raw: dict[str, Any]) -> None:
        raw["storage"]["lustre"]["kms_key_id"] = key

    result, _ = run("aws-h200-slurm", edit)
    assert one(result, FSX, "-storage-lustre").inputs["kmsKeyId"] == key
    assert not [k for k in result.of_type("aws:kms/key:Key") if k.name.endswith("-lustre-key")]
    sse = one(
        result,
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
        "-storage-checkpoints",
    )
    assert sse.inputs["rules"][0]["applyServerSideEncryptionByDefault"]["kmsMasterKeyId"] == key


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_checkpoint_bucket(stack: str) -> None:
    result, _ = run(stack)
    bucket = one(result, "aws:s3/bucket:Bucket", "-storage-checkpoints")
    assert bucket.protect is True and bucket.inputs.get("forceDestroy") is False
    bucket_id = bucket.name + "-id"
    pab = one(result, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", "-storage-checkpoints").inputs
    assert pab["bucket"] == bucket_id
    assert all(
        pab[k] is True for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    )
    versioning = one(result, "aws:s3/bucketVersioning:BucketVersioning", "-storage-checkpoints").inputs
    assert versioning["bucket"] == bucket_id and versioning["versioningConfiguration"]["status"] == "Enabled"
    sse = one(
        result,
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
        "-storage-checkpoints",
    ).inputs
    assert sse["rules"][0]["applyServerSideEncryptionByDefault"]["sseAlgorithm"] == "aws:kms"
    assert result.outputs["bucket"].startswith(bucket.name)


def test_named_bucket_is_used_as_given() -> None:
    def edit(raw: dict[str, Any]) -> None:
        raw["storage"]["bucket_name"] = "my-checkpoints"

    result, _ = run("aws-h200-slurm", edit)
    assert one(result, "aws:s3/bucket:Bucket", "-storage-checkpoints").inputs["bucket"] == "my-checkpoints"
    assert result.outputs["bucket"] == "my-checkpoints"
