"""heal's AWS calls against moto's server (boto3 through AWS_ENDPOINT_URL): an EKS managed node's
instance terminated through its Auto Scaling group with the desired capacity unchanged and a
replacement launched; a PCS node's instance found by its address and terminated. moto does not
model capacity reservations (tests/preflight/test_aws.py), so the capacity block's end is answered
by botocore's Stubber in DescribeCapacityReservations' documented shape."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from gpu_cluster.heal.adapters import NodeState
from gpu_cluster.heal.aws import CB_EKS_EARLY_S, EksAsgCloud, Ec2Window, PcsCloud, clients
from tests.preflight.test_aws import aws_env, moto_url  # noqa: F401 (fixtures)

REGION = "us-east-1"


@pytest.fixture
def aws(aws_env: str) -> tuple[Any, Any]:  # noqa: F811 (the fixture imported above)
    """(ec2, autoscaling) against moto's server, reset for the test (tests/preflight/test_aws.py's
    fixtures: AWS_ENDPOINT_URL and test credentials)."""
    return clients(REGION)


def node_group(ec2: Any, asg: Any, size: int = 2) -> tuple[str, list[str]]:
    """What an EKS managed node group is underneath: a launch template and an Auto Scaling group."""
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24", AvailabilityZone=f"{REGION}a")["Subnet"]["SubnetId"]
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ec2.create_launch_template(
        LaunchTemplateName="gpu", LaunchTemplateData={"ImageId": ami, "InstanceType": "p5.48xlarge"}
    )
    name = "eks-gpu-5ac9a1f0"
    asg.create_auto_scaling_group(
        AutoScalingGroupName=name,
        LaunchTemplate={"LaunchTemplateName": "gpu", "Version": "$Latest"},
        MinSize=size,
        MaxSize=size,
        DesiredCapacity=size,
        VPCZoneIdentifier=subnet,
    )
    ids = [
        i["InstanceId"]
        for i in asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]["Instances"]
    ]
    return name, ids


def test_eks_node_replaced_through_its_group_with_desired_capacity_kept(aws: tuple[Any, Any]) -> None:
    ec2, asg = aws
    group, ids = node_group(ec2, asg)
    cloud = EksAsgCloud(ec2, asg)
    node = NodeState(node="ip-10-0-1-5.ec2.internal", present=True, instance=ids[0])
    assert cloud.instance(node).id == ids[0] and cloud.instance(node).window_end is None
    assert not cloud.progress(node, ids[0], "t", {}).started
    out = cloud.replace(node, cloud.instance(node), "h-1-a1", "why")
    assert out.ok and out.extra["group"] == group and out.extra["desired"] == 2
    g = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"][0]
    assert g["DesiredCapacity"] == 2
    now = {i["InstanceId"] for i in g["Instances"]}
    assert ids[0] not in now and len(now) == 2
    state = ec2.describe_instances(InstanceIds=[ids[0]])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state in ("shutting-down", "terminated")
    prog = cloud.progress(node, ids[0], "h-1-a1", out.extra)
    assert prog.started and prog.new_instance in now - {ids[1]}


class NoReason:
    """moto's EC2 with every instance's StateTransitionReason empty, as the reference allows ("This
    might be an empty string", EC2 API reference, Instance)."""

    def __init__(self, ec2: Any) -> None:
        self._ec2 = ec2

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ec2, name)

    def describe_instances(self, **kw: Any) -> Any:
        got = self._ec2.describe_instances(**kw)
        for r in got["Reservations"]:
            for i in r["Instances"]:
                i["StateTransitionReason"] = ""
        return got


@pytest.mark.parametrize("skew", [-600.0, 600.0])
@pytest.mark.parametrize("reason", ["kept", "empty"])
def test_the_replacement_is_told_by_aws_clock_never_heals(aws: tuple[Any, Any], skew: float, reason: str) -> None:
    """moto's server lists no scaling activity, so the replacement is told by EC2's own times: the
    old instance's StateTransitionReason against the new one's LaunchTime. Heal's clock ten minutes
    ahead of AWS's or behind (``asked_at`` as the engine journals it) changes nothing; without the
    reason's time, any instance that was not a member before the call, never one that was."""
    ec2, asg = aws
    group, ids = node_group(ec2, asg, size=3)
    cloud = EksAsgCloud(ec2 if reason == "kept" else NoReason(ec2), asg)
    node = NodeState(node="n", present=True, instance=ids[0])
    out = cloud.replace(node, cloud.instance(node), "h-1-a1", "why")
    old = ec2.describe_instances(InstanceIds=[ids[0]])["Reservations"][0]["Instances"][0]
    assert old["StateTransitionReason"].startswith("User initiated (")
    g = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"][0]
    (launched,) = {i["InstanceId"] for i in g["Instances"]} - set(ids)
    facts = {**out.extra, "asked_at": time.time() + skew}
    prog = cloud.progress(node, ids[0], "h-1-a1", facts)
    assert prog.started and prog.new_instance == launched, prog.detail
    # a member journalled before the call is never taken
    assert cloud.launched_for(group, ids[0], set(ids)) == [launched]
    assert cloud.launched_for(group, ids[0], {*ids, launched}) == []


