"""GKE and Cluster Director resources and their inputs; stack outputs; strict invokes."""

from __future__ import annotations

from typing import Callable

import pytest

from gpu_cluster.components.cluster import OUTPUT_KEYS, PILLARS
from gpu_cluster.components.engine import OfflineRun
from gpu_cluster.components.spec import load_stack
from tests.components.gcp.conftest import DEPLOYER, PROJECT, gcp_obj, gpu_pool, named

GKE = "gcp:container/cluster:Cluster"
HCC = "gcp:hypercomputecluster/cluster:Cluster"


def test_gke_cluster_is_private_multinetwork_and_hardened(offline: Callable[..., OfflineRun]) -> None:
    run = offline(gcp_obj("a3-megagpu-8g"))
    c = run.one(GKE).inputs
    assert c["location"] == gcp_obj("a3-megagpu-8g")["zone"]
    assert c["privateClusterConfig"]["enablePrivateNodes"] is True
    # Public endpoint, authorised for the deployers and the cluster's own range only, as
    # cluster-toolkit's GKE blueprints authorise the deployer: `pulumi up` reaches the API.
    assert c["privateClusterConfig"]["enablePrivateEndpoint"] is False
    assert c["masterAuthorizedNetworksConfig"]["cidrBlocks"] == [
        {"cidrBlock": DEPLOYER, "displayName": "allowed-0"},
        {"cidrBlock": "10.0.0.0/16", "displayName": "allowed-1"},
    ]
    assert c["masterAuthorizedNetworksConfig"]["gcpPublicCidrsAccessEnabled"] is False
    assert c["enableMultiNetworking"] is True and c["datapathProvider"] == "ADVANCED_DATAPATH"
    assert "networkPolicy" not in c  # Dataplane V2 enforces policy; GKE refuses both
    assert c["enableShieldedNodes"] is True
    assert c["workloadIdentityConfig"] == {"workloadPool": f"{PROJECT}.svc.id.goog"}
    assert c["releaseChannel"] == {"channel": "REGULAR"}
    assert c["removeDefaultNodePool"] is True
    # Port 988 (the legacy-port flag is deprecated from 1.33.2-gke.4780000); multi-NIC off: the GPU
    # gVNICs are each in a VPC of their own (the Managed Lustre CSI page's "Same VPC" requirement).
    assert c["addonsConfig"]["lustreCsiDriverConfig"] == {"enabled": True, "disableMultiNic": True}
    # CKV_GCP_66, the way Checkov's Terraform check reads it; CKV_GCP_61 (intranode visibility) is a
    # stated exception: no source says it works with multi-network Pods (orchestration_gke.py).
    assert c["binaryAuthorization"] == {"evaluationMode": "PROJECT_SINGLETON_POLICY_ENFORCE"}
    assert c["enableIntranodeVisibility"] is False
    assert c["ipAllocationPolicy"] == {"clusterSecondaryRangeName": "pods", "servicesSecondaryRangeName": "services"}
    assert not run.outputs["access"]["kubeconfig_command"].endswith("--internal-ip")
    assert c["deletionProtection"] is True  # the default: a destroy stops at the cluster


def test_deletion_protection_is_the_stack_setting_for_teardown(offline: Callable[..., OfflineRun]) -> None:
    obj = gcp_obj("a3-megagpu-8g")
    obj["orchestration"] = {**obj["orchestration"], "deletion_protection": False}
    assert offline(obj).one(GKE).inputs["deletionProtection"] is False


def test_private_endpoint_leaves_the_in_cluster_layer_to_a_program_inside_the_vpc(
    offline: Callable[..., OfflineRun],
) -> None:
    obj = gcp_obj("a3-megagpu-8g")
    obj["orchestration"] = {"kind": "gke", "endpoint": "private"}
    run = offline(obj)
    c = run.one(GKE).inputs
    assert c["privateClusterConfig"]["enablePrivateEndpoint"] is True
    assert [b["cidrBlock"] for b in c["masterAuthorizedNetworksConfig"]["cidrBlocks"]] == ["10.0.0.0/16"]
    assert run.outputs["access"]["kubeconfig_command"].endswith("--internal-ip")
    assert not [r.type for r in run.resources if r.type.startswith(("kubernetes:", "pulumi:providers:kubernetes"))]


