"""Network: resource group, VNet, node / Lustre / system subnets, their NSGs, the NAT gateway.

The VNet never overlaps 172.16.0.0/16, which the InfiniBand (RDMA) network reserves (the spec
refuses it, components/azure/rules.py). Subnets are standalone resources and the VNet declares
none inline: mixing the two makes every update delete and re-create subnets
(pulumi-azure-native issues #611, #74).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_azure_native as azure

from gpu_cluster.components.azure.common import AKS_POD_CIDR, AddressPlan, cluster_tags
from gpu_cluster.components.spec import ClusterSpec

# Managed Lustre: clients and servers talk TCP 988 and 1019-1023, in and out, and the file
# system's subnet reaches the AzureCloud service tag outbound (amlfs-prerequisites.md at
# f1e86c5; the same rules in Azure/cyclecloud-slurm-workspace bicep/network-new.bicep at bc0fc1b:
# Lustre ['988','1019-1023'], AllowAzureCloudServiceAccess).
LUSTRE_PORTS = ["988", "1019-1023"]
BASTION_SUBNET = "AzureBastionSubnet"


def _rule(
    name: str,
    access: str,
    direction: str,
    priority: int,
    *,
    source: str,
    destination: str,
    protocol: str = "*",
    ports: Sequence[str] | None = None,
) -> azure.network.SecurityRuleArgs:
    """One NSG rule from any source port; to ``ports`` (a list) or to every port."""
    return azure.network.SecurityRuleArgs(
        name=name,
        access=access,
        direction=direction,
        protocol=protocol,
        priority=priority,
        source_address_prefix=source,
        source_port_range="*",
        destination_address_prefix=destination,
        destination_port_range=None if ports else "*",
        destination_port_ranges=list(ports) if ports else None,
    )


# Nothing from the internet, on every NSG (Checkov CKV_AZURE_9/10/77/160 flag 3389, 22, UDP, 80 open).
DENY_INTERNET_IN = _rule("deny-internet-in", "Deny", "Inbound", 4000, source="Internet", destination="*")


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkArgs:
    spec: ClusterSpec
    plan: AddressPlan


class Network(pulumi.ComponentResource):
    """The cluster's private network: no node has a public address; egress goes through NAT."""

    resource_group: azure.resources.ResourceGroup
    vnet: azure.network.VirtualNetwork
    nodes: azure.network.Subnet
    lustre: azure.network.Subnet
    system: azure.network.Subnet
    bastion: azure.network.Subnet | None
    """AzureBastionSubnet, for Slurm's login path (the controller has no public address)."""
    node_nsg: azure.network.NetworkSecurityGroup
    nat_ip: azure.network.PublicIPAddress
    """The NAT gateway's public address: every node's egress address (the API server's authorized
    ranges must hold it)."""

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-cluster:azure:Network", name, None, opts)
        spec, plan = args.spec, args.plan
        child = pulumi.ResourceOptions(parent=self)
        tags = cluster_tags(spec)
        self.resource_group = azure.resources.ResourceGroup(f"{name}-rg", location=spec.region, tags=tags, opts=child)
        rg = self.resource_group.name
        self.vnet = azure.network.VirtualNetwork(
            f"{name}-vnet",
            resource_group_name=rg,
            location=spec.region,
            address_space=azure.network.AddressSpaceArgs(address_prefixes=[plan.vnet]),
            tags=tags,
            # Subnets are their own resources (module docstring): the VNet must not own them.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["subnets"]),
        )
        nat = self._create_nat(name, spec, rg, tags)
        self.node_nsg = self._create_node_nsg(name, spec, rg, tags)
        lustre_nsg = self._create_lustre_nsg(name, spec, rg, tags)
        self.nodes = self._create_subnet(name, "nodes", plan.nodes, self.node_nsg, nat, storage_endpoint=True)
        self.system = self._create_subnet(name, "system", plan.system, self.node_nsg, nat, storage_endpoint=True)
        # The Lustre subnet has no NAT: the file system's own NICs reach Azure through the
        # AzureCloud rule, as CCWS's lustre subnet does (network-new.bicep at bc0fc1b).
        self.lustre = self._create_subnet(name, "lustre", plan.lustre, lustre_nsg, None, storage_endpoint=False)
        self.bastion = None
        if spec.orchestration.kind == "slurm":
            # Bastion's subnet must be named AzureBastionSubnet (AddressPlan.bastion). No NSG and no NAT:
            # an NSG there is optional and must carry all of Bastion's own rules, the first HTTPS in from
            # Internet (learn.microsoft.com/azure/bastion/bastion-nsg, azure-docs 529fe12), and Bastion
            # reaches the VMs over the VNet only. Checkov's CKV2_AZURE_31 is excepted with the reason
            # (policies/checkov-azure-exceptions.yaml).
            self.bastion = azure.network.Subnet(
                f"{name}-bastion",
                subnet_name=BASTION_SUBNET,
                resource_group_name=self.resource_group.name,
                virtual_network_name=self.vnet.name,
                address_prefix=plan.bastion,
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({"vnet": self.vnet.id, "nodes": self.nodes.id, "lustre": self.lustre.id})

    def _create_nat(
        self, name: str, spec: ClusterSpec, rg: pulumi.Output[str], tags: dict[str, str]
    ) -> azure.network.NatGateway:
        """Egress for nodes: the subnets turn default outbound access off, so without this
        cloud-init, container pulls and package installs would fail (AZURE.md §9.5)."""
        zones = [spec.zone]
        ip = self.nat_ip = azure.network.PublicIPAddress(
            f"{name}-nat-ip",
            resource_group_name=rg,
            location=spec.region,
            # A NAT gateway takes Standard, static addresses (AZURE.md §7, NatGateway row).
            sku=azure.network.PublicIPAddressSkuArgs(name="Standard"),
            public_ip_allocation_method="Static",
            zones=zones,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        return azure.network.NatGateway(
            f"{name}-nat",
            resource_group_name=rg,
            location=spec.region,
            sku=azure.network.NatGatewaySkuArgs(name="Standard"),
            public_ip_addresses=[azure.network.SubResourceArgs(id=ip.id)],
            zones=zones,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _create_node_nsg(
        self, name: str, spec: ClusterSpec, rg: pulumi.Output[str], tags: dict[str, str]
    ) -> azure.network.NetworkSecurityGroup:
        cidr = spec.network.cidr
        rules = [
            # Everything inside the cluster's range: NCCL/RCCL bootstrap, Slurm, SSH between
            # nodes (CCWS AllowAllComputeComputeIn/Out, network-new.bicep at bc0fc1b). SSH is
            # thereby admitted from the VNet only.
            _rule("allow-cluster-in", "Allow", "Inbound", 100, source=cidr, destination=cidr),
            DENY_INTERNET_IN,
        ]
        if spec.orchestration.kind == "aks":
            # Azure CNI Overlay: pod-to-pod traffic is not encapsulated and the subnet NSG's rules
            # apply to it, and the pod range is not the VNet's (so not VirtualNetwork, which the
            # default allow rules name): "Node CIDR -> Pod CIDR" and "Pod CIDR -> Pod CIDR", all ports
            # and protocols, DNS included (concepts-network-azure-cni-overlay.md:96-102 at fb060ab).
            # Both directions: the source NIC's outbound rules and the destination's inbound ones
            # are both evaluated (network-security-groups-overview).
            for i, (rule, source) in enumerate((("node-to-pod", cidr), ("pod-to-pod", AKS_POD_CIDR))):
                rules += [
                    _rule(f"allow-{rule}-in", "Allow", "Inbound", 110 + i, source=source, destination=AKS_POD_CIDR),
                    _rule(f"allow-{rule}-out", "Allow", "Outbound", 110 + i, source=source, destination=AKS_POD_CIDR),
                ]
        return self._nsg(f"{name}-nodes-nsg", spec, rg, tags, rules)

    def _create_lustre_nsg(
        self, name: str, spec: ClusterSpec, rg: pulumi.Output[str], tags: dict[str, str]
    ) -> azure.network.NetworkSecurityGroup:
        cidr = spec.network.cidr
        rules = [
            *(
                _rule(rule, "Allow", direction, 100, protocol="Tcp", source=cidr, destination=cidr, ports=LUSTRE_PORTS)
                for rule, direction in (("allow-lustre-in", "Inbound"), ("allow-lustre-out", "Outbound"))
            ),
            _rule("allow-azurecloud-out", "Allow", "Outbound", 110, source="VirtualNetwork", destination="AzureCloud"),
            DENY_INTERNET_IN,
        ]
        return self._nsg(f"{name}-lustre-nsg", spec, rg, tags, rules)

    def _nsg(
        self,
        resource_name: str,
        spec: ClusterSpec,
        rg: pulumi.Output[str],
        tags: dict[str, str],
        rules: list[azure.network.SecurityRuleArgs],
    ) -> azure.network.NetworkSecurityGroup:
        return azure.network.NetworkSecurityGroup(
            resource_name,
            resource_group_name=rg,
            location=spec.region,
            security_rules=rules,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _create_subnet(
        self,
        name: str,
        role: str,
        prefix: str,
        nsg: azure.network.NetworkSecurityGroup,
        nat: azure.network.NatGateway | None,
        *,
        storage_endpoint: bool,
    ) -> azure.network.Subnet:
        return azure.network.Subnet(
            f"{name}-{role}",
            resource_group_name=self.resource_group.name,
            virtual_network_name=self.vnet.name,
            address_prefix=prefix,
            # NetworkSecurityGroupArgs, not SubResourceArgs, for the subnet's NSG (AZURE.md §7).
            network_security_group=azure.network.NetworkSecurityGroupArgs(id=nsg.id),
            nat_gateway=azure.network.SubResourceArgs(id=nat.id) if nat is not None else None,
            # Egress only through the NAT gateway (issue 23; AZURE.md §7 Subnet row).
            default_outbound_access=False if nat is not None else None,
            # The checkpoint account admits only these subnets (storage.py), through the
            # Microsoft.Storage service endpoint.
            service_endpoints=[azure.network.ServiceEndpointPropertiesFormatArgs(service="Microsoft.Storage")]
            if storage_endpoint
            else None,
            opts=pulumi.ResourceOptions(parent=self),
        )
