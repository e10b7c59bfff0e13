"""One planted break per kind of liveness check, each caught with the reason a person needs.

Every break is made in the plan or the rendered job of a bundled stack that holds (the plan is the
one planned in tests/components/_liveness.py), then the model runs again on the broken copy.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gpu_cluster.components import liveness as live
from gpu_cluster.components.liveness import apis
from tests.components._liveness import bundled, mutate_job, mutate_plan, pod_of


def _failed(result: live.Liveness, kind: str) -> list[live.Check]:
    return [c for c in result.failed if c.kind == kind]


def test_admission_a_field_the_api_prunes() -> None:
    p = bundled("gcp-h100-gke")

    def old_shape(inputs: dict[str, Any]) -> None:
        spec = inputs["spec"]
        spec["admissionChecks"] = [a["name"] for a in spec.pop("admissionChecksStrategy")["admissionChecks"]]

    plan = mutate_plan(
        p.plan, "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue", "h100-gke-orchestration-kueue-clusterqueue", old_shape
    )
    bad = _failed(live.evaluate(plan, p.job), "admission")
    fields = next(c for c in bad if "fields of" in c.check)
    assert (
        "spec.admissionChecks" in fields.why and "prunes" in fields.why and "clusterqueue_types.go:57" in fields.source
    )
    chain = next(c for c in bad if "provisioning admission check" in c.check)
    assert "no ProvisioningRequest" in chain.why


def test_admission_a_required_field_missing_and_a_wrong_enum() -> None:
    spec = {
        "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu"}]}]}],
        "stopPolicy": "Pause",
    }
    problems = {pr.path: pr.reason for pr in apis.check_fields(apis.CLUSTER_QUEUE.spec, spec)}
    assert "required" in problems["spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"]
    assert "allowed: None, Hold, HoldAndDrain" in problems["spec.stopPolicy"]


def test_admission_a_queued_pool_and_a_job_without_a_queue() -> None:
    p = bundled("gcp-h100-gke")
    assert p.job is not None

    def unlabel(manifests: list[dict[str, Any]]) -> None:
        js = next(m for m in manifests if m["kind"] == "JobSet")
        del js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]

    (bad,) = _failed(live.evaluate(p.plan, mutate_job(p.job, unlabel)), "admission")
    assert "never scales up" in bad.why


def test_admission_a_custom_resource_with_no_model() -> None:
    p = bundled("azure-h100-aks")
    extra = live.Resource(type="kubernetes:example.com/v1:Widget", name="w", inputs={"spec": {}})
    plan = replace(p.plan, resources=(*p.plan.resources, extra))
    (bad,) = _failed(live.evaluate(plan, p.job), "admission")
    assert bad.object == "Widget w" and "no model" in bad.why and "apis.py" in bad.fix


def test_scheduling_a_toleration_removed() -> None:
    p = bundled("azure-h100-aks")
    assert p.job is not None

    def drop_sku(manifests: list[dict[str, Any]]) -> None:
        pod = pod_of(manifests)
        pod["tolerations"] = [t for t in pod["tolerations"] if t["key"] != "sku"]

    (bad,) = _failed(live.evaluate(p.plan, mutate_job(p.job, drop_sku)), "scheduling")
    assert "does not tolerate sku=gpu:NoSchedule" in bad.why and bad.fix == "tolerate sku (NoSchedule)"


def test_scheduling_an_operand_that_misses_the_pool_leaves_its_resource_unadvertised() -> None:
    p = bundled("azure-h100-aks")

    def no_tolerations(inputs: dict[str, Any]) -> None:
        inputs["spec"].pop("tolerations")

    plan = mutate_plan(
        p.plan,
        "kubernetes:mellanox.com/v1alpha1:NicClusterPolicy",
        "h100-aks-orchestration-nic-cluster-policy",
        no_tolerations,
    )
    bad = _failed(live.evaluate(plan, p.job), "scheduling")
    assert any("SR-IOV device plugin" in c.object and "sku=gpu:NoSchedule" in c.why for c in bad)
    adv = next(c for c in bad if "rdma/ib" in c.check)
    assert "does not run there" in adv.why


def test_scheduling_a_resource_nothing_advertises() -> None:
    p = bundled("aws-h100-eks")
    assert p.job is not None

    def hugepages(manifests: list[dict[str, Any]]) -> None:
        c = pod_of(manifests)["containers"][0]
        for part in ("requests", "limits"):
            c["resources"][part]["hugepages-2Mi"] = "5120Mi"

    bad = _failed(live.evaluate(p.plan, mutate_job(p.job, hugepages)), "scheduling")
    (huge,) = [c for c in bad if "hugepages-2Mi" in c.check]
    assert "nothing the stack installs advertises hugepages-2Mi" in huge.why


def test_scheduling_a_driver_nothing_installs() -> None:
    p = bundled("azure-mi300x-aks")
    plan = replace(p.plan, resources=tuple(r for r in p.plan.resources if "amdgpu-driver" not in r.name))
    adv = next(c for c in _failed(live.evaluate(plan, p.job), "scheduling") if "amd.com/gpu" in c.check)
    assert "finds no amdgpu driver" in adv.why


def test_reachability_the_nat_address_dropped() -> None:
    p = bundled("azure-h100-aks")

    def deployers_only(inputs: dict[str, Any]) -> None:
        ranges = inputs["apiServerAccessProfile"]["authorizedIPRanges"]
        inputs["apiServerAccessProfile"]["authorizedIPRanges"] = [r for r in ranges if not r.startswith("203.0.113.")]

    plan = mutate_plan(
        p.plan, "azure-native:containerservice:ManagedCluster", "h100-aks-orchestration-aks", deployers_only
    )
    (bad,) = _failed(live.evaluate(plan, p.job), "reachability")
    assert "not in the authorized ranges" in bad.why and "NAT gateway" in bad.fix


def test_reachability_a_closed_port() -> None:
    p = bundled("aws-h200-slurm")

    def https_only(inputs: dict[str, Any]) -> None:
        inputs.update(ipProtocol="tcp", fromPort=443.0, toPort=443.0)

    plan = mutate_plan(
        p.plan,
        "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
        "h200-slurm-interconnect-efa-in-self",
        https_only,
    )
    bad = _failed(live.evaluate(plan, p.job), "reachability")
    assert any("TCP on every port" in c.check and "no ingress rule" in c.why for c in bad)
    assert any("every protocol (EFA" in c.check for c in bad)


def test_reachability_an_nsg_without_the_pod_range() -> None:
    p = bundled("azure-mi300x-aks")

    def pre_overlay_rules(inputs: dict[str, Any]) -> None:
        inputs["securityRules"] = [r for r in inputs["securityRules"] if "pod" not in r["name"]]

    plan = mutate_plan(
        p.plan, "azure-native:network:NetworkSecurityGroup", "mi300x-aks-network-nodes-nsg", pre_overlay_rules
    )
    bad = _failed(live.evaluate(plan, p.job), "reachability")
    assert len(bad) == 6 and all("default Deny 65500" in c.why for c in bad)


def test_node_image_a_path_missing_from_the_image() -> None:
    p = bundled("azure-h100-aks")
    assert p.job is not None
    job = replace(p.job, env={**p.job.env, "NCCL_TOPO_FILE": "/opt/microsoft/ndv5-topo.xml"})
    (bad,) = _failed(live.evaluate(p.plan, job), "node-image")
    assert "/opt/microsoft/ndv5-topo.xml" in bad.check and "no cited manifest" in bad.why


def test_node_image_the_ubuntu_tuner_path_on_the_al2023_image() -> None:
    """What the PCS job named before issue 32: a fixed lib path the AL2023 sample AMI does not have."""
    p = bundled("aws-h200-slurm")
    assert p.job is not None
    job = replace(
        p.job,
        env={**p.job.env, "NCCL_TUNER_PLUGIN": "/opt/amazon/ofi-nccl/lib/libnccl-ofi-tuner.so"},
        library_path=("/opt/amazon/efa/lib", "/opt/amazon/ofi-nccl/lib"),
        found_at_start=(),
    )
    bad = _failed(live.evaluate(p.plan, job), "node-image")
    assert {c.check.split(" on the")[0] for c in bad} == {
        "NCCL_TUNER_PLUGIN /opt/amazon/ofi-nccl/lib/libnccl-ofi-tuner.so",
        "LD_LIBRARY_PATH entry /opt/amazon/efa/lib",
        "LD_LIBRARY_PATH entry /opt/amazon/ofi-nccl/lib",
    }
    assert all("pcs-al2023" in c.why for c in bad)


def test_ordering_the_gate_removed_or_without_a_deadline() -> None:
    p = bundled("gcp-h100-gke")
    assert p.job is not None

    def no_gate(manifests: list[dict[str, Any]]) -> None:
        pod = pod_of(manifests)
        pod["initContainers"] = [c for c in pod["initContainers"] if c["name"] != "wait-for-node"]

    (bad,) = _failed(live.evaluate(p.plan, mutate_job(p.job, no_gate)), "ordering")
    assert "binds it empty" in bad.why and "wait-for-node" in bad.fix

    def forever(manifests: list[dict[str, Any]]) -> None:
        gate = pod_of(manifests)["initContainers"][0]
        gate["env"] = [e if e["name"] != "GPUC_WAIT_S" else {**e, "value": "0"} for e in gate["env"]]

    (late,) = _failed(live.evaluate(p.plan, mutate_job(p.job, forever)), "ordering")
    assert "is no deadline" in late.why


def test_ordering_the_gate_after_the_sidecar() -> None:
    p = bundled("gcp-h100-gke")
    assert p.job is not None

    def swap(manifests: list[dict[str, Any]]) -> None:
        pod = pod_of(manifests)
        pod["initContainers"] = list(reversed(pod["initContainers"]))

    (bad,) = _failed(live.evaluate(p.plan, mutate_job(p.job, swap)), "ordering")
    assert "tcpxo-daemon start before the gate" in bad.why


@pytest.mark.parametrize(
    ("taint", "toleration", "holds"),
    [
        (("k", "v", "NoSchedule"), {"key": "k", "operator": "Equal", "value": "v"}, True),
        (("k", "v", "NoSchedule"), {"key": "k", "operator": "Equal", "value": "w"}, False),
        (("k", "v", "NoSchedule"), {"key": "k", "operator": "Exists", "effect": "NoExecute"}, False),
        (("k", "v", "NoExecute"), {"operator": "Exists"}, True),
    ],
)
def test_toleration_matching_is_kubernetes_own(
    taint: tuple[str, str, str], toleration: dict[str, str], holds: bool
) -> None:
    from gpu_cluster.components.liveness.cluster import tolerates
    from gpu_cluster.components.liveness.facts import Taint

    assert tolerates([toleration], Taint(*taint, source="test")) is holds


def test_a_job_that_does_not_render_is_a_failed_check_not_a_crash() -> None:
    from gpu_cluster.components.plan import check_liveness

    p = bundled("aws-h100-eks")

    def broken(run: object, spec: object) -> live.Job:
        raise ValueError("scheduler.namespace: missing")

    result = check_liveness(p.run, p.spec, broken)
    (bad,) = result.failed
    assert bad.object == "the validation job" and "scheduler.namespace: missing" in bad.why
