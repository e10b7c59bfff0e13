"""AWS: the EC2 calls that replace an instance, for EKS managed node groups and for AWS PCS.

An EKS managed node group launches its nodes through an EC2 Auto Scaling group (EKS user guide
capacity-blocks-mng, awsdocs/amazon-eks-user-guide latest/ug/ml/capacity-blocks-mng.adoc at 0a7189e,
speaks of the node group's ASG; DescribeAutoScalingInstances names the group of any instance). A
node is replaced by ``TerminateInstanceInAutoScalingGroup`` with
``ShouldDecrementDesiredCapacity=false``: "If you do not specify the option to decrement the
desired capacity, Amazon EC2 Auto Scaling launches instances to replace the ones that are
terminated" (Auto Scaling API reference, as botocore 1.43.117's service model carries it). In a
capacity block the group relaunches into the same block, which takes the instance back only after
its clean-up ("several minutes": EC2 user guide capacity-blocks-launch, SELFHEAL.md B1); the group
retries on its own, within the join deadline. EKS scales a capacity-block node group to 0 forty
minutes before the block ends (capacity-blocks-mng, as components/aws/orchestration_eks.py cites),
so the window heal may use ends 40 minutes early. The API takes no idempotency token: the rerun's
guard is the re-read (the old instance already Terminating or gone means the call was made).

AWS PCS: a compute node group launches and keeps its instances within its minimum and maximum
count (PCS user guide "Create compute node groups": "AWS PCS efficiently launches, manages, and
terminates compute nodes ... according to these settings"); heal terminates the instance behind the
Slurm node (EC2 TerminateInstances) and the group launches one in its place. PCS documents no call
that replaces a named instance (its repairAction applies to faults PCS itself finds: PCS API
reference HealthMonitoring), so this is the path; the note of issue 34 says so. TerminateInstances
"is idempotent; if you terminate an instance more than once, each call succeeds" (EC2 API
reference, botocore 1.43.117's service model). The instance behind
a Slurm node is the one PCS tagged (``aws:pcs:compute-node-group-id``, components/aws/
orchestration_pcs.py) at the node's address (EC2 DescribeInstances filter ``private-ip-address``).

Whether PCS relaunches a terminated instance is the node group's to say, so heal asks PCS itself
before it acts: ``GetComputeNodeGroup`` (PCS API reference; botocore 1.43.117's ``pcs`` service
model 2023-02-10, JSON 1.0, target ``AWSParallelComputingService``) with the cluster and group the
instance's own tags name (``aws:pcs:cluster-id``: PCS user guide
working-with_clusters_version_update_procedure, which finds a cluster's instances by it, read
2026-12-07). Its ``scalingConfiguration`` ``minInstanceCount`` is the static capacity, "the minimum
you keep always-on"; the instances between it and ``maxInstanceCount`` are dynamic, launched "to
satisfy" waiting jobs and scaled "back down as jobs finish and instances become idle" (PCS user
guide scaling-job-level, read 2026-12-07). A group with minimum 0 (our capacity-block groups,
components/aws/orchestration_pcs.py) or below its maximum may not relaunch the instance heal
terminated, so heal refuses there, naming the group, its counts and what to do.
"""

from __future__ import annotations

from collections.abc import Mapping
import re
from datetime import datetime, timezone
from typing import Any

from gpu_cluster.heal.adapters import AdapterError, DocumentedPath, Instance, MissingSdk, NodeState, Outcome, Progress
from gpu_cluster.components.validation_time import REPLACE_PATHS

CB_EKS_EARLY_S = 40 * 60.0
"""EKS scales a capacity-block node group to 0 forty minutes before the block ends (capacity-blocks-mng)."""
PCS_TAG = "aws:pcs:compute-node-group-id"
PCS_CLUSTER_TAG = "aws:pcs:cluster-id"
"""The tag PCS puts on its instances naming their cluster (PCS user guide
working-with_clusters_version_update_procedure: ``describe-instances --filters
"Name=tag:aws:pcs:cluster-id,Values=<cluster-id>"``, read 2026-12-07)."""
GONE = ("Terminating", "Terminating:Wait", "Terminating:Proceed", "Terminated")


