"""Service quotas: the GPU nodes' vCPUs, the nodes per EKS managed node group, the system or login
nodes' standard vCPUs.
"""

from __future__ import annotations

import re

from botocore.exceptions import ClientError

from gpu_cluster.components.preflight import Context, CouldNotCheck, NotApplicable, Problem
from gpu_cluster.components.preflight.aws.clients import call


# Service Quotas codes. Each is looked up by code and its QuotaName is compared with the name
# below, so a wrong code is "could not check", never a wrong verdict. Names: "Running On-Demand
# P instances" and "All P Spot Instance Requests", both in vCPUs (EC2 User Guide, "On-Demand
# Instance quotas" and "Spot Instance quotas", using-spot-limits); "Nodes per managed node group",
# default 450 (EKS User Guide "service-quotas", listed by `aws service-quotas
# list-aws-default-service-quotas --service-code eks`). The codes were read 2026-12 in public
# ListAWSDefaultServiceQuotas dumps and in tools that call GetServiceQuota with them.
QUOTA_ON_DEMAND_P = ("ec2", "L-417A185B", "Running On-Demand P instances")
QUOTA_SPOT_P = ("ec2", "L-7212CCBC", "All P Spot Instance Requests")
QUOTA_EKS_NODES_PER_GROUP = ("eks", "L-BD136A63", "Nodes per managed node group")
# The standard families' On-Demand vCPU quota, which the EKS system nodes (c5) and the PCS login
# nodes (m6i) count against (EC2 User Guide, "On-Demand Instance quotas"). Code and name verified
# 2026-12-01 against the AWS CLI User Guide, "Service Quotas examples using AWS CLI"
# (docs.aws.amazon.com/cli/latest/userguide/cli_service-quotas_code_examples.html): its
# get-aws-default-service-quota example answers QuotaCode L-1216C47A, QuotaName "Running On-Demand
# Standard (A, C, D, H, I, M, R, T, Z) instances", usage metric Class Standard/OnDemand, Resource vCPU.
# L-7212CCBC "All P Spot Instance Requests" matches a recorded ListServiceQuotas table
# (geyang/jaynes-starter-kit 02_ec2_docker_guide/setup/spot_limit.md at 0e7994c). L-417A185B was not
# found on an AWS page; the name comparison keeps a wrong code from giving a wrong verdict.
QUOTA_ON_DEMAND_STANDARD = ("ec2", "L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances")


def _quota(ctx: Context, quota: tuple[str, str, str]) -> float:
    service, code, name = quota
    try:
        resp = call(
            f"service-quotas:GetServiceQuota {service}/{code}",
            ctx.clients.quotas.get_service_quota,
            ServiceCode=service,
            QuotaCode=code,
        )
    except ClientError as exc:
        raise CouldNotCheck(f"service quota {service}/{code} ({name}): {exc}") from None
    q = resp.get("Quota", {})
    if q.get("QuotaName") != name:
        raise CouldNotCheck(
            f"service quota {service}/{code} is named {q.get('QuotaName')!r}, not {name!r}; "
            "the code in components/preflight/aws/quotas.py needs correcting"
        )
    return float(q.get("Value", 0.0))


