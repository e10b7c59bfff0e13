"""The stack's own validation job: EKS creates it as a JobSet once the nodes are up; PCS
hands back the rendered batch script. Both come from the stack's spec and the catalog."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from components.aws.orchestration_eks import FSX_VOLUME
from components.cluster import OUTPUT_KEYS
from components.k8s.addons import JOBSET_CHART
from workloads.launch import sbatch
from workloads.launch.validation import DEFAULT_IMAGE, ValidationJob, sbatch_spec
from tests.components.aws._offline import in_pillar, run

JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"


def _ints(value: Any) -> Any:
    """Mock state carries numbers as floats; the rendered manifest has ints."""
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


@pytest.mark.parametrize("stack", ["aws-h100-eks", "aws-h100-capacity-block"])
def test_eks_creates_the_validation_jobset(stack: str) -> None:
    result, spec = run(stack)
    (js,) = in_pillar(result, "Orchestration", JOBSET)
    assert "validation" in OUTPUT_KEYS
    assert js.inputs["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and js.inputs["kind"] == "JobSet"
    body = _ints(js.inputs["spec"])
    (rjob,) = body["replicatedJobs"]
    job = rjob["template"]["spec"]
    n = spec.compute.nodes
    assert (rjob["replicas"], job["parallelism"], job["completions"]) == (1, n, n)
    pod = job["template"]["spec"]
    (c,) = pod["containers"]
    it = spec.instance
    limits = c["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == str(it.accelerator.count) == "8"
    assert limits["vpc.amazonaws.com/efa"] == str(it.network.efa_interfaces)
    assert limits["hugepages-2Mi"] == "5120Mi"
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": spec.compute.instance_type}
    assert {"name": "lustre", "persistentVolumeClaim": {"claimName": FSX_VOLUME}} in pod["volumes"]
    assert c["image"] == DEFAULT_IMAGE
    script = c["command"][2]
    assert "-m workloads.validate run --out /fsx/validation/" + spec.name in script
    assert "-m workloads.validate judge" in script
    # The default image lacks the package: pods wait for its checkout on Lustre first.
    assert "until [ -e /fsx/gpu-cluster/workloads/validate ]; do" in script
    assert script.index("/fsx/gpu-cluster/workloads/validate") < script.index("torch.distributed.run")
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["PYTHONPATH"] == "/fsx/gpu-cluster"
    assert all(env[k] == v for k, v in it.software.fabric_env.items())

    out = result.outputs["validation"]
    assert out["kind"] == "jobset" and (out["name"], out["namespace"]) == ("gpuc-validate", "default")
    assert out["watch_command"] == "kubectl -n default get jobset gpuc-validate"
    assert out["report"] == f"/fsx/validation/{spec.name}/report.json"
    # The YAML in the output is what the stack created.
    manifest = yaml.safe_load(out["manifest"])
    assert manifest["spec"] == body
    assert _ints(js.inputs["metadata"]) == manifest["metadata"]


def test_pcs_outputs_the_rendered_sbatch_job() -> None:
    result, spec = run("aws-h200-slurm")
    assert result.of_type(JOBSET) == []
    out = result.outputs["validation"]
    assert out["kind"] == "sbatch"
    mount = spec.storage.lustre.mount_point
    assert out["submit_command"].endswith(f"sbatch {mount}/validation/validate.sbatch")
    assert out["report"] == f"{mount}/validation/{spec.name}/report.json"
    script = out["script"]
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    assert "-m workloads.validate" in script
    assert f"#SBATCH --partition={spec.orchestration.partition}" in script
    # Built here from the stack's facts alone, the job renders to the very same script.
    expected = sbatch_spec(ValidationJob(
        nodes=spec.compute.nodes, workdir=f"{mount}/validation/{spec.name}", instance_type=spec.compute.instance_type,
        python=f"{mount}/gpu-cluster/.venv/bin/python", partition=spec.orchestration.partition,
        extra_env={"PYTHONPATH": f"{mount}/gpu-cluster"}))
    assert script == sbatch.render(expected)
    names = [line.split(": ", 1)[1].rstrip('"') for line in script.splitlines() if line.startswith('echo "step ')
             and ": " in line and "exit status" not in line]
    assert names == [step.name for step in expected.then] == ["fabric-only", "ddp-data", "ddp", "judge"]


def test_jobset_waits_for_nodes_controller_and_claim(monkeypatch: pytest.MonkeyPatch) -> None:
    """The dependencies the engine is sent with the JobSet's registration (recorded by
    wrapping the offline monitor, which keeps no dependencies itself)."""
    from components import engine
    from tests.components.aws._offline import _run

    sent: dict[str, list[str]] = {}
    original = engine._RecordingMonitor.RegisterResource

    def register(self: Any, request: Any) -> Any:
        if request.type == JOBSET:
            sent[request.name] = list(request.dependencies)
        return original(self, request)

    monkeypatch.setattr(engine._RecordingMonitor, "RegisterResource", register)
    result, _ = _run("aws-h100-eks", None)
    (deps,) = sent.values()
    types = sorted({r.type for r in result.resources if r.urn in deps})
    assert types == ["aws:eks/nodeGroup:NodeGroup", "kubernetes:core/v1:PersistentVolumeClaim",
                     "kubernetes:helm.sh/v4:Chart"]
    (chart,) = [r for r in result.resources if r.urn in deps and r.type == "kubernetes:helm.sh/v4:Chart"]
    assert chart.inputs["chart"] == JOBSET_CHART
