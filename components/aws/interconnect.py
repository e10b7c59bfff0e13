"""Interconnect: the EFA layout of a node, the security group EFA needs, the placement group.

EFA's OS-bypass traffic is refused by any security group that does not let every protocol
in from, and out to, the group itself (AWS EFA user guide, "Prepare an EFA-enabled security
group"); the group therefore holds exactly those two self rules plus open egress.

The network interface layout follows the current AWS page "Maximize network bandwidth on
Amazon EC2 instances with multiple network cards"
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html):

* network card 0, device 0: the primary interface, a plain ENA ("interface") that carries
  the node's IP traffic;
* network card 0, device 1: an "efa-only" interface, when card 0 supports EFA (every card
  of the type does: the catalog's EFA count equals its card count);
* every further card i, device 0: an "efa-only" interface.

"efa-only" interfaces have no IP address, so a 32-card p5 node costs one address, not 32.
The older layout (an "efa" interface on every card) gave each card an IP and put the
primary's ENA traffic on an EFA device; pulumi-eks' count of network cards as EFA devices
is wrong for types whose card 0 has no EFA.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping

import pulumi
import pulumi_aws as aws

from gpu_cluster.components.aws.common import with_name
from gpu_cluster.components.catalog import InstanceType

InterfaceType = Literal["interface", "efa", "efa-only"]


class EfaLayoutError(ValueError):
    """The catalog's network card and EFA counts for a type do not describe a layout."""


@dataclass(kw_only=True, frozen=True, slots=True)
class Nic:
    network_card_index: int
    """Which network card the interface sits on."""
    device_index: int
    """Its device index on that card (0 is the card's first interface)."""
    interface_type: InterfaceType
    """EC2 ``InterfaceType``: ``interface`` (ENA), ``efa`` (EFA with ENA) or ``efa-only``."""

    @property
    def is_efa(self) -> bool:
        return self.interface_type in ("efa", "efa-only")


def efa_layout(instance: InstanceType) -> list[Nic]:
    """The network interfaces a node of this type gets, primary first."""
    net = instance.network
    cards, efa = net.network_cards, net.efa_interfaces
    where = f"catalog entry {instance.name}: network_cards={cards}, efa_interfaces={efa}"
    if net.fabric != "efa":
        raise EfaLayoutError(f"{where}: fabric is {net.fabric!r}, not 'efa'; no EFA layout applies")
    if cards < 1 or efa < 1:
        raise EfaLayoutError(f"{where}: an EFA type needs at least one network card and one EFA interface")
    if efa == cards:
        card0_efa = True
    elif efa == cards - 1:
        card0_efa = False  # card 0 carries only the primary ENA interface
    else:
        raise EfaLayoutError(
            f"{where}: one EFA per card (efa_interfaces == network_cards) or per card but the "
            f"first (efa_interfaces == network_cards - 1) are the layouts AWS documents; "
            f"{efa} EFA on {cards} cards is neither (source: efa-acc-inst-types)"
        )
    nics = [Nic(network_card_index=0, device_index=0, interface_type="interface")]
    if card0_efa:
        nics.append(Nic(network_card_index=0, device_index=1, interface_type="efa-only"))
    nics += [Nic(network_card_index=i, device_index=0, interface_type="efa-only") for i in range(1, cards)]
    return nics


@dataclass(kw_only=True, frozen=True, slots=True)
class InterconnectArgs:
    vpc_id: pulumi.Input[str]
    """VPC the security group belongs to."""
    instance: InstanceType
    """Catalog entry of the GPU type; sizes the EFA layout."""
    placement: bool
    """Create a cluster placement group (False for capacity blocks and reservations,
    which AWS hands over already placed)."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """Merged into every resource."""


class Interconnect(pulumi.ComponentResource):
    security_group_id: pulumi.Output[str]
    placement_group_name: pulumi.Output[str] | None
    nics: list[Nic]

    def __init__(self, name: str, args: InterconnectArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-cluster:aws:Interconnect", name, None, opts)
        # Computed first: a catalog entry without a valid layout fails the run before any
        # resource is registered.
        self.nics = efa_layout(args.instance)

        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-efa",
            vpc_id=args.vpc_id,
            description="EFA: all traffic between members of this group",
            tags=with_name(args.tags, f"{name}-efa"),
            opts=pulumi.ResourceOptions(parent=self),
        )
        sg_id = self.security_group.id
        # Separate rule resources rather than inline rules: inline and standalone rules on
        # the same group fight each other, and Storage adds standalone rules that reference
        # this group.
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-efa-in-self",
            security_group_id=sg_id,
            referenced_security_group_id=sg_id,
            ip_protocol="-1",
            description="EFA and node traffic from members of this group",
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-efa-out-self",
            security_group_id=sg_id,
            referenced_security_group_id=sg_id,
            ip_protocol="-1",
            description="EFA traffic to members of this group",
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-efa-out-all",
            security_group_id=sg_id,
            cidr_ipv4="0.0.0.0/0",
            ip_protocol="-1",
            description="Image pulls, S3, AWS APIs (through the NAT gateway and S3 endpoint)",
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self),
        )

        self.placement_group = (
            aws.ec2.PlacementGroup(
                f"{name}-placement",
                strategy="cluster",
                tags=args.tags,
                opts=pulumi.ResourceOptions(parent=self),
            )
            if args.placement
            else None
        )
        self.security_group_id = sg_id
        self.placement_group_name = self.placement_group.name if self.placement_group is not None else None
        self.register_outputs(
            {
                "security_group_id": self.security_group_id,
                "placement_group_name": self.placement_group_name,
                "efa_interfaces": sum(1 for n in self.nics if n.is_efa),
            }
        )
