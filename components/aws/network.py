"""Network: one VPC whose GPU nodes sit in a single private subnet of one zone.

Layout of the VPC range (for the default /16):

* first half (/17): the private node subnet in the chosen zone. EFA-only interfaces take no
  IP address, but pods on EKS do (VPC CNI), so the node subnet gets most of the range;
* an eighth of the second half (/20): the public subnet, which holds only the NAT gateway;
* the next eighth (/20), only when EKS is the orchestrator: a private subnet in a second
  zone, for the control plane's ENIs (EKS refuses subnets in fewer than two zones). No node
  is ever launched there. Its zone is chosen by zone ID (``network.control_plane_zone_id``, or
  the account's zones as DescribeAvailabilityZones lists them: never a zone EKS refuses, never
  the nodes' zone; components/aws/network_rules.py ``control_plane_zone``).

Nothing on a GPU node has a public IP: egress goes through the NAT gateway, and S3 traffic
(checkpoints, the FSx data repository) through a gateway endpoint that costs nothing per GB.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Mapping, Sequence, Union

import pulumi
import pulumi_aws as aws

from gpu_cluster.components.aws.audit import network_audit
from gpu_cluster.components.aws.common import with_name
from gpu_cluster.components.aws.network_rules import control_plane_zone
from gpu_cluster.components.spec_security import SecuritySpec


@dataclass(kw_only=True, frozen=True, slots=True)
class NetworkArgs:
    cidr: str
    """The VPC's range (spec.network.cidr, a private /16 to /20)."""
    region: str
    """Region of the VPC; names the S3 endpoint service."""
    zone: str
    """The one zone every GPU node shares."""
    zone_id: str | None = None
    """That zone's ID when the spec names it: the node and NAT subnets are then created by ID,
    the zone the spec's rules checked (components/aws/rules.py)."""
    control_plane: bool = False
    """EKS: add a small control-plane-only subnet in a second zone, chosen by zone ID."""
    control_plane_zone_id: str | None = None
    """That zone's ID when the spec names it (``network.control_plane_zone_id``); else it is chosen
    from the account's zones at ``pulumi up`` (``control_plane_zone``)."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """Merged into every resource."""
    security: SecuritySpec = field(default_factory=SecuritySpec)
    """Flow logs and log retention (components/aws/audit.py)."""
    existing: ExistingNetwork | None = None
    """The caller's VPC and subnets: then no network resource is created, only the log bucket."""


SubnetIds = Union[Sequence[pulumi.Input[str]], pulumi.Output[Sequence[str]]]
"""Subnet ids: a sequence of Inputs, or one Output of a list (another program's subnets)."""


@dataclass(kw_only=True, frozen=True, slots=True)
class ExistingNetwork:
    """A VPC the caller made (``network.vpc_id``; checked by components/aws/network_rules.py)."""

    vpc_id: pulumi.Input[str]
    node_subnet_id: pulumi.Input[str]
    control_plane_subnet_ids: SubnetIds = ()
    """EKS: subnets of other zones for the control plane (the node subnet is added to them); a
    sequence, or an Output of one."""


def subnet_plan(cidr: str) -> tuple[str, str, str]:
    """(node subnet, public subnet, control plane subnet) carved out of the VPC range."""
    net = ipaddress.IPv4Network(cidr)  # the spec admits private IPv4 ranges only
    nodes, rest = list(net.subnets(prefixlen_diff=1))
    eighths = list(rest.subnets(prefixlen_diff=3))
    return str(nodes), str(eighths[0]), str(eighths[1])