def check_quotas(ctx: Context) -> list[Problem]:
    """The vCPU quota of the capacity the nodes launch as (On-Demand or Spot P instances), and on
    EKS the nodes-per-managed-node-group quota. Instances in a reservation or capacity block
    use capacity already reserved, so no vCPU quota is asked for them."""
    spec = ctx.spec
    problems: list[Problem] = []
    cap = spec.compute.capacity.type
    vcpus = spec.compute.nodes * spec.instance.vcpu
    if cap in ("on-demand", "spot") and re.match(r"^p\d", spec.compute.instance_type):
        quota = QUOTA_ON_DEMAND_P if cap == "on-demand" else QUOTA_SPOT_P
        limit = _quota(ctx, quota)
        if limit < vcpus:
            problems.append(
                Problem(
                    "compute.nodes",
                    f"{spec.compute.nodes} x {spec.compute.instance_type} need {vcpus} vCPUs "
                    f"but the quota {quota[2]!r} ({quota[1]}) is {limit:.0f} in {spec.region}, "
                    "before any running instance counts against it (allowed: "
                    f"at most {int(limit) // spec.instance.vcpu} nodes, or request an increase)",
                )
            )
    if spec.orchestration.kind == "eks":
        limit = _quota(ctx, QUOTA_EKS_NODES_PER_GROUP)
        largest = largest_node_group(ctx)
        if limit < largest:
            problems.append(
                Problem(
                    "compute.nodes",
                    f"a managed node group of {largest} nodes exceeds the EKS quota "
                    f"{QUOTA_EKS_NODES_PER_GROUP[2]!r} ({QUOTA_EKS_NODES_PER_GROUP[1]}) "
                    f"of {limit:.0f} (allowed: up to {limit:.0f} per group, or request an increase)",
                )
            )
    return problems


def _small_nodes(ctx: Context) -> tuple[str, int] | None:
    """The on-demand non-GPU nodes the stack launches: EKS's system group, PCS's login nodes."""
    spec = ctx.spec
    if spec.orchestration.kind == "eks":
        from gpu_cluster.components.aws.eks_sizing import SYSTEM_INSTANCE_TYPE, SYSTEM_NODES

        return SYSTEM_INSTANCE_TYPE, SYSTEM_NODES
    if spec.orchestration.login_nodes > 0:
        from gpu_cluster.components.aws.orchestration_pcs import LOGIN_INSTANCE_TYPE

        return LOGIN_INSTANCE_TYPE, spec.orchestration.login_nodes
    return None


def check_standard_quota(ctx: Context) -> list[Problem]:
    """The system (EKS) or login (PCS) nodes fit the standard families' On-Demand vCPU quota. Their
    vCPUs are EC2's answer (DescribeInstanceTypes VCpuInfo.DefaultVCpus), not a number kept here."""
    small = _small_nodes(ctx)
    if small is None:
        raise NotApplicable("no login nodes")
    itype, count = small
    try:
        resp = call("ec2:DescribeInstanceTypes", ctx.clients.ec2.describe_instance_types, InstanceTypes=[itype])
    except ClientError as exc:
        raise CouldNotCheck(f"ec2:DescribeInstanceTypes {itype}: {exc}") from None
    found = resp.get("InstanceTypes", [])
    if not found:
        raise CouldNotCheck(f"ec2:DescribeInstanceTypes: no answer for {itype} in {ctx.spec.region}")
    vcpus = count * int(found[0].get("VCpuInfo", {}).get("DefaultVCpus", 0))
    limit = _quota(ctx, QUOTA_ON_DEMAND_STANDARD)
    if limit >= vcpus:
        return []
    role = "EKS system nodes" if ctx.spec.orchestration.kind == "eks" else "PCS login nodes (orchestration.login_nodes)"
    return [
        Problem(
            "orchestration.login_nodes" if ctx.spec.orchestration.kind == "slurm" else "orchestration.kind",
            f"the {count} {role}, {itype}, need {vcpus} vCPUs but the quota {QUOTA_ON_DEMAND_STANDARD[2]!r} "
            f"({QUOTA_ON_DEMAND_STANDARD[1]}) is {limit:.0f} in {ctx.spec.region}, before any running instance "
            "counts against it (allowed: request an increase"
            + (", or fewer login nodes)" if ctx.spec.orchestration.kind == "slurm" else ")"),
        )
    ]


def largest_node_group(ctx: Context) -> int:
    """The largest EKS managed node group the program makes (it splits the GPU nodes into groups
    of at most 450: gpu_cluster.components.aws.eks_sizing)."""
    from gpu_cluster.components.aws.eks_sizing import node_group_sizes

    return max(node_group_sizes(ctx.spec.compute.nodes))
