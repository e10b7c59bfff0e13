"""Reachability: the nodes reach the API server, the job's processes reach each other on every port
they listen on (the rendezvous, NCCL's bootstrap, EFA's own traffic), the nodes reach Lustre and
the registries their images come from. Each cloud's rules are evaluated as the cloud evaluates
them: security groups (allow rules, all must be read), VPC firewalls (allow rules over an implied
deny), NSGs (priority order over the default rules).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from components.liveness import facts, netpol
from components.liveness.cluster import Pool
from components.liveness.facts import cite
from components.liveness.model import Check, Job, Plan, Resource

Net = ipaddress.IPv4Network | ipaddress.IPv6Network


def _net(text: Any) -> Net | None:
    try:
        return ipaddress.ip_network(str(text), strict=False)
    except ValueError:
        return None


def _within(inner: Net | None, outer: Net | None) -> bool:
    return inner is not None and outer is not None and inner.version == outer.version and inner.subnet_of(outer)  # type: ignore[arg-type]


def _ok(obj: str, check: str, why: str, source: str) -> Check:
    return Check(kind="reachability", object=obj, check=check, holds=True, why=why, source=source)


def _bad(obj: str, check: str, why: str, source: str, fix: str) -> Check:
    return Check(kind="reachability", object=obj, check=check, holds=False, why=why, source=source, fix=fix)


@dataclass(frozen=True, slots=True)
class Flow:
    """Traffic to check: a protocol and a port range."""

    protocol: str
    """tcp | udp | all (every protocol: EFA's SRD is not TCP)."""
    ports: tuple[int, int]
    what: str


def job_flows(job: Job | None) -> list[Flow]:
    """What the job's processes send each other: TCP on every port (the rendezvous ports are fixed,
    NCCL's bootstrap and socket connections are ephemeral), which covers the rendezvous."""
    ports = ", ".join(str(p) for p in (job.ports if job else ())) or "the rendezvous"
    return [Flow("tcp", facts.ALL_TCP, f"TCP on every port (rendezvous {ports}, NCCL bootstrap)")]


# ---------------------------------------------------------------------------------------------
# Kubernetes NetworkPolicy, where the cluster enforces it (the cluster names its engine).

_PROTOCOLS = {"tcp": "TCP", "udp": "UDP"}


def _selected(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A label selector (matchLabels; matchExpressions In/NotIn/Exists/DoesNotExist) over ``labels``;
    an empty selector selects every pod (k8s-netpol)."""
    sel = selector or {}
    if any(labels.get(str(k)) != str(v) for k, v in (sel.get("matchLabels") or {}).items()):
        return False
    for e in sel.get("matchExpressions") or []:
        key, op, vals = str(e.get("key")), str(e.get("operator")), [str(v) for v in e.get("values") or []]
        has = key in labels
        if (
            (op == "In" and not (has and labels[key] in vals))
            or (op == "NotIn" and has and labels[key] in vals)
            or (op == "Exists" and not has)
            or (op == "DoesNotExist" and has)
        ):
            return False
    return True


def _ports_cover(ports: Any, flow: Flow) -> bool:
    """A rule's ports (absent or empty: every port) cover the flow's whole range."""
    if not ports:
        return True
    lo, hi = flow.ports
    for p in ports:
        proto = str(p.get("protocol") or "TCP").upper()
        if flow.protocol != "all" and proto != _PROTOCOLS.get(flow.protocol, proto):
            continue
        if "port" not in p or p.get("port") is None:
            return True
        try:
            start = int(p["port"])
        except (TypeError, ValueError):
            continue  # a named port: not resolved here
        end = int(p.get("endPort") or start)
        if start <= lo and hi <= end:
            return True
    return False


def _job_pod_labels(job: Job) -> list[tuple[str, str, dict[str, str]]]:
    """(namespace, object, labels) of each pod template the job's JobSets hold."""
    out = []
    for m in job.jobsets():
        meta = m.get("metadata") or {}
        ns = str(meta.get("namespace") or "default")
        for rj in (m.get("spec") or {}).get("replicatedJobs") or []:
            tmpl = ((rj.get("template") or {}).get("spec") or {}).get("template") or {}
            labels = {str(k): str(v) for k, v in ((tmpl.get("metadata") or {}).get("labels") or {}).items()}
            out.append((ns, f"JobSet {ns}/{meta.get('name')} {rj.get('name')} pod", labels))
    return out


def _peer_admits(
    peer: Mapping[str, Any],
    dns: bool,
    ns: str,
    labels: Mapping[str, str],
    engine: str,
    pod_net: Net | None,
) -> bool:
    """Whether one from/to peer covers the job's own pods (ingress, egress to each other) or, for
    ``dns``, CoreDNS in kube-system. podSelector alone: the policy's namespace; namespaceSelector:
    the namespaces it selects (k8s-netpol)."""
    if "ipBlock" in peer:
        block = _net((peer.get("ipBlock") or {}).get("cidr"))
        if block is None or pod_net is None:
            return False
        if engine == "cilium":
            return False  # Cilium cannot match pod or node IPs with an ipBlock (aks-cilium)
        return _within(pod_net, block)
    if dns:
        target_ns, target = "kube-system", {"k8s-app": "kube-dns"}
    else:
        target_ns, target = ns, dict(labels)
    if "namespaceSelector" in peer:
        if not _selected(peer.get("namespaceSelector"), {"kubernetes.io/metadata.name": target_ns}):
            return False
    elif target_ns != ns:
        return False
    return _selected(peer.get("podSelector"), target) if "podSelector" in peer else True


def network_policy_checks(job: Job | None, engine: str, pod_net: Net | None, source: str) -> list[Check]:
    """With an engine that enforces NetworkPolicy: the job's own policies admit what its pods send
    each other (every TCP port), and, where they restrict egress, DNS too."""
    if job is None or job.scheduler != "kubernetes":
        return []
    src = f"{cite('k8s-netpol')}; {source}"
    policies = [m for m in job.manifests if m.get("kind") == "NetworkPolicy"]
    out: list[Check] = []
    dns_flow = Flow("udp", (facts.DNS_PORT, facts.DNS_PORT), "DNS (UDP 53) to CoreDNS")
    for ns, obj, labels in _job_pod_labels(job):
        mine = [
            p
            for p in policies
            if str((p.get("metadata") or {}).get("namespace") or "default") == ns
            and _selected((p.get("spec") or {}).get("podSelector"), labels)
        ]
        for direction, key, peers_key in (("Ingress", "ingress", "from"), ("Egress", "egress", "to")):
            restricting = []
            for pol in mine:
                spec = pol.get("spec") or {}
                types = spec.get("policyTypes") or (["Ingress", "Egress"] if spec.get("egress") else ["Ingress"])
                if direction in types:
                    restricting.append(pol)
            check = f"its NetworkPolicy ({engine} enforces it) admits the job's own traffic, {direction.lower()}"
            if not restricting:
                out.append(_ok(obj, check, f"no policy restricts {direction.lower()} of these pods", src))
                continue
            flows = [*job_flows(job), *([dns_flow] if key == "egress" else [])]
            missing = []
            for f in flows:
                dns = f is dns_flow
                if not any(
                    _ports_cover(rule.get("ports"), f)
                    and (
                        not rule.get(peers_key)
                        or any(
                            _peer_admits(peer, dns, ns, labels, engine, pod_net) for peer in rule.get(peers_key) or []
                        )
                    )
                    for pol in restricting
                    for rule in (pol.get("spec") or {}).get(key) or []
                ):
                    missing.append(f.what)
            names = ", ".join(str((pol.get("metadata") or {}).get("name")) for pol in restricting)
            out.append(
                _bad(
                    obj,
                    check,
                    f"NetworkPolicy {names} has no rule for {'; '.join(missing)}",
                    src,
                    f"allow the job's own pods on every TCP port in the {direction.lower()} rules (a podSelector peer, no ports)",
                )
                if missing
                else _ok(
                    obj,
                    check,
                    f"NetworkPolicy {names} admits {', '.join(f.what for f in flows)} of the job's own pods",
                    src,
                )
            )
    return out


# ---------------------------------------------------------------------------------------------
# AWS: security groups (allow-only; a flow passes when an egress rule of the source's groups and an
# ingress rule of the destination's groups both allow it).


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
    plan: Plan, src_groups: Iterable[str], dst_groups: Iterable[str], flow: Flow, dst_cidr: Net | None = None
) -> tuple[bool, str]:
    src, dst = set(src_groups), set(dst_groups)
    egress = [
        r
        for r in _sg_rules(plan, "Egress")
        if r.get("securityGroupId") in src
        and (
            r.get("referencedSecurityGroupId") in dst
            or _within(dst_cidr, _net(r.get("cidrIpv4")))
            # To every address: whatever the destination's group is, its addresses are inside.
            or r.get("cidrIpv4") == "0.0.0.0/0"
        )
        and _sg_covers(r, flow)
    ]
    ingress = [
        r
        for r in _sg_rules(plan, "Ingress")
        if r.get("securityGroupId") in dst and r.get("referencedSecurityGroupId") in src and _sg_covers(r, flow)
    ]
    if not egress:
        return False, f"no egress rule of {', '.join(sorted(src))} allows {flow.what} to {', '.join(sorted(dst))}"
    if not ingress and dst:
        return False, f"no ingress rule of {', '.join(sorted(dst))} allows {flow.what} from {', '.join(sorted(src))}"
    said = f"egress {egress[0].get('ipProtocol')} of {egress[0].get('securityGroupId')}"
    if ingress:
        said += f" and ingress {ingress[0].get('ipProtocol')} of {ingress[0].get('securityGroupId')}"
    return True, said


def registries(plan: Plan, job: Job | None) -> list[str]:
    """The hosts the cluster's images and charts come from: the job's pods, the plan's DaemonSets,
    its charts' repositories (a chart's own images come from where its values name)."""
    refs: list[str] = []
    pods: list[Mapping[str, Any]] = [pod for _, pod, _ in (job.pods() if job else [])]
    for r in plan.of("kubernetes:apps/v1:DaemonSet"):
        pods.append((((r.inputs.get("spec") or {}).get("template") or {}).get("spec")) or {})
    for pod in pods:
        refs += [str(c.get("image", "")) for c in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]]
    for r in plan.of("kubernetes:helm.sh/v4:Chart"):
        chart = str(r.inputs.get("chart", ""))
        repo = str((r.inputs.get("repositoryOpts") or {}).get("repo", ""))
        refs.append(chart.removeprefix("oci://") if chart.startswith("oci://") else repo.split("://", 1)[-1])
    hosts = []
    if job is not None and job.scheduler == "slurm":
        # The batch job makes its interpreter once with pip (workloads/launch/validation.py _venv_lines).
        hosts.append("pypi.org (the job's shared virtualenv)")
    for ref in refs:
        first = ref.split("/", 1)[0] if "/" in ref else ""
        host = first if ("." in first or ":" in first) else ("docker.io" if ref else "")
        if host and host not in hosts:
            hosts.append(host)
    return hosts


