"""Network rules: open ingress, flow logs, the VPC's default security group."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpu_cluster.policies.core import (
    AWS_DEFAULT_SECURITY_GROUP,
    AWS_FLOW_LOG,
    AWS_SECURITY_GROUP,
    AWS_SECURITY_GROUP_RULE,
    AWS_SG_INGRESS_RULE,
    AWS_VPC,
    GCP_FIREWALL,
    GCP_NETWORK,
    GCP_SUBNETWORK,
    Props,
    RuleContext,
    StackFinding,
    StackResource,
    _is_false,
    _is_open,
    _known,
    _is_true,
    _items,
    _num,
    _refers_to,
    _strings,
    resource_rule,
    stack_rule,
)


def _sg_rule_open(rule: Mapping[str, Any], v4: str = "cidrBlocks", v6: str = "ipv6CidrBlocks") -> list[str]:
    return [c for c in (*_strings(rule.get(v4)), *_strings(rule.get(v6))) if _is_open(c)]


def _port_text(rule: Mapping[str, Any], proto_key: str = "protocol") -> str:
    proto = str(rule.get(proto_key, "?"))
    if proto in ("-1", "all"):
        return "all traffic"
    lo, hi = _num(rule.get("fromPort")), _num(rule.get("toPort"))
    return f"{proto} {lo}" if lo == hi else f"{proto} {lo}-{hi}"


@resource_rule(
    name="no-open-ingress",
    description="No security group or firewall rule admits ingress from 0.0.0.0/0 or ::/0; egress may be open "
    "(CKV_AWS_382 is not mirrored: nodes pull images and reach AWS APIs through NAT)",
    enforcement="mandatory",
    ids=("CKV_AWS_24", "CKV_AWS_25", "CKV_AWS_260", "CKV_AWS_277", "AVD-AWS-0107", "CKV_GCP_2", "CKV_GCP_3"),
    anchor="Checkov CKV_AWS_24/25/260/277, CKV_GCP_2/3; Trivy AVD-AWS-0107",
    resource_types=(AWS_SECURITY_GROUP, AWS_SECURITY_GROUP_RULE, AWS_SG_INGRESS_RULE, GCP_FIREWALL),
)
def check_no_open_ingress(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type == AWS_SECURITY_GROUP:
        return [
            f"ingress[{i}] ({_port_text(r)}) is open to {', '.join(_sg_rule_open(r))}"
            for i, r in enumerate(_items(props.get("ingress")))
            if _sg_rule_open(r)
        ]
    if resource_type == AWS_SECURITY_GROUP_RULE:
        if props.get("type") == "ingress" and _sg_rule_open(props):
            return [f"ingress rule ({_port_text(props)}) is open to {', '.join(_sg_rule_open(props))}"]
        return []
    if resource_type == AWS_SG_INGRESS_RULE:
        open_ = _sg_rule_open(props, "cidrIpv4", "cidrIpv6")
        if open_:
            return [f"ingress rule ({_port_text(props, 'ipProtocol')}) is open to {', '.join(open_)}"]
        return []
    if resource_type == GCP_FIREWALL:
        if str(props.get("direction") or "INGRESS").upper() != "INGRESS" or _is_true(props.get("disabled")):
            return []
        if not _items(props.get("allows")):
            return []  # a deny rule open to the world is a good thing
        open_ = [c for c in _strings(props.get("sourceRanges")) if _is_open(c)]
        if open_:
            allowed = ", ".join(
                f"{a.get('protocol')}:{','.join(_strings(a.get('ports'))) or 'all'}"
                for a in _items(props.get("allows"))
            )
            return [f"ingress firewall allows {allowed} from {', '.join(open_)}"]
    return []


FLOW_LOGS_RULE = "flow-logs"


@stack_rule(
    name=FLOW_LOGS_RULE,
    description="Every VPC has a flow log of all traffic (an aws.ec2.FlowLog on the VPC, trafficType ALL, to a "
    "log destination) and every GCP subnetwork has logConfig (VPC flow logs), except the subnets of "
    "a network on an RDMA (RoCE) profile, which carry only RDMA traffic; a stack that switches "
    "them off (security.flow_logs: false) names its reason in exceptions['flow-logs']",
    enforcement="mandatory",
    ids=("CKV2_AWS_11", "AVD-AWS-0178", "CKV_GCP_26", "AVD-GCP-0029"),
    anchor="Checkov CKV2_AWS_11/CKV_GCP_26, Trivy AVD-AWS-0178/AVD-GCP-0029",
)
def check_flow_logs(resources: Sequence[StackResource], ctx: RuleContext) -> list[StackFinding]:
    if ctx.exception(FLOW_LOGS_RULE):
        return []
    findings: list[StackFinding] = []
    logs = [r for r in resources if r.type == AWS_FLOW_LOG]
    for vpc in (r for r in resources if r.type == AWS_VPC):
        mine = [f for f in logs if _refers_to(f, "vpcId", vpc)]
        if not mine:
            findings.append((f"VPC {vpc.name!r} has no flow log: no record of who talked to the nodes", vpc.urn))
        for f in mine:
            if f.props.get("trafficType") != "ALL":
                findings.append(
                    (
                        f"flow log {f.name!r} of VPC {vpc.name!r} records trafficType "
                        f"{f.props.get('trafficType')!r}, not 'ALL'",
                        f.urn,
                    )
                )
            if not _known(f.props, "logDestination") and not _known(f.props, "logGroupName"):
                findings.append((f"flow log {f.name!r} of VPC {vpc.name!r} names no log destination", f.urn))
    # A VPC on an RDMA (RoCE) network profile carries only the GPU NICs' RDMA traffic, which the
    # stacks do not log: Google's RDMA-profile page lists the features such a network supports
    # and the API refuses the rest, and flow logs there were not confirmed (see the closing note).
    roce = [
        n
        for n in resources
        if n.type == GCP_NETWORK and "vpc-roce" in " ".join(_strings(n.props.get("networkProfile")))
    ]
    for subnet in (r for r in resources if r.type == GCP_SUBNETWORK):
        if any(_refers_to(subnet, "network", n) for n in roce):
            continue
        cfg = subnet.props.get("logConfig")
        if not isinstance(cfg, Mapping) or _is_false(cfg.get("enable")):
            findings.append((f"subnetwork {subnet.name!r} has no logConfig: VPC flow logs are off", subnet.urn))
    return findings


@stack_rule(
    name="default-sg-closed",
    description="Every VPC's default security group is taken under management with no rules "
    "(aws.ec2.DefaultSecurityGroup without ingress or egress), so nothing that lands in it by "
    "default can talk to anything",
    enforcement="mandatory",
    ids=("CKV2_AWS_12", "AVD-AWS-0173"),
    anchor="Checkov CKV2_AWS_12, Trivy AVD-AWS-0173",
)
def check_default_sg_closed(resources: Sequence[StackResource], ctx: RuleContext) -> list[StackFinding]:
    findings: list[StackFinding] = []
    defaults = [r for r in resources if r.type == AWS_DEFAULT_SECURITY_GROUP]
    for vpc in (r for r in resources if r.type == AWS_VPC):
        mine = [d for d in defaults if _refers_to(d, "vpcId", vpc)]
        if not mine:
            findings.append(
                (
                    f"VPC {vpc.name!r}: its default security group keeps AWS's default rules (all traffic "
                    "from itself, all egress); declare an aws.ec2.DefaultSecurityGroup with no rules",
                    vpc.urn,
                )
            )
        for d in mine:
            rules = [
                f"{direction}[{i}]"
                for direction in ("ingress", "egress")
                for i, _ in enumerate(_items(d.props.get(direction)))
            ]
            if rules:
                findings.append(
                    (
                        f"default security group {d.name!r} of VPC {vpc.name!r} keeps rules "
                        f"{', '.join(rules)}: it must have none",
                        d.urn,
                    )
                )
    return findings