def clients(region: str) -> tuple[Any, Any]:
    """(ec2, autoscaling) from the standard chain and endpoints (``AWS_ENDPOINT_URL`` in the tests)."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise MissingSdk("boto3") from None
    cfg = Config(region_name=region, retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5)
    session = boto3.session.Session(region_name=region)
    return session.client("ec2", config=cfg), session.client("autoscaling", config=cfg)


def pcs_client(region: str) -> Any:
    """The PCS client, from the same chain (``AWS_ENDPOINT_URL_PCS`` in the tests)."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise MissingSdk("boto3") from None
    cfg = Config(region_name=region, retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5)
    return boto3.session.Session(region_name=region).client("pcs", config=cfg)


def _call(what: str, fn: Any, **kw: Any) -> Any:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return fn(**kw)
    except ClientError as exc:
        err = exc.response.get("Error", {})
        raise AdapterError(f"{what}: {err.get('Code', '?')}: {err.get('Message', '')}"[:400]) from None
    except BotoCoreError as exc:
        raise AdapterError(f"{what}: {exc}"[:400]) from None


def _epoch(value: Any) -> float | None:
    return value.timestamp() if isinstance(value, datetime) else None


class Ec2Window:
    """The capacity reservation or block an instance runs in, and when it ends."""

    def __init__(self, ec2: Any, early_s: float = 0.0) -> None:
        self.ec2 = ec2
        self.early_s = early_s

    def instance(self, instance_id: str) -> Instance:
        if not instance_id:
            return Instance(id="")
        got = _call("ec2 DescribeInstances", self.ec2.describe_instances, InstanceIds=[instance_id])
        found = [i for r in got.get("Reservations", []) for i in r.get("Instances", [])]
        if not found:
            return Instance(id=instance_id, state="unknown")
        inst = found[0]
        cr = inst.get("CapacityReservationId")
        if not cr:
            return Instance(id=instance_id, state=inst.get("State", {}).get("Name", ""))
        res = _call(
            "ec2 DescribeCapacityReservations",
            self.ec2.describe_capacity_reservations,
            CapacityReservationIds=[cr],
        ).get("CapacityReservations", [{}])[0]
        end = _epoch(res.get("EndDate"))
        block = res.get("ReservationType") == "capacity-block"
        return Instance(
            id=instance_id,
            state=inst.get("State", {}).get("Name", ""),
            window_end=None if end is None else end - (self.early_s if block else 0.0),
            window=f"{cr} ({'capacity block' if block else 'capacity reservation'}, ends {res.get('EndDate')}"
            + (f", EKS scales the group to 0 {self.early_s / 60:.0f} min before" if block and self.early_s else "")
            + ")",
            capacity_block=block,
        )


