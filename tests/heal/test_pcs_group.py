"""AWS PCS: heal reads the node's compute node group from PCS's own API (GetComputeNodeGroup, against
a stand-in in the shape of botocore's ``pcs`` model, tests/heal/pcs_world.py) with the cluster and
group ids PCS tagged the instance with (moto's EC2), and replaces a node only in a group that keeps
all its instances static (minInstanceCount = maxInstanceCount > 0, PCS user guide
scaling-job-level). Anything else is refused before any call that acts, naming the group, its counts
and what to do (issue 41)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpu_cluster.heal.adapters import AdapterError, NodeState
from gpu_cluster.heal.aws import PCS_CLUSTER_TAG, PCS_TAG, PcsCloud, clients, pcs_client
from tests.heal.pcs_world import PcsWorld
from tests.preflight.test_aws import aws_env, moto_url  # noqa: F401 (fixtures)

REGION = "us-east-1"
CLUSTER = "pcs_4kq9z1x7mb"
GROUP = "pcs_7w2hd0c5ta"
ADDR = "10.2.1.11"


@pytest.fixture
def pcs(aws_env: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[PcsWorld]:  # noqa: F811
    world = PcsWorld()
    monkeypatch.setenv("AWS_ENDPOINT_URL_PCS", world.url)
    yield world
    world.close()


def instance(ec2: Any, tags: dict[str, str]) -> str:
    vpc = ec2.create_vpc(CidrBlock="10.2.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.2.1.0/24")["Subnet"]["SubnetId"]
    got = ec2.run_instances(
        ImageId=ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"],
        InstanceType="p5.48xlarge",
        MinCount=1,
        MaxCount=1,
        SubnetId=subnet,
        PrivateIpAddress=ADDR,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
    )
    return str(got["Instances"][0]["InstanceId"])


def state(ec2: Any, iid: str) -> str:
    return str(ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]["State"]["Name"])


NODE = NodeState(node="gpu-1", present=True, address=ADDR)
TAGS = {PCS_CLUSTER_TAG: CLUSTER, PCS_TAG: GROUP}


@pytest.mark.parametrize(
    ("low", "high", "purchase", "kind"),
    [(0, 4, "CAPACITY_BLOCK", "all dynamic"), (2, 4, "ONDEMAND", "dynamic above its 2 static instances")],
)
def test_a_group_with_dynamic_capacity_is_refused_before_any_terminate(
    pcs: PcsWorld, low: int, high: int, purchase: str, kind: str
) -> None:
    ec2 = clients(REGION)[0]
    iid = instance(ec2, TAGS)
    pcs.add(CLUSTER, GROUP, name="gpu", low=low, high=high, purchase=purchase)
    cloud = PcsCloud(ec2, pcs_client(REGION))
    found = cloud.instance(NODE)
    assert found.id == iid
    out = cloud.replace(NODE, found, "tok", "node gate")
    assert not out.ok
    for said in (
        f"group gpu ({GROUP}, cluster {CLUSTER}, purchase option {purchase})",
        f"minInstanceCount {low}, maxInstanceCount {high}",
        kind,
        f"{NODE.node} stays drained; terminate {iid} by hand",
    ):
        assert said in out.detail, out.detail
    # PCS was asked for the instance's own group, by the ids its tags carry; nothing terminated
    assert pcs.asked("GetComputeNodeGroup") == [{"clusterIdentifier": CLUSTER, "computeNodeGroupIdentifier": GROUP}]
    assert state(ec2, iid) == "running"


def test_a_static_group_is_replaced(pcs: PcsWorld) -> None:
    ec2 = clients(REGION)[0]
    iid = instance(ec2, TAGS)
    pcs.add(CLUSTER, GROUP, name="gpu", low=3, high=3, purchase="ONDEMAND")
    cloud = PcsCloud(ec2, pcs_client(REGION))
    out = cloud.replace(NODE, cloud.instance(NODE), "tok", "node gate")
    assert out.ok and out.extra == {"op": iid}, out.detail
    assert state(ec2, iid) in ("shutting-down", "terminated")
    assert len(pcs.asked("GetComputeNodeGroup")) == 1


def test_a_group_pcs_does_not_know_stops_with_its_error_and_terminates_nothing(pcs: PcsWorld) -> None:
    ec2 = clients(REGION)[0]
    iid = instance(ec2, TAGS)
    pcs.add(CLUSTER, "pcs_otherg0000", name="other", low=3, high=3, purchase="ONDEMAND")
    cloud = PcsCloud(ec2, pcs_client(REGION))
    with pytest.raises(AdapterError, match="pcs GetComputeNodeGroup: ResourceNotFoundException"):
        cloud.replace(NODE, cloud.instance(NODE), "tok", "node gate")
    assert state(ec2, iid) == "running"


def test_an_instance_without_the_pcs_tags_is_not_taken_for_a_group(pcs: PcsWorld) -> None:
    ec2 = clients(REGION)[0]
    iid = instance(ec2, {PCS_TAG: GROUP})
    pcs.add(CLUSTER, GROUP, name="gpu", low=3, high=3, purchase="ONDEMAND")
    cloud = PcsCloud(ec2, pcs_client(REGION))
    with pytest.raises(AdapterError, match=f"carries no {PCS_CLUSTER_TAG}"):
        cloud.replace(NODE, cloud.instance(NODE), "tok", "node gate")
    assert state(ec2, iid) == "running" and pcs.asked("GetComputeNodeGroup") == []


def test_the_pcs_stacks_heal_asks_pcs(pcs: PcsWorld) -> None:
    """The cloud heal builds for a PCS stack carries a PCS client, on the standard chain's endpoint."""
    from gpu_cluster.heal.platforms import slurm_cloud
    from tests.launch.test_render_stacks import outputs

    outs = outputs("aws-h200-slurm")
    assert (outs.cloud, outs.scheduler.kind) == ("aws", "slurm")
    cloud = slurm_cloud(outs, object())
    assert isinstance(cloud, PcsCloud) and cloud.pcs is not None
    assert cloud.pcs.meta.service_model.service_name == "pcs" and cloud.pcs.meta.endpoint_url == pcs.url
