"""GPU networks per machine type, MTUs, firewall reach, NAT, placement: all from the catalog."""

from __future__ import annotations

import ipaddress
from typing import Any, Callable

import pytest

from gpu_cluster.components.catalog import load_catalog
from gpu_cluster.components.engine import OfflineRun
from tests.components.gcp.conftest import PROJECT, gcp_obj, gpu_pool, named

GCP_TYPES = load_catalog().names("gcp")
NETWORK = "gcp:compute/network:Network"
SUBNET = "gcp:compute/subnetwork:Subnetwork"
FIREWALL = "gcp:compute/firewall:Firewall"
POOL = "gcp:container/nodePool:NodePool"


def test_catalog_has_the_four_gcp_types() -> None:
    assert set(GCP_TYPES) == {"a3-highgpu-8g", "a3-megagpu-8g", "a3-ultragpu-8g", "a4-highgpu-8g"}


@pytest.mark.parametrize("itype", GCP_TYPES)
def test_gpu_networks_match_the_catalog(itype: str, offline: Callable[..., OfflineRun]) -> None:
    it = load_catalog().get(itype)
    run = offline(gcp_obj(itype))
    recorded = run.of_type(NETWORK)
    nets = {r.inputs["name"]: r.inputs for r in recorded}
    subnets = run.of_type(SUBNET)
    # Every VPC of the cluster carries the catalog's MTU.
    assert {n["mtu"] for n in nets.values()} == {it.network.mtu}
    pool = gpu_pool(run).inputs
    extra = pool["networkConfig"]["additionalNodeNetworkConfigs"]
    assert len(extra) == it.network.gpu_nics + it.network.gvnics - 1
    if it.network.fabric == "rdma":
        rdma = [r for r in recorded if "networkProfile" in r.inputs]
        assert len(rdma) == 1, "all RDMA NICs share one RoCE VPC"
        zone = gcp_obj(itype)["zone"]
        assert rdma[0].inputs["networkProfile"] == f"projects/{PROJECT}/global/networkProfiles/{zone}-vpc-roce"
        # the mock engine gives each resource the id "<logical name>-id"
        rdma_subnets = [s for s in subnets if s.inputs["network"] == f"{rdma[0].name}-id"]
        assert len(rdma_subnets) == it.network.gpu_nics
        # the pool names each VPC and subnet by the resource's own output (a real dependency)
        assert sum(1 for e in extra if e["network"] == rdma[0].inputs["name"]) == it.network.gpu_nics
        assert {e["subnetwork"] for e in extra} == {
            s.inputs["name"] for s in subnets if s.inputs["name"] != "t1-subnet"
        }
        # system VPC + second gVNIC VPC + the RoCE VPC
        assert len(nets) == 3
    else:
        # one VPC per GPU NIC plus the system VPC, each GPU VPC with exactly one subnet
        assert len(nets) == 1 + it.network.gpu_nics
        assert len(subnets) == 1 + it.network.gpu_nics
        assert len({e["network"] for e in extra}) == it.network.gpu_nics
        assert not any("networkProfile" in n for n in nets.values())


@pytest.mark.parametrize("itype", GCP_TYPES)
def test_fabric_output_and_gke_network_objects(itype: str, offline: Callable[..., OfflineRun]) -> None:
    it = load_catalog().get(itype)
    run = offline(gcp_obj(itype))
    fabric = run.outputs["fabric"]
    assert fabric["type"] == it.network.fabric
    assert fabric["interfaces_per_node"] == it.network.gpu_nics
    assert fabric["mtu"] == it.network.mtu
    params = run.of_type("kubernetes:networking.gke.io/v1:GKENetworkParamSet")
    modes = [p.inputs["spec"].get("deviceMode") for p in params]
    rdma = it.network.fabric == "rdma"
    # cluster-toolkit gke-cluster: RDMA for RoCE NICs, NetDevice for every other additional NIC
    # (the second gVNIC of A3 Ultra/A4 too), and every Network object of type Device.
    assert modes.count("RDMA") == (it.network.gpu_nics if rdma else 0)
    assert modes.count("NetDevice") == (it.network.gvnics - 1 if rdma else it.network.gpu_nics)
    networks = run.of_type("kubernetes:networking.gke.io/v1:Network")
    assert len(networks) == len(params) and {n.inputs["spec"]["type"] for n in networks} == {"Device"}
    # the param sets name the VPCs and subnets the Interconnect created, by their outputs
    created = {r.inputs["name"] for r in run.of_type(NETWORK)} | {r.inputs["name"] for r in run.of_type(SUBNET)}
    assert all({p.inputs["spec"]["vpc"], p.inputs["spec"]["vpcSubnet"]} <= created for p in params)
    expected = {"tcpx": "nccl-tcpx-installer", "tcpxo": "nccl-tcpxo-installer", "rdma": "nccl-rdma-installer"}
    named(run, "kubernetes:apps/v1:DaemonSet", expected[it.network.fabric])


