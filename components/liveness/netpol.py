"""The job's NetworkPolicy: is it enforced on the cluster, and does it still let the job's own pods
reach each other once it is?

Two failures look alike from the outside and are opposite: a policy nothing enforces protects
nothing (the job's pods take traffic from any pod of the cluster), and an enforced policy that does
not admit the job's own pods cuts the rendezvous and NCCL's bootstrap. Both are checked here, as
``reachability`` checks, against what each platform's network plugin is documented to enforce:

* EKS: the VPC CNI's network policy agent, on only when the ``vpc-cni`` add-on's configuration
  values say ``"enableNetworkPolicy": "true"``; it applies a policy only to pods that have an owner,
  and to at most 24 port combinations per protocol in each rule (facts ``eks-netpol``,
  ``eks-netpol-limits``);
* GKE: Dataplane V2 (``datapathProvider: ADVANCED_DATAPATH``) always enforces NetworkPolicy
  (``gke-dataplane-v2``); the legacy Calico add-on (``networkPolicy.enabled``) does too.

On AKS the cluster names its policy engine (``networkProfile.networkPolicy``: cilium, calico,
azure); ``reachability_azure.py`` reads it and asks :func:`network_policy_checks` (the last section
here) whether the job's own policies admit its traffic under that engine.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gpu_cluster.components.liveness import facts
from gpu_cluster.components.liveness.facts import cite
from gpu_cluster.components.liveness.flows import Flow, Net, as_net, failed, job_flows, passed, within
from gpu_cluster.components.liveness.model import Check, Job, Plan, selects

# The VPC CNI agent's limit on unique port combinations per protocol in one ingress or egress rule
# (eks-netpol-limits).
EKS_PORT_COMBINATIONS = 24


def _check(obj: str, check: str, holds: bool, why: str, source: str, fix: str = "") -> Check:
    return Check(kind="reachability", object=obj, check=check, holds=holds, why=why, source=source, fix=fix)


def _matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A NetworkPolicy's selector against a pod's labels (absent or empty: every pod, k8s-netpol)."""
    return selects(selector or {}, labels)


def enforcer(plan: Plan) -> tuple[bool, str, str, str] | None:
    """(enforced, why, source, fix) for the plan's cluster; None where the platform is not modelled."""
    if plan.orchestrator == "eks":
        addons = [a for a in plan.of("aws:eks/addon:Addon") if a.inputs.get("addonName") == "vpc-cni"]
        if not addons:
            return (
                False,
                "no vpc-cni add-on is planned: the CNI EKS installs by itself has network policy off",
                cite("eks-netpol"),
                'install the vpc-cni add-on with configuration values {"enableNetworkPolicy": "true"}',
            )
        raw = addons[0].inputs.get("configurationValues") or "{}"
        try:
            values = json.loads(raw) if isinstance(raw, str) else dict(raw)
        except ValueError:
            values = {}
        value = values.get("enableNetworkPolicy")
        fix = f'set "enableNetworkPolicy": "true" in the configuration values of {addons[0].name}'
        if value != "true":
            return (
                False,
                f"add-on {addons[0].name} has enableNetworkPolicy {json.dumps(value)}: the VPC CNI enforces no "
                "NetworkPolicy (AWS leaves it off)",
                cite("eks-netpol"),
                fix,
            )
        return (True, f'add-on {addons[0].name} sets "enableNetworkPolicy": "true"', cite("eks-netpol"), "")
    if plan.orchestrator == "gke":
        for c in plan.of("gcp:container/cluster:Cluster"):
            if c.inputs.get("datapathProvider") == "ADVANCED_DATAPATH":
                return (True, f"cluster {c.name} runs Dataplane V2 (ADVANCED_DATAPATH)", cite("gke-dataplane-v2"), "")
            if (c.inputs.get("networkPolicy") or {}).get("enabled"):
                return (True, f"cluster {c.name} has the Calico network policy add-on", cite("gke-dataplane-v2"), "")
            return (
                False,
                f"cluster {c.name} has neither Dataplane V2 nor the network policy add-on",
                cite("gke-dataplane-v2"),
                "set datapathProvider ADVANCED_DATAPATH",
            )
    return None


def _pod_labels(job: Job) -> list[tuple[str, str, dict[str, str]]]:
    """(object, namespace, labels) of each pod template the job's JobSets hold."""
    out = []
    for js in job.jobsets():
        meta = js.get("metadata") or {}
        ns = str(meta.get("namespace") or "default")
        for rj in (js.get("spec") or {}).get("replicatedJobs") or []:
            tmpl = ((rj.get("template") or {}).get("spec") or {}).get("template") or {}
            labels = {str(k): str(v) for k, v in ((tmpl.get("metadata") or {}).get("labels") or {}).items()}
            out.append((f"JobSet {ns}/{meta.get('name')} {rj.get('name')} pod", ns, labels))
    return out


def _port_combinations(rule: Mapping[str, Any]) -> dict[str, int]:
    """Unique port combinations per protocol in one ingress or egress rule."""
    seen: dict[str, set[tuple[Any, Any]]] = {}
    for p in rule.get("ports") or []:
        seen.setdefault(str(p.get("protocol", "TCP")), set()).add((p.get("port"), p.get("endPort")))
    return {proto: len(v) for proto, v in seen.items()}


