"""A private cluster's in-cluster layer, deployed by the second program from inside the VPC:
the cluster stack (endpoint private) creates no Kubernetes object; the layer stack reads its
outputs through a StackReference and creates the same objects a public stack creates, with
the cluster's kubeconfig, volume handle and claim name."""

from __future__ import annotations

import copy
import json
from typing import Any

import pulumi
import pytest

from gpu_cluster.components.engine import OfflineRun, run_offline
from gpu_cluster.components.spec import read_stack_file

REF = "my-org/gpu-cluster/cluster"


def _k8s(run: OfflineRun) -> list[tuple[str, str]]:
    return sorted(
        (r.type, r.name.split("-", 2)[-1])
        for r in run.resources
        if r.type.startswith("kubernetes:") and not r.type.startswith("kubernetes:index")
    )


def _runs(stack: str) -> tuple[OfflineRun, OfflineRun, OfflineRun]:
    name, raw = read_stack_file(stack)
    extra = {"gcp:project": "test-project"} if raw["cloud"] == "gcp" else {}
    public = run_offline(name, raw, extra_config=extra)
    private_raw = copy.deepcopy(raw)
    private_raw["orchestration"] = {**raw["orchestration"], "endpoint": "private"}
    private = run_offline(name, private_raw, extra_config=extra)
    layer = run_offline(
        f"{name}-layer",
        private_raw,
        extra_config={**extra, "gpu-cluster:layer": "in-cluster", "gpu-cluster:cluster_stack": REF},
        stack_outputs={REF: private.outputs},
    )
    return public, private, layer


@pytest.mark.parametrize("stack", ["aws-h100-eks", "gcp-h100-gke"])
def test_layer_program_creates_what_the_public_stack_creates(stack: str) -> None:
    public, private, layer = _runs(stack)
    assert _k8s(private) == []

    # Same objects, same Kubernetes names (the resource names differ only by their prefix).
    def objects(run: OfflineRun) -> list[tuple[str, Any]]:
        return sorted(
            (r.type, json.dumps(r.inputs.get("metadata", {}).get("name", r.inputs.get("chart"))))
            for r in run.resources
            if r.type.startswith("kubernetes:") and "providers" not in r.type
        )

    assert objects(layer) == objects(public) and objects(layer)
    (provider,) = [r for r in layer.resources if r.type == "pulumi:providers:kubernetes"]
    # The kubeconfig arrives as a secret (Pulumi's secret envelope: a signature key and the value).
    kubeconfig = provider.inputs["kubeconfig"]
    assert isinstance(kubeconfig, dict) and kubeconfig["value"] == private.outputs["access"]["kubeconfig"]
    # The Lustre volume (GKE also has the checkpoint bucket's GCS FUSE volume).
    pv = next(
        r
        for r in layer.resources
        if r.type == "kubernetes:core/v1:PersistentVolume" and "gcsfuse" not in r.inputs["spec"]["csi"]["driver"]
    ).inputs["spec"]["csi"]
    assert pv["volumeHandle"] == private.outputs["mount"]["volume_handle"]
    pvc = next(
        r
        for r in layer.resources
        if r.type == "kubernetes:core/v1:PersistentVolumeClaim" and "checkpoints" not in r.inputs["metadata"]["name"]
    )
    assert pvc.inputs["metadata"]["name"] == private.outputs["scheduler"]["lustre_claim"]
    # Nothing of the cloud is created by the layer program.
    assert not [r.type for r in layer.resources if r.type.startswith(("aws:", "gcp:"))]
    assert layer.outputs == {"in_cluster_layer_of": REF}


def test_layer_stack_misconfiguration_is_named() -> None:
    name, raw = read_stack_file("aws-h200-slurm")
    with pytest.raises(pulumi.InputPropertiesError) as info:
        run_offline(name, raw, extra_config={"gpu-cluster:layer": "everything"})
    text = str(info.value) + repr(getattr(info.value, "errors", ""))
    assert "gpu-cluster:layer" in text and "gpu-cluster:cluster_stack" in text and "slurm" in text


@pytest.mark.parametrize("stack", ["aws-h100-eks", "gcp-h100-gke", "gcp-h200-gke"])
def test_jobs_run_in_their_own_namespace_with_what_they_mount(stack: str) -> None:
    """The jobs' namespace (not `default`, CKV_K8S_21) is the stack output scheduler.namespace; the
    claims and the Workload Identity service account the pods use are created in it, after it (a pod
    mounts only claims of its own namespace), by the public stack and the private layer alike."""
    from gpu_cluster.components.k8s.addons import JOB_NAMESPACE, JOB_POD_SECURITY

    public, private, layer = _runs(stack)
    assert public.outputs["scheduler"]["namespace"] == private.outputs["scheduler"]["namespace"] == JOB_NAMESPACE
    assert JOB_NAMESPACE != "default"
    for run in (public, layer):
        (ns,) = [
            r
            for r in run.resources
            if r.type == "kubernetes:core/v1:Namespace" and r.inputs["metadata"]["name"] == JOB_NAMESPACE
        ]
        labels = ns.inputs["metadata"]["labels"]
        assert {k: labels[k] for k in JOB_POD_SECURITY} == JOB_POD_SECURITY
        assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
        used = [
            r
            for r in run.resources
            if r.type in ("kubernetes:core/v1:PersistentVolumeClaim", "kubernetes:core/v1:ServiceAccount")
        ]
        assert {r.type for r in used} >= {"kubernetes:core/v1:PersistentVolumeClaim"}
        for r in used:
            assert r.inputs["metadata"]["namespace"] == JOB_NAMESPACE, r.name
            assert ns.urn in r.dependencies, f"{r.name} does not wait for its namespace"
