"""Network: the system VPC every node's first gVNIC sits on, its way out, and the peering
Managed Lustre needs.

Nodes get no public addresses (CKV_GCP_40): Cloud NAT is their only way out. The firewall
admits the cluster's own range and nothing else; Google's IAP range may reach SSH so login
nodes stay private. Private service access (a reserved range peered to
servicenetworking.googleapis.com) is how Managed Lustre attaches to the VPC
(cloud.google.com/managed-lustre/docs/vpc).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from gpu_cluster.components.gcp.audit import subnet_log_config
from gpu_cluster.components.gcp.common import IAP_RANGE, AddressPlan, labels
from gpu_cluster.components.spec import ClusterSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkArgs:
    spec: ClusterSpec
    """The checked cluster description."""
    plan: AddressPlan
    """Ranges carved from the spec's CIDR."""


class Network(pulumi.ComponentResource):
    """The system VPC, subnet, Cloud Router + NAT, firewall and private service access."""

    vpc: gcp.compute.Network
    subnet: gcp.compute.Subnetwork
    psa: gcp.servicenetworking.Connection
    firewall: gcp.compute.Firewall
    """The rule admitting the cluster's own range (nodes, pods, Lustre servers)."""

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-cluster:gcp:Network", name, None, opts)
        spec, plan = args.spec, args.plan
        self._child = pulumi.ResourceOptions(parent=self)
        mtu = spec.instance.network.mtu
        self.vpc = gcp.compute.Network(
            f"{name}-vpc",
            name=f"{spec.name}-vpc",
            auto_create_subnetworks=False,
            routing_mode="REGIONAL",
            # The catalog's MTU on the system VPC too: cluster-toolkit sets the same MTU on the
            # gVNIC networks of A3 Ultra/A4, and jumbo frames help NCCL's bootstrap and storage.
            mtu=mtu,
            opts=self._child,
        )
        secondary = []
        if spec.orchestration.kind == "gke":
            secondary = [
                gcp.compute.SubnetworkSecondaryIpRangeArgs(range_name="pods", ip_cidr_range=plan.pods),
                gcp.compute.SubnetworkSecondaryIpRangeArgs(range_name="services", ip_cidr_range=plan.services),
            ]
        self.subnet = gcp.compute.Subnetwork(
            f"{name}-subnet",
            name=f"{spec.name}-subnet",
            network=self.vpc.id,
            region=spec.region,
            ip_cidr_range=plan.nodes,
            secondary_ip_ranges=secondary,
            private_ip_google_access=True,
            # CKV_GCP_26: VPC flow logs unless the stack switched them off (audit.py).
            log_config=subnet_log_config(spec.security),
            opts=self._child,
        )
        self._create_firewall(name, spec, plan)
        self._create_nat(name, spec)
        self.psa = self._create_private_service_access(name, spec, plan)
        self.register_outputs({"vpc": self.vpc.id, "subnet": self.subnet.id, "psa_range": plan.psa})

    def _create_firewall(self, name: str, spec: ClusterSpec, plan: AddressPlan) -> None:
        # One rule covers nodes, pods, services and the Lustre servers in the peered range
        # (Lustre clients must accept LNet traffic on 988/6988 from that range).
        self.firewall = gcp.compute.Firewall(
            f"{name}-internal",
            network=self.vpc.id,
            direction="INGRESS",
            source_ranges=[plan.cluster],
            allows=[
                gcp.compute.FirewallAllowArgs(protocol="tcp"),
                gcp.compute.FirewallAllowArgs(protocol="udp"),
                gcp.compute.FirewallAllowArgs(protocol="icmp"),
            ],
            opts=self._child,
        )
        gcp.compute.Firewall(
            f"{name}-iap-ssh",
            network=self.vpc.id,
            direction="INGRESS",
            source_ranges=[IAP_RANGE],
            allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=["22"])],
            opts=self._child,
        )

    def _create_nat(self, name: str, spec: ClusterSpec) -> None:
        router = gcp.compute.Router(
            f"{name}-router", name=f"{spec.name}-router", network=self.vpc.id, region=spec.region, opts=self._child
        )
        gcp.compute.RouterNat(
            f"{name}-nat",
            router=router.name,
            region=spec.region,
            nat_ip_allocate_option="AUTO_ONLY",
            source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
            log_config=gcp.compute.RouterNatLogConfigArgs(enable=True, filter="ERRORS_ONLY"),
            opts=self._child,
        )

    def _create_private_service_access(
        self, name: str, spec: ClusterSpec, plan: AddressPlan
    ) -> gcp.servicenetworking.Connection:
        base, prefix = plan.psa.split("/")
        address = gcp.compute.GlobalAddress(
            f"{name}-psa-range",
            name=f"{spec.name}-psa",
            network=self.vpc.id,
            purpose="VPC_PEERING",
            address_type="INTERNAL",
            address=base,
            prefix_length=int(prefix),
            labels=labels(spec),
            opts=self._child,
        )
        return gcp.servicenetworking.Connection(
            f"{name}-psa",
            network=self.vpc.id,
            service="servicenetworking.googleapis.com",
            reserved_peering_ranges=[address.name],
            opts=self._child,
        )