def test_gpu_node_pool_inputs(offline: Callable[..., OfflineRun]) -> None:
    run = offline(gcp_obj("a3-megagpu-8g"))
    pool = gpu_pool(run).inputs
    cfg = pool["nodeConfig"]
    assert pool["cluster"] == "t1-orchestration-gke-id"
    assert cfg["machineType"] == "a3-megagpu-8g"
    assert cfg["guestAccelerators"][0]["count"] == 8
    assert cfg["guestAccelerators"][0]["type"] == "nvidia-h100-mega-80gb"
    # LATEST: above 580.65, which the image's CUDA 13.1 needs (rapidsai/deployment PR 659; CUDA
    # minor version compatibility); DEFAULT was seen at 535 (rapidsai/deployment issue 656)
    assert cfg["guestAccelerators"][0]["gpuDriverInstallationConfig"] == {"gpuDriverVersion": "LATEST"}
    assert cfg["gvnic"] == {"enabled": True}
    assert cfg["shieldedInstanceConfig"] == {"enableSecureBoot": True, "enableIntegrityMonitoring": True}
    assert cfg["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}
    assert run.outputs["scheduler"]["node_selector"] == {"cloud.google.com/gke-nodepool": pool["name"]}
    # GKE's GPU taint, and the registration taint this fixed-size (spot) pool's nodes carry until a
    # validation passes them (issue 41, I6); GKE puts a pool's taints on every node it adds.
    assert run.outputs["scheduler"]["tolerations"] == ["nvidia.com/gpu", "gpu-cluster.io/unvalidated"]
    assert cfg["taints"] == [{"key": "gpu-cluster.io/unvalidated", "value": "true", "effect": "NO_SCHEDULE"}]
    account = named(run, "gcp:serviceaccount/account:Account", "-compute-nodes").inputs
    assert cfg["serviceAccount"] == f"{account['accountId']}@offline-project.iam.gserviceaccount.com"
    members = [m for m in run.of_type("gcp:projects/iAMMember:IAMMember") if m.name.startswith("t1-compute-")]
    assert {m.inputs["role"] for m in members} == {
        "roles/container.defaultNodeServiceAccount",
        "roles/artifactregistry.reader",
    }
    assert {m.inputs["member"] for m in members} == {f"serviceAccount:{cfg['serviceAccount']}"}
    assert all(m.inputs["project"] == PROJECT for m in members)


def test_in_cluster_parts_use_the_cluster_provider(offline: Callable[..., OfflineRun]) -> None:
    run = offline(gcp_obj("a3-ultragpu-8g"))
    provider = run.one("pulumi:providers:kubernetes")
    assert "server: https://10.0.0.2" in provider.inputs["kubeconfig"]
    assert "gke-gcloud-auth-plugin" in provider.inputs["kubeconfig"]
    pv = named(run, "kubernetes:core/v1:PersistentVolume", "-lustre-pv").inputs["spec"]
    lustre = run.one("gcp:lustre/instance:Instance").inputs
    assert pv["csi"]["driver"] == "lustre.csi.storage.gke.io"
    assert pv["csi"]["volumeHandle"] == f"{PROJECT}/{lustre['location']}/{lustre['instanceId']}"
    assert pv["csi"]["volumeAttributes"] == {"ip": "10.0.96.2", "filesystem": lustre["filesystem"]}
    assert pv["persistentVolumeReclaimPolicy"] == "Retain"
    pvc = named(run, "kubernetes:core/v1:PersistentVolumeClaim", "-lustre-pvc").inputs["spec"]
    assert (
        pvc["volumeName"] == named(run, "kubernetes:core/v1:PersistentVolume", "-lustre-pv").inputs["metadata"]["name"]
    )
    charts = sorted(c.inputs["chart"].rsplit("/", 1)[-1] for c in run.of_type("kubernetes:helm.sh/v4:Chart"))
    assert charts == ["jobset", "prometheus-pushgateway"]
    ds = named(run, "kubernetes:apps/v1:DaemonSet", "nccl-rdma-installer").inputs
    [term] = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [
        {"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": ["nvidia-h200-141gb"]}
    ]
    assert "gpudirect-gib" in ds["spec"]["template"]["spec"]["initContainers"][0]["image"]


@pytest.mark.parametrize(
    "capacity,key",
    [
        ({"type": "reservation", "id": "h200-block-1"}, "newReservedInstances"),
        ({"type": "flex-start"}, "newFlexStartInstances"),
        ({"type": "spot"}, "newSpotInstances"),
    ],
)
def test_cluster_director_inputs(capacity: dict[str, str], key: str, offline: Callable[..., OfflineRun]) -> None:
    obj = gcp_obj("a3-ultragpu-8g", kind="slurm")
    obj["compute"]["capacity"] = capacity
    obj["orchestration"] = {"kind": "slurm", "partition": "train", "login_nodes": 2}
    run = offline(obj)
    c = run.one(HCC).inputs
    zone, region = obj["zone"], obj["region"]
    assert c["location"] == region and c["clusterId"] == "t1"
    [net] = c["networkResources"]
    assert net["config"]["existingNetwork"] == {
        "network": f"projects/{PROJECT}/global/networks/t1-vpc",
        "subnetwork": f"projects/{PROJECT}/regions/{region}/subnetworks/t1-subnet",
    }
    storage = {s["id"]: s["config"] for s in c["storageResources"]}
    assert storage["lustre"]["existingLustre"]["lustre"] == f"projects/{PROJECT}/locations/{zone}/instances/t1-lustre"
    assert storage["checkpoints"]["existingBucket"]["bucket"] == run.outputs["bucket"]
    [compute] = c["computeResources"]
    cfg = compute["config"]
    assert list(cfg) == [key]
    if key == "newReservedInstances":
        assert cfg[key] == {"reservation": f"projects/{PROJECT}/zones/{zone}/reservations/h200-block-1"}
    else:
        assert cfg[key]["machineType"] == "a3-ultragpu-8g" and cfg[key]["zone"] == zone
    slurm = c["orchestrator"]["slurm"]
    assert slurm["loginNodes"]["count"] == "2" and slurm["loginNodes"]["enablePublicIps"] is False
    [ns] = slurm["nodeSets"]
    assert ns["staticNodeCount"] == "2" and ns["computeId"] == compute["id"]
    # Lustre, the Filestore /home Cluster Director needs, and the checkpoint bucket on every node
    mounts = [
        {"id": "lustre", "localMount": "/fsx"},
        {"id": "home", "localMount": "/home"},
        {"id": "checkpoints", "localMount": "/checkpoints"},
    ]
    assert ns["storageConfigs"] == mounts and slurm["loginNodes"]["storageConfigs"] == mounts
    assert storage["home"]["newFilestore"] == {
        "filestore": f"projects/{PROJECT}/locations/{zone}/instances/t1-home",
        "tier": "ZONAL",
        "fileShares": [{"capacityGb": "1024", "fileShare": "home"}],
        "description": "gpu-cluster t1 /home",
    }
    assert slurm["partitions"] == [{"id": "train", "nodeSetIds": [ns["id"]]}]
    assert run.outputs["scheduler"] == {"kind": "slurm", "partition": "train"}
    assert run.outputs["access"]["login"] == "t1-login-001"
    # Cluster Director attaches GPU networks and places nodes itself: nothing of ours to attach
    assert len(run.of_type("gcp:compute/network:Network")) == 1
    assert run.of_type("gcp:compute/resourcePolicy:ResourcePolicy") == []


@pytest.mark.parametrize("stack", ["gcp-h100-gke", "gcp-h200-gke", "gcp-b200-gke", "gcp-h200-slurm"])
def test_bundled_stacks_group_every_resource_under_a_pillar(stack: str, offline: Callable[..., OfflineRun]) -> None:
    from gpu_cluster.components.spec import read_stack_file

    _, raw = read_stack_file(stack)
    _, spec = load_stack(stack, deployer_placeholder=True)
    run = offline(raw)
    assert set(run.outputs) == set(OUTPUT_KEYS)
    assert run.outputs["cloud"] == "gcp" and run.outputs["gpus_per_node"] == spec.instance.accelerator.count
    # The project's APIs come before every pillar: their component is the one cluster-level part.
    pillars = {f"gpu-cluster:gcp:{p}" for p in (*PILLARS, "ProjectServices")}
    for r in run.resources:
        if r.custom:
            assert any(a.type in pillars for a in run.ancestors(r)), f"{r.type} {r.name} has no pillar"


def test_project_from_config_makes_no_invoke_else_one_declared_invoke(offline: Callable[..., OfflineRun]) -> None:
    with_config = offline(gcp_obj("a3-highgpu-8g"))
    assert with_config.invokes == []
    without = offline(gcp_obj("a3-highgpu-8g"), project=None)
    assert set(without.invokes) == {"gcp:organizations/getClientConfig:getClientConfig"}
    assert without.one(GKE).inputs["workloadIdentityConfig"]["workloadPool"] == "offline-project.svc.id.goog"
