"""Azure: NSGs, by priority over the default rules; the API server's authorized ranges."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_cluster.components.liveness import facts, netpol
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


_DEFAULT_NSG = {
    "Inbound": [
        (65000, "Allow", "VirtualNetwork", "VirtualNetwork"),
        (65001, "Allow", "AzureLoadBalancer", "*"),
        (65500, "Deny", "*", "*"),
    ],
    "Outbound": [
        (65000, "Allow", "VirtualNetwork", "VirtualNetwork"),
        (65001, "Allow", "*", "Internet"),
        (65500, "Deny", "*", "*"),
    ],
}


def _prefix_match(prefix: str, flow_net: Net | None, vnet: list[Net], *, for_allow: bool) -> bool:
    if prefix == "*":
        return True
    if prefix == "VirtualNetwork":
        return any(within(flow_net, v) for v in vnet)
    if prefix == "Internet":
        return flow_net is not None and not flow_net.is_private
    if prefix == "AzureLoadBalancer":
        return False
    n = as_net(prefix)
    if n is None or flow_net is None:
        return False
    return within(flow_net, n) if for_allow else n.version == flow_net.version and n.overlaps(flow_net)


def _nsg_rule_ports(rule: Mapping[str, Any]) -> list[tuple[int, int]]:
    ranges = list(rule.get("destinationPortRanges") or []) or [rule.get("destinationPortRange", "*")]
    out = []
    for r in ranges:
        if r in ("*", None):
            return [(0, 65535)]
        lo, _, hi = str(r).partition("-")
        out.append((int(lo), int(hi or lo)))
    return out


def _nsg_decides(
    rules: list[Mapping[str, Any]], direction: str, src: Net | None, dst: Net | None, flow: Flow, vnet: list[Net]
) -> tuple[bool, str]:
    """Whether every port of ``flow`` from ``src`` to ``dst`` is allowed by an NSG."""
    ordered = sorted(
        [
            (
                int(float(r.get("priority", 4096))),
                str(r.get("access")),
                str(r.get("sourceAddressPrefix", "*")),
                str(r.get("destinationAddressPrefix", "*")),
                r,
            )
            for r in rules
            if r.get("direction") == direction
        ]
        + [(p, a, s, d, {"name": f"default {a} {p}", "protocol": "*"}) for p, a, s, d in _DEFAULT_NSG[direction]],
        key=lambda x: x[0],
    )
    cuts = {flow.ports[0], flow.ports[1] + 1}
    for *_, r in ordered:
        for lo, hi in _nsg_rule_ports(r) if r.get("protocol") else [(0, 65535)]:
            cuts |= {lo, hi + 1}
    points = sorted(c for c in cuts if flow.ports[0] <= c <= flow.ports[1])
    decided = []
    for port in points:
        for prio, access, sp, dp, r in ordered:
            proto = str(r.get("protocol", "*")).lower()
            if proto not in ("*", flow.protocol) and flow.protocol != "all":
                continue
            if not any(lo <= port <= hi for lo, hi in _nsg_rule_ports(r)):
                continue
            allow = access == "Allow"
            if _prefix_match(sp, src, vnet, for_allow=allow) and _prefix_match(dp, dst, vnet, for_allow=allow):
                if not allow:
                    return (
                        False,
                        f"{direction.lower()} rule {r.get('name')} (priority {prio}) denies {flow.what} from {src} to {dst}",
                    )
                decided.append(str(r.get("name")))
                break
    return True, f"{direction.lower()}: {', '.join(dict.fromkeys(decided))}"


def azure_checks(plan: Plan, pools: list[Pool], job: Job | None) -> list[Check]:
    out: list[Check] = []
    clusters = plan.of("azure-native:containerservice:ManagedCluster")
    if not clusters:
        return _slurm_checks(plan, pools, job)
    mc = clusters[0]
    vnets = [
        as_net(p)
        for v in plan.of("azure-native:network:VirtualNetwork")
        for p in ((v.inputs.get("addressSpace") or {}).get("addressPrefixes") or [])
    ]
    vnet = [v for v in vnets if v is not None]
    subnets = {s.id: s for s in plan.of("azure-native:network:Subnet")}
    nsgs = {n.id: n for n in plan.of("azure-native:network:NetworkSecurityGroup")}
    gpu = next((p for p in pools if p.gpu), None)
    system = next((p for p in pools if not p.gpu), None)
    if gpu is None:
        return out
    node_subnet = subnets.get(gpu.subnet)
    obj = f"pool {gpu.name}"
    if node_subnet is None:
        return [
            failed(
                obj, "its subnet is planned", f"subnet {gpu.subnet} not in the plan", "the plan", "plan the node subnet"
            )
        ]
    nsg = nsgs.get(str((node_subnet.inputs.get("networkSecurityGroup") or {}).get("id")))
    rules = list((nsg.inputs if nsg else {}).get("securityRules") or [])
    node_net = as_net(node_subnet.inputs.get("addressPrefix"))
    profile = mc.inputs.get("networkProfile") or {}
    overlay = profile.get("networkPluginMode") == "overlay"
    pod_net = as_net(profile.get("podCidr")) if overlay else node_net
    src = f"{cite('aks-overlay-nsg')}; {cite('azure-nsg')}"
    flows = [*job_flows(job)]
    for f in flows:
        for direction in ("Outbound", "Inbound"):
            ok, why = _nsg_decides(rules, direction, pod_net, pod_net, f, vnet)
            check = f"pods reach each other ({'pod range ' + str(pod_net) if overlay else 'VNet'}), {direction.lower()}: {f.what}"
            out.append(
                passed(obj, check, why, src)
                if ok
                else failed(
                    obj,
                    check,
                    why,
                    src,
                    f"allow {pod_net} to {pod_net} (and the node range to the pod range), all ports, {direction.lower()}, in the node subnet's NSG",
                )
            )
    if overlay:
        for direction in ("Outbound", "Inbound"):
            ok, why = _nsg_decides(
                rules, direction, node_net, pod_net, Flow("tcp", facts.ALL_TCP, "TCP on every port"), vnet
            )
            check = f"nodes reach pods ({node_net} to {pod_net}), {direction.lower()}"
            out.append(
                passed(obj, check, why, src)
                if ok
                else failed(obj, check, why, src, f"allow {node_net} to {pod_net}, all ports, {direction.lower()}")
            )
    dns = Flow("udp", (facts.DNS_PORT, facts.DNS_PORT), "DNS (UDP 53)")
    for direction in ("Outbound", "Inbound"):
        ok, why = _nsg_decides(rules, direction, pod_net, pod_net, dns, vnet)
        check = f"pods reach CoreDNS, {direction.lower()}"
        out.append(
            passed(obj, check, why, src)
            if ok
            else failed(obj, check, why, src, f"allow {pod_net} to {pod_net} on UDP 53, {direction.lower()}")
        )
    engine = str(profile.get("networkPolicy") or "none").lower()
    if engine in ("cilium", "calico", "azure"):
        out += netpol.network_policy_checks(
            job, engine, pod_net, f"{cite('aks-cilium')} (networkProfile.networkPolicy {engine})"
        )
    # The API server from the nodes' egress address.
    access = mc.inputs.get("apiServerAccessProfile") or {}
    ranges = [as_net(r) for r in access.get("authorizedIPRanges") or []]
    check = "nodes reach the API server from their egress address"
    asrc = cite("aks-authorized-ranges")
    if access.get("enablePrivateCluster"):
        out.append(passed(obj, check, "private cluster: nodes use the private endpoint", asrc))
    elif not ranges:
        out.append(passed(obj, check, "no authorized ranges: the endpoint admits every address", asrc))
    else:
        egress: list[tuple[str, Net | None]] = []
        for pool in [gpu, *([system] if system else [])]:
            sub = subnets.get(pool.subnet)
            nat = plan.ref(((sub.inputs if sub else {}).get("natGateway") or {}).get("id"))
            if nat is None:
                continue
            for ip in nat.inputs.get("publicIpAddresses") or []:
                pip = plan.ref(ip.get("id"))
                addr = (pip.inputs if pip else {}).get("ipAddress")
                egress.append(
                    (
                        f"NAT gateway {nat.name} address {addr or '(unknown to the plan)'}",
                        as_net(f"{addr}/32") if addr else None,
                    )
                )
        if profile.get("outboundType") in ("loadBalancer", None) and not egress:
            out.append(
                passed(
                    obj,
                    check,
                    "outbound through the Standard load balancer, whose address AKS adds to the authorized ranges itself",
                    f"{asrc}; api-server-authorized-ip-ranges.md:51",
                )
            )
        else:
            missing = [name for name, addr in egress if not any(within(addr, r) for r in ranges)]
            if not egress:
                out.append(
                    failed(
                        obj,
                        check,
                        f"outbound type {profile.get('outboundType')} and no egress address found in the plan",
                        asrc,
                        "give the node subnets a NAT gateway with a public IP",
                    )
                )
            elif missing:
                out.append(
                    failed(
                        obj,
                        check,
                        f"{'; '.join(missing)} not in the authorized ranges {[str(r) for r in ranges]}: kubelets are refused and the nodes never join",
                        asrc,
                        "add the NAT gateway's public IP (/32) to apiServerAccessProfile.authorizedIPRanges",
                    )
                )
            else:
                out.append(passed(obj, check, "; ".join(n for n, _ in egress) + " within the authorized ranges", asrc))
    # Lustre: the node NSG lets the ports out, the file system subnet's NSG lets them in.
    for fs in plan.of("azure-native:storagecache:AmlFilesystem"):
        fs_sub = subnets.get(str(fs.inputs.get("filesystemSubnet")))
        fs_nsg = nsgs.get(str(((fs_sub.inputs if fs_sub else {}).get("networkSecurityGroup") or {}).get("id")))
        fs_net = as_net((fs_sub.inputs if fs_sub else {}).get("addressPrefix"))
        problems = []
        for lo, hi in facts.LUSTRE_PORTS["azure"]:
            f = Flow("tcp", (lo, hi), f"TCP {lo}-{hi}")
            for who, rl, direction, a, b in (
                ("node NSG", rules, "Outbound", node_net, fs_net),
                (
                    "Lustre NSG",
                    list((fs_nsg.inputs if fs_nsg else {}).get("securityRules") or []),
                    "Inbound",
                    node_net,
                    fs_net,
                ),
            ):
                ok, why = _nsg_decides(rl, direction, a, b, f, vnet)
                if not ok:
                    problems.append(f"{who}: {why}")
        check = f"nodes reach Lustre {fs.name} on {lustre_ports('azure')}"
        lsrc = f"components/azure/network.py LUSTRE_PORTS (amlfs-prerequisites.md); {cite('azure-nsg')}"
        out.append(
            failed(obj, check, "; ".join(problems), lsrc, "allow the Lustre ports from the node subnet")
            if problems
            else passed(obj, check, f"{node_net} to {fs_net}", lsrc)
        )
    nat_id = (node_subnet.inputs.get("natGateway") or {}).get("id")
    ok, why = _nsg_decides(rules, "Outbound", node_net, as_net("8.8.8.8/32"), Flow("tcp", (443, 443), "TCP 443"), vnet)
    check = registry_check(registries(plan, job))
    esrc = f"{cite('azure-nat')}; {cite('azure-nsg')}"
    if not nat_id:
        out.append(
            failed(
                obj,
                check,
                "the node subnet has no NAT gateway and default outbound access is off",
                esrc,
                "attach the NAT gateway",
            )
        )
    else:
        out.append(
            passed(obj, check, f"through NAT gateway {nat_id}; {why}", esrc)
            if ok
            else failed(obj, check, why, esrc, "allow outbound 443 to the internet")
        )
    return out


# slurmd registers with slurmctld on its port (slurm.conf.5 SlurmctldPort, 6817 by default; the
# nodes' --conf-server, components/azure/slurm_config.py).
SLURMCTLD_FLOW = Flow("tcp", (6817, 6817), "slurmd to slurmctld (TCP 6817)")


def _slurm_checks(plan: Plan, pools: list[Pool], job: Job | None) -> list[Check]:
    """Azure Slurm: the job's flows between GPU nodes, and the nodes to the controller, through the
    NSGs of their subnets (the source's outbound rules and the destination's inbound ones)."""
    gpu = next((p for p in pools if p.gpu and p.partition), None)
    if gpu is None:
        return []
    vnet = [
        n
        for v in plan.of("azure-native:network:VirtualNetwork")
        for n in (as_net(p) for p in ((v.inputs.get("addressSpace") or {}).get("addressPrefixes") or []))
        if n is not None
    ]
    subnets = {s.id: s for s in plan.of("azure-native:network:Subnet")}
    nsgs = {n.id: n for n in plan.of("azure-native:network:NetworkSecurityGroup")}

    def rules_of(subnet: Any) -> list[Any]:
        nsg = nsgs.get(str(((subnet.inputs if subnet else {}).get("networkSecurityGroup") or {}).get("id")))
        return list((nsg.inputs if nsg else {}).get("securityRules") or [])

    obj = f"scale set {gpu.name}"
    node_subnet = subnets.get(gpu.subnet)
    if node_subnet is None:
        return [failed(obj, "its subnet is planned", f"subnet {gpu.subnet} not in the plan", "the plan", "plan it")]
    node_net = as_net(node_subnet.inputs.get("addressPrefix"))
    src = cite("azure-nsg")
    targets: list[tuple[str, Flow, Net | None, list[Any]]] = [
        ("nodes reach each other", f, node_net, rules_of(node_subnet)) for f in job_flows(job)
    ]
    for nic in plan.of("azure-native:network:NetworkInterface"):
        for ipc in nic.inputs.get("ipConfigurations") or []:
            sub = subnets.get(str((ipc.get("subnet") or {}).get("id")))
            if sub is not None and ipc.get("privateIPAddress"):
                targets.append(
                    (
                        f"nodes reach the controller {ipc['privateIPAddress']}",
                        SLURMCTLD_FLOW,
                        as_net(f"{ipc['privateIPAddress']}/32"),
                        rules_of(sub),
                    )
                )
    out: list[Check] = []
    for what, flow, dest, dest_rules in targets:
        for direction, rules in (("Outbound", rules_of(node_subnet)), ("Inbound", dest_rules)):
            ok, why = _nsg_decides(rules, direction, node_net, dest, flow, vnet)
            check = f"{what}, {direction.lower()}: {flow.what}"
            out.append(
                passed(obj, check, why, src)
                if ok
                else failed(obj, check, why, src, f"allow {node_net} to {dest} for {flow.what}, {direction.lower()}")
            )
    return out
