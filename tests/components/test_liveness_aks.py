"""Liveness of what issue 35 adds to an AKS cluster, each with a planted break the model catches:
the job's NetworkPolicy now that Cilium enforces it, the ND v5 topology's ConfigMap the job mounts,
one node-feature-discovery on the MI300X nodes, and the AKS add-ons that run on the GPU pool.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpu_cluster.components import liveness as live
from tests.components._liveness import bundled, mutate_job, mutate_plan, pod_of

CLUSTER = "azure-native:containerservice:ManagedCluster"


def _failed(result: live.Liveness, kind: str) -> list[live.Check]:
    return [c for c in result.failed if c.kind == kind]


def _policy(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    return next(m for m in manifests if m["kind"] == "NetworkPolicy")


@pytest.mark.parametrize("stack", ["azure-h100-aks", "azure-mi300x-aks"])
def test_the_jobs_network_policy_is_checked_where_cilium_enforces_it(stack: str) -> None:
    p = bundled(stack)
    ingress, egress = p.checks("reachability", "its NetworkPolicy (cilium enforces it)")
    assert ingress.holds and "TCP on every port" in ingress.why and "network-policies" in ingress.source
    assert egress.holds and "no policy restricts egress" in egress.why


def test_a_policy_that_admits_only_the_rendezvous_port_cuts_nccl_off() -> None:
    p = bundled("azure-h100-aks")
    assert p.job is not None

    def ports_only(manifests: list[dict[str, Any]]) -> None:
        _policy(manifests)["spec"]["ingress"][0]["ports"] = [{"protocol": "TCP", "port": 29500}]

    (bad,) = _failed(live.evaluate(p.plan, mutate_job(p.job, ports_only)), "reachability")
    assert "ingress" in bad.check and "TCP on every port" in bad.why and "every TCP port" in bad.fix


def test_an_egress_policy_without_dns_and_an_ipblock_on_cilium_fail() -> None:
    p = bundled("azure-h100-aks")
    assert p.job is not None

    def egress_to_own(manifests: list[dict[str, Any]]) -> None:
        spec = _policy(manifests)["spec"]
        spec["policyTypes"] = ["Ingress", "Egress"]
        spec["egress"] = [{"to": [{"podSelector": spec["podSelector"]}]}]

    (bad,) = _failed(live.evaluate(p.plan, mutate_job(p.job, egress_to_own)), "reachability")
    assert "egress" in bad.check and "DNS" in bad.why

    def ipblock(manifests: list[dict[str, Any]]) -> None:
        # The pod range as an ipBlock: Cilium cannot match pod IPs with one (azure-cni-powered-by-cilium.md:110).
        _policy(manifests)["spec"]["ingress"] = [{"from": [{"ipBlock": {"cidr": "10.253.0.0/16"}}]}]

    (bad,) = _failed(live.evaluate(p.plan, mutate_job(p.job, ipblock)), "reachability")
    assert "ingress" in bad.check
    # Without an enforcing engine the same policy is not the cluster's business.
    plan = mutate_plan(
        p.plan, CLUSTER, "h100-aks-orchestration-aks", lambda i: i["networkProfile"].pop("networkPolicy")
    )
    assert not _failed(live.evaluate(plan, mutate_job(p.job, ipblock)), "reachability")


def test_the_topology_file_comes_from_the_configmap_the_stack_creates() -> None:
    p = bundled("azure-h100-aks")
    assert p.job is not None and p.job.env["NCCL_TOPO_FILE"] == "/opt/nvidia-topology/topo.xml"
    (topo,) = p.checks("node-image", "NCCL_TOPO_FILE /opt/nvidia-topology/topo.xml")
    assert topo.holds and "ConfigMap gpu-jobs/nvidia-topology" in topo.why and "configMap" in topo.source
    # The stack without its ConfigMap: the pod would never start.
    plan = live.Plan(
        resources=tuple(r for r in p.plan.resources if not r.name.endswith("nccl-topology")),
        outputs=p.plan.outputs,
        deferred=p.plan.deferred,
    )
    (bad,) = _failed(live.evaluate(plan, p.job), "node-image")
    assert "no ConfigMap gpu-jobs/nvidia-topology" in bad.why and "never start" in bad.why
    # A ConfigMap without the key the pod's path needs.
    plan = mutate_plan(
        p.plan, "kubernetes:core/v1:ConfigMap", "h100-aks-orchestration-nccl-topology", lambda i: i.update(data={})
    )
    (bad,) = _failed(live.evaluate(plan, p.job), "node-image")
    assert "has no key topo.xml" in bad.why


def test_one_nfd_on_the_mi300x_nodes_and_two_fail() -> None:
    p = bundled("azure-mi300x-aks")
    (gpu,) = p.checks("scheduling", "pool gpu: one node-feature-discovery")
    assert gpu.holds and "network-operator" in gpu.why
    # AMD's default rule still labels the MI300X nodes, through the Network Operator's NFD.
    (plugin,) = p.checks("scheduling", "DeviceConfig gpu-operator: device plugin DaemonSet")
    assert plugin.holds and "amd-vgpu" in plugin.why and "network-operator" in plugin.why
    chart = next(r for r in p.plan.resources if r.inputs.get("chart") == "gpu-operator-charts")

    def amd_nfd_on(inputs: dict[str, Any]) -> None:
        # As the reference deploys it, tolerating the GPU pool's taint (as issue 32 had it).
        inputs["values"]["node-feature-discovery"] = {
            "enabled": True,
            "worker": {"tolerations": [{"operator": "Exists"}]},
        }

    plan = mutate_plan(p.plan, chart.type, chart.name, amd_nfd_on)
    (bad,) = [c for c in _failed(live.evaluate(plan, p.job), "scheduling") if c.object == "pool gpu"]
    assert "2 land there" in bad.why and "amd-node-feature-discovery-worker" in bad.why
    assert "master-commandline-reference.md" in bad.source and "NodeFeatureRules" in bad.fix

    def no_rule(inputs: dict[str, Any]) -> None:
        inputs["values"]["installdefaultNFDRule"] = False

    plan = mutate_plan(p.plan, chart.type, chart.name, no_rule)
    failed = _failed(live.evaluate(plan, p.job), "scheduling")
    assert any("amd.com/gpu" in c.check for c in failed)


@pytest.mark.parametrize("stack", ["azure-h100-aks", "azure-mi300x-aks"])
def test_the_aks_add_ons_on_the_gpu_pool_are_modelled_with_their_sources(stack: str) -> None:
    p = bundled(stack)
    (cilium,) = p.checks("scheduling", "AKS's Cilium agent")
    (ama,) = p.checks("scheduling", "ama-logs")
    assert cilium.holds and "cilium" in cilium.source
    assert ama.holds and "Docker-Provider" in ama.source
    # ama-logs selects Linux nodes: a pool whose nodes lack the label would not get it.
    pool = next(r for r in p.plan.resources if r.name.endswith("gpu-pool"))
    assert pool.inputs["osSKU"] == "Ubuntu"


def test_the_job_mounts_the_topology_it_names() -> None:
    p = bundled("azure-h100-aks")
    assert p.job is not None
    pod = pod_of([dict(m) for m in p.job.manifests])
    volumes = {v["name"]: v for v in pod["volumes"]}
    (c,) = pod["containers"]
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == "/opt/nvidia-topology")
    assert volumes[mount["name"]]["configMap"]["name"] == "nvidia-topology"
