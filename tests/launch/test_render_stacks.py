"""``validate render`` for every bundled stack, from the outputs its offline plan gives: what
``submit`` would hand the scheduler, checked against the Kubernetes and JobSet schemas, as
bash, and for what a fresh cluster needs (the job carries its own code; each run has its own
directory)."""

from __future__ import annotations

import argparse
import base64
import io
import re
from datetime import datetime, timezone
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from gpu_cluster.components.catalog import load_catalog
from gpu_cluster.components.contract import ClusterOutputs, read_outputs
from gpu_cluster.components.engine import run_offline
from gpu_cluster.components.spec import bundled_stacks, read_stack_file
from gpu_cluster.workloads.launch import bundle as code_bundle
from gpu_cluster.workloads.launch import validation as vjob
from gpu_cluster.workloads.validate import commands
from tests.launch.test_jobset import K8S_VERSIONS, _crd_errors, _pod
from tests.launch.test_jobset import jobset_schema as jobset_schema  # the fixture, by its name

ROOT = Path(__file__).resolve().parents[2]
K8S_STACKS = [s for s in bundled_stacks() if read_stack_file(s)[1]["orchestration"]["kind"] != "slurm"]
SLURM_STACKS = [s for s in bundled_stacks() if s not in K8S_STACKS]
# Every Kubernetes stack renders, the AKS ones included (issue 23).
K8S_RENDERED = K8S_STACKS
_OUTPUTS: dict[str, ClusterOutputs] = {}


def outputs(stack: str) -> ClusterOutputs:
    if stack not in _OUTPUTS:
        name, raw = read_stack_file(stack)
        extra = {"gcp:project": "test-project"} if raw["cloud"] == "gcp" else None
        _OUTPUTS[stack] = read_outputs(run_offline(name, raw, extra_config=extra).outputs)
    return _OUTPUTS[stack]


def args(**over: Any) -> argparse.Namespace:
    base: dict[str, Any] = dict(
        python=None,
        image=vjob.DEFAULT_IMAGE,
        env=[],
        run_arg=[],
        cpu=False,
        procs_per_node=None,
        time_limit=60,
        rdzv_port=29500,
        no_drain=False,
        shared=False,
    )
    base.update(over)
    return argparse.Namespace(**base)


