"""GpuClusterArgs go through the spec's rules (the stack file's errors, word for word); an existing
network's offline checks; the caller's providers on GCP (APIs still first) and AWS (region held)."""

from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_gcp as gcp
import pytest

from gpu_cluster.components.args import GpuClusterArgs, to_raw, to_spec
from gpu_cluster.components.cluster import GpuCluster
from gpu_cluster.components.engine import run_program
from gpu_cluster.components.spec import DEPLOY_TIME_ID, SpecError, default_name, load_stack, parse_spec, read_stack_file

EKS: dict[str, Any] = {
    "cloud": "aws",
    "region": "us-east-1",
    "zone": "us-east-1a",
    "compute": {"instance_type": "p5.48xlarge", "nodes": 2},
    "storage": {"lustre": {"size_gib": 4800, "throughput_mbps_per_tib": 250}},
    "orchestration": {"kind": "eks", "deployer_cidrs": ["52.0.0.1/32"]},
}
VPC, SUBNET, SUBNET_B = "vpc-0a1b2c3d4e5f60718", "subnet-0a1b2c3d4e5f60718", "subnet-0f1e2d3c4b5a69788"


@pytest.mark.parametrize("stack", ["aws-h100-eks", "aws-h200-slurm", "gcp-h100-gke", "gcp-h200-slurm"])
def test_args_give_the_stack_files_spec(stack: str) -> None:
    name, raw = read_stack_file(stack)
    if raw["orchestration"]["kind"] != "slurm":
        raw = {**raw, "orchestration": {**raw["orchestration"], "deployer_cidrs": ["52.0.0.1/32"]}}
    spec = parse_spec(raw, default_name=default_name(name))
    assert to_spec(name, GpuClusterArgs(**raw)) == spec  # type: ignore[typeddict-item]
    assert spec.name == load_stack(stack, deployer_placeholder=True)[1].name


def test_bad_args_get_the_specs_problems() -> None:
    bad = {**EKS, "compute": {"instance_type": "p9.huge", "nodes": 0}, "zone": "us-west-2a"}
    with pytest.raises(SpecError) as direct:
        parse_spec(bad, default_name="c1")
    with pytest.raises(pulumi.InputPropertiesError) as err:
        to_spec("c1", bad)  # type: ignore[arg-type]
    assert str(err.value) == direct.value.render()
    assert "compute.instance_type: 'p9.huge' is not in the hardware catalog" in str(err.value)


def _problems(network: dict[str, Any], kind: str = "eks") -> list[tuple[str, str]]:
    raw = to_raw({**EKS, "network": network})  # type: ignore[typeddict-item]
    if kind == "slurm":
        raw["orchestration"] = {"kind": "slurm"}
    try:
        parse_spec(raw)
    except SpecError as err:
        return err.problems
    return []


def test_existing_network_checks() -> None:
    assert _problems({"vpc_id": VPC, "node_subnet_id": SUBNET, "control_plane_subnet_ids": [SUBNET_B]}) == []
    assert _problems({"vpc_id": "vpc-12", "node_subnet_id": SUBNET, "control_plane_subnet_ids": [SUBNET_B]}) == [
        ("network.vpc_id", "'vpc-12' is malformed (allowed: an id such as vpc-0123456789abcdef0)")
    ]
    assert [p for p, _ in _problems({"vpc_id": VPC})] == ["network.node_subnet_id"]
    assert [p for p, _ in _problems({"vpc_id": VPC, "node_subnet_id": SUBNET})] == ["network.control_plane_subnet_ids"]
    assert [
        p for p, _ in _problems({"vpc_id": VPC, "node_subnet_id": SUBNET, "control_plane_subnet_ids": [SUBNET]})
    ] == ["network.control_plane_subnet_ids"]
    assert _problems({"vpc_id": VPC, "node_subnet_id": SUBNET}, kind="slurm") == []
    assert [p for p, _ in _problems({"control_plane_subnet_ids": [SUBNET_B]})] == ["network.control_plane_subnet_ids"]
    gcp_raw = to_raw(
        {
            **EKS,
            "cloud": "gcp",
            "region": "us-central1",
            "zone": "us-central1-a",  # type: ignore[typeddict-item]
            "compute": {"instance_type": "a3-megagpu-8g", "nodes": 2, "capacity": {"type": "flex-start"}},
            "storage": {"lustre": {"size_gib": 36000, "throughput_mbps_per_tib": 250}},
            "orchestration": {"kind": "gke", "deployer_cidrs": ["52.0.0.1/32"]},
            "network": {"vpc_id": "projects/p/global/networks/n", "node_subnet_id": "s"},
        }
    )
    with pytest.raises(SpecError) as err:
        parse_spec(gcp_raw)
    assert [p for p, _ in err.value.problems] == ["network.vpc_id"]


