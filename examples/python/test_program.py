"""Testing your own program offline (components/testing.py), as a user's test file would: the
library example under the offline engine, the caller's provider and VPC honoured; then Pulumi's
standard recipe (set_mocks, @pulumi.runtime.test) with GpuClusterMocks. `make test` runs it
(pytest ... examples), and tests/test_packaging.py runs it against gpu-cluster installed into a
fresh virtualenv (so it imports only the installed package)."""

import json
import runpy
from pathlib import Path

import pulumi

from gpu_cluster.components.args import GpuClusterArgs
from gpu_cluster.components.cluster import GpuCluster
from gpu_cluster.components.contract import read_outputs
from gpu_cluster.components.testing import GpuClusterMocks, OfflineRun, run_program

PROGRAM = Path(__file__).resolve().parent / "__main__.py"
CONFIG = {
    "example:vpc_id": "vpc-0a1b2c3d4e5f60718",
    "example:node_subnet_id": "subnet-0a1b2c3d4e5f60718",
    "example:control_plane_subnet_id": "subnet-0f1e2d3c4b5a69788",
    "example:deployer_cidr": "52.0.0.1/32",
    "example:role_arn": "arn:aws:iam::123456789012:role/deploy",
}


def example_run() -> OfflineRun:
    """The example program under the strict mocks."""
    return run_program("example", lambda: runpy.run_path(str(PROGRAM), run_name="__main__") and None, config=CONFIG)


def test_library_example_uses_the_callers_provider_and_vpc() -> None:
    run = example_run()
    providers = [r for r in run.resources if r.type.startswith("pulumi:providers:")]
    assert [(p.type, p.name) for p in providers if p.type == "pulumi:providers:aws"] == [
        ("pulumi:providers:aws", "deploy")
    ]
    (deploy,) = [p for p in providers if p.name == "deploy"]
    roles = deploy.inputs["assumeRoles"]  # provider inputs travel JSON-encoded
    assert json.loads(roles)[0]["roleArn"] == CONFIG["example:role_arn"]
    aws_resources = [r for r in run.resources if r.custom and r.type.startswith("aws:")]
    assert len(aws_resources) > 20
    stray = [r.name for r in aws_resources if not r.provider.startswith(deploy.urn + "::")]
    assert not stray, f"not created with the caller's provider: {stray}"
    created = {r.type for r in aws_resources}
    for network_type in (
        "aws:ec2/vpc:Vpc",
        "aws:ec2/subnet:Subnet",
        "aws:ec2/natGateway:NatGateway",
        "aws:ec2/internetGateway:InternetGateway",
        "aws:ec2/routeTable:RouteTable",
        "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup",
        "aws:ec2/flowLog:FlowLog",
    ):
        assert network_type not in created, f"{network_type} created in the caller's VPC"
    vpc, subnet, cp = (
        CONFIG["example:vpc_id"],
        CONFIG["example:node_subnet_id"],
        CONFIG["example:control_plane_subnet_id"],
    )
    eks = [r for r in aws_resources if r.type == "aws:eks/cluster:Cluster"]
    assert len(eks) == 1 and eks[0].inputs["vpcConfig"]["subnetIds"] == [subnet, cp]
    (sg,) = [
        r for r in aws_resources if r.type == "aws:ec2/securityGroup:SecurityGroup" and "efa" in r.name.lower()
    ] or [r for r in aws_resources if r.type == "aws:ec2/securityGroup:SecurityGroup"][:1]
    assert sg.inputs["vpcId"] == vpc
    (fsx,) = [r for r in aws_resources if r.type == "aws:fsx/lustreFileSystem:LustreFileSystem"]
    assert fsx.inputs["subnetIds"] == subnet  # pulumi-aws 7 takes the one subnet as a string
    # The outputs the validation reads, with the contract's shape, and the typed attributes.
    outputs = read_outputs(run.outputs["gpu_cluster"])
    assert outputs.cluster_name == "train" and outputs.orchestrator == "eks" and outputs.nodes == 2
    assert run.outputs["kubeconfig"] == outputs.access.kubeconfig
    assert run.outputs["security_group_id"] and run.outputs["file_system_id"] == fsx.urn.split("::")[-1] + "-id"


def test_the_standard_set_mocks_recipe() -> None:
    """Pulumi's own recipe, unchanged but for the mocks: set_mocks, build, check in @pulumi.runtime.test."""
    mocks = GpuClusterMocks("aws")
    pulumi.runtime.set_mocks(mocks, preview=False)
    cluster = GpuCluster(
        "recipe",
        GpuClusterArgs(
            cloud="aws",
            region="us-east-1",
            zone="us-east-1a",
            compute={"instance_type": "p5.48xlarge", "nodes": 2, "capacity": {"type": "on-demand"}},
            storage={"lustre": {"size_gib": 4800, "throughput_mbps_per_tib": 250}},
            orchestration={"kind": "eks", "kubernetes_version": "1.35", "deployer_cidrs": ["52.0.0.1/32"]},
        ),
    )

    @pulumi.runtime.test
    def check() -> pulumi.Output[None]:
        def facts(values: list[object]) -> None:
            name, nodes, outputs = values
            assert name == "recipe" and nodes == 2
            assert read_outputs(outputs).orchestrator == "eks"  # type: ignore[arg-type]

        return pulumi.Output.all(cluster.cluster_name, cluster.nodes, cluster.stack_outputs).apply(facts)

    check()
    assert len(mocks.of_type("aws:eks/cluster:Cluster")) == 1 and mocks.of_type("aws:ec2/vpc:Vpc")
    # what a Mocks answering {} leaves None (the zones' ids, the GPU image's id), answered from the tables
    assert {"aws:index/getAvailabilityZones:getAvailabilityZones", "aws:ssm/getParameter:getParameter"} <= set(
        mocks.calls
    )