@pytest.mark.parametrize("stack", K8S_RENDERED)
def test_kubernetes_render_is_valid_and_carries_the_code(stack: str, jobset_schema: dict[str, Any]) -> None:
    outs = outputs(stack)
    r = commands.render_run(outs, args(), "20261201t070000z-ab12")
    assert r.jobset is not None and r.configmap is not None
    assert _crd_errors(jobset_schema, r.jobset) == []
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(_pod(r.jobset), version, strict=True)
        kubernetes_validate.validate(r.configmap, version, strict=True)
    name = r.jobset["metadata"]["name"]
    assert name == "gpuc-20261201t070000z-ab12" == r.configmap["metadata"]["name"]
    assert r.jobset["metadata"]["namespace"] == outs.scheduler.namespace == r.configmap["metadata"]["namespace"]
    pod = r.jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    it = load_catalog().get(outs.instance_type)
    limits = c["resources"]["limits"]
    gpu = "amd.com/gpu" if it.accelerator.vendor == "amd" else "nvidia.com/gpu"
    assert limits[gpu] == str(it.accelerator.count)
    if outs.cloud == "azure":
        # One rdma/ib per HCA (the Network Operator's SR-IOV plugin, components/k8s/aks.py) and
        # IPC_LOCK (AZURE.md §4.1, ai-infrastructure-on-azure NCCL chart: else memlock is 64).
        assert set(limits) == {gpu, "rdma/ib"} and limits["rdma/ib"] == str(it.network.gpu_nics)
        assert "IPC_LOCK" in c["securityContext"]["capabilities"].get("add", [])
    elif outs.cloud == "aws":
        # No hugepages: nothing read shows the node reserving any (workloads/launch/validation.py).
        assert set(limits) == {"nvidia.com/gpu", "vpc.amazonaws.com/efa"}
        assert limits["vpc.amazonaws.com/efa"] == str(it.network.efa_interfaces)
        # Root, so the run directory can be made under the root-owned Lustre mount and IPC_LOCK
        # is an effective capability (catalog fabrics.efa.pod.run_as_root).
        assert c["securityContext"]["runAsUser"] == 0 and c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    else:
        assert set(limits) == {gpu}
    assert pod["nodeSelector"] == dict(outs.scheduler.node_selector)
    assert [t["key"] for t in pod.get("tolerations", [])] == list(outs.scheduler.tolerations)
    assert {"name": "lustre", "persistentVolumeClaim": {"claimName": outs.scheduler.lustre_claim}} in pod["volumes"]
    # The code: the ConfigMap's archive, mounted and unpacked before the first step.
    assert {"name": "cm-0", "configMap": {"name": name}} in pod["volumes"]
    assert {"name": "cm-0", "mountPath": vjob.BUNDLE_MOUNT, "readOnly": True} in c["volumeMounts"]
    data = base64.b64decode(r.configmap["binaryData"][vjob.BUNDLE_KEY])
    assert data == code_bundle.build().data
    names = tarfile.open(fileobj=io.BytesIO(data), mode="r:gz").getnames()
    # under the one name the toolkit installs
    assert {"gpu_cluster/__init__.py", "gpu_cluster/workloads/validate/__main__.py"} <= set(names)
    assert {"gpu_cluster/components/catalog.yaml", "gpu_cluster/components/catalog.py"} <= set(names)
    assert all(n.startswith("gpu_cluster/") for n in names)
    inside = [n.removeprefix("gpu_cluster/") for n in names if n.startswith("gpu_cluster/components/")]
    assert not [n for n in inside if n not in code_bundle.shared_modules()]
    script = c["command"][2].replace("$$", "$")
    unpack = f"tar -xzf {vjob.BUNDLE_MOUNT}/{vjob.BUNDLE_KEY} -C {vjob.POD_CODE_DIR}"
    assert unpack in script and script.index(unpack) < script.index("torch.distributed.run")
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["PYTHONPATH"] == vjob.POD_CODE_DIR
    assert all(env[k] == v for k, v in it.software.fabric_env.items())
    run = f"{outs.mount.mount_point}/validation/{outs.cluster_name}/20261201t070000z-ab12"
    assert r.run_dir == run and f"--out {run} " in script
    # The judge prints the report as an archive: nothing else leaves a finished pod.
    assert "--print-archive" in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


@pytest.mark.parametrize("stack", SLURM_STACKS)
def test_slurm_render_carries_the_code_and_makes_its_interpreter(stack: str, tmp_path: Path) -> None:
    outs = outputs(stack)
    r = commands.render_run(outs, args(), "20261201t070000z-cd34")
    script = r.files["validate.sbatch"]
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    run = f"{outs.mount.mount_point}/validation/{outs.cluster_name}/20261201t070000z-cd34"
    assert f"#SBATCH --chdir={run}" in script and f"#SBATCH --partition={outs.scheduler.partition}" in script
    # The inline bundle decodes to exactly the package's archive.
    body = re.search(r"<<'GPUC_BUNDLE'\n(.*?)\nGPUC_BUNDLE\n", script, re.S)
    assert body is not None
    assert base64.b64decode(body.group(1).replace("\n", "")) == code_bundle.build().data
    assert f"export PYTHONPATH={run}/code" in script
    venv = vjob.venv_path(outs)
    assert venv.startswith(f"{outs.mount.mount_point}/gpu-cluster/venv-")
    assert f"{venv}/bin/python \\\n    -m torch.distributed.run" in script
    assert "pip install -q torch==2.13.0" in script and "flock 9" in script
    steps = [
        line for line in script.splitlines() if line.startswith(("echo 'step ", 'echo "step ')) and "exit" not in line
    ]
    assert [s.split(": ", 1)[1].strip("'\"") for s in steps] == [
        "main",
        "pairs",
        "storage",
        "fabric-only",
        "ddp-data",
        "ddp",
        "judge",
    ]
    # --python names an interpreter that exists: no virtualenv is made.
    own = commands.render_run(outs, args(python="/opt/conda/bin/python"), "20261201t070000z-cd35").files
    assert "python3 -m venv" not in own["validate.sbatch"] and "/opt/conda/bin/python \\\n" in own["validate.sbatch"]