class EksAsgCloud(DocumentedPath):
    """EKS managed node groups: terminate through the Auto Scaling group, desired capacity kept."""

    name = "eks-asg"

    def __init__(self, ec2: Any, autoscaling: Any, *, capacity_block: bool = False) -> None:
        self.ec2 = ec2
        self.asg = autoscaling
        self._path(capacity_block)
        self.window = Ec2Window(ec2, CB_EKS_EARLY_S)

    def _path(self, capacity_block: bool) -> None:
        self.path = "eks-capacity-block" if capacity_block else "eks-asg"
        self.call = f"{REPLACE_PATHS[self.path][1]} (Auto Scaling API reference)"

    def instance(self, node: NodeState) -> Instance:
        """The node's instance, and with it the path: a node group's kind of capacity is not in the
        stack's outputs, so what the instance's capacity reservation says (``ReservationType``
        ``capacity-block``, DescribeCapacityReservations) decides the label, the call's wording and
        the budget journalled with the intent."""
        # A node's spec.providerID is aws:///<zone>/<instance-id> (cloud-provider-aws).
        found = self.window.instance(node.instance.rsplit("/", 1)[-1])
        if found.id and found.state != "unknown":
            self._path(found.capacity_block)
        return found

    def _asg_instance(self, instance_id: str) -> dict[str, Any] | None:
        got = _call(
            "autoscaling DescribeAutoScalingInstances",
            self.asg.describe_auto_scaling_instances,
            InstanceIds=[instance_id],
        )
        found = got.get("AutoScalingInstances", [])
        return dict(found[0]) if found else None

    def _group(self, name: str) -> dict[str, Any]:
        got = _call(
            "autoscaling DescribeAutoScalingGroups",
            self.asg.describe_auto_scaling_groups,
            AutoScalingGroupNames=[name],
        ).get("AutoScalingGroups", [])
        if not got:
            raise AdapterError(f"Auto Scaling group {name} not found")
        return dict(got[0])

    def prepare(self, node: NodeState, instance: Instance) -> dict[str, Any]:
        """The group, its desired capacity and its members before the call (journalled with the
        intent, so a rerun killed after the call knows them)."""
        member = self._asg_instance(instance.id) if instance.id else None
        if member is None:
            return {}
        group = str(member["AutoScalingGroupName"])
        g = self._group(group)
        return {
            "group": group,
            "desired": g["DesiredCapacity"],
            "before": sorted(i["InstanceId"] for i in g.get("Instances", [])),
        }

    def replace(self, node: NodeState, instance: Instance, token: str, why: str) -> Outcome:
        member = self._asg_instance(instance.id)
        if member is None:
            return Outcome(ok=False, detail=f"{instance.id} is in no Auto Scaling group (not a managed node?)")
        group = str(member["AutoScalingGroupName"])
        before = self._group(group)
        act = _call(
            "autoscaling TerminateInstanceInAutoScalingGroup",
            self.asg.terminate_instance_in_auto_scaling_group,
            InstanceId=instance.id,
            ShouldDecrementDesiredCapacity=False,
        ).get("Activity", {})
        return Outcome(
            ok=True,
            detail=f"{instance.id} terminating in {group} (desired capacity kept at {before['DesiredCapacity']}); "
            f"activity {act.get('ActivityId', '?')}",
            extra={
                "group": group,
                "desired": before["DesiredCapacity"],
                "before": sorted(i["InstanceId"] for i in before.get("Instances", [])),
                "op": act.get("ActivityId", ""),
            },
        )

    def progress(self, node: NodeState, old: str, token: str, facts: Mapping[str, Any]) -> Progress:
        member = self._asg_instance(old) if old else None
        group = str(facts.get("group") or (member or {}).get("AutoScalingGroupName") or "")
        if member is not None and str(member.get("LifecycleState")) not in GONE:
            return Progress(started=False, detail=f"{old} still {member.get('LifecycleState')} in {group}")
        if not group:
            return Progress(started=True, detail=f"{old} is in no group any more")
        g = self._group(group)
        if "before" not in facts:
            # Never "any member that is new": without the members before the call, any other
            # member could be taken for the replacement and quarantined.
            return Progress(
                started=True,
                detail=f"{old} going in {group}, but its members before the call are not in the journal: "
                "the replacement cannot be told from the others; a person must name it",
            )
        new = self.launched_for(group, old, set(facts["before"]))
        live = {i["InstanceId"] for i in g.get("Instances", []) if i.get("LifecycleState") in ("Pending", "InService")}
        new = [i for i in new if i in live]
        return Progress(
            started=True,
            new_instance=new[0] if new else "",
            detail=f"{old} going; {group} desired {g['DesiredCapacity']}, "
            + (f"launched for its termination: {', '.join(new)}" if new else "no new instance yet"),
        )

    def launched_for(self, group: str, old: str, before: set[str]) -> list[str]:
        """The instances the group launched after terminating ``old``, earliest first.

        The group's scaling activities name each: "Terminating EC2 instance: i-..." and "Launching
        a new EC2 instance: i-..." with their StartTime (DescribeScalingActivities, Auto Scaling API
        reference; the launch that answers a user's termination is the next one, "in response to a
        difference between desired and actual capacity"). Where the API lists no activity for the
        termination (moto's server answers an empty list), the instances of the group that were
        not members before the call and that EC2 says launched once the old one was terminated
        (DescribeInstances LaunchTime against the old instance's StateTransitionReason, both AWS's
        clock: heal's own clock is never compared with the cloud's) stand in."""
        acts = _call(
            "autoscaling DescribeScalingActivities",
            self.asg.describe_scaling_activities,
            AutoScalingGroupName=group,
        ).get("Activities", [])
        term = [a for a in acts if str(a.get("Description", "")).endswith(f"EC2 instance: {old}")]
        prefix = "Launching a new EC2 instance: "
        if term:
            t0 = min(a["StartTime"] for a in term)
            launched = sorted(
                (a["StartTime"], str(a["Description"])[len(prefix) :].strip())
                for a in acts
                if str(a.get("Description", "")).startswith(prefix) and a["StartTime"] >= t0
            )
            return [i for _t, i in launched if i not in before]
        g = self._group(group)
        fresh = [i["InstanceId"] for i in g.get("Instances", []) if i["InstanceId"] not in before]
        if not fresh:
            return []
        # By filter, not InstanceIds: "Recently terminated instances might appear in the returned
        # results. This interval is usually less than one hour", and "If you specify an instance ID
        # that is not valid, an error is returned" (EC2 API reference, DescribeInstances,
        # docs.aws.amazon.com/AWSEC2/latest/APIReference/ApiReference-query-DescribeInstances.html,
        # read 2026-12-07): the old instance, gone from the list, must not fail the read.
        got = _call(
            "ec2 DescribeInstances",
            self.ec2.describe_instances,
            Filters=[{"Name": "instance-id", "Values": [old, *fresh]}],
        )
        seen = {i["InstanceId"]: i for r in got.get("Reservations", []) for i in r.get("Instances", [])}
        when = {i: _epoch(seen.get(i, {}).get("LaunchTime")) or 0.0 for i in fresh}
        # The termination's time on AWS's own clock, never heal's (a local clock ahead of AWS's
        # would miss the replacement): the old instance's StateTransitionReason.
        ended = terminated_at(str(seen.get(old, {}).get("StateTransitionReason") or ""))
        # EC2 reports LaunchTime to the second: a launch in the same second as the termination counts.
        # Without that time (the reason gone or in another form), every instance that was not a
        # member before the call, earliest first: never one the journal lists as a member before.
        keep = [i for i in fresh if ended is None or when[i] >= ended - 1.0]
        return sorted(keep, key=lambda i: when[i])