def test_the_re_read_sees_the_call_without_the_journal(aws: tuple[Any, Any]) -> None:
    """Killed after the call and before its journal line, the rerun has no group or activity in its
    facts: the re-read alone must say the replacement is under way, so no second call is made."""
    ec2, asg = aws
    _group, ids = node_group(ec2, asg)
    cloud = EksAsgCloud(ec2, asg)
    node = NodeState(node="n", present=True, instance=ids[0])
    assert not cloud.progress(node, ids[0], "h-1-a1", {}).started
    assert cloud.replace(node, cloud.instance(node), "h-1-a1", "why").ok
    prog = cloud.progress(node, ids[0], "h-1-a1", {})
    assert prog.started, prog.detail


def test_a_node_outside_any_group_is_refused(aws: tuple[Any, Any]) -> None:
    ec2, asg = aws
    node_group(ec2, asg)
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    loose = ec2.run_instances(ImageId=ami, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    cloud = EksAsgCloud(ec2, asg)
    out = cloud.replace(
        NodeState(node="n", present=True, instance=loose),
        cloud.instance(NodeState(node="n", present=True, instance=loose)),
        "t",
        "w",
    )
    assert not out.ok and "no Auto Scaling group" in out.detail


def test_pcs_node_found_by_address_and_terminated(aws: tuple[Any, Any]) -> None:
    ec2, _asg = aws
    vpc = ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.1.1.0/24")["Subnet"]["SubnetId"]
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    tags = [{"ResourceType": "instance", "Tags": [{"Key": "aws:pcs:compute-node-group-id", "Value": "pcs_abc"}]}]
    inst = ec2.run_instances(
        ImageId=ami, MinCount=1, MaxCount=1, SubnetId=subnet, PrivateIpAddress="10.1.1.20", TagSpecifications=tags
    )["Instances"][0]["InstanceId"]
    # an instance at the same address in another VPC, not PCS's, is not the node's
    vpc2 = ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
    sub2 = ec2.create_subnet(VpcId=vpc2, CidrBlock="10.1.1.0/24")["Subnet"]["SubnetId"]
    ec2.run_instances(ImageId=ami, MinCount=1, MaxCount=1, SubnetId=sub2, PrivateIpAddress="10.1.1.20")
    cloud = PcsCloud(ec2)
    node = NodeState(node="compute-1", present=True, address="10.1.1.20")
    assert cloud.instance(node).id == inst
    assert not cloud.progress(node, inst, "t", {}).started
    out = cloud.replace(node, cloud.instance(node), "t", "w")
    assert out.ok and inst in out.detail
    prog = cloud.progress(node, inst, "t", {})
    assert prog.started and prog.new_instance == ""
    # the group's relaunch: a new instance at the node's address (PCS registers it as the same Slurm node)
    new = ec2.run_instances(
        ImageId=ami, MinCount=1, MaxCount=1, SubnetId=subnet, PrivateIpAddress="10.1.1.21", TagSpecifications=tags
    )["Instances"][0]["InstanceId"]
    moved = NodeState(node="compute-1", present=True, address="10.1.1.21")
    assert cloud.progress(moved, inst, "t", {}).new_instance == new


def capacity_reservation(end: dt.datetime, kind: str = "capacity-block") -> dict[str, Any]:
    """DescribeCapacityReservations' documented response (EC2 API reference, CapacityReservation)."""
    return {
        "CapacityReservations": [
            {
                "CapacityReservationId": "cr-0123456789abcdef0",
                "InstanceType": "p5.48xlarge",
                "AvailabilityZone": f"{REGION}a",
                "TotalInstanceCount": 16,
                "AvailableInstanceCount": 0,
                "State": "active",
                "StartDate": end - dt.timedelta(days=7),
                "EndDate": end,
                "EndDateType": "limited",
                "ReservationType": kind,
            }
        ]
    }


def test_the_capacity_blocks_end_comes_forty_minutes_early_on_eks() -> None:
    ec2 = boto3.client("ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(ec2)
    end = dt.datetime(2026, 12, 5, 12, 0, tzinfo=dt.timezone.utc)
    inst = {
        "InstanceId": "i-0abc",
        "State": {"Code": 16, "Name": "running"},
        "CapacityReservationId": "cr-0123456789abcdef0",
    }
    for kind in ("capacity-block", "default"):
        stub.add_response("describe_instances", {"Reservations": [{"Instances": [inst]}]}, {"InstanceIds": ["i-0abc"]})
        stub.add_response(
            "describe_capacity_reservations",
            capacity_reservation(end, kind),
            {"CapacityReservationIds": ["cr-0123456789abcdef0"]},
        )
    stub.activate()
    block = Ec2Window(ec2, CB_EKS_EARLY_S).instance("i-0abc")
    assert block.window_end == end.timestamp() - 2400 and "capacity block" in block.window
    odcr = Ec2Window(ec2, CB_EKS_EARLY_S).instance("i-0abc")
    assert odcr.window_end == end.timestamp() and "capacity reservation" in odcr.window
    stub.assert_no_pending_responses()


def test_the_eks_path_is_read_from_the_instances_capacity_reservation() -> None:
    """Issue 41 item 4b: a node of a capacity-block node group takes the capacity-block path (its
    label, its call's wording, its budget's basis) from what its instance's capacity reservation
    says; a node in an ordinary reservation, or in none, the plain Auto Scaling path."""
    from gpu_cluster.heal.platforms import kube_cloud

    ec2 = boto3.client("ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(ec2)
    end = dt.datetime(2027, 1, 5, 12, 0, tzinfo=dt.timezone.utc)
    inst = {"InstanceId": "i-0abc", "State": {"Code": 16, "Name": "running"}}
    in_cr = {**inst, "CapacityReservationId": "cr-0123456789abcdef0"}
    for kind in ("capacity-block", "default"):
        stub.add_response("describe_instances", {"Reservations": [{"Instances": [in_cr]}]}, {"InstanceIds": ["i-0abc"]})
        stub.add_response(
            "describe_capacity_reservations",
            capacity_reservation(end, kind),
            {"CapacityReservationIds": ["cr-0123456789abcdef0"]},
        )
    stub.add_response("describe_instances", {"Reservations": [{"Instances": [inst]}]}, {"InstanceIds": ["i-0abc"]})
    stub.activate()
    cloud = EksAsgCloud(ec2, None)
    node = NodeState(node="n", present=True, instance=f"aws:///{REGION}a/i-0abc")
    assert cloud.instance(node).capacity_block
    assert cloud.path == "eks-capacity-block" and "same capacity block" in cloud.call
    assert "clean-up" in cloud.replace_estimate()[1]
    assert not cloud.instance(node).capacity_block and cloud.path == "eks-asg"
    assert "capacity block" not in cloud.call and "clean-up" not in cloud.replace_estimate()[1]
    assert not cloud.instance(node).capacity_block and cloud.path == "eks-asg"
    stub.assert_no_pending_responses()
    # the stack's EKS cloud assumes neither: it starts on the plain path and reads each instance
    outs = type("O", (), {"orchestrator": "eks", "region": REGION})()
    plain = kube_cloud(outs, None)
    assert isinstance(plain, EksAsgCloud) and plain.path == "eks-asg"


def test_the_replacement_is_the_launch_after_this_termination_in_the_scaling_activities() -> None:
    """Where the API lists the group's activities (DescribeScalingActivities' documented shape:
    "Terminating EC2 instance: i-..." then "Launching a new EC2 instance: i-..."), the replacement is
    the launch that follows this termination, not an earlier launch nor a member from before."""
    asg = boto3.client("autoscaling", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(asg)
    t0 = dt.datetime(2026, 12, 5, 12, 0, tzinfo=dt.timezone.utc)
    group = "eks-gpu-5ac9a1f0"

    def member(i: str, state: str) -> dict[str, Any]:
        return {
            "InstanceId": i,
            "AvailabilityZone": f"{REGION}a",
            "LifecycleState": state,
            "HealthStatus": "Healthy",
            "ProtectedFromScaleIn": False,
        }

    def activity(what: str, when: dt.datetime) -> dict[str, Any]:
        return {
            "ActivityId": f"a-{what[-4:]}",
            "AutoScalingGroupName": group,
            "Description": what,
            "Cause": "At ... in response to a difference between desired and actual capacity",
            "StartTime": when,
            "StatusCode": "Successful",
        }

    stub.add_response(
        "describe_auto_scaling_instances",
        {"AutoScalingInstances": [{**member("i-old", "Terminating"), "AutoScalingGroupName": group}]},
        {"InstanceIds": ["i-old"]},
    )
    stub.add_response(
        "describe_auto_scaling_groups",
        {
            "AutoScalingGroups": [
                {
                    "AutoScalingGroupName": group,
                    "MinSize": 3,
                    "MaxSize": 3,
                    "DesiredCapacity": 3,
                    "DefaultCooldown": 300,
                    "AvailabilityZones": [f"{REGION}a"],
                    "HealthCheckType": "EC2",
                    "CreatedTime": t0,
                    "Instances": [member(i, "InService") for i in ("i-a", "i-b", "i-new")],
                }
            ]
        },
        {"AutoScalingGroupNames": [group]},
    )
    stub.add_response(
        "describe_scaling_activities",
        {
            "Activities": [
                activity("Launching a new EC2 instance: i-new", t0 + dt.timedelta(seconds=40)),
                activity("Terminating EC2 instance: i-old", t0),
                activity("Launching a new EC2 instance: i-b", t0 - dt.timedelta(days=1)),
            ]
        },
        {"AutoScalingGroupName": group},
    )
    stub.activate()
    cloud = EksAsgCloud(None, asg)
    # i-b is not in the journalled members here on purpose: the activity, not membership, decides
    prog = cloud.progress(NodeState(node="n", present=True), "i-old", "t", {"group": group, "before": ["i-a", "i-old"]})
    assert prog.new_instance == "i-new", prog.detail
    stub.assert_no_pending_responses()
