"""The stack's own validation job on GCP: GKE creates the JobSet after the node pool; Cluster
Director hands back the rendered batch script."""

from __future__ import annotations

import subprocess
from typing import Any, Callable

import pytest
import yaml

from components import engine
from components.catalog import load_catalog
from components.engine import OfflineRun, run_offline
from components.k8s.addons import JOBSET_CHART
from workloads.launch import sbatch
from workloads.launch.validation import ValidationJob, sbatch_spec
from tests.components.gcp.conftest import PROJECT, gcp_obj

JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"


def _ints(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def test_gke_creates_the_validation_jobset(offline: Callable[..., OfflineRun]) -> None:
    run = offline(gcp_obj("a3-megagpu-8g"))
    js = run.one(JOBSET)
    assert [a.type for a in run.ancestors(js)][0] == "gpu-cluster:gcp:Orchestration"
    body = _ints(js.inputs["spec"])
    job = body["replicatedJobs"][0]["template"]["spec"]
    assert (job["parallelism"], job["completions"]) == (2, 2)
    pod = job["template"]["spec"]
    (c,) = pod["containers"]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "8"}  # no EFA, no hugepages off AWS
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "a3-megagpu-8g"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    (pvc,) = run.of_type("kubernetes:core/v1:PersistentVolumeClaim")
    assert {"name": "lustre", "persistentVolumeClaim": {"claimName": pvc.inputs["metadata"]["name"]}} in pod["volumes"]
    assert "-m workloads.validate run --out /fsx/validation/t1" in c["command"][2]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert all(env[k] == v for k, v in load_catalog().get("a3-megagpu-8g").software.fabric_env.items())
    out = run.outputs["validation"]
    assert out["kind"] == "jobset" and yaml.safe_load(out["manifest"])["spec"] == body
    assert out["watch_command"] == "kubectl -n default get jobset gpuc-validate"


def test_gke_jobset_waits_for_the_node_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[list[str]] = []
    original = engine._RecordingMonitor.RegisterResource

    def register(self: Any, request: Any) -> Any:
        if request.type == JOBSET:
            sent.append(list(request.dependencies))
        return original(self, request)

    monkeypatch.setattr(engine._RecordingMonitor, "RegisterResource", register)
    run = run_offline("test", gcp_obj("a3-megagpu-8g"), extra_config={"gcp:project": PROJECT})
    (deps,) = sent
    got = sorted((r.type, r.inputs.get("chart", "")) for r in run.resources if r.urn in deps)
    assert got == [("gcp:container/nodePool:NodePool", ""), ("kubernetes:core/v1:PersistentVolumeClaim", ""),
                   ("kubernetes:helm.sh/v4:Chart", JOBSET_CHART)]


def test_cluster_director_outputs_the_rendered_sbatch_job(offline: Callable[..., OfflineRun]) -> None:
    run = offline(gcp_obj("a3-ultragpu-8g", kind="slurm"))
    assert run.of_type(JOBSET) == []
    out = run.outputs["validation"]
    assert out["kind"] == "sbatch" and out["submit_command"].endswith("sbatch /fsx/validation/validate.sbatch")
    script = out["script"]
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    assert "-m workloads.validate" in script
    expected = sbatch_spec(ValidationJob(
        nodes=2, workdir="/fsx/validation/t1", instance_type="a3-ultragpu-8g",
        python="/fsx/gpu-cluster/.venv/bin/python", partition="gpu",
        extra_env={"PYTHONPATH": "/fsx/gpu-cluster"}))
    assert script == sbatch.render(expected)
    assert [line for line in script.splitlines() if line.startswith('echo "step ') and "exit status" not in line] == [
        f'echo "step {n}: {step.name}"' for n, step in enumerate(expected.then, start=2)]


def test_stack_config_names_the_image_and_drops_the_wait() -> None:
    image = "us-docker.pkg.dev/p/r/gpu-cluster:1"
    run = run_offline("test", gcp_obj("a3-megagpu-8g"),
                      extra_config={"gcp:project": PROJECT, "gpu-cluster:validation_image": image})
    (c,) = run.one(JOBSET).inputs["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    assert c["image"] == image
    assert "gpu-cluster/workloads/validate" not in c["command"][2]
