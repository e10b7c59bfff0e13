"""Reachability: the nodes reach the API server, the job's processes reach each other on every port
they listen on (the rendezvous, NCCL's bootstrap, EFA's own traffic), the nodes reach Lustre and
the registries their images come from. Each cloud's rules are evaluated as the cloud evaluates
them: security groups (allow rules, all must be read), VPC firewalls (allow rules over an implied
deny), NSGs (priority order over the default rules).
"""

from __future__ import annotations

from gpu_cluster.components.liveness import netpol
from gpu_cluster.components.liveness.cluster import Pool
from gpu_cluster.components.liveness.model import Check, Job, Plan
from gpu_cluster.components.liveness.reachability_aws import aws_checks
from gpu_cluster.components.liveness.reachability_azure import azure_checks
from gpu_cluster.components.liveness.reachability_gcp import gcp_checks


def checks(plan: Plan, pools: list[Pool], job: Job | None) -> list[Check]:
    # The job's NetworkPolicy (enforced, and admitting the job's own pods): components/liveness/netpol.py.
    if plan.cloud == "aws":
        return aws_checks(plan, pools, job) + netpol.checks(plan, job)
    if plan.cloud == "gcp":
        return gcp_checks(plan, pools, job) + netpol.checks(plan, job)
    if plan.cloud == "azure":
        return azure_checks(plan, pools, job)
    return []
