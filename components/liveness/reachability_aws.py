"""AWS: security groups (allow rules only; a flow passes when an egress rule of the source's groups
and an ingress rule of the destination's both cover it), and the nodes' route out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpu_cluster.components.liveness import facts
from gpu_cluster.components.liveness.cluster import Pool
from gpu_cluster.components.liveness.facts import cite
from gpu_cluster.components.liveness.model import Check, Job, Plan
from gpu_cluster.components.liveness.flows import (
    Flow,
    Net,
    as_net,
    failed,
    job_flows,
    lustre_ports,
    passed,
    registries,
    registry_check,
    within,
)


def _sg_rules(plan: Plan, kind: str) -> list[Mapping[str, Any]]:
    return [r.inputs for r in plan.of(f"aws:vpc/securityGroup{kind}Rule:SecurityGroup{kind}Rule")]


def _sg_covers(rule: Mapping[str, Any], flow: Flow) -> bool:
    proto = str(rule.get("ipProtocol", ""))
    if proto == "-1":
        return True
    if flow.protocol == "all" or proto.lower() != flow.protocol:
        return False
    lo, hi = int(float(rule.get("fromPort", -1))), int(float(rule.get("toPort", -1)))
    return lo <= flow.ports[0] and flow.ports[1] <= hi


def _sg_allows(
    plan: Plan,
    src_groups: Iterable[str],
    dst_groups: Iterable[str],
    flow: Flow,
    dst_cidr: Net | None = None,
    *,
    groups_only: bool = False,
) -> tuple[bool, str]:
    """``groups_only``: only rules naming the destination's group count (EFA: AWS matches its SRD
    traffic against group-referenced rules only, so a 0.0.0.0/0 egress rule does not carry it;
    efa-sg-self)."""
    src, dst = set(src_groups), set(dst_groups)
    egress = [
        r
        for r in _sg_rules(plan, "Egress")
        if r.get("securityGroupId") in src
        and (
            r.get("referencedSecurityGroupId") in dst
            or (not groups_only and within(dst_cidr, as_net(r.get("cidrIpv4"))))
            # To every address: whatever the destination's group is, its addresses are inside.
            or (not groups_only and r.get("cidrIpv4") == "0.0.0.0/0")
        )
        and _sg_covers(r, flow)
    ]
    ingress = [
        r
        for r in _sg_rules(plan, "Ingress")
        if r.get("securityGroupId") in dst and r.get("referencedSecurityGroupId") in src and _sg_covers(r, flow)
    ]
    if not egress:
        only = " naming that group (a CIDR rule, 0.0.0.0/0 included, does not carry EFA)" if groups_only else ""
        return False, f"no egress rule of {', '.join(sorted(src))} allows {flow.what} to {', '.join(sorted(dst))}{only}"
    if not ingress and dst:
        return False, f"no ingress rule of {', '.join(sorted(dst))} allows {flow.what} from {', '.join(sorted(src))}"
    said = f"egress {egress[0].get('ipProtocol')} of {egress[0].get('securityGroupId')}"
    if ingress:
        said += f" and ingress {ingress[0].get('ipProtocol')} of {ingress[0].get('securityGroupId')}"
    return True, said


def aws_checks(plan: Plan, pools: list[Pool], job: Job | None) -> list[Check]:
    out: list[Check] = []
    gpu = [p for p in pools if p.gpu]
    if not gpu:
        return out
    pool = gpu[0]
    obj = f"pool {pool.name}"
    groups = pool.security_groups
    # The job's processes on different nodes (pods on EKS share their node's groups: the VPC CNI).
    efa = Flow("all", (0, 65535), "every protocol (EFA's own traffic)")
    for flow in [*job_flows(job), efa]:
        ok, why = _sg_allows(plan, groups, groups, flow, groups_only=flow is efa)
        check = f"nodes reach each other: {flow.what}"
        src = cite("efa-sg") if flow is not efa else cite("efa-sg-self")
        out.append(
            passed(obj, check, why, src)
            if ok
            else failed(obj, check, why, src, "allow all traffic in from and out to the nodes' own security group")
        )
    # The API server (EKS) or the Slurm controller (PCS).
    for c in plan.of("aws:eks/cluster:Cluster"):
        vpc = c.inputs.get("vpcConfig") or {}
        cp_groups = [str(g) for g in vpc.get("securityGroupIds") or []]
        check = "nodes reach the API server"
        if not vpc.get("endpointPrivateAccess"):
            out.append(_public_endpoint(plan, pool, obj, check, vpc))
            continue
        ok, why = _sg_allows(plan, groups, cp_groups, Flow("tcp", (443, 443), "TCP 443"))
        out.append(
            passed(obj, check, f"private endpoint on; {why}", cite("eks-endpoint"))
            if ok
            else failed(obj, check, why, cite("eks-endpoint"), "let the nodes' group reach the control plane's on 443")
        )
    for c in plan.of("aws-native:pcs:Cluster"):
        cp_groups = [str(g) for g in (c.inputs.get("networking") or {}).get("securityGroupIds") or []]
        ok, why = _sg_allows(plan, groups, cp_groups, Flow("all", (0, 65535), "all traffic"))
        ok_back, why_back = _sg_allows(plan, cp_groups, groups, Flow("all", (0, 65535), "all traffic"))
        check = "nodes and the Slurm controller reach each other"
        out.append(
            passed(obj, check, f"{why}; back: {why_back}", cite("pcs-networking"))
            if ok and ok_back
            else failed(
                obj, check, why if not ok else why_back, cite("pcs-networking"), "put the cluster in the nodes' group"
            )
        )
    # Lustre.
    for fs in plan.of("aws:fsx/lustreFileSystem:LustreFileSystem"):
        fs_groups = [str(g) for g in fs.inputs.get("securityGroupIds") or []]
        missing = []
        for lo, hi in facts.LUSTRE_PORTS["aws"]:
            for a, b in ((groups, fs_groups), (fs_groups, groups)):
                ok, why = _sg_allows(plan, a, b, Flow("tcp", (lo, hi), f"TCP {lo}-{hi}"))
                if not ok:
                    missing.append(why)
        check = f"nodes reach Lustre {fs.name} on {lustre_ports('aws')}"
        src = "components/aws/storage.py LUSTRE_PORTS (FSx for Lustre user guide, limit-access-security-groups)"
        out.append(
            failed(obj, check, "; ".join(missing), src, "allow the Lustre ports both ways")
            if missing
            else passed(obj, check, "both ways, between the nodes' and the file system's groups", src)
        )
    out.append(_aws_egress(plan, pool, obj, registries(plan, job)))
    return out


def _aws_egress(plan: Plan, pool: Pool, obj: str, hosts: list[str]) -> Check:
    check = registry_check(hosts)
    tables = {
        str(a.inputs.get("routeTableId"))
        for a in plan.of("aws:ec2/routeTableAssociation:RouteTableAssociation")
        if a.inputs.get("subnetId") == pool.subnet
    }
    nat = [
        r
        for r in plan.of("aws:ec2/route:Route")
        if str(r.inputs.get("routeTableId")) in tables
        and r.inputs.get("destinationCidrBlock") == "0.0.0.0/0"
        and (r.inputs.get("natGatewayId") or r.inputs.get("gatewayId"))
    ]
    ok, why = _sg_allows(plan, pool.security_groups, [], Flow("tcp", (443, 443), "TCP 443"), as_net("0.0.0.0/0"))
    src = "the plan's route tables and security groups"
    if not nat:
        return failed(
            obj,
            check,
            f"the node subnet's route table has no 0.0.0.0/0 route (tables {sorted(tables)})",
            src,
            "route 0.0.0.0/0 through a NAT gateway",
        )
    if not ok:
        return failed(obj, check, why, src, "allow egress to 0.0.0.0/0 on 443")
    return passed(
        obj,
        check,
        f"0.0.0.0/0 through {nat[0].inputs.get('natGatewayId') or nat[0].inputs.get('gatewayId')}; {why}",
        src,
    )


def _public_endpoint(plan: Plan, pool: Pool, obj: str, check: str, vpc: Mapping[str, Any]) -> Check:
    """Private access off: the nodes reach the public endpoint from their NAT gateway's address, so
    that address must be inside publicAccessCidrs (eks-endpoint: the public endpoint admits only
    those ranges; without private access, nodes' requests to it leave through the NAT)."""
    src = cite("eks-endpoint")
    if vpc.get("endpointPublicAccess") is False:
        return failed(
            obj, check, "both the private and the public endpoint are off", src, "turn endpointPrivateAccess on"
        )
    ranges = [n for n in (as_net(c) for c in vpc.get("publicAccessCidrs") or ["0.0.0.0/0"]) if n is not None]
    tables = {
        str(a.inputs.get("routeTableId"))
        for a in plan.of("aws:ec2/routeTableAssociation:RouteTableAssociation")
        if a.inputs.get("subnetId") == pool.subnet
    }
    nat_ids = {
        str(r.inputs.get("natGatewayId"))
        for r in plan.of("aws:ec2/route:Route")
        if str(r.inputs.get("routeTableId")) in tables and r.inputs.get("natGatewayId")
    }
    addresses: list[str] = []
    for nat in plan.of("aws:ec2/natGateway:NatGateway"):
        if nat.id not in nat_ids and nat.name not in nat_ids:
            continue
        eip = plan.ref(nat.inputs.get("allocationId"))
        ip = (eip.inputs.get("publicIp") or eip.inputs.get("address")) if eip is not None else None
        addresses.append(str(ip or ""))
    if not addresses:
        return failed(
            obj,
            check,
            "private access is off and the nodes' subnet routes through no NAT gateway",
            src,
            "turn endpointPrivateAccess on",
        )
    shown = ", ".join(str(n) for n in ranges)
    for ip in addresses:
        net = as_net(f"{ip}/32") if ip else None
        if any(r.prefixlen == 0 for r in ranges) or (net is not None and any(within(net, r) for r in ranges)):
            return passed(obj, check, f"private access off; the NAT address {ip or '(any)'} is inside {shown}", src)
    known = [a for a in addresses if a]
    why = (
        f"private access is off and the NAT address {', '.join(known)} is outside publicAccessCidrs ({shown})"
        if known
        else f"private access is off and the NAT gateway's address is allocated at `pulumi up`, so it is not "
        f"among publicAccessCidrs ({shown})"
    )
    return failed(
        obj, check, why, src, "turn endpointPrivateAccess on, or add the NAT gateway's EIP/32 to publicAccessCidrs"
    )
