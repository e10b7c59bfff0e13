"""Network pillar: VPC, private node subnet in the spec's zone, NAT egress, S3 endpoint."""

from __future__ import annotations

import ipaddress

import pytest

from tests.components.aws._offline import AWS_STACKS, in_pillar, one, run

SUBNET = "aws:ec2/subnet:Subnet"


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_network(stack: str) -> None:
    result, spec = run(stack)
    vpc = one(result, "aws:ec2/vpc:Vpc", "-network-vpc")
    assert vpc.inputs["cidrBlock"] == spec.network.cidr
    assert vpc.inputs["enableDnsSupport"] is True and vpc.inputs["enableDnsHostnames"] is True

    subnets = {r.name.rsplit("-", 1)[-1]: r for r in in_pillar(result, "Network", SUBNET)}
    expected = {"nodes", "public"} | ({"plane"} if spec.orchestration.kind == "eks" else set())
    assert set(subnets) == expected
    nodes = subnets["nodes"].inputs
    assert nodes["availabilityZone"] == spec.zone
    assert all(s.inputs.get("mapPublicIpOnLaunch") is False for s in subnets.values())
    vpc_net = ipaddress.ip_network(spec.network.cidr)
    nets = [ipaddress.ip_network(s.inputs["cidrBlock"]) for s in subnets.values()]
    assert all(n.subnet_of(vpc_net) for n in nets)  # type: ignore[arg-type]
    assert not any(a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1 :])
    # The node subnet is the big one: pods on EKS take VPC addresses.
    assert ipaddress.ip_network(nodes["cidrBlock"]).num_addresses == vpc_net.num_addresses // 2
    if spec.orchestration.kind == "eks":
        cp = subnets["plane"].inputs
        assert cp["availabilityZone"] != spec.zone and cp["availabilityZone"].startswith(spec.region)

    nat = one(result, "aws:ec2/natGateway:NatGateway", "-network-nat")
    assert nat.inputs["subnetId"] == subnets["public"].name + "-id"
    routes = {r.name: r.inputs for r in result.of_type("aws:ec2/route:Route")}
    private = next(v for k, v in routes.items() if k.endswith("private-default"))
    assert private["natGatewayId"] == nat.name + "-id" and private["destinationCidrBlock"] == "0.0.0.0/0"
    public = next(v for k, v in routes.items() if k.endswith("public-default"))
    assert public["gatewayId"].endswith("-network-igw-id")
    # The node subnet routes through the NAT, never the internet gateway.
    assoc = {
        r.inputs["subnetId"]: r.inputs["routeTableId"]
        for r in result.of_type("aws:ec2/routeTableAssociation:RouteTableAssociation")
    }
    assert assoc[subnets["nodes"].name + "-id"] == private["routeTableId"]

    s3 = one(result, "aws:ec2/vpcEndpoint:VpcEndpoint", "-network-s3")
    assert s3.inputs["vpcEndpointType"] == "Gateway"
    assert s3.inputs["serviceName"] == f"com.amazonaws.{spec.region}.s3"
    assert s3.inputs["routeTableIds"] == [private["routeTableId"]]
