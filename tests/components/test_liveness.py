"""Liveness of the bundled stacks, the seven blockers of issue 32 as regressions, and the variants
per cloud (spot, reservation, a 2-node queued pool): each holds or the spec refuses it, saying why.

Each stack is planned once (tests/components/_liveness.py): the program under the mock engine, the
validation job rendered as `validate render` renders it, the model over both.
"""

from __future__ import annotations

import pytest

from gpu_cluster.components.spec import SpecError, bundled_stacks
from tests.components._liveness import bundled, plan_raw, pod_of, raw_of


@pytest.mark.parametrize("stack", bundled_stacks())
def test_every_bundled_stack_holds_with_a_source_on_every_check(stack: str) -> None:
    p = bundled(stack)
    assert p.result.holds, [f"{c.object}: {c.check}: {c.why}" for c in p.failed()]
    kinds = {c.kind for c in p.result.checks}
    # Every stack is checked for where its pods run, what they reach, and when they start.
    assert {"scheduling", "reachability", "ordering"} <= kinds
    for c in p.result.checks:
        assert c.source.strip() and c.why.strip() and c.check.strip(), c


def test_the_json_summary_carries_the_checks() -> None:
    from gpu_cluster.components.plan import summarize

    p = bundled("gcp-h100-gke")
    doc = summarize("gcp-h100-gke", p.spec, p.run, liveness=p.result).liveness
    assert doc["holds"] is True and doc["checks"]
    assert {"kind", "object", "check", "holds", "why", "source"} <= set(doc["checks"][0])


# ---------------------------------------------------------------------------------------------
# The seven blockers, each as the check that failed on the code before issue 32.


def test_blocker_kueue_cluster_queue_fields_and_the_queue_chain_hold() -> None:
    p = bundled("gcp-h100-gke")
    (fields,) = p.checks("admission", "ClusterQueue gpu-cluster-queue: fields of")
    assert fields.holds and "clusterqueue_types.go" in fields.source
    (chain,) = p.checks("admission", "-> ProvisioningRequestConfig gpu-provisioning -> pool")
    assert chain.holds and "queued-provisioning.gke.io" in chain.why
    cq = next(r for r in p.plan.resources if r.type.endswith(":ClusterQueue"))
    assert "admissionChecks" not in cq.inputs["spec"]


@pytest.mark.parametrize("stack", ["azure-h100-aks", "azure-mi300x-aks"])
def test_blocker_aks_api_admits_the_nat_address(stack: str) -> None:
    p = bundled(stack)
    (api,) = p.checks("reachability", "nodes reach the API server from their egress address")
    assert api.holds and "203.0.113." in api.why and "api-server-authorized-ip-ranges.md:45" in api.source


def test_blocker_amd_gpus_are_advertised_after_the_driver() -> None:
    p = bundled("azure-mi300x-aks")
    (adv,) = p.checks("scheduling", "amd.com/gpu x 8 advertised")
    assert adv.holds and "DeviceConfig" in adv.why
    (order,) = p.checks("ordering", "amd.com/gpu ready before the pod starts")
    assert order.holds and "install-amdgpu-driver" in order.why
    (inst,) = p.checks("scheduling", "DaemonSet kube-system/install-amdgpu-driver")
    assert inst.holds


@pytest.mark.parametrize("stack", ["azure-h100-aks", "azure-mi300x-aks"])
def test_blocker_overlay_pod_traffic_passes_the_node_nsg(stack: str) -> None:
    p = bundled(stack)
    pods = p.checks("reachability", "pods reach each other (pod range 10.253.0.0/16)")
    dns = p.checks("reachability", "pods reach CoreDNS")
    nodes = p.checks("reachability", "nodes reach pods")
    assert len(pods) == len(dns) == len(nodes) == 2 and all(c.holds for c in [*pods, *dns, *nodes])
    assert all("concepts-network-azure-cni-overlay.md" in c.source for c in pods)