def _aws(plan: Plan, pools: list[Pool], job: Job | None) -> list[Check]:
    out: list[Check] = []
    gpu = [p for p in pools if p.gpu]
    if not gpu:
        return out
    pool = gpu[0]
    obj = f"pool {pool.name}"
    groups = pool.security_groups
    # The job's processes on different nodes (pods on EKS share their node's groups: the VPC CNI).
    for flow in [*job_flows(job), Flow("all", (0, 65535), "every protocol (EFA's own traffic)")]:
        ok, why = _sg_allows(plan, groups, groups, flow)
        check = f"nodes reach each other: {flow.what}"
        src = cite("efa-sg")
        out.append(
            _ok(obj, check, why, src)
            if ok
            else _bad(obj, check, why, src, "allow all traffic in from and out to the nodes' own security group")
        )
    # The API server (EKS) or the Slurm controller (PCS).
    for c in plan.of("aws:eks/cluster:Cluster"):
        vpc = c.inputs.get("vpcConfig") or {}
        cp_groups = [str(g) for g in vpc.get("securityGroupIds") or []]
        check = "nodes reach the API server"
        if not vpc.get("endpointPrivateAccess"):
            out.append(
                _bad(
                    obj,
                    check,
                    "the endpoint's private access is off: nodes would go out through NAT to the public "
                    "endpoint, which admits only publicAccessCidrs",
                    cite("eks-endpoint"),
                    "turn endpointPrivateAccess on",
                )
            )
            continue
        ok, why = _sg_allows(plan, groups, cp_groups, Flow("tcp", (443, 443), "TCP 443"))
        out.append(
            _ok(obj, check, f"private endpoint on; {why}", cite("eks-endpoint"))
            if ok
            else _bad(obj, check, why, cite("eks-endpoint"), "let the nodes' group reach the control plane's on 443")
        )
    for c in plan.of("aws-native:pcs:Cluster"):
        cp_groups = [str(g) for g in (c.inputs.get("networking") or {}).get("securityGroupIds") or []]
        ok, why = _sg_allows(plan, groups, cp_groups, Flow("all", (0, 65535), "all traffic"))
        ok_back, why_back = _sg_allows(plan, cp_groups, groups, Flow("all", (0, 65535), "all traffic"))
        check = "nodes and the Slurm controller reach each other"
        out.append(
            _ok(obj, check, f"{why}; back: {why_back}", cite("pcs-networking"))
            if ok and ok_back
            else _bad(
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
        check = f"nodes reach Lustre {fs.name} on {_ports('aws')}"
        src = "components/aws/storage.py LUSTRE_PORTS (FSx for Lustre user guide, limit-access-security-groups)"
        out.append(
            _bad(obj, check, "; ".join(missing), src, "allow the Lustre ports both ways")
            if missing
            else _ok(obj, check, "both ways, between the nodes' and the file system's groups", src)
        )
    out.append(_aws_egress(plan, pool, obj, registries(plan, job)))
    return out


def _ports(cloud: str) -> str:
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in facts.LUSTRE_PORTS[cloud])


def _registry_check(hosts: list[str]) -> str:
    return f"nodes reach the registries their images come from ({', '.join(hosts) or 'none named'})"


def _aws_egress(plan: Plan, pool: Pool, obj: str, hosts: list[str]) -> Check:
    check = _registry_check(hosts)
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
    ok, why = _sg_allows(plan, pool.security_groups, [], Flow("tcp", (443, 443), "TCP 443"), _net("0.0.0.0/0"))
    src = "the plan's route tables and security groups"
    if not nat:
        return _bad(
            obj,
            check,
            f"the node subnet's route table has no 0.0.0.0/0 route (tables {sorted(tables)})",
            src,
            "route 0.0.0.0/0 through a NAT gateway",
        )
    if not ok:
        return _bad(obj, check, why, src, "allow egress to 0.0.0.0/0 on 443")
    return _ok(
        obj,
        check,
        f"0.0.0.0/0 through {nat[0].inputs.get('natGatewayId') or nat[0].inputs.get('gatewayId')}; {why}",
        src,
    )


# ---------------------------------------------------------------------------------------------
# GCP: VPC firewall rules (ingress allow rules over the implied deny; egress implied allow).


def _gcp_firewall_allows(plan: Plan, network_id: str, source: Net | None, flow: Flow) -> tuple[bool, str]:
    for fw in plan.of("gcp:compute/firewall:Firewall"):
        i = fw.inputs
        if i.get("network") != network_id or i.get("direction", "INGRESS") != "INGRESS":
            continue
        if not any(_within(source, _net(r)) for r in i.get("sourceRanges") or []):
            continue
        for allow in i.get("allows") or []:
            proto = str(allow.get("protocol", ""))
            if proto == "all" or (proto == flow.protocol and _gcp_ports_cover(allow.get("ports"), flow.ports)):
                return (
                    True,
                    f"firewall {fw.name} admits {source} ({proto}{' ' + ','.join(allow.get('ports') or []) if allow.get('ports') else ', every port'})",
                )
    return False, f"no ingress rule of {network_id} admits {flow.what} from {source} (the implied rule denies it)"


def _gcp_ports_cover(ports: Any, want: tuple[int, int]) -> bool:
    if not ports:
        return True
    for p in ports:
        lo, _, hi = str(p).partition("-")
        if int(lo) <= want[0] and want[1] <= int(hi or lo):
            return True
    return False


def _gcp(plan: Plan, pools: list[Pool], job: Job | None) -> list[Check]:
    out: list[Check] = []
    subnets = {r.id: r for r in plan.of("gcp:compute/subnetwork:Subnetwork")}
    networks = plan.of("gcp:compute/network:Network")
    system = next((s for s in subnets.values() if s.inputs.get("secondaryIpRanges") or "-network-" in s.name), None)
    if system is None:
        return out
    vpc = str(system.inputs.get("network"))
    node_range = _net(system.inputs.get("ipCidrRange"))
    pods = next(
        (
            _net(r.get("ipCidrRange"))
            for r in system.inputs.get("secondaryIpRanges") or []
            if r.get("rangeName") == "pods"
        ),
        None,
    )
    gke = plan.orchestrator == "gke"
    vpc_res = plan.ref(vpc)
    obj = f"VPC {(vpc_res.inputs.get('name') if vpc_res else None) or vpc}"
    src = cite("gcp-firewall")
    peers = pods if gke and pods else node_range
    who = "pods" if gke else "nodes"
    for flow in job_flows(job):
        ok, why = _gcp_firewall_allows(plan, vpc, peers, flow)
        check = f"{who} reach each other on the primary network: {flow.what}"
        out.append(_ok(obj, check, why, src) if ok else _bad(obj, check, why, src, f"admit {peers} on every TCP port"))
    if gke:
        ok, why = _gcp_firewall_allows(plan, vpc, pods, Flow("udp", (facts.DNS_PORT, facts.DNS_PORT), "DNS (UDP 53)"))
        check = "pods reach kube-dns"
        out.append(_ok(obj, check, why, src) if ok else _bad(obj, check, why, src, "admit the pods' range on UDP 53"))
        out += _gcp_gpu_networks(plan, networks, subnets, job)
        for c in plan.of("gcp:container/cluster:Cluster"):
            pcc = c.inputs.get("privateClusterConfig") or {}
            man = c.inputs.get("masterAuthorizedNetworksConfig") or {}
            blocks = [_net(b.get("cidrBlock")) for b in man.get("cidrBlocks") or []]
            check = "nodes reach the API server"
            if pcc.get("enablePrivateNodes") and any(_within(node_range, b) for b in blocks):
                out.append(
                    _ok(
                        f"cluster {c.name}",
                        check,
                        f"private nodes use the private endpoint, and {node_range} is an authorized network",
                        f"{cite('gke-private')}",
                    )
                )
            elif pcc.get("enablePrivateNodes") and not man:
                out.append(
                    _ok(
                        f"cluster {c.name}",
                        check,
                        "private nodes use the private endpoint; no authorized networks are set",
                        cite("gke-private"),
                    )
                )
            else:
                out.append(
                    _bad(
                        f"cluster {c.name}",
                        check,
                        f"the node range {node_range} is not among the authorized networks {[str(b) for b in blocks]}",
                        cite("gke-private"),
                        "authorize the node range",
                    )
                )
    # Lustre: the servers in the private service access range talk LNet to the clients.
    for fs in plan.of("gcp:lustre/instance:Instance"):
        psa = next(
            (r for r in plan.of("gcp:compute/globalAddress:GlobalAddress") if r.inputs.get("purpose") == "VPC_PEERING"),
            None,
        )
        psa_net = _net(f"{psa.inputs.get('address')}/{int(float(psa.inputs.get('prefixLength', 32)))}") if psa else None
        ok, why = _gcp_firewall_allows(plan, vpc, psa_net, Flow("tcp", facts.LUSTRE_PORTS["gcp"][0], "TCP 988"))
        check = f"nodes reach Lustre {fs.name} on {_ports('gcp')}"
        lsrc = f"{src}; components/gcp/network.py (Lustre servers in the private service access range)"
        out.append(
            _ok(obj, check, f"egress implied; {why}", lsrc)
            if ok
            else _bad(obj, check, why, lsrc, "admit the private service access range on 988")
        )
    nat = [
        n
        for n in plan.of("gcp:compute/routerNat:RouterNat")
        if n.inputs.get("sourceSubnetworkIpRangesToNat")
        in ("ALL_SUBNETWORKS_ALL_IP_RANGES", "ALL_SUBNETWORKS_ALL_PRIMARY_IP_RANGES")
    ]
    check = _registry_check(registries(plan, job))
    nsrc = "cloud.google.com/nat/docs/overview (Cloud NAT for the VPC's subnets); the plan's RouterNat"
    out.append(
        _ok(
            obj,
            check,
            f"Cloud NAT {nat[0].name} covers every subnet range; private Google access {'on' if system.inputs.get('privateIpGoogleAccess') else 'off'}",
            nsrc,
        )
        if nat
        else _bad(
            obj,
            check,
            "no Cloud NAT covers the node subnet and the nodes have no public address",
            nsrc,
            "add Cloud NAT",
        )
    )
    return out


def _gcp_gpu_networks(
    plan: Plan, networks: list[Resource], subnets: Mapping[str, Resource], job: Job | None
) -> list[Check]:
    """Every additional network the job's pods attach to admits the job's traffic from its subnet."""
    out: list[Check] = []
    params = {
        str((r.inputs.get("metadata") or {}).get("name")): r.inputs.get("spec") or {}
        for r in plan.of("kubernetes:networking.gke.io/v1:GKENetworkParamSet")
    }
    attached: list[str] = []
    for m in job.manifests if job else ():
        for rj in (m.get("spec") or {}).get("replicatedJobs") or []:
            tmpl = ((rj.get("template") or {}).get("spec") or {}).get("template") or {}
            text = ((tmpl.get("metadata") or {}).get("annotations") or {}).get("networking.gke.io/interfaces")
            if text:
                attached += [str(e.get("network")) for e in json.loads(text) if e.get("network") != "default"]
    for name in dict.fromkeys(attached):
        spec = params.get(name)
        obj = f"Network {name}"
        if spec is None:
            out.append(
                _bad(
                    obj,
                    "the job's pods attach to a planned network",
                    f"no GKENetworkParamSet {name}",
                    "the plan",
                    "plan the Network objects the pod annotation names",
                )
            )
            continue
        vpc = next((n for n in networks if n.inputs.get("name") == spec.get("vpc")), None)
        sub = next((s for s in subnets.values() if s.inputs.get("name") == spec.get("vpcSubnet")), None)
        if vpc is None or sub is None:
            out.append(
                _bad(
                    obj,
                    "its VPC and subnet are planned",
                    f"VPC {spec.get('vpc')} / subnet {spec.get('vpcSubnet')} not in the plan",
                    "the plan",
                    "plan them",
                )
            )
            continue
        if "vpc-roce" in str(vpc.inputs.get("networkProfile", "")):
            out.append(
                _ok(
                    obj,
                    "the job's RDMA traffic between nodes",
                    f"VPC {spec.get('vpc')} has the RoCE network profile: no VPC firewall rules apply and its implied rules allow all ingress",
                    "cloud.google.com/firewall/docs/firewall-for-roce; docs.cloud.google.com/vpc/docs/rdma-network-profiles (components/gcp/interconnect.py)",
                )
            )
            continue
        ok, why = _gcp_firewall_allows(
            plan, vpc.id, _net(sub.inputs.get("ipCidrRange")), Flow("tcp", facts.ALL_TCP, "TCP on every port")
        )
        check = "the job's traffic between nodes on this GPU network"
        out.append(
            _ok(obj, check, why, cite("gcp-firewall"))
            if ok
            else _bad(
                obj, check, why, cite("gcp-firewall"), f"admit {sub.inputs.get('ipCidrRange')} in VPC {spec.get('vpc')}"
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# Azure: NSGs, by priority over the default rules; the API server's authorized ranges.


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
        return any(_within(flow_net, v) for v in vnet)
    if prefix == "Internet":
        return flow_net is not None and not flow_net.is_private
    if prefix == "AzureLoadBalancer":
        return False
    n = _net(prefix)
    if n is None or flow_net is None:
        return False
    return _within(flow_net, n) if for_allow else n.version == flow_net.version and n.overlaps(flow_net)


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


def _azure(plan: Plan, pools: list[Pool], job: Job | None) -> list[Check]:
    out: list[Check] = []
    clusters = plan.of("azure-native:containerservice:ManagedCluster")
    if not clusters:
        return out
    mc = clusters[0]
    vnets = [
        _net(p)
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
            _bad(
                obj, "its subnet is planned", f"subnet {gpu.subnet} not in the plan", "the plan", "plan the node subnet"
            )
        ]
    nsg = nsgs.get(str((node_subnet.inputs.get("networkSecurityGroup") or {}).get("id")))
    rules = list((nsg.inputs if nsg else {}).get("securityRules") or [])
    node_net = _net(node_subnet.inputs.get("addressPrefix"))
    profile = mc.inputs.get("networkProfile") or {}
    overlay = profile.get("networkPluginMode") == "overlay"
    pod_net = _net(profile.get("podCidr")) if overlay else node_net
    src = f"{cite('aks-overlay-nsg')}; {cite('azure-nsg')}"
    flows = [*job_flows(job)]
    for f in flows:
        for direction in ("Outbound", "Inbound"):
            ok, why = _nsg_decides(rules, direction, pod_net, pod_net, f, vnet)
            check = f"pods reach each other ({'pod range ' + str(pod_net) if overlay else 'VNet'}), {direction.lower()}: {f.what}"
            out.append(
                _ok(obj, check, why, src)
                if ok
                else _bad(
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
                _ok(obj, check, why, src)
                if ok
                else _bad(obj, check, why, src, f"allow {node_net} to {pod_net}, all ports, {direction.lower()}")
            )
    dns = Flow("udp", (facts.DNS_PORT, facts.DNS_PORT), "DNS (UDP 53)")
    for direction in ("Outbound", "Inbound"):
        ok, why = _nsg_decides(rules, direction, pod_net, pod_net, dns, vnet)
        check = f"pods reach CoreDNS, {direction.lower()}"
        out.append(
            _ok(obj, check, why, src)
            if ok
            else _bad(obj, check, why, src, f"allow {pod_net} to {pod_net} on UDP 53, {direction.lower()}")
        )
    engine = str(profile.get("networkPolicy") or "none").lower()
    if engine in ("cilium", "calico", "azure"):
        out += network_policy_checks(
            job, engine, pod_net, f"{cite('aks-cilium')} (networkProfile.networkPolicy {engine})"
        )
    # The API server from the nodes' egress address.
    access = mc.inputs.get("apiServerAccessProfile") or {}
    ranges = [_net(r) for r in access.get("authorizedIPRanges") or []]
    check = "nodes reach the API server from their egress address"
    asrc = cite("aks-authorized-ranges")
    if access.get("enablePrivateCluster"):
        out.append(_ok(obj, check, "private cluster: nodes use the private endpoint", asrc))
    elif not ranges:
        out.append(_ok(obj, check, "no authorized ranges: the endpoint admits every address", asrc))
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
                        _net(f"{addr}/32") if addr else None,
                    )
                )
        if profile.get("outboundType") in ("loadBalancer", None) and not egress:
            out.append(
                _ok(
                    obj,
                    check,
                    "outbound through the Standard load balancer, whose address AKS adds to the authorized ranges itself",
                    f"{asrc}; api-server-authorized-ip-ranges.md:51",
                )
            )
        else:
            missing = [name for name, addr in egress if not any(_within(addr, r) for r in ranges)]
            if not egress:
                out.append(
                    _bad(
                        obj,
                        check,
                        f"outbound type {profile.get('outboundType')} and no egress address found in the plan",
                        asrc,
                        "give the node subnets a NAT gateway with a public IP",
                    )
                )
            elif missing:
                out.append(
                    _bad(
                        obj,
                        check,
                        f"{'; '.join(missing)} not in the authorized ranges {[str(r) for r in ranges]}: kubelets are refused and the nodes never join",
                        asrc,
                        "add the NAT gateway's public IP (/32) to apiServerAccessProfile.authorizedIPRanges",
                    )
                )
            else:
                out.append(_ok(obj, check, "; ".join(n for n, _ in egress) + " within the authorized ranges", asrc))
    # Lustre: the node NSG lets the ports out, the file system subnet's NSG lets them in.
    for fs in plan.of("azure-native:storagecache:AmlFilesystem"):
        fs_sub = subnets.get(str(fs.inputs.get("filesystemSubnet")))
        fs_nsg = nsgs.get(str(((fs_sub.inputs if fs_sub else {}).get("networkSecurityGroup") or {}).get("id")))
        fs_net = _net((fs_sub.inputs if fs_sub else {}).get("addressPrefix"))
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
        check = f"nodes reach Lustre {fs.name} on {_ports('azure')}"
        lsrc = f"components/azure/network.py LUSTRE_PORTS (amlfs-prerequisites.md); {cite('azure-nsg')}"
        out.append(
            _bad(obj, check, "; ".join(problems), lsrc, "allow the Lustre ports from the node subnet")
            if problems
            else _ok(obj, check, f"{node_net} to {fs_net}", lsrc)
        )
    nat_id = (node_subnet.inputs.get("natGateway") or {}).get("id")
    ok, why = _nsg_decides(rules, "Outbound", node_net, _net("8.8.8.8/32"), Flow("tcp", (443, 443), "TCP 443"), vnet)
    check = _registry_check(registries(plan, job))
    esrc = f"{cite('azure-nat')}; {cite('azure-nsg')}"
    if not nat_id:
        out.append(
            _bad(
                obj,
                check,
                "the node subnet has no NAT gateway and default outbound access is off",
                esrc,
                "attach the NAT gateway",
            )
        )
    else:
        out.append(
            _ok(obj, check, f"through NAT gateway {nat_id}; {why}", esrc)
            if ok
            else _bad(obj, check, why, esrc, "allow outbound 443 to the internet")
        )
    return out


def checks(plan: Plan, pools: list[Pool], job: Job | None) -> list[Check]:
    # The job's NetworkPolicy (enforced, and admitting the job's own pods): components/liveness/netpol.py.
    if plan.cloud == "aws":
        return _aws(plan, pools, job) + netpol.checks(plan, job)
    if plan.cloud == "gcp":
        return _gcp(plan, pools, job) + netpol.checks(plan, job)
    if plan.cloud == "azure":
        return _azure(plan, pools, job)
    return []