_TERMINATED_AT = re.compile(r"\((\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (?:GMT|UTC)\)")


def terminated_at(reason: str) -> float | None:
    """When EC2 says a user's terminate happened, from the instance's ``StateTransitionReason``
    ("The reason for the most recent state transition. This might be an empty string.", EC2 API
    reference, Instance, docs.aws.amazon.com/AWSEC2/latest/APIReference/API_Instance.html, read
    2026-12-07). The reference does not give the text's form: EC2 answers "User initiated
    (YYYY-MM-DD HH:MM:SS GMT)" (as the describe-instances outputs users post show; not an AWS
    page), moto 5's server the same with "UTC" (moto/ec2/models/instances.py ``terminate``). None
    when it carries no such time."""
    m = _TERMINATED_AT.search(reason)
    if m is None:
        return None
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()


class PcsCloud(DocumentedPath):
    """AWS PCS: terminate the node's instance; the compute node group launches one in its place."""

    name = path = "pcs"
    keeps_name = True
    """The group's new instance registers under the terminated one's node name: heal holds the
    slot's reservation across the relaunch (engine._hold_slot, I6)."""

    def __init__(self, ec2: Any, pcs: Any = None) -> None:
        self.ec2 = ec2
        self.pcs = pcs
        """The PCS client that reads the node group; None only where a caller has no PCS to ask (the
        crash suite's worker plays a group of fixed size), and then no group is read."""
        self.call = f"{REPLACE_PATHS['pcs'][1]} (EC2 API reference, TerminateInstances)"
        self.window = Ec2Window(ec2)

    def group(self, instance_id: str) -> dict[str, Any]:
        """The compute node group the instance belongs to, as PCS describes it (GetComputeNodeGroup's
        ``computeNodeGroup``), found by the cluster and group ids PCS tagged the instance with."""
        got = _call("ec2 DescribeInstances", self.ec2.describe_instances, InstanceIds=[instance_id])
        found = [i for r in got.get("Reservations", []) for i in r.get("Instances", [])]
        tags = {t["Key"]: t["Value"] for t in (found[0].get("Tags", []) if found else [])}
        cluster, group = tags.get(PCS_CLUSTER_TAG, ""), tags.get(PCS_TAG, "")
        if not cluster or not group:
            raise AdapterError(
                f"{instance_id} carries no {PCS_CLUSTER_TAG} and {PCS_TAG} tags: not an instance PCS launched"
            )
        return dict(
            _call(
                "pcs GetComputeNodeGroup",
                self.pcs.get_compute_node_group,
                clusterIdentifier=cluster,
                computeNodeGroupIdentifier=group,
            )["computeNodeGroup"]
        )

    def _at(self, address: str) -> dict[str, Any] | None:
        if not address:
            return None
        got = _call(
            "ec2 DescribeInstances",
            self.ec2.describe_instances,
            Filters=[
                {"Name": "private-ip-address", "Values": [address]},
                {"Name": "tag-key", "Values": [PCS_TAG]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ],
        )
        found = [i for r in got.get("Reservations", []) for i in r.get("Instances", [])]
        return dict(found[0]) if found else None

    def instance(self, node: NodeState) -> Instance:
        inst = self._at(node.address)
        if inst is None:
            return Instance(id="", state=f"no PCS instance at {node.address or '(no address)'}")
        return self.window.instance(str(inst["InstanceId"]))

    def replace(self, node: NodeState, instance: Instance, token: str, why: str) -> Outcome:
        if not instance.id:
            return Outcome(ok=False, detail=f"no PCS instance found at {node.node}'s address {node.address!r}")
        if self.pcs is not None:
            refused = dynamic(self.group(instance.id), node.node, instance.id)
            if refused:
                return Outcome(ok=False, detail=refused)
        got = _call("ec2 TerminateInstances", self.ec2.terminate_instances, InstanceIds=[instance.id])
        state = got.get("TerminatingInstances", [{}])[0].get("CurrentState", {}).get("Name", "?")
        return Outcome(ok=True, detail=f"{instance.id} {state}; the node group relaunches", extra={"op": instance.id})

    def progress(self, node: NodeState, old: str, token: str, facts: Mapping[str, Any]) -> Progress:
        got = _call("ec2 DescribeInstances", self.ec2.describe_instances, InstanceIds=[old]) if old else {}
        states = [i["State"]["Name"] for r in got.get("Reservations", []) for i in r.get("Instances", [])]
        if states and states[0] in ("pending", "running", "stopping", "stopped"):
            return Progress(started=False, detail=f"{old} still {states[0]}")
        now = self._at(node.address)
        new = str(now["InstanceId"]) if now and now["InstanceId"] != old else ""
        return Progress(
            started=True,
            new_instance=new,
            detail=f"{old} {states[0] if states else 'gone'}; at {node.address}: {new or '-'}",
        )


def dynamic(group: Mapping[str, Any], node: str, instance_id: str) -> str:
    """Why heal must not replace a node of this group ('' when it may): the group keeps only its
    minimum always on (PCS user guide scaling-job-level), so an instance terminated above that
    minimum is relaunched only for a waiting job, and heal would wait for a node that never comes."""
    scaling = group.get("scalingConfiguration", {})
    low, high = int(scaling.get("minInstanceCount", 0)), int(scaling.get("maxInstanceCount", 0))
    if low >= high and low > 0:
        return ""
    kind = "all dynamic" if low == 0 else f"dynamic above its {low} static instances"
    return (
        f"{instance_id} is in PCS compute node group {group.get('name', '?')} ({group.get('id', '?')}, cluster "
        f"{group.get('clusterId', '?')}, purchase option {group.get('purchaseOption', 'ONDEMAND')}): "
        f"minInstanceCount {low}, maxInstanceCount {high}, so it is {kind} capacity, which PCS launches only for a "
        "waiting job and releases when idle (PCS user guide scaling-job-level); a terminated instance is not "
        f"relaunched for heal to check. {node} stays drained; terminate {instance_id} by hand and the next job "
        "that needs the node launches a new one"
    )