def test_ids_from_other_resources_stand_in_as_deploy_time() -> None:
    out = pulumi.Output.from_input(VPC)
    raw = to_raw(
        {
            **EKS,
            "network": {
                "vpc_id": out,
                "node_subnet_id": SUBNET,  # type: ignore[typeddict-item]
                "control_plane_subnet_ids": [pulumi.Output.from_input(SUBNET_B)],
            },
        }
    )
    assert raw["network"] == {
        "vpc_id": DEPLOY_TIME_ID,
        "node_subnet_id": SUBNET,
        "control_plane_subnet_ids": [DEPLOY_TIME_ID],
    }
    assert parse_spec(raw).network.existing


def _gcp_program() -> None:
    caller = gcp.Provider("mine", project="caller-project", region="us-central1")
    args = {
        "cloud": "gcp",
        "region": "us-central1",
        "zone": "us-central1-a",
        "compute": {"instance_type": "a3-megagpu-8g", "nodes": 2, "capacity": {"type": "flex-start"}},
        "storage": {"lustre": {"size_gib": 36000, "throughput_mbps_per_tib": 250}},
        "orchestration": {"kind": "gke", "deployer_cidrs": ["52.0.0.1/32"]},
    }
    GpuCluster("g", args, pulumi.ResourceOptions(providers=[caller]))  # type: ignore[arg-type]


def test_gcp_callers_provider_everywhere_after_the_apis() -> None:
    run = run_program("g", _gcp_program, cloud="gcp")
    providers = [r for r in run.resources if r.type == "pulumi:providers:gcp"]
    assert [p.name for p in providers] == ["mine"]
    gcp_resources = [r for r in run.resources if r.custom and r.type.startswith("gcp:")]
    assert len(gcp_resources) > 15
    assert all(r.provider.startswith(providers[0].urn + "::") for r in gcp_resources)
    services = {r.urn for r in gcp_resources if r.type == "gcp:projects/service:Service"}
    assert len(services) >= 5
    late = [r.name for r in gcp_resources if r.urn not in services and not services <= set(r.dependencies)]
    assert not late, f"created without waiting for the APIs: {late}"
    # The project of the caller's provider, asked of that provider.
    assert {r.inputs.get("project") for r in gcp_resources if r.urn in services} != {None}


def test_aws_callers_provider_in_another_region_is_refused() -> None:
    def program() -> dict[str, Any]:
        caller = aws.Provider("west", region="us-west-2")
        cluster = GpuCluster("c", EKS, pulumi.ResourceOptions(providers=[caller]))  # type: ignore[arg-type]
        return {"region": cluster.region}

    with pytest.raises(Exception, match="deploys to 'us-west-2', the cluster description says 'us-east-1'"):
        run_program("c", program)


def test_stack_file_with_an_existing_vpc_creates_no_network() -> None:
    from gpu_cluster.components.engine import run_offline

    raw = {**EKS, "network": {"vpc_id": VPC, "node_subnet_id": SUBNET, "control_plane_subnet_ids": [SUBNET_B]}}
    run = run_offline("mine", raw)
    types = {r.type for r in run.resources}
    assert "aws:ec2/vpc:Vpc" not in types and "aws:ec2/subnet:Subnet" not in types
    assert "aws:s3/bucket:Bucket" in types  # the log bucket the checkpoint bucket's access logs go to
    (eks,) = run.of_type("aws:eks/cluster:Cluster")
    assert eks.inputs["vpcConfig"]["subnetIds"] == [SUBNET, SUBNET_B]
    assert "aws:ec2/getVpc:getVpc" in run.invokes
    assert set(run.outputs) == set(__import__("gpu_cluster.components.contract", fromlist=["OUTPUT_KEYS"]).OUTPUT_KEYS)


def test_a_vpc_without_dns_hostnames_is_refused() -> None:
    from gpu_cluster.components.aws.network import _dns_checked

    assert _dns_checked(["arn:aws:ec2:us-east-1:1:vpc/" + VPC, True, True, VPC]).endswith(VPC)
    with pytest.raises(ValueError, match="enableDnsHostnames=False"):
        _dns_checked(["arn", True, False, VPC])


