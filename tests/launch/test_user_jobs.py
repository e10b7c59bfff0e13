"""``validate render --job ddp|model-parallel|tasks``: a user's job onto a bundled stack, with
the job's own arguments and the fabric's wiring, as Slurm and as a JobSet."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from gpu_cluster.workloads.launch import bundle as code_bundle
from gpu_cluster.workloads.launch import userjob
from gpu_cluster.workloads.launch.common import LaunchSpecError
from gpu_cluster.workloads.validate import commands
from tests.launch.test_jobset import K8S_VERSIONS, _crd_errors, _pod
from tests.launch.test_jobset import jobset_schema as jobset_schema  # the fixture, by its name
from tests.launch.test_render_stacks import args, outputs

JOB_ARGS = {
    "ddp": ["--data", "/lustre/tokens", "--steps", "100", "--ckpt-dir", "/lustre/ckpt"],
    "model-parallel": ["--mode", "fsdp", "--steps", "5"],
    "tasks": [
        "--glob",
        "/lustre/in/*.mp4",
        "--output-dir",
        "/lustre/out",
        "--command",
        "ffmpeg -hwaccel cuda -hwaccel_device {local_rank} -i {input} {output}",
    ],
}
RUN = "20261201t070000z-ab12"


@pytest.mark.parametrize("pattern", sorted(userjob.PATTERNS))
def test_user_job_on_gke_is_wired_for_tcpxo_and_valid(pattern: str, jobset_schema: dict[str, Any]) -> None:
    outs = outputs("gcp-h100-gke")
    r = commands.render_run(outs, args(job=pattern, job_arg=JOB_ARGS[pattern]), RUN)
    assert r.jobset is not None and r.configmap is not None and r.networkpolicy is not None
    assert _crd_errors(jobset_schema, r.jobset) == []
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(_pod(r.jobset), version, strict=True)
        kubernetes_validate.validate(r.networkpolicy, version, strict=True)
    name = r.jobset["metadata"]["name"]
    assert name == f"gpuc-{pattern}-{RUN}" == r.configmap["metadata"]["name"]
    tpl = r.jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert {"name": "cm-0", "configMap": {"name": name}} in tpl["spec"]["volumes"]
    # The fabric's wiring: the stack's GPU networks on the pod, the receive-datapath sidecar.
    nets = [i["network"] for i in json.loads(tpl["metadata"]["annotations"]["networking.gke.io/interfaces"])]
    assert nets == ["default", *[n["name"] for n in outs.fabric.networks]]
    assert [c["name"] for c in tpl["spec"]["initContainers"]] == ["wait-for-node", "tcpxo-daemon"]
    script = tpl["spec"]["containers"][0]["command"][2].replace("$$", "$")
    module = userjob.PATTERNS[pattern]
    assert f"-m {module} " + " ".join(shlex.quote(a) for a in JOB_ARGS[pattern]) in script
    assert "step 2" not in script and "gpu_cluster.workloads.validate" not in script
    assert r.run_dir == f"{outs.mount.mount_point}/jobs/{outs.cluster_name}/{RUN}"
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


@pytest.mark.parametrize("pattern", sorted(userjob.PATTERNS))
def test_user_job_on_slurm_carries_its_code_and_the_fabric_env(pattern: str) -> None:
    outs = outputs("aws-h200-slurm")
    r = commands.render_run(outs, args(job=pattern, job_arg=JOB_ARGS[pattern]), RUN)
    script = r.files[f"{pattern}.sbatch"]
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    assert f"#SBATCH --job-name=gpuc-{pattern}" in script
    assert f"-m {userjob.PATTERNS[pattern]} " in script.replace("\\\n    ", " ")
    assert 'export LD_LIBRARY_PATH="$gpuc_found_libs""${LD_LIBRARY_PATH:+' in script
    assert "for gpuc_cand in /opt/amazon/ofi-nccl/lib64 /opt/amazon/ofi-nccl/lib; do" in script
    assert "export FI_PROVIDER=efa" in script
    assert f"export PYTHONPATH={outs.mount.mount_point}/jobs/{outs.cluster_name}/{RUN}/code" in script
    assert "<<'GPUC_BUNDLE'" in script and "step 2" not in script


def test_an_unknown_pattern_is_named() -> None:
    with pytest.raises(LaunchSpecError) as err:
        userjob.user_job(outputs("aws-h200-slurm"), "pipeline", (), RUN, code_bundle.build())
    assert err.value.fields() == ["--job"] and "ddp, model-parallel, tasks" in str(err.value)


def test_render_command_writes_a_user_job(tmp_path: Path) -> None:
    from gpu_cluster.workloads.validate.__main__ import main

    assert (
        main(
            [
                "render",
                "aws-h200-slurm",
                "--out",
                str(tmp_path),
                "--run-id",
                RUN,
                "--job",
                "ddp",
                "--job-arg=--data",
                "--job-arg=/fsx/tokens",
            ]
        )
        == 0
    )
    text = (tmp_path / "ddp.sbatch").read_text()
    assert "-m gpu_cluster.workloads.train --data /fsx/tokens" in " ".join(text.replace("\\\n", " ").split())
