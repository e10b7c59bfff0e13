"""Topology rules (advisory): what the GPU fabric needs to run at speed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpu_cluster.policies.core import (
    AWS_LAUNCH_TEMPLATE,
    AWS_LAUNCH_TEMPLATES,
    AWS_NATIVE_LAUNCH_TEMPLATE,
    AWS_PLACEMENT_GROUP,
    AWS_SECURITY_GROUP,
    AWS_SECURITY_GROUP_RULE,
    AWS_SG_EGRESS_RULE,
    AWS_SG_INGRESS_RULE,
    AWS_SUBNET,
    GCP_NETWORK,
    RuleContext,
    StackFinding,
    StackResource,
    _efa_interfaces,
    _get,
    _is_list,
    _is_true,
    _items,
    _launch_template_data,
    _refers_to,
    _walk_strings,
    stack_rule,
)


def _efa_templates(resources: Sequence[StackResource]) -> list[StackResource]:
    return [r for r in resources if r.type in AWS_LAUNCH_TEMPLATES and _efa_interfaces(r.type, r.props)]


def _is_self_all(rule: Mapping[str, Any], proto_key: str = "protocol") -> bool:
    return str(rule.get(proto_key)) in ("-1", "all")


@stack_rule(
    name="efa-sg-self-traffic",
    description="Every EFA launch template carries a security group that allows all traffic in from and out "
    "to itself (AWS EFA user guide; ParallelCluster's EFA security group check)",
    enforcement="advisory",
    ids=(),
    anchor="AWS EFA user guide, 'Prepare an EFA-enabled security group'",
)
def check_efa_sg_self(resources: Sequence[StackResource], ctx: RuleContext) -> list[StackFinding]:
    findings: list[StackFinding] = []
    groups = [r for r in resources if r.type == AWS_SECURITY_GROUP]
    for lt in _efa_templates(resources):
        data_prop = "launchTemplateData" if lt.type == AWS_NATIVE_LAUNCH_TEMPLATE else "networkInterfaces"
        attached = [sg for sg in groups if _refers_to(lt, data_prop, sg)]
        if not attached:
            findings.append(
                (
                    f"EFA launch template {lt.name!r}: none of its interfaces' security groups is "
                    "declared in this stack, so its self rules cannot be checked",
                    lt.urn,
                )
            )
            continue
        if not any(_sg_allows_self(sg, resources) == (True, True) for sg in attached):
            missing = {
                d for sg in attached for d, ok in zip(("ingress", "egress"), _sg_allows_self(sg, resources)) if not ok
            }
            findings.append(
                (
                    f"EFA launch template {lt.name!r}: no attached security group allows all traffic "
                    f"to and from itself ({'/'.join(sorted(missing))} self rule with protocol -1 "
                    "missing); EFA's SRD traffic is dropped without both",
                    lt.urn,
                )
            )
    return findings


def _sg_allows_self(sg: StackResource, resources: Sequence[StackResource]) -> tuple[bool, bool]:
    """(ingress, egress): whether the group lets all protocols in from / out to itself."""
    seen = {"ingress": False, "egress": False}
    for direction in seen:
        for rule in _items(sg.props.get(direction)):
            if _is_self_all(rule) and _is_true(rule.get("self")):
                seen[direction] = True
    for r in resources:
        if r.type == AWS_SECURITY_GROUP_RULE and _refers_to(r, "securityGroupId", sg):
            if (
                r.props.get("type") in seen
                and _is_self_all(r.props)
                and (_is_true(r.props.get("self")) or _refers_to(r, "sourceSecurityGroupId", sg))
            ):
                seen[str(r.props["type"])] = True
        elif r.type in (AWS_SG_INGRESS_RULE, AWS_SG_EGRESS_RULE) and _refers_to(r, "securityGroupId", sg):
            if _is_self_all(r.props, "ipProtocol") and _refers_to(r, "referencedSecurityGroupId", sg):
                seen["ingress" if r.type == AWS_SG_INGRESS_RULE else "egress"] = True
    return seen["ingress"], seen["egress"]


@stack_rule(
    name="efa-placement",
    description="EFA nodes share one zone and a cluster placement group, unless the capacity is already "
    "placed (capacity block, reservation), where a placement group must not be named",
    enforcement="advisory",
    ids=(),
    anchor="AWS EC2 placement groups and capacity blocks guides",
)
def check_efa_placement(resources: Sequence[StackResource], ctx: RuleContext) -> list[StackFinding]:
    findings: list[StackFinding] = []
    efa = _efa_templates(resources)
    if not efa:
        return findings
    clusters = [r for r in resources if r.type == AWS_PLACEMENT_GROUP and r.props.get("strategy") == "cluster"]
    for lt in efa:
        data = _launch_template_data(lt.type, lt.props)
        group = _get(data, "placement", "groupName")
        if ctx.pre_placed:
            if group:
                findings.append(
                    (
                        f"EFA launch template {lt.name!r} names placement group {group!r} but the "
                        "capacity is already placed (capacity block/reservation): launches can fail",
                        lt.urn,
                    )
                )
            continue
        if not group:
            findings.append(
                (
                    f"EFA launch template {lt.name!r} has no placement.groupName: nodes may land far apart "
                    "on the network spine",
                    lt.urn,
                )
            )
        elif clusters and not any(
            _refers_to(
                lt,
                "placement" if lt.type == AWS_LAUNCH_TEMPLATE else "launchTemplateData",
                pg,
                pg.props.get("name") or "",
            )
            for pg in clusters
        ):
            findings.append(
                (
                    f"EFA launch template {lt.name!r}: placement group {group!r} is not a 'cluster' "
                    "placement group of this stack",
                    lt.urn,
                )
            )
        elif not clusters:
            findings.append(
                (f"EFA launch template {lt.name!r}: the stack declares no 'cluster' placement group", lt.urn)
            )
    if ctx.zone:
        subnets = [r for r in resources if r.type == AWS_SUBNET]
        for lt in efa:
            for sn in subnets:
                zone = sn.props.get("availabilityZone")
                if zone and zone != ctx.zone and _refers_to(lt, "networkInterfaces", sn):
                    findings.append(
                        (
                            f"EFA launch template {lt.name!r} uses subnet {sn.name!r} in {zone}, not the "
                            f"cluster's zone {ctx.zone}: EFA does not cross zones",
                            lt.urn,
                        )
                    )
    return findings


def _catalog_mtu(resources: Sequence[StackResource], ctx: RuleContext) -> tuple[str, int] | None:
    from gpu_cluster.components.catalog import CatalogError, load_catalog

    catalog = load_catalog()
    names = [ctx.instance_type] if ctx.instance_type else []
    for r in resources:
        for key in ("machineType", "instanceType", "instanceTypes"):
            names += _walk_strings_at(r.props, key)
    for name in names:
        try:
            it = catalog.get(name.rsplit("/", 1)[-1])
        except CatalogError:
            continue
        return it.name, it.network.mtu
    return None


def _walk_strings_at(value: Any, key: str) -> list[str]:
    """Every string found under ``key`` at any depth."""
    out: list[str] = []
    if isinstance(value, Mapping):
        for k, v in value.items():
            if k == key:
                out += list(_walk_strings(v))
            else:
                out += _walk_strings_at(v, key)
    elif _is_list(value):
        for v in value:
            out += _walk_strings_at(v, key)
    return out


@stack_rule(
    name="gpu-network-mtu",
    description="The stack's VPC networks use the MTU the catalog gives for the GPU machine type "
    "(components/catalog.yaml)",
    enforcement="advisory",
    ids=(),
    anchor="GCP GPU network bandwidth and MTU guidance (catalog source)",
)
def check_gpu_network_mtu(resources: Sequence[StackResource], ctx: RuleContext) -> list[StackFinding]:
    networks = [r for r in resources if r.type == GCP_NETWORK]
    if not networks:
        return []
    found = _catalog_mtu(resources, ctx)
    if found is None:
        return [
            (
                "the stack's GPU machine type is not in the catalog (set instanceType in the policy config), "
                "so network MTUs cannot be checked",
                None,
            )
        ]
    machine, mtu = found
    findings: list[StackFinding] = []
    for net in networks:
        given = net.props.get("mtu")
        if given is None or int(given) != mtu:
            findings.append(
                (
                    f"network {net.name!r} has MTU {given if given is not None else 'unset (1460)'}, the "
                    f"catalog gives {mtu} for {machine}: smaller frames cut GPU-to-GPU bandwidth",
                    net.urn,
                )
            )
    return findings