def test_subnets_do_not_overlap_and_firewalls_admit_only_cluster_ranges(offline: Callable[..., OfflineRun]) -> None:
    run = offline(gcp_obj("a3-megagpu-8g"))
    ranges = [ipaddress.ip_network(s.inputs["ipCidrRange"]) for s in run.of_type(SUBNET)]
    for s in run.of_type(SUBNET):
        ranges += [ipaddress.ip_network(r["ipCidrRange"]) for r in s.inputs.get("secondaryIpRanges", [])]
    assert all(not a.overlaps(b) for i, a in enumerate(ranges) for b in ranges[i + 1 :])
    allowed = [ipaddress.ip_network("10.0.0.0/16"), ipaddress.ip_network("35.235.240.0/20")] + ranges
    for fw in run.of_type(FIREWALL):
        assert fw.inputs["direction"] == "INGRESS"
        for src in fw.inputs["sourceRanges"]:
            net = ipaddress.ip_network(src)
            assert net.prefixlen > 0, f"{fw.name} opens {src}"
            assert any(net.subnet_of(a) for a in allowed), f"{fw.name} admits {src}"  # type: ignore[arg-type]


def test_nodes_leave_through_cloud_nat_and_lustre_has_private_service_access(
    offline: Callable[..., OfflineRun],
) -> None:
    run = offline(gcp_obj("a3-highgpu-8g"))
    nat = run.one("gcp:compute/routerNat:RouterNat").inputs
    assert nat["sourceSubnetworkIpRangesToNat"] == "ALL_SUBNETWORKS_ALL_IP_RANGES"
    addr = run.one("gcp:compute/globalAddress:GlobalAddress").inputs
    assert addr["purpose"] == "VPC_PEERING" and addr["addressType"] == "INTERNAL"
    conn = run.one("gcp:servicenetworking/connection:Connection").inputs
    assert conn["service"] == "servicenetworking.googleapis.com"
    assert conn["reservedPeeringRanges"] == [addr["name"]]
    assert gpu_pool(run).inputs["networkConfig"]["enablePrivateNodes"] is True


CAPACITIES: list[tuple[dict[str, Any], bool]] = [
    ({"type": "spot"}, True),
    # cluster-toolkit's gke-node-pool refuses COMPACT with a queued (multi-node flex-start) pool
    ({"type": "flex-start"}, False),
    ({"type": "reservation", "id": "h100-block"}, False),
]


@pytest.mark.parametrize("capacity,placed", CAPACITIES, ids=[c[0]["type"] for c in CAPACITIES])
def test_placement_follows_capacity(capacity: dict[str, Any], placed: bool, offline: Callable[..., OfflineRun]) -> None:
    obj = gcp_obj("a3-megagpu-8g")
    obj["compute"]["capacity"] = capacity
    run = offline(obj)
    policies = run.of_type("gcp:compute/resourcePolicy:ResourcePolicy")
    pool = gpu_pool(run).inputs
    cfg = pool["nodeConfig"]
    if placed:
        assert len(policies) == 1
        # with a max distance the policy is dense, not best-effort (2: the tightest A3 accepts)
        assert policies[0].inputs["groupPlacementPolicy"] == {"collocation": "COLLOCATED", "maxDistance": 2}
        assert pool["placementPolicy"] == {"type": "COMPACT", "policyName": policies[0].inputs["name"]}
        assert run.outputs["fabric"]["placement"] == policies[0].inputs["name"]
    else:
        assert policies == [] and "placementPolicy" not in pool
        assert run.outputs["fabric"]["placement"] is None
    if capacity["type"] == "reservation":
        assert cfg["reservationAffinity"] == {
            "consumeReservationType": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": ["h100-block"],
        }
    else:
        assert cfg["reservationAffinity"]["consumeReservationType"] == "NO_RESERVATION"
    assert cfg.get("spot") is (True if capacity["type"] == "spot" else None)
    if capacity["type"] == "flex-start":
        assert cfg["flexStart"] is True
        assert pool["autoscaling"]["totalMinNodeCount"] == 0 and pool["autoscaling"]["totalMaxNodeCount"] == 2
        assert "nodeCount" not in pool
    else:
        assert "flexStart" not in cfg and pool["nodeCount"] == 2


def test_placement_false_drops_the_policy(offline: Callable[..., OfflineRun]) -> None:
    obj = gcp_obj("a3-ultragpu-8g")
    obj["interconnect"] = {"placement": False}
    run = offline(obj)
    assert run.of_type("gcp:compute/resourcePolicy:ResourcePolicy") == []
    assert "placementPolicy" not in gpu_pool(run).inputs
