"""Interconnect: the GPU networks a machine type needs, and where its nodes are placed.

The layout comes from the catalog, never from code: ``network.gpu_nics`` GPU NICs,
``network.gvnics`` host NICs, ``network.fabric`` and ``network.mtu``.

* TCPX (a3-highgpu-8g, 4 NICs) and TCPXO (a3-megagpu-8g, 8 NICs): one VPC and subnet per GPU
  NIC, MTU 8244 (cluster-toolkit ``modules/network/multivpc``; GKE "Maximize GPU network
  bandwidth with GPUDirect-TCPX(O)").
* RDMA (a3-ultragpu-8g, a4-highgpu-8g): a second gVNIC VPC, plus ONE VPC on the zone's RoCE
  network profile ``<zone>-vpc-roce`` holding one subnet per GPU NIC, MTU 8896
  (cluster-toolkit ``modules/network/gpu-rdma-vpc`` and the a3-ultragpu-8g blueprint).

A compact placement policy (COLLOCATED) is made unless the capacity is a reservation, which
Google hands over already placed (``spec.interconnect.placement``). Without a max distance the
policy is best-effort only; with one, the VMs are densely colocated or not created
(docs.cloud.google.com/ai-hypercomputer/docs/placement-policy-and-workload-policy, read 2026-12:
"When you require densely colocated resources, specify a max distance in the policy"). The
distance is 2: the tightest A3 machines accept (cluster-toolkit at 1047080,
community/modules/compute/schedmd-slurm-gcp-v6-nodeset/outputs.tf: "A3 machines do not support
a placement_max_distance of 1"; valid values 1..3, variables.tf).

Under Cluster Director (managed Slurm) the API takes one network (``hypercomputecluster.Cluster
.network_resources``: "Must contain at most one value") and has no field for additional NICs or
a placement policy in pulumi_gcp 10.2.0: the service sets up the machine type's GPU networking
and placement itself. VPCs and a policy nothing could attach would be waste, so for
``kind: slurm`` this component only describes the fabric (the catalog's NIC count and MTU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pulumi
import pulumi_gcp as gcp

from gpu_cluster.components.gcp.audit import subnet_log_config
from gpu_cluster.components.gcp.common import AddressPlan
from gpu_cluster.components.spec import ClusterSpec

PLACEMENT_MAX_DISTANCE = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class InterconnectArgs:
    spec: ClusterSpec
    """The checked cluster description."""
    plan: AddressPlan
    """``plan.gpu_subnets`` holds one range per additional NIC."""
    project: pulumi.Input[str]
    """Project id, for the RoCE network profile's path."""


@dataclass(frozen=True, slots=True)
class NicNetwork:
    """One additional NIC of a node: the VPC and subnet it attaches to."""

    role: Literal["gvnic", "gpu", "rdma"]
    """gvnic: a second host NIC; gpu: a TCPX/TCPXO GPU NIC; rdma: a RoCE GPU NIC."""
    k8s_name: str
    """Name of the GKE Network / GKENetworkParamSet objects for this NIC."""
    network: gcp.compute.Network
    subnet: gcp.compute.Subnetwork
    network_name: str
    subnet_name: str
    cidr: str