@pytest.mark.parametrize("stack", ["azure-h100-aks", "azure-mi300x-aks"])
def test_blocker_aks_spot_pool_is_tolerated_by_operands_and_the_job(stack: str) -> None:
    name, raw = raw_of(stack, compute={"capacity": {"type": "spot"}})
    p = plan_raw(name, raw)
    assert p.result.holds, [f"{c.object}: {c.why}" for c in p.failed()]
    assert p.run.outputs["scheduler"]["tolerations"] == ["sku", "kubernetes.azure.com/scalesetpriority"]
    assert p.job is not None
    keys = {t["key"] for t in pod_of(list(p.job.manifests))["tolerations"]}
    assert "kubernetes.azure.com/scalesetpriority" in keys
    landed = [c for c in p.checks("scheduling", "runs on every node of pool gpu") if c.holds]
    assert landed and all("scalesetpriority=spot:NoSchedule" in c.why for c in landed)


def test_blocker_pcs_plugin_paths_are_found_at_start_not_fixed_to_the_ubuntu_layout() -> None:
    p = bundled("aws-h200-slurm")
    assert p.job is not None
    assert "NCCL_TUNER_PLUGIN" not in p.job.env and not p.job.library_path
    found = p.checks("node-image")
    assert found and all(c.holds for c in found)
    ofi = next(c for c in found if "aws-ofi-nccl plugin" in c.check)
    assert "/opt/amazon/ofi-nccl/lib64, /opt/amazon/ofi-nccl/lib" in ofi.why and "found at start" in ofi.why


def test_blocker_tcpxo_pod_waits_for_its_installer() -> None:
    p = bundled("gcp-h100-gke")
    (gate,) = p.checks("ordering", "paths ready before the containers bind them")
    assert gate.holds and "/dev/aperture_devices/" in gate.why and "wait-for-node" in gate.why
    assert p.job is not None
    inits = [c["name"] for c in pod_of(list(p.job.manifests))["initContainers"]]
    assert inits == ["wait-for-node", "tcpxo-daemon"]


# ---------------------------------------------------------------------------------------------
# Variants per cloud: each holds, or the spec refuses it with its reason.

VARIANTS = [
    ("aws-h100-eks", {"capacity": {"type": "spot"}}, None),
    ("aws-h100-eks", {"capacity": {"type": "reservation", "id": "cr-0123456789abcdef0"}}, None),
    ("aws-h100-eks", {"capacity": {"type": "flex-start"}, "nodes": 2}, "compute.capacity.type: 'flex-start'"),
    ("gcp-h100-gke", {"capacity": {"type": "spot"}}, None),
    ("gcp-h100-gke", {"capacity": {"type": "reservation", "id": "h100-block-1"}}, None),
    ("gcp-h100-gke", {"nodes": 2}, None),  # a 2-node queued (flex-start) pool
    ("azure-h100-aks", {"capacity": {"type": "spot"}}, None),
    (
        "azure-h100-aks",
        {
            "capacity": {
                "type": "reservation",
                "id": "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg/providers/"
                "Microsoft.Compute/capacityReservationGroups/crg",
            }
        },
        # No ND size can use an on-demand capacity reservation (capacity-reservation-overview.md).
        "compute.capacity.type: 'reservation' is refused for Standard_ND96isr_H100_v5",
    ),
    ("azure-h100-aks", {"capacity": {"type": "flex-start"}}, "compute.capacity.type: 'flex-start'"),
]


@pytest.mark.parametrize(
    ("stack", "compute", "refused"), VARIANTS, ids=[f"{s}-{i}" for i, (s, _, _) in enumerate(VARIANTS)]
)
def test_variant_holds_or_is_refused_with_its_reason(
    stack: str, compute: dict[str, object], refused: str | None
) -> None:
    name, raw = raw_of(stack, compute=compute)
    if refused is not None:
        with pytest.raises(SpecError) as err:
            plan_raw(name, raw)
        assert refused in err.value.render() and "allowed:" in err.value.render()
        return
    p = plan_raw(name, raw)
    assert p.result.holds, [f"{c.object}: {c.check}: {c.why}" for c in p.failed()]
    if compute.get("nodes") == 2:
        # The queue chain runs to a pool that takes queued provisioning, and 2 pods fit it.
        assert any(c.holds for c in p.checks("admission", "-> pool"))
        assert any(c.holds and "2 pods fit" in c.check for c in p.checks("scheduling"))
