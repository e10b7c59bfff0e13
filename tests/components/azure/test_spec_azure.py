"""Azure's spec rules (components/azure/rules.py): each bad input names its path and what is allowed."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpu_cluster.components.spec import SpecError, parse_spec

DEPLOYER = "203.0.114.7/32"
GROUP = (
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/gpu/providers/"
    "Microsoft.Compute/capacityReservationGroups/nd-h100"
)


def azure_base() -> dict[str, Any]:
    return {
        "name": "nd",
        "cloud": "azure",
        "region": "eastus",
        "zone": "1",
        "compute": {"instance_type": "Standard_ND96isr_H100_v5", "nodes": 2},
        "storage": {"lustre": {"size_gib": 16384, "throughput_mbps_per_tib": 125}},
        "orchestration": {"kind": "aks", "deployer_cidrs": [DEPLOYER]},
        "tags": {"team": "ml"},
    }


def problems(obj: Any) -> dict[str, str]:
    with pytest.raises(SpecError) as info:
        parse_spec(obj)
    return dict(info.value.problems)


def test_a_good_azure_spec_parses_with_no_placement_group() -> None:
    spec = parse_spec(azure_base())
    assert (spec.cloud, spec.orchestration.kind, spec.zone) == ("azure", "aks", "1")
    assert spec.interconnect.placement is False  # the fabric is the scale set, never a PPG
    assert spec.total_gpus == 16


@pytest.mark.parametrize("size", ["Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5", "Standard_ND96isr_MI300X_v5"])
def test_a_reservation_on_an_nd_pool_is_refused_with_the_limitation(size: str) -> None:
    """On-demand capacity reservations support neither the ND-series nor a scale set with
    singlePlacementGroup true (capacity-reservation-overview.md @05a4485, Limitations)."""
    obj = azure_base()
    obj["compute"]["instance_type"] = size
    obj["region"] = "swedencentral"  # offers all three sizes (the catalog's region lists)
    obj["compute"]["capacity"] = {"type": "reservation", "id": GROUP}
    assert problems(obj)["compute.capacity.type"] == (
        f"'reservation' is refused for {size}: on-demand capacity reservations support "
        "neither the ND-series nor a scale set with singlePlacementGroup true, which InfiniBand needs (allowed: "
        "on-demand, spot; source: learn.microsoft.com/azure/virtual-machines/capacity-reservation-overview, "
        "Limitations)"
    )


KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB9kZ3VzZXJrZXlmb3J0ZXN0c29ubHk user@host"


def test_slurm_parses_with_its_key_and_one_login_node() -> None:
    obj = azure_base()
    obj["orchestration"] = {"kind": "slurm", "ssh_public_key": KEY}
    spec = parse_spec(obj)
    assert (spec.orchestration.kind, spec.orchestration.ssh_public_key, spec.orchestration.login_nodes) == (
        "slurm",
        KEY,
        1,
    )


def test_slurm_needs_a_key_for_pulumi_up_and_the_offline_plan_stands_a_placeholder_in() -> None:
    from gpu_cluster.components.spec_model import SSH_KEY_PLACEHOLDER

    obj = azure_base()
    obj["orchestration"] = {"kind": "slurm"}
    assert problems(obj)["orchestration.ssh_public_key"] == (
        "required for slurm on azure (allowed: an OpenSSH public key line)"
    )
    assert parse_spec(obj, deployer_placeholder=True).orchestration.ssh_public_key == SSH_KEY_PLACEHOLDER


def test_slurm_refuses_more_login_nodes_and_a_key_elsewhere() -> None:
    obj = azure_base()
    obj["orchestration"] = {"kind": "slurm", "ssh_public_key": KEY, "login_nodes": 2}
    assert problems(obj)["orchestration.login_nodes"] == (
        "2: on azure the Slurm controller is the one login node, reached through Azure Bastion (allowed: 1)"
    )
    aks = azure_base()
    aks["orchestration"]["ssh_public_key"] = KEY
    assert "only applies to slurm on azure" in problems(aks)["orchestration.ssh_public_key"]
    bad = azure_base()
    bad["orchestration"] = {"kind": "slurm", "ssh_public_key": "not a key"}
    assert "orchestration.ssh_public_key" in problems(bad)


@pytest.mark.parametrize("cidr", ["172.16.0.0/16", "172.16.128.0/20"])
def test_a_vnet_overlapping_the_rdma_range_is_refused(cidr: str) -> None:
    obj = azure_base()
    obj["network"] = {"cidr": cidr}
    found = problems(obj)
    assert "172.16.0.0/16" in found["network.cidr"] and "allowed" in found["network.cidr"]


def test_a_vnet_beside_the_rdma_range_is_fine() -> None:
    obj = azure_base()
    obj["network"] = {"cidr": "172.17.0.0/16"}
    assert parse_spec(obj).network.cidr == "172.17.0.0/16"


def test_more_nodes_than_one_scale_set_holds_is_refused() -> None:
    obj = azure_base()
    obj["compute"]["nodes"] = 101
    found = problems(obj)
    assert "101 nodes" in found["compute.nodes"] and "1..100" in found["compute.nodes"]
    obj["compute"]["nodes"] = 100
    assert parse_spec(obj).compute.nodes == 100


@pytest.mark.parametrize(
    ("tput", "good", "bad"),
    [(40, 49152, 16384), (125, 32768, 20480), (250, 8192, 4096), (500, 4096, 6144)],
)
def test_lustre_sizes_follow_each_sku_minimum_and_increment(tput: int, good: int, bad: int) -> None:
    obj = azure_base()
    obj["storage"]["lustre"] = {"size_gib": good, "throughput_mbps_per_tib": tput}
    assert parse_spec(obj).storage.lustre.size_gib == good
    obj["storage"]["lustre"]["size_gib"] = bad
    reason = problems(obj)["storage.lustre.size_gib"]
    assert f"AMLFS-Durable-Premium-{tput}" in reason and "allowed: multiples of" in reason


def test_lustre_beyond_what_its_24_subnet_holds_is_refused() -> None:
    obj = azure_base()
    obj["storage"]["lustre"] = {"size_gib": 196 * 1024, "throughput_mbps_per_tib": 500}
    assert parse_spec(obj).storage.lustre.size_gib == 196 * 1024
    obj["storage"]["lustre"]["size_gib"] = 200 * 1024
    assert "/24" in problems(obj)["storage.lustre.size_gib"]


def test_a_throughput_amlfs_does_not_sell_is_refused() -> None:
    obj = azure_base()
    obj["storage"]["lustre"]["throughput_mbps_per_tib"] = 1000
    assert "40, 125, 250, 500" in problems(obj)["storage.lustre.throughput_mbps_per_tib"]


@pytest.mark.parametrize(
    ("path", "value", "word"),
    [
        ("zone", "eastus-1", "not a zone of region"),
        ("region", "East US", "malformed"),
        ("compute.instance_type", "p5.48xlarge", "aws type"),
        ("compute.capacity", {"type": "capacity-block", "id": GROUP}, "allowed: on-demand, reservation, spot"),
        ("compute.capacity", {"type": "reservation", "id": "cr-0123456789abcdef0"}, "capacity reservation group"),
        ("interconnect", {"placement": True}, "scale set itself"),
        ("orchestration", {"kind": "eks"}, "allowed: aks, slurm"),
        ("orchestration", {"kind": "aks"}, "required for aks"),
        ("network", {"cidr": "10.254.0.0/16"}, "AKS service range"),
        ("orchestration", {"kind": "aks", "endpoint": "private"}, "not built yet"),
        ("storage.lustre.import_path", "https://acct.blob.core.windows.net/data", "not built yet"),
        ("storage.bucket_name", "Checkpoints", "malformed"),
        ("storage.bucket_name", "a--b", "malformed"),
        ("tags", {"a/b": "x"}, "without < > % & \\ ? /"),
        ("compute.image", "microsoft-dsvm:ubuntu-hpc:2204:latest", "os SKU Ubuntu"),
        ("network", {"vpc_id": "/subscriptions/x/vnet", "node_subnet_id": "s"}, "aws only"),
    ],
)
def test_each_azure_mistake_names_its_path(path: str, value: Any, word: str) -> None:
    obj = copy.deepcopy(azure_base())
    keys = path.split(".")
    node = obj
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    found = problems(obj)
    hits = [reason for p, reason in found.items() if p.startswith(path.split(".")[0])]
    assert any(word in reason for reason in hits), found


def test_an_h100_not_offered_in_a_region_is_refused_with_the_regions() -> None:
    obj = azure_base()
    obj["region"] = "australiaeast"
    reason = problems(obj)["region"]
    assert "not offered" in reason and "eastus" in reason