def _admits_own(policy: Mapping[str, Any], ns: str, labels: Mapping[str, str]) -> tuple[bool, str]:
    """Whether the policy's ingress admits pods with ``labels`` in ``ns`` on every TCP port."""
    spec = policy.get("spec") or {}
    types = spec.get("policyTypes") or ["Ingress"]
    if "Ingress" not in types:
        return True, "the policy does not restrict ingress"
    for i, rule in enumerate(spec.get("ingress") or []):
        if rule.get("ports"):
            continue  # a port list cuts NCCL's ephemeral bootstrap and socket ports
        peers = rule.get("from")
        if not peers:
            return True, f"ingress rule {i} admits every source on every port"
        for peer in peers:
            if "ipBlock" in peer:
                continue
            same_ns = "namespaceSelector" not in peer or _matches(
                peer.get("namespaceSelector"), {"kubernetes.io/metadata.name": ns}
            )
            if same_ns and _matches(peer.get("podSelector"), labels):
                return (
                    True,
                    f"ingress rule {i} admits the job's own pods (podSelector {peer.get('podSelector')}) on every port",
                )
    return False, "no ingress rule admits the job's own pods on every port: the rendezvous and NCCL's bootstrap are cut"


def checks(plan: Plan, job: Job | None) -> list[Check]:
    if job is None or job.scheduler != "kubernetes":
        return []
    policies = [m for m in job.manifests if m.get("kind") == "NetworkPolicy"]
    found = enforcer(plan)
    if not policies or found is None:
        return []
    enforced, how, source, fix = found
    pods = _pod_labels(job)
    out: list[Check] = []
    for pol in policies:
        meta = pol.get("metadata") or {}
        ns = str(meta.get("namespace", "default"))
        obj = f"NetworkPolicy {ns}/{meta.get('name')}"
        selected = [
            (o, labels)
            for o, pns, labels in pods
            if pns == ns and _matches((pol.get("spec") or {}).get("podSelector"), labels)
        ]
        if not selected:
            out.append(
                _check(
                    obj,
                    "selects the job's pods",
                    False,
                    "its podSelector matches no pod template of the job: it protects nothing",
                    cite("k8s-netpol"),
                    "select the pods by the labels their template carries",
                )
            )
            continue
        why = how
        holds = enforced
        if enforced and plan.orchestrator == "eks":
            spec = pol.get("spec") or {}
            too_many = [
                f"{kind} rule {i}: {n} {proto} port combinations"
                for kind in ("ingress", "egress")
                for i, rule in enumerate(spec.get(kind) or [])
                for proto, n in _port_combinations(rule).items()
                if n > EKS_PORT_COMBINATIONS
            ]
            if too_many:
                holds = False
                why = f"{how}; but {', '.join(too_many)} (the agent applies at most {EKS_PORT_COMBINATIONS})"
                fix = "use a port range (endPort) or no port list"
                source = cite("eks-netpol-limits")
            else:
                # A JobSet's pods are made by its Jobs, so each has its Job as owner: the agent applies
                # policies only to owned pods.
                why = (
                    f"{how}; the pods are made by the JobSet's Jobs, so each has an owner ({cite('k8s-owners')}), "
                    f"and no rule lists more than {EKS_PORT_COMBINATIONS} port combinations per protocol "
                    f"({cite('eks-netpol-limits')})"
                )
        out.append(_check(obj, "enforced on the job's pods", holds, why, source, "" if holds else fix))
        for pod_obj, labels in selected:
            ok, said = _admits_own(pol, ns, labels)
            out.append(
                _check(
                    obj,
                    f"admits {pod_obj}s from each other on every port",
                    ok,
                    said,
                    cite("k8s-netpol"),
                    "" if ok else "add an ingress rule from the job's own pods with no port list",
                )
            )
    return out


# ---------------------------------------------------------------------------------------------
# AKS: the rules of the job's own NetworkPolicy, where the cluster's policy engine enforces it
# (networkProfile.networkPolicy; reachability_azure.py asks).

_PROTOCOLS = {"tcp": "TCP", "udp": "UDP"}


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
        block = as_net((peer.get("ipBlock") or {}).get("cidr"))
        if block is None or pod_net is None:
            return False
        if engine == "cilium":
            return False  # Cilium cannot match pod or node IPs with an ipBlock (aks-cilium)
        return within(pod_net, block)
    if dns:
        target_ns, target = "kube-system", {"k8s-app": "kube-dns"}
    else:
        target_ns, target = ns, dict(labels)
    if "namespaceSelector" in peer:
        if not _matches(peer.get("namespaceSelector"), {"kubernetes.io/metadata.name": target_ns}):
            return False
    elif target_ns != ns:
        return False
    return _matches(peer.get("podSelector"), target) if "podSelector" in peer else True


def network_policy_checks(job: Job | None, engine: str, pod_net: Net | None, source: str) -> list[Check]:
    """With an engine that enforces NetworkPolicy: the job's own policies admit what its pods send
    each other (every TCP port), and, where they restrict egress, DNS too."""
    if job is None or job.scheduler != "kubernetes":
        return []
    src = f"{cite('k8s-netpol')}; {source}"
    policies = [m for m in job.manifests if m.get("kind") == "NetworkPolicy"]
    out: list[Check] = []
    dns_flow = Flow("udp", (facts.DNS_PORT, facts.DNS_PORT), "DNS (UDP 53) to CoreDNS")
    for obj, ns, labels in _pod_labels(job):
        mine = [
            p
            for p in policies
            if str((p.get("metadata") or {}).get("namespace") or "default") == ns
            and _matches((p.get("spec") or {}).get("podSelector"), labels)
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
                out.append(passed(obj, check, f"no policy restricts {direction.lower()} of these pods", src))
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
                failed(
                    obj,
                    check,
                    f"NetworkPolicy {names} has no rule for {'; '.join(missing)}",
                    src,
                    f"allow the job's own pods on every TCP port in the {direction.lower()} rules (a podSelector peer, no ports)",
                )
                if missing
                else passed(
                    obj,
                    check,
                    f"NetworkPolicy {names} admits {', '.join(f.what for f in flows)} of the job's own pods",
                    src,
                )
            )
    return out
