"""Multi-node flex-start on GKE goes through queued provisioning: the pool is queued, Kueue (a pinned
chart on the system pool) holds a ProvisioningRequest admission check, and the rendered jobs carry
the queue's label and tolerate the taint GKE puts on queued nodes. Checked against what
cluster-toolkit's A3 Ultra queued example (dws-queues.yaml.tftpl, nccl-jobset-example.yaml at
1047080) sets."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from gpu_cluster.components.catalog import load_catalog
from gpu_cluster.components.contract import read_outputs
from gpu_cluster.components.engine import OfflineRun
from gpu_cluster.components.k8s import kueue
from tests.components.gcp.conftest import gcp_obj, gpu_pool
from tests.launch import test_render_stacks
from gpu_cluster.workloads.launch import bundle as code_bundle
from gpu_cluster.workloads.launch import jobset as js
from gpu_cluster.workloads.launch import userjob
from gpu_cluster.workloads.launch.common import LaunchSpecError
from gpu_cluster.workloads.launch import validation as vjob
from gpu_cluster.workloads.validate import commands

CHART = "kubernetes:helm.sh/v4:Chart"


def _flex(itype: str = "a3-megagpu-8g", nodes: int = 4) -> dict[str, Any]:
    obj = gcp_obj(itype)
    obj["compute"].update(nodes=nodes, capacity={"type": "flex-start"})
    return obj


def _kueue_objects(run: OfflineRun) -> dict[str, dict[str, Any]]:
    return {
        r.type.rsplit(":", 1)[-1]: r.inputs
        for r in run.by_urn().values()
        if r.type.startswith("kubernetes:kueue.x-k8s.io/")
    }


def test_multi_node_flex_start_pool_is_queued(offline: Callable[..., OfflineRun]) -> None:
    pool = gpu_pool(offline(_flex())).inputs
    assert pool["queuedProvisioning"] == {"enabled": True}
    # the rest of cluster-toolkit's preconditions for a queued pool
    assert pool["nodeConfig"]["reservationAffinity"]["consumeReservationType"] == "NO_RESERVATION"
    assert pool["autoscaling"]["totalMinNodeCount"] == 0
    assert "spot" not in pool["nodeConfig"] and "placementPolicy" not in pool


def test_a_queued_pool_leaves_the_run_duration_to_the_provisioning_request(
    offline: Callable[..., OfflineRun],
) -> None:
    """cluster-toolkit's queued flex-start example (gke-a3-ultragpu.yaml at 1047080) gives the pool
    flex-start and queued provisioning and no max_run_duration; the duration rides on the JobSet's
    provreq.kueue.x-k8s.io/maxRunDurationSeconds (above). A flex-start pool that is not queued (one
    node) keeps its seven-day maximum run duration on the pool."""
    queued = gpu_pool(offline(_flex())).inputs["nodeConfig"]
    assert queued["flexStart"] is True and "maxRunDuration" not in queued
    single = gpu_pool(offline(_flex(nodes=1))).inputs["nodeConfig"]
    assert single["flexStart"] is True and single["maxRunDuration"] == "604800s"
    assert "job_annotations" not in offline(_flex(nodes=1)).outputs["scheduler"]


def test_kueue_chart_is_pinned_on_the_system_pool(offline: Callable[..., OfflineRun]) -> None:
    run = offline(_flex())
    (chart,) = [r for r in run.of_type(CHART) if r.name.endswith("-kueue")]
    assert chart.inputs["chart"] == "oci://registry.k8s.io/kueue/charts/kueue"
    assert chart.inputs["version"] == "0.17.8"
    assert chart.inputs["namespace"] == "kueue-system"
    assert chart.inputs["values"]["controllerManager"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "system"}


def test_queue_holds_a_provisioning_request_check_as_the_reference_does(offline: Callable[..., OfflineRun]) -> None:
    obj = _flex(nodes=4)
    run = offline(obj)
    objs = _kueue_objects(run)
    assert set(objs) == {"ResourceFlavor", "ProvisioningRequestConfig", "AdmissionCheck", "ClusterQueue", "LocalQueue"}
    config = objs["ProvisioningRequestConfig"]
    assert config["spec"] == {
        "provisioningClassName": "queued-provisioning.gke.io",
        "managedResources": ["nvidia.com/gpu"],
        # Kueue's own defaults written out (kueue v0.17.8 provisioningrequestconfig_types.go
        # lines 127-157): what `validate submit` waits through before Kueue deactivates the job.
        "retryStrategy": {"backoffLimitCount": 3, "backoffBaseSeconds": 60, "backoffMaxSeconds": 1800},
    }
    check = objs["AdmissionCheck"]
    assert check["spec"]["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    assert check["spec"]["parameters"] == {
        "apiGroup": "kueue.x-k8s.io",
        "kind": "ProvisioningRequestConfig",
        "name": config["metadata"]["name"],
    }
    cq = objs["ClusterQueue"]
    # v1beta2's field (kueue v0.17.8 clusterqueue_types.go:120): v1beta1's spec.admissionChecks is pruned.
    assert "admissionChecks" not in cq["spec"]
    assert cq["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": check["metadata"]["name"]}]}
    (group,) = cq["spec"]["resourceGroups"]
    (flavor,) = group["flavors"]
    assert flavor["name"] == objs["ResourceFlavor"]["metadata"]["name"]
    it = load_catalog().get("a3-megagpu-8g")
    quota = {r["name"]: r["nominalQuota"] for r in flavor["resources"]}
    assert quota["nvidia.com/gpu"] == it.accelerator.count * 4
    assert quota["cpu"] == it.vcpu * 4
    assert set(group["coveredResources"]) == set(quota)
    lq = objs["LocalQueue"]
    assert lq["metadata"]["namespace"] == run.outputs["scheduler"]["namespace"]
    assert lq["spec"] == {"clusterQueue": cq["metadata"]["name"]}
    assert run.outputs["scheduler"]["queue"] == lq["metadata"]["name"]
    # every object is an apiVersion the pinned Kueue serves (v1beta2 from 0.15.0 on)
    assert all(
        r.type.startswith("kubernetes:kueue.x-k8s.io/v1beta2:")
        for r in run.by_urn().values()
        if "kueue.x-k8s" in r.type
    )


@pytest.mark.parametrize(
    "obj",
    [_flex(nodes=1), gcp_obj("a3-megagpu-8g"), _flex("a3-ultragpu-8g", 1)],
    ids=["flex-start-1-node", "spot", "a3-ultra-flex-1-node"],
)
def test_no_queue_where_nothing_is_queued(obj: dict[str, Any], offline: Callable[..., OfflineRun]) -> None:
    run = offline(obj)
    assert "queuedProvisioning" not in gpu_pool(run).inputs
    assert _kueue_objects(run) == {}
    assert not [r for r in run.of_type(CHART) if r.name.endswith("-kueue")]
    assert "queue" not in run.outputs["scheduler"]
    assert "cloud.google.com/gke-queued" not in run.outputs["scheduler"]["tolerations"]


@pytest.mark.parametrize("nodes", [1, 2])
def test_a_flex_start_pool_registers_its_nodes_without_the_registration_taint(
    nodes: int, offline: Callable[..., OfflineRun]
) -> None:
    """A flex-start pool scales from zero for the pods that wait; the registration taint is left off
    it (components/gcp/compute.py holds_new_nodes) and the job is not told to tolerate it."""
    run = offline(_flex(nodes=nodes))
    assert "taints" not in gpu_pool(run).inputs["nodeConfig"]
    assert "gpu-cluster.io/unvalidated" not in run.outputs["scheduler"]["tolerations"]


def test_rendered_validation_and_user_jobs_go_through_the_queue(offline: Callable[..., OfflineRun]) -> None:
    outs = read_outputs(offline(_flex()).outputs)
    assert outs.scheduler.queue == kueue.LOCAL_QUEUE
    run = commands.render_run(outs, test_render_stacks.args(), "20261201t070000z-ab12")
    user = userjob.user_job(outs, "ddp", (), "20261201t070000z-ab12", code_bundle.build(), image="i@sha256:" + "0" * 64)
    assert run.jobset is not None and isinstance(user, js.JobSetSpec)
    for manifest in (run.jobset, js.render(user)):
        assert manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == kueue.LOCAL_QUEUE
        # The nodes' run duration goes through the ProvisioningRequest, as cluster-toolkit's queued
        # nccl-jobset-example.yaml (line 23) asks it: flex-start's seven days (604800 s).
        assert manifest["metadata"]["annotations"] == {"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "604800"}
        pod = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        assert {"key": "cloud.google.com/gke-queued", "operator": "Exists", "effect": "NoSchedule"} in pod[
            "tolerations"
        ]


def test_a_bad_queue_name_is_refused_by_name() -> None:
    spec = vjob.jobset_spec(
        vjob.ValidationJob(nodes=2, workdir="/fsx/v"), image="i", lustre_pvc=None, queue="Bad Queue"
    )
    with pytest.raises(LaunchSpecError) as info:
        js.render(spec)
    assert "Bad Queue" in str(info.value) and "LocalQueue" in str(info.value)