def test_job_requirements_are_the_repository_pins() -> None:
    pins = dict(
        line.split("==")
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    for req in code_bundle.JOB_REQUIREMENTS:
        name, version = req.split("==")
        assert pins[name] == version, req


def test_bundle_is_reproducible_and_unpacks_to_importable_code(tmp_path: Path) -> None:
    a, b = code_bundle.build(), code_bundle.build()
    assert a.data == b.data and a.digest == b.digest
    names = code_bundle.unpack(a.data, tmp_path)
    # Only the modules both sides share come from components, and nothing in it imports Pulumi.
    shared = code_bundle.shared_modules()
    assert sorted(n.removeprefix("gpu_cluster/") for n in names if n.startswith("gpu_cluster/components/")) == sorted(
        shared
    )
    assert {"components/catalog.py", "components/contract.py", "components/bandwidth.py"} <= set(shared)
    for name in names:
        if name.endswith(".py"):
            text = (tmp_path / name).read_text()
            assert not re.search(r"^\s*(import|from) pulumi", text, re.M), name
    done = subprocess.run(
        [
            "python3",
            "-c",
            "import gpu_cluster.components.catalog as c, gpu_cluster.workloads.launch.common; print(len(c.load_catalog().names()))",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    # The system interpreter may lack PyYAML; what matters is that the import resolves inside the bundle.
    assert done.returncode == 0 or "yaml" in done.stderr, done.stderr


def test_run_ids_are_new_each_time_and_valid_in_kubernetes_names() -> None:
    """Two submitters in the same second differ by the 16 random bits. 50 ids drawn at once
    collide with odds of about 2% (the birthday bound, 50*49/2/65536): asserting all 50 distinct
    was a flaky test. 400 draws give ~1.2 collisions on average; fewer than 380 distinct suffixes
    would take a source far from uniform (odds below 1e-17 for a uniform one)."""
    at = datetime(2026, 12, 1, 7, 1, 2, tzinfo=timezone.utc)
    ids = [vjob.new_run_id(at) for _ in range(400)]
    for run_id in ids:
        assert re.fullmatch(r"20261201t070102z-[0-9a-f]{4}", run_id)
    assert len(set(ids)) >= 380
    assert vjob.new_run_id(datetime(2026, 12, 1, 7, 1, 3, tzinfo=timezone.utc)) > max(ids)  # sortable by time


def test_render_command_writes_files_from_the_offline_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_cluster.workloads.validate.__main__ import main

    assert main(["render", "aws-h200-slurm", "--out", str(tmp_path), "--run-id", "20261201t070000z-0001"]) == 0
    out = capsys.readouterr().out
    assert "offline plan of bundled stack aws-h200-slurm" in out and "placeholder" in out
    assert (tmp_path / "validate.sbatch").read_text().startswith("#!/bin/bash")
    assert main(["render", "no-such-stack", "--out", str(tmp_path)]) == 3
    assert "no outputs for stack 'no-such-stack'" in capsys.readouterr().err


def test_render_says_the_expected_time_and_a_budget_trims_the_job() -> None:
    outs = outputs("aws-h200-slurm")
    full = commands.render_run(outs, args(budget=None), "20261201t070000z-ab13")
    assert full.timing and full.timing[0].startswith("expected cluster time ")
    assert "--sweep-min" not in full.files["validate.sbatch"]
    # A budget a little under the full run: repetitions go first, and the script carries them.
    it = load_catalog().get(outs.instance_type)
    from gpu_cluster.components import validation_time as vt

    need = vt.total_s(vt.estimate(it, outs.nodes)) + vt.search_estimate(it, outs.nodes).seconds
    trimmed = commands.render_run(outs, args(budget=(need - 60) / 60), "20261201t070000z-ab14")
    assert any(line.startswith("to fit --budget") and "iterations 20 -> 10" in line for line in trimmed.timing)
    assert re.search(r"--iters[\s\\]+10\b", trimmed.files["validate.sbatch"])
    # A budget nothing fits: refused with the least it needs.
    with pytest.raises(commands.CommandError, match=r"--budget 0.5: .* needs about .* \(allowed: --budget "):
        commands.render_run(outs, args(budget=0.5), "20261201t070000z-ab15")
    # Giving up whole phases leaves their steps out.
    bare = commands.render_run(outs, args(budget=(need - 100) / 60), "20261201t070000z-ab16")
    if "the short DDP run" in " ".join(bare.timing):
        assert "gpu_cluster.workloads.train.ddp" not in bare.files["validate.sbatch"]