def test_the_package_provider_constructs_the_component_from_schema_inputs() -> None:
    """What `pulumi package add` consumers reach: the component provider maps camelCase inputs
    (as a YAML program sends them) to GpuClusterArgs and builds the cluster."""
    from pulumi.provider.experimental.component import ComponentProvider

    from gpu_cluster.components.provider import COMPONENTS, PACKAGE

    provider = ComponentProvider(list(COMPONENTS), PACKAGE, None, "0.1.0")
    inputs = {
        "cloud": "aws",
        "region": "us-east-1",
        "zone": "us-east-1a",
        "compute": {"instanceType": "p5.48xlarge", "nodes": 2.0},
        "storage": {"lustre": {"sizeGib": 4800.0, "throughputMbpsPerTib": 250.0}},
        "orchestration": {"kind": "slurm", "loginNodes": 1.0},
        "network": {"vpcId": VPC, "nodeSubnetId": SUBNET},
    }
    state: dict[str, Any] = {}

    def program() -> dict[str, Any]:
        result = provider.construct("pkg", "gpu-cluster:index:GpuCluster", inputs, pulumi.ResourceOptions())
        state.update(result.state)
        return {k: state[k] for k in ("clusterName", "networkId", "nodeSubnetId", "nodeGroups", "mount")}

    run = run_program("pkg", program)
    assert run.outputs["clusterName"] == "pkg" and run.outputs["networkId"] == VPC
    assert run.outputs["nodeSubnetId"] == SUBNET and len(run.outputs["nodeGroups"]) == 1
    assert run.outputs["mount"]["mountPoint"] == "/fsx"
    assert not run.of_type("aws:ec2/vpc:Vpc") and run.of_type("aws-native:pcs:Cluster")


def test_outputs_of_other_resources_as_inputs() -> None:
    """The inputs another resource usually supplies, as Outputs of resources the caller's program
    makes (its VPC, its subnets, the control plane's subnets as one Output of a list) and the
    caller's provider: the component is built under the mocks and every one reaches its resource."""

    def program() -> dict[str, Any]:
        deploy = aws.Provider("deploy", region="us-east-1")
        mine = pulumi.ResourceOptions(provider=deploy)
        vpc = aws.ec2.Vpc("theirs", cidr_block="10.8.0.0/16", opts=mine)
        nodes = aws.ec2.Subnet(
            "nodes", vpc_id=vpc.id, cidr_block="10.8.0.0/17", availability_zone="us-east-1a", opts=mine
        )
        other = aws.ec2.Subnet(
            "cp", vpc_id=vpc.id, cidr_block="10.8.128.0/20", availability_zone="us-east-1b", opts=mine
        )
        args = {
            **EKS,
            "network": {
                "vpc_id": vpc.id,
                "node_subnet_id": nodes.id,
                "control_plane_subnet_ids": pulumi.Output.all(other.id).apply(list),
            },
        }
        cluster = GpuCluster("c", args, pulumi.ResourceOptions(providers=[deploy]))  # type: ignore[arg-type]
        return {"network_id": cluster.network_id, "node_subnet_id": cluster.node_subnet_id}

    run = run_program("outputs", program)
    (deploy,) = run.of_type("pulumi:providers:aws")
    ours = [
        r for r in run.resources if r.custom and r.type.startswith("aws:") and r.name not in ("theirs", "nodes", "cp")
    ]
    assert len(ours) > 20 and all(r.provider.startswith(deploy.urn + "::") for r in ours)
    assert not [r for r in ours if r.type in ("aws:ec2/vpc:Vpc", "aws:ec2/subnet:Subnet")]
    (eks,) = run.of_type("aws:eks/cluster:Cluster")
    assert eks.inputs["vpcConfig"]["subnetIds"] == ["nodes-id", "cp-id"]
    (fsx,) = run.of_type("aws:fsx/lustreFileSystem:LustreFileSystem")
    assert fsx.inputs["subnetIds"] == "nodes-id"
    assert {r.inputs["vpcId"] for r in ours if r.type == "aws:ec2/securityGroup:SecurityGroup"} == {"theirs-id"}
    assert run.outputs == {"network_id": "theirs-id", "node_subnet_id": "nodes-id"}
