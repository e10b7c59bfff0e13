"""Network pillar: VPC, private node subnet in the spec's zone, NAT egress, S3 endpoint."""

from __future__ import annotations

import ipaddress

import pytest

from gpu_cluster.components.aws.mocks import MOCK_ZONES
from gpu_cluster.components.aws.network_rules import control_plane_zone
from gpu_cluster.components.spec import SpecError
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
        # The second zone goes by ID, chosen from the account's zones (the mock account's, MOCK_ZONES):
        # the first by name that is neither the nodes' zone nor one EKS refuses.
        cp = subnets["plane"]
        zones = MOCK_ZONES[spec.region]
        assert "availabilityZone" not in cp.inputs
        chosen = next(z for n, z in sorted(zones.items()) if n != spec.zone and z not in ("use1-az3",))
        assert cp.inputs["availabilityZoneId"] == chosen != zones[spec.zone]
        assert cp.ignore_changes == ("availabilityZoneId",)
        assert "aws:index/getAvailabilityZones:getAvailabilityZones" in result.invokes

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


def _zones(**kw: object) -> tuple[str | None, list[tuple[str, str]]]:
    args = {"region": "us-east-1", "zone": "us-east-1a", "zone_id": None, "control_plane_zone_id": None, **kw}
    return control_plane_zone(dict(MOCK_ZONES["us-east-1"]), **args)  # type: ignore[arg-type]


def test_the_control_plane_zone_is_never_one_eks_refuses() -> None:
    # us-east-1d is use1-az2 in the mock account; the first other zone by name is a (use1-az4).
    assert _zones(zone="us-east-1d") == ("use1-az4", [])
    # An account whose first other zone is use1-az3, which EKS refuses: the next one is taken.
    zones = {"us-east-1a": "use1-az3", "us-east-1b": "use1-az1", "us-east-1c": "use1-az2"}
    assert control_plane_zone(
        zones, region="us-east-1", zone="us-east-1c", zone_id=None, control_plane_zone_id=None
    ) == ("use1-az1", [])
    # A region where the only other zone is the refused one: no second zone, and the fix named.
    chosen, problems = control_plane_zone(
        {"us-west-1a": "usw1-az1", "us-west-1b": "usw1-az2"},
        region="us-west-1",
        zone="us-west-1a",
        zone_id=None,
        control_plane_zone_id=None,
    )
    ((path, reason),) = problems
    assert chosen is None and path == "network.control_plane_zone_id"
    assert "usw1-az2" in reason and "network.vpc_id" in reason


def test_zone_and_zone_id_are_reconciled() -> None:
    assert _zones(zone_id="use1-az4") == ("use1-az6", [])
    chosen, problems = _zones(zone_id="use1-az1")
    ((path, reason),) = problems
    assert path == "zone_id" and "us-east-1a is zone ID use1-az4" in reason and "us-east-1c" in reason
    _, problems = _zones(zone="us-east-1g")
    assert [p for p, _ in problems] == ["zone"] and "us-east-1f (use1-az5)" in problems[0][1]
    _, problems = _zones(control_plane_zone_id="use1-az9")
    assert [p for p, _ in problems] == ["network.control_plane_zone_id"]


def test_a_given_control_plane_zone_id_goes_to_the_subnet() -> None:
    def edit(raw: dict[str, object]) -> None:
        raw.setdefault("network", {})["control_plane_zone_id"] = "use1-az1"  # type: ignore[union-attr]

    result, spec = run("aws-h100-eks", edit)
    assert spec.network.control_plane_zone_id == "use1-az1"
    cp = one(result, SUBNET, "-network-control-plane")
    assert cp.inputs["availabilityZoneId"] == "use1-az1" and cp.ignore_changes == ()
    assert "aws:index/getAvailabilityZones:getAvailabilityZones" not in result.invokes


@pytest.mark.parametrize(
    ("stack", "value", "says"),
    [
        ("aws-h100-eks", "use1-az3", "EKS refuses cluster subnets in use1-az3"),
        ("aws-h100-eks", "use2-az1", "not a zone ID of region 'us-east-1'"),
        ("aws-h200-slurm", "use2-az1", "only applies to eks"),
    ],
)
def test_a_bad_control_plane_zone_id_is_refused_offline(stack: str, value: str, says: str) -> None:
    from tests.components.aws._offline import raw_stack
    from gpu_cluster.components.spec import parse_spec

    _, raw = raw_stack(stack)
    raw.setdefault("network", {})["control_plane_zone_id"] = value
    with pytest.raises(SpecError) as info:
        parse_spec(raw, deployer_placeholder=True)
    reasons = [r for p, r in info.value.problems if p == "network.control_plane_zone_id"]
    assert len(reasons) == 1 and says in reasons[0], info.value.problems


def test_the_nodes_zone_id_is_no_control_plane_zone() -> None:
    from tests.components.aws._offline import raw_stack
    from gpu_cluster.components.spec import parse_spec

    _, raw = raw_stack("aws-h100-eks")
    raw["zone_id"] = "use1-az4"
    raw.setdefault("network", {})["control_plane_zone_id"] = "use1-az4"
    with pytest.raises(SpecError) as info:
        parse_spec(raw, deployer_placeholder=True)
    assert [p for p, r in info.value.problems if "nodes' zone" in r] == ["network.control_plane_zone_id"]
