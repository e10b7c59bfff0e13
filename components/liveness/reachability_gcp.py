"""GCP: VPC firewall rules (ingress allow rules over the implied deny; egress implied allow), and
the GPU NICs' own networks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gpu_cluster.components.liveness import facts
from gpu_cluster.components.liveness.cluster import Pool
from gpu_cluster.components.liveness.facts import cite
from gpu_cluster.components.liveness.model import Check, Job, Plan, Resource
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


def _gcp_firewall_allows(plan: Plan, network_id: str, source: Net | None, flow: Flow) -> tuple[bool, str]:
    for fw in plan.of("gcp:compute/firewall:Firewall"):
        i = fw.inputs
        if i.get("network") != network_id or i.get("direction", "INGRESS") != "INGRESS":
            continue
        if not any(within(source, as_net(r)) for r in i.get("sourceRanges") or []):
            continue
        for allow in i.get("allows") or []:
            proto = str(allow.get("protocol", ""))
            if proto == "all" or (proto == flow.protocol and _gcp_ports_cover(allow.get("ports"), flow.ports)):
                return (
                    True,
                    f"firewall {fw.name} admits {source} ({proto}{' ' + ','.join(allow.get('ports') or []) if allow.get('ports') else ', every port'})",
                )
    return False, f"no ingress rule of {network_id} admits {flow.what} from {source} (the implied rule denies it)"


def _gke_all_rule(pods: Net, flow: Flow, why_not: str) -> tuple[bool, str]:
    """GKE makes gke-<cluster>-<hash>-all with every cluster: the Pod CIDR to the nodes, TCP, UDP,
    SCTP, ICMP, ESP and AH on every port (gke-firewall-auto), so pod-to-pod TCP and UDP passes
    without a rule of the stack's own."""
    if flow.protocol in ("tcp", "udp"):
        return True, f"GKE's own rule gke-<cluster>-<hash>-all admits the Pod CIDR {pods} ({cite('gke-firewall-auto')})"
    return False, why_not


def _gcp_ports_cover(ports: Any, want: tuple[int, int]) -> bool:
    if not ports:
        return True
    for p in ports:
        lo, _, hi = str(p).partition("-")
        if int(lo) <= want[0] and want[1] <= int(hi or lo):
            return True
    return False


def gcp_checks(plan: Plan, pools: list[Pool], job: Job | None) -> list[Check]:
    out: list[Check] = []
    subnets = {r.id: r for r in plan.of("gcp:compute/subnetwork:Subnetwork")}
    networks = plan.of("gcp:compute/network:Network")
    system = next((s for s in subnets.values() if s.inputs.get("secondaryIpRanges") or "-network-" in s.name), None)
    if system is None:
        return out
    vpc = str(system.inputs.get("network"))
    node_range = as_net(system.inputs.get("ipCidrRange"))
    pods = next(
        (
            as_net(r.get("ipCidrRange"))
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
        if not ok and gke and pods:
            ok, why = _gke_all_rule(pods, flow, why)
        check = f"{who} reach each other on the primary network: {flow.what}"
        out.append(
            passed(obj, check, why, src) if ok else failed(obj, check, why, src, f"admit {peers} on every TCP port")
        )
    if gke:
        dns = Flow("udp", (facts.DNS_PORT, facts.DNS_PORT), "DNS (UDP 53)")
        ok, why = _gcp_firewall_allows(plan, vpc, pods, dns)
        if not ok and pods:
            ok, why = _gke_all_rule(pods, dns, why)
        check = "pods reach kube-dns"
        out.append(
            passed(obj, check, why, src) if ok else failed(obj, check, why, src, "admit the pods' range on UDP 53")
        )
        out += _gcp_gpu_networks(plan, networks, subnets, job)
        for c in plan.of("gcp:container/cluster:Cluster"):
            pcc = c.inputs.get("privateClusterConfig") or {}
            man = c.inputs.get("masterAuthorizedNetworksConfig") or {}
            blocks = [as_net(b.get("cidrBlock")) for b in man.get("cidrBlocks") or []]
            check = "nodes reach the API server"
            if pcc.get("enablePrivateNodes") and any(within(node_range, b) for b in blocks):
                out.append(
                    passed(
                        f"cluster {c.name}",
                        check,
                        f"private nodes use the private endpoint, and {node_range} is an authorized network",
                        f"{cite('gke-private')}",
                    )
                )
            elif pcc.get("enablePrivateNodes") and not man:
                out.append(
                    passed(
                        f"cluster {c.name}",
                        check,
                        "private nodes use the private endpoint; no authorized networks are set",
                        cite("gke-private"),
                    )
                )
            else:
                out.append(
                    failed(
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
        psa_net = (
            as_net(f"{psa.inputs.get('address')}/{int(float(psa.inputs.get('prefixLength', 32)))}") if psa else None
        )
        ok, why = _gcp_firewall_allows(plan, vpc, psa_net, Flow("tcp", facts.LUSTRE_PORTS["gcp"][0], "TCP 988"))
        check = f"nodes reach Lustre {fs.name} on {lustre_ports('gcp')}"
        lsrc = f"{src}; components/gcp/network.py (Lustre servers in the private service access range)"
        out.append(
            passed(obj, check, f"egress implied; {why}", lsrc)
            if ok
            else failed(obj, check, why, lsrc, "admit the private service access range on 988")
        )
    nat = [
        n
        for n in plan.of("gcp:compute/routerNat:RouterNat")
        if n.inputs.get("sourceSubnetworkIpRangesToNat")
        in ("ALL_SUBNETWORKS_ALL_IP_RANGES", "ALL_SUBNETWORKS_ALL_PRIMARY_IP_RANGES")
    ]
    check = registry_check(registries(plan, job))
    nsrc = "cloud.google.com/nat/docs/overview (Cloud NAT for the VPC's subnets); the plan's RouterNat"
    out.append(
        passed(
            obj,
            check,
            f"Cloud NAT {nat[0].name} covers every subnet range; private Google access {'on' if system.inputs.get('privateIpGoogleAccess') else 'off'}",
            nsrc,
        )
        if nat
        else failed(
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
                failed(
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
                failed(
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
                passed(
                    obj,
                    "the job's RDMA traffic between nodes",
                    f"VPC {spec.get('vpc')} has the RoCE network profile: no VPC firewall rules apply and its implied rules allow all ingress",
                    "cloud.google.com/firewall/docs/firewall-for-roce; docs.cloud.google.com/vpc/docs/rdma-network-profiles (components/gcp/interconnect.py)",
                )
            )
            continue
        ok, why = _gcp_firewall_allows(
            plan, vpc.id, as_net(sub.inputs.get("ipCidrRange")), Flow("tcp", facts.ALL_TCP, "TCP on every port")
        )
        check = "the job's traffic between nodes on this GPU network"
        out.append(
            passed(obj, check, why, cite("gcp-firewall"))
            if ok
            else failed(
                obj, check, why, cite("gcp-firewall"), f"admit {sub.inputs.get('ipCidrRange')} in VPC {spec.get('vpc')}"
            )
        )
    return out
