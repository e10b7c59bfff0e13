"""The EKS control plane's log group (``orchestration.cluster_name``, ``adopt_log_group``).

With a cluster name the stack creates ``/aws/eks/<name>/cluster`` (components/aws/control_plane.py),
and CreateLogGroup refuses a name that exists (ResourceAlreadyExistsException, CloudWatch Logs API;
botocore 1.43.117 logs model): a group left by a cluster of the same name, or this stack's own on an
update, which the note says. ``adopt_log_group`` imports the group instead, so there it must exist.
logs:DescribeLogGroups by the name as prefix answers both.
"""

from __future__ import annotations

from gpu_cluster.components.preflight import Context, CouldNotCheck, NotApplicable, Problem
from gpu_cluster.components.preflight.aws.clients import call
from gpu_cluster.components.spec_eks import log_group_name


def check_log_group(ctx: Context) -> list[Problem]:
    o = ctx.spec.orchestration
    if o.kind != "eks" or not o.cluster_name:
        raise NotApplicable("no orchestration.cluster_name (EKS makes the group itself)")
    if ctx.clients.logs is None:
        raise CouldNotCheck("no CloudWatch Logs client: the control plane's log group was not looked up")
    name = log_group_name(o.cluster_name)
    resp = call("logs:DescribeLogGroups", ctx.clients.logs.describe_log_groups, logGroupNamePrefix=name)
    exists = any(g.get("logGroupName") == name for g in resp.get("logGroups", []))
    if o.adopt_log_group and not exists:
        return [
            Problem(
                "orchestration.adopt_log_group",
                f"there is no log group {name} in {ctx.spec.region} to adopt; allowed: false for a new cluster (the "
                "stack creates the group), or cluster_name set to the running cluster's name (the stack output "
                "cluster_name)",
            )
        ]
    if exists and not o.adopt_log_group:
        ctx.notes.append(
            f"log group {name} exists in {ctx.spec.region}: this stack's own on an update; a new stack's first "
            "`pulumi up` would be refused (ResourceAlreadyExistsException): adopt it with "
            "orchestration.adopt_log_group: true"
        )
    return []