class Network(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    node_subnet_id: pulumi.Output[str]
    control_plane_subnet_ids: SubnetIds
    """Subnets the EKS control plane uses: the node subnet plus the second-zone subnet."""

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-cluster:aws:Network", name, None, opts)
        self._name = name
        self._args = args
        if args.existing is not None:
            self._adopt(name, args.existing)
            return
        node_cidr, public_cidr, cp_cidr = subnet_plan(args.cidr)

        # DNS support and hostnames: FSx for Lustre is mounted by DNS name and the EKS private
        # endpoint resolves only inside a VPC that has both turned on (EKS user guide network-reqs,
        # VPC requirements; neither that line nor the FSx side re-read this session: closing note).
        self.vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.cidr,
            enable_dns_support=True,
            enable_dns_hostnames=True,
            tags=with_name(args.tags, f"{name}-vpc"),
            opts=pulumi.ResourceOptions(parent=self),
        )
        # Flow logs into the stack's log bucket, the default security group emptied (audit.py).
        self.log_bucket = network_audit(name, self.vpc.id, self.vpc.arn, args.region, args.security, args.tags, self)
        self.public_subnet = self._subnet("public", public_cidr, args.zone, args.zone_id)
        self.node_subnet = self._subnet("nodes", node_cidr, args.zone, args.zone_id)
        self.control_plane_subnet = self._create_control_plane_subnet(cp_cidr) if args.control_plane else None
        self.nat_gateway = self._create_egress()
        self.private_route_table = self._create_private_routes()
        # S3 through a gateway endpoint on the private route table, so data and checkpoint traffic
        # stays off the NAT gateway (service name com.amazonaws.<region>.s3, type Gateway: Amazon
        # VPC "Gateway endpoints for Amazon S3", docs.aws.amazon.com/vpc/latest/privatelink/vpc-endpoints-s3.html;
        # not re-read this session).
        self.s3_endpoint = aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=self.vpc.id,
            service_name=f"com.amazonaws.{args.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[self.private_route_table.id],
            tags=with_name(args.tags, f"{name}-s3"),
            opts=pulumi.ResourceOptions(parent=self),
        )

        self.vpc_id = self.vpc.id
        self.node_subnet_id = self.node_subnet.id
        self.control_plane_subnet_ids = [self.node_subnet.id]
        if self.control_plane_subnet is not None:
            self.control_plane_subnet_ids.append(self.control_plane_subnet.id)
        self.register_outputs(
            {
                "vpc_id": self.vpc_id,
                "node_subnet_id": self.node_subnet_id,
                "control_plane_subnet_ids": self.control_plane_subnet_ids,
            }
        )

    def _create_control_plane_subnet(self, cidr: str) -> aws.ec2.Subnet:
        args = self._args
        if args.control_plane_zone_id is not None:
            return self._subnet("control-plane", cidr, None, args.control_plane_zone_id)
        # The account's zones (DescribeAvailabilityZones: regular zones only, opted-in or not
        # needed; EC2 API reference, DescribeAvailabilityZones filter zone-type). The same choice as
        # the preflight's; a zone name or ID the account lacks fails here, with the fix named.
        zones = aws.get_availability_zones_output(
            state="available",
            filters=[aws.GetAvailabilityZonesFilterArgs(name="zone-type", values=["availability-zone"])],
            region=args.region,
            opts=pulumi.InvokeOutputOptions(parent=self),
        )
        chosen = zones.apply(lambda z: _chosen_zone(dict(zip(z.names, z.zone_ids)), args))
        # Kept once created: a later change in the account's zone list must not move (replace) a
        # subnet the control plane's ENIs sit in.
        return self._subnet("control-plane", cidr, None, chosen, ignore=["availabilityZoneId"])

    def _subnet(
        self,
        role: str,
        cidr: str,
        zone: str | None,
        zone_id: pulumi.Input[str] | None = None,
        ignore: list[str] | None = None,
    ) -> aws.ec2.Subnet:
        return aws.ec2.Subnet(
            f"{self._name}-{role}",
            vpc_id=self.vpc.id,
            cidr_block=cidr,
            availability_zone=zone if zone_id is None else None,
            availability_zone_id=zone_id,
            # Even the public subnet hands out no public IPs: only the NAT gateway lives
            # there, and it gets an Elastic IP of its own.
            map_public_ip_on_launch=False,
            tags=with_name(self._args.tags, f"{self._name}-{role}"),
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=ignore),
        )

    def _create_egress(self) -> aws.ec2.NatGateway:
        name, tags = self._name, self._args.tags
        igw = aws.ec2.InternetGateway(
            f"{name}-igw",
            vpc_id=self.vpc.id,
            tags=with_name(tags, f"{name}-igw"),
            opts=pulumi.ResourceOptions(parent=self),
        )
        public_rt = aws.ec2.RouteTable(
            f"{name}-public",
            vpc_id=self.vpc.id,
            tags=with_name(tags, f"{name}-public"),
            opts=pulumi.ResourceOptions(parent=self),
        )
        aws.ec2.Route(
            f"{name}-public-default",
            route_table_id=public_rt.id,
            destination_cidr_block="0.0.0.0/0",
            gateway_id=igw.id,
            opts=pulumi.ResourceOptions(parent=self),
        )
        aws.ec2.RouteTableAssociation(
            f"{name}-public-assoc",
            route_table_id=public_rt.id,
            subnet_id=self.public_subnet.id,
            opts=pulumi.ResourceOptions(parent=self),
        )
        eip = aws.ec2.Eip(
            f"{name}-nat",
            domain="vpc",
            tags=with_name(tags, f"{name}-nat"),
            opts=pulumi.ResourceOptions(parent=self),
        )
        # One NAT gateway, in the nodes' zone: every GPU node is in that zone, so a second
        # gateway would only add cost; a zone outage stops the whole cluster anyway.
        return aws.ec2.NatGateway(
            f"{name}-nat",
            allocation_id=eip.id,
            subnet_id=self.public_subnet.id,
            tags=with_name(tags, f"{name}-nat"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
        )

    def _create_private_routes(self) -> aws.ec2.RouteTable:
        name = self._name
        rt = aws.ec2.RouteTable(
            f"{name}-private",
            vpc_id=self.vpc.id,
            tags=with_name(self._args.tags, f"{name}-private"),
            opts=pulumi.ResourceOptions(parent=self),
        )
        aws.ec2.Route(
            f"{name}-private-default",
            route_table_id=rt.id,
            destination_cidr_block="0.0.0.0/0",
            nat_gateway_id=self.nat_gateway.id,
            opts=pulumi.ResourceOptions(parent=self),
        )
        subnets = [("nodes", self.node_subnet)]
        if self.control_plane_subnet is not None:
            subnets.append(("control-plane", self.control_plane_subnet))
        for role, subnet in subnets:
            aws.ec2.RouteTableAssociation(
                f"{name}-{role}-assoc",
                route_table_id=rt.id,
                subnet_id=subnet.id,
                opts=pulumi.ResourceOptions(parent=self),
            )
        return rt

    def _adopt(self, name: str, existing: ExistingNetwork) -> None:
        """The caller's VPC: read it (its ARN names the account for the log bucket's policy,
        its DNS attributes are checked) and create nothing in it but what the pillars add."""
        args = self._args
        vpc = aws.ec2.get_vpc_output(id=existing.vpc_id, opts=pulumi.InvokeOutputOptions(parent=self))
        self.vpc_arn = pulumi.Output.all(vpc.arn, vpc.enable_dns_support, vpc.enable_dns_hostnames, vpc.id).apply(
            _dns_checked
        )
        self.log_bucket = network_audit(
            name, existing.vpc_id, self.vpc_arn, args.region, args.security, args.tags, self, owned=False
        )
        self.vpc_id = pulumi.Output.from_input(existing.vpc_id)
        self.node_subnet_id = pulumi.Output.from_input(existing.node_subnet_id)
        others = existing.control_plane_subnet_ids
        if isinstance(others, pulumi.Output):
            self.control_plane_subnet_ids = pulumi.Output.all(self.node_subnet_id, others).apply(
                lambda v: [v[0], *v[1]]
            )
        else:
            self.control_plane_subnet_ids = [self.node_subnet_id, *(pulumi.Output.from_input(s) for s in others)]
        self.register_outputs(
            {
                "vpc_id": self.vpc_id,
                "node_subnet_id": self.node_subnet_id,
                "control_plane_subnet_ids": self.control_plane_subnet_ids,
            }
        )


def _chosen_zone(zones: dict[str, str], args: NetworkArgs) -> str:
    chosen, problems = control_plane_zone(
        zones, region=args.region, zone=args.zone, zone_id=args.zone_id, control_plane_zone_id=None
    )
    if problems or chosen is None:
        raise ValueError("; ".join(f"{path}: {reason}" for path, reason in problems))
    return chosen


def _dns_checked(vpc: list[object]) -> str:
    arn, dns_support, dns_hostnames, vpc_id = vpc
    if not (dns_support and dns_hostnames):
        # The same reason the VPC we create turns both on (Network.__init__): FSx for Lustre is
        # mounted by its DNS name and the EKS private endpoint resolves only in a VPC with both on.
        raise ValueError(
            f"network.vpc_id: {vpc_id} has enableDnsSupport={dns_support}, "
            f"enableDnsHostnames={dns_hostnames} (allowed: both true; "
            "aws ec2 modify-vpc-attribute --vpc-id ... --enable-dns-hostnames)"
        )
    return str(arn)
