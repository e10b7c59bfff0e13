"""The job's NetworkPolicy in the liveness model: enforced by the cluster's network plugin (EKS: the
vpc-cni add-on's enableNetworkPolicy; GKE: Dataplane V2), applicable by the EKS agent (owned pods, at
most 24 port combinations per protocol), and admitting the job's own pods on every port."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpu_cluster.components import liveness as live
from tests.components._liveness import bundled, mutate_job, mutate_plan

ENFORCED = "enforced on the job's pods"


def _netpol(result: live.Liveness) -> list[live.Check]:
    return [c for c in result.checks if c.object.startswith("NetworkPolicy ")]


@pytest.mark.parametrize("stack", ["aws-h100-eks", "aws-h100-capacity-block", "gcp-h100-gke", "gcp-h200-gke"])
def test_the_bundled_kubernetes_stacks_enforce_the_jobs_policy(stack: str) -> None:
    p = bundled(stack)
    checks = _netpol(p.result)
    assert [c.check for c in checks if c.check == ENFORCED] == [ENFORCED]
    assert all(c.holds for c in checks), [c for c in checks if not c.holds]
    assert any("admits" in c.check for c in checks)


def test_eks_without_enable_network_policy_is_not_enforced() -> None:
    p = bundled("aws-h100-eks")

    def off(inputs: dict[str, Any]) -> None:
        values = json.loads(inputs["configurationValues"])
        del values["enableNetworkPolicy"]
        inputs["configurationValues"] = json.dumps(values)

    plan = mutate_plan(p.plan, "aws:eks/addon:Addon", "h100-eks-orchestration-vpc-cni", off)
    (bad,) = [c for c in live.evaluate(plan, p.job).failed]
    assert bad.check == ENFORCED and "enableNetworkPolicy null" in bad.why
    assert "cni-network-policy-configure.adoc" in bad.source and '"enableNetworkPolicy": "true"' in bad.fix


def test_eks_a_boolean_true_is_not_the_documented_string() -> None:
    p = bundled("aws-h100-eks")

    def boolean(inputs: dict[str, Any]) -> None:
        values = json.loads(inputs["configurationValues"])
        values["enableNetworkPolicy"] = True
        inputs["configurationValues"] = json.dumps(values)

    plan = mutate_plan(p.plan, "aws:eks/addon:Addon", "h100-eks-orchestration-vpc-cni", boolean)
    (bad,) = live.evaluate(plan, p.job).failed
    assert "enableNetworkPolicy true" in bad.why


def test_eks_agent_applies_at_most_24_port_combinations_per_protocol() -> None:
    p = bundled("aws-h100-eks")
    assert p.job is not None

    def many_ports(manifests: list[dict[str, Any]]) -> None:
        pol = next(m for m in manifests if m["kind"] == "NetworkPolicy")
        pol["spec"]["egress"] = [{"ports": [{"protocol": "TCP", "port": 30000 + i} for i in range(25)]}]
        pol["spec"]["policyTypes"] = ["Ingress", "Egress"]

    (bad,) = live.evaluate(p.plan, mutate_job(p.job, many_ports)).failed
    assert bad.check == ENFORCED and "25 TCP port combinations" in bad.why and "cni-network-policy.adoc" in bad.source


def test_a_policy_with_a_port_list_cuts_the_jobs_own_traffic() -> None:
    p = bundled("gcp-h200-gke")
    assert p.job is not None

    def rendezvous_only(manifests: list[dict[str, Any]]) -> None:
        pol = next(m for m in manifests if m["kind"] == "NetworkPolicy")
        pol["spec"]["ingress"][0]["ports"] = [{"protocol": "TCP", "port": 29500}]

    (bad,) = live.evaluate(p.plan, mutate_job(p.job, rendezvous_only)).failed
    assert "admits" in bad.check and "NCCL's bootstrap" in bad.why


def test_a_policy_selecting_no_pod_of_the_job_protects_nothing() -> None:
    p = bundled("aws-h100-eks")
    assert p.job is not None

    def elsewhere(manifests: list[dict[str, Any]]) -> None:
        pol = next(m for m in manifests if m["kind"] == "NetworkPolicy")
        pol["spec"]["podSelector"] = {"matchLabels": {"app": "other"}}

    (bad,) = live.evaluate(p.plan, mutate_job(p.job, elsewhere)).failed
    assert bad.check == "selects the job's pods" and "protects nothing" in bad.why


def test_gke_without_dataplane_v2_is_not_enforced() -> None:
    p = bundled("gcp-h100-gke")
    name = p.plan.of("gcp:container/cluster:Cluster")[0].name
    plan = mutate_plan(p.plan, "gcp:container/cluster:Cluster", name, lambda i: i.pop("datapathProvider"))
    bad = [c for c in live.evaluate(plan, p.job).failed if c.object.startswith("NetworkPolicy ")]
    assert [c.check for c in bad] == [ENFORCED] and "dataplane-v2" in bad[0].source


def test_aks_and_slurm_get_no_policy_check() -> None:
    # AKS's policy engine is components/azure's (issue 35); a Slurm job has no NetworkPolicy.
    assert _netpol(bundled("azure-h100-aks").result) == []
    assert _netpol(bundled("aws-h200-slurm").result) == []