def nic_count(spec: ClusterSpec) -> int:
    """Additional NIC subnets a node needs beyond its first gVNIC."""
    net = spec.instance.network
    return net.gpu_nics + max(0, net.gvnics - 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class NicName:
    """An additional NIC's names and range, known from the spec alone (before any resource)."""

    role: Literal["gvnic", "gpu", "rdma"]
    k8s_name: str
    vpc: str
    subnet: str
    cidr: str


def nic_names(spec: ClusterSpec, plan: AddressPlan) -> list[NicName]:
    """Every additional NIC of a GKE node, in attachment order (none on Cluster Director, which
    attaches its own): second gVNICs, then the GPU NICs (GKE's TCPX/TCPXO guides name their
    networks vpc1..vpcN; RDMA NICs share one RoCE VPC with a subnet each)."""
    if spec.orchestration.kind == "slurm":
        return []
    net = spec.instance.network
    ranges = list(plan.gpu_subnets)
    out = [
        NicName(
            role="gvnic",
            k8s_name=f"gvnic-{i}",
            vpc=f"{spec.name}-gvnic{i}",
            subnet=f"{spec.name}-gvnic{i}-sub",
            cidr=ranges.pop(0),
        )
        for i in range(1, net.gvnics)
    ]
    if net.fabric == "rdma":
        out += [
            NicName(
                role="rdma",
                k8s_name=f"rdma-{i}",
                vpc=f"{spec.name}-rdma",
                subnet=f"{spec.name}-rdma-sub-{i}",
                cidr=cidr,
            )
            for i, cidr in enumerate(ranges[: net.gpu_nics])
        ]
    else:
        out += [
            NicName(
                role="gpu",
                k8s_name=f"vpc{i + 1}",
                vpc=f"{spec.name}-gpu{i + 1}",
                subnet=f"{spec.name}-gpu{i + 1}-sub",
                cidr=ranges.pop(0),
            )
            for i in range(net.gpu_nics)
        ]
    return out


class Interconnect(pulumi.ComponentResource):
    """GPU VPCs and subnets sized from the catalog, their firewall, and the placement policy."""

    nics: list[NicNetwork]
    placement: gcp.compute.ResourcePolicy | None

    def __init__(self, name: str, args: InterconnectArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-cluster:gcp:Interconnect", name, None, opts)
        spec = args.spec
        self._child = pulumi.ResourceOptions(parent=self)
        self.nics = []
        self.placement = None
        net = spec.instance.network
        if spec.orchestration.kind != "slurm":
            names = nic_names(spec, args.plan)
            for nic in names:
                if nic.role != "rdma":
                    self.nics.append(self._vpc_with_subnet(name, spec, nic, firewall=True))
            rdma = [n for n in names if n.role == "rdma"]
            if rdma:
                self._create_rdma(name, spec, args.project, rdma)
            if spec.interconnect.placement:
                self.placement = gcp.compute.ResourcePolicy(
                    f"{name}-placement",
                    name=f"{spec.name}-compact",
                    region=spec.region,
                    group_placement_policy=gcp.compute.ResourcePolicyGroupPlacementPolicyArgs(
                        collocation="COLLOCATED", max_distance=PLACEMENT_MAX_DISTANCE
                    ),
                    opts=self._child,
                )
        self.register_outputs(
            {
                "fabric": net.fabric,
                "gpu_nics": net.gpu_nics,
                "mtu": net.mtu,
                "networks": [n.network_name for n in self.nics],
                "placement": self.placement.name if self.placement else None,
            }
        )

    def _vpc_with_subnet(self, name: str, spec: ClusterSpec, nic: NicName, firewall: bool) -> NicNetwork:
        mtu = spec.instance.network.mtu
        vpc_name, subnet_name, cidr = nic.vpc, nic.subnet, nic.cidr
        suffix = vpc_name.removeprefix(f"{spec.name}-")
        vpc = gcp.compute.Network(
            f"{name}-{suffix}",
            name=vpc_name,
            auto_create_subnetworks=False,
            routing_mode="REGIONAL",
            mtu=mtu,
            opts=self._child,
        )
        subnet = gcp.compute.Subnetwork(
            f"{name}-{suffix}-sub",
            name=subnet_name,
            network=vpc.id,
            region=spec.region,
            ip_cidr_range=cidr,
            log_config=subnet_log_config(spec.security),
            opts=self._child,
        )
        if firewall:
            # GPU traffic flows between nodes of this subnet only; nothing else may enter.
            gcp.compute.Firewall(
                f"{name}-{suffix}-internal",
                network=vpc.id,
                direction="INGRESS",
                source_ranges=[cidr],
                allows=[
                    gcp.compute.FirewallAllowArgs(protocol="tcp"),
                    gcp.compute.FirewallAllowArgs(protocol="udp"),
                    gcp.compute.FirewallAllowArgs(protocol="icmp"),
                ],
                opts=self._child,
            )
        return NicNetwork(
            role=nic.role,
            k8s_name=nic.k8s_name,
            network=vpc,
            subnet=subnet,
            network_name=vpc_name,
            subnet_name=subnet_name,
            cidr=cidr,
        )

    def _create_rdma(self, name: str, spec: ClusterSpec, project: pulumi.Input[str], nics: list[NicName]) -> None:
        vpc_name = nics[0].vpc
        # No firewall resource here. A RoCE VPC takes no VPC firewall rules, only a regional
        # network firewall policy of type RDMA_ROCE_POLICY (cloud.google.com/firewall/docs/
        # firewall-for-roce, read 2026-12-01: "They don't support global network firewall
        # policies, hierarchical firewall policies, or VPC firewall rules"), and without one its
        # implied rules allow all ingress and all egress (docs.cloud.google.com/vpc/docs/
        # rdma-network-profiles, "Firewall differences", read 2026-12-01). It stays open on
        # purpose: only MRDMA NICs attach to it (same page), so the only peers are the GPU NICs of
        # this project's instances in this zone that are put on this stack's own VPC, and NCCL's
        # RDMA traffic between them is all it carries (cluster-toolkit gpu-rdma-vpc at 1047080
        # creates no policy either). A stateless RDMA_ROCE_POLICY limited to the GPU subnets
        # would narrow that further; not built yet.
        vpc = gcp.compute.Network(
            f"{name}-rdma",
            name=vpc_name,
            auto_create_subnetworks=False,
            routing_mode="REGIONAL",
            mtu=spec.instance.network.mtu,
            network_profile=pulumi.Output.format(
                "projects/{0}/global/networkProfiles/{1}-vpc-roce", project, spec.zone
            ),
            opts=self._child,
        )
        for i, nic in enumerate(nics):
            subnet = gcp.compute.Subnetwork(
                f"{name}-rdma-sub-{i}",
                name=nic.subnet,
                network=vpc.id,
                region=spec.region,
                ip_cidr_range=nic.cidr,
                opts=self._child,
            )
            self.nics.append(
                NicNetwork(
                    role="rdma",
                    k8s_name=nic.k8s_name,
                    network=vpc,
                    subnet=subnet,
                    network_name=vpc_name,
                    subnet_name=nic.subnet,
                    cidr=nic.cidr,
                )
            )
