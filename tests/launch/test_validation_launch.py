"""The validation job for both launchers: the same phases, in the same order, with the same
arguments; the JobSet's judge knows the pods by name and drains nothing."""

from __future__ import annotations

import subprocess

import pytest

from gpu_cluster.components.catalog import load_catalog
from gpu_cluster.workloads.launch.fabric import wiring
from gpu_cluster.workloads.launch import jobset, sbatch
from gpu_cluster.workloads.launch.validation import ValidationJob, jobset_spec, pod_hostnames, sbatch_spec
from gpu_cluster.workloads.launch.validation_args import FABRIC_ONLY_ENV


def _job() -> ValidationJob:
    return ValidationJob(nodes=3, workdir="/fsx/validation/c1", instance_type="p5.48xlarge", partition="gpu")


def test_jobset_runs_the_sbatch_phases() -> None:
    job = _job()
    s = sbatch_spec(job)
    it = load_catalog().get("p5.48xlarge")
    j = jobset_spec(
        job,
        image="nvcr.io/nvidia/pytorch:25.01-py3",
        lustre_pvc="fsx-lustre",
        efa_per_node=it.network.efa_interfaces,
        node_selector={"node.kubernetes.io/instance-type": "p5.48xlarge"},
    )
    assert (j.module, j.module_args) == (s.module, s.module_args)
    assert j.module_args[:3] == ("run", "--out", "/fsx/validation/c1") and j.module_args[-2:] == ("--phase", "main")
    # After a hang the search runs one job per pair: on Slurm the pairs step is the driver on the
    # batch host (one srun step per pair); a JobSet's is a gate on every pod that ends it there, so
    # that submit can run one JobSet per pair on the nodes it gives back.
    assert [(t.name, t.module, t.torchrun) for t in s.then][:1] == [("pairs", "gpu_cluster.workloads.validate", False)]
    assert s.then[0].module_args[:3] == ("pair-search", "--out", "/fsx/validation/c1")
    assert s.then[0].module_args[s.then[0].module_args.index("--") + 1 :] == s.module_args[3:-2]
    assert s.then[0].module_args[s.then[0].module_args.index("--ranks-per-node") + 1] == "8"
    gate = j.then[0]
    assert (gate.name, gate.torchrun, gate.every_host, gate.stop_on) == ("pairs-gate", False, True, 10)
    assert gate.module_args[:3] == ("pair-gate", "--out", "/fsx/validation/c1")
    assert gate.module_args[gate.module_args.index("--ranks-per-node") + 1] == "8"
    assert (
        [(t.name, t.module, t.torchrun) for t in j.then][1:]
        == [(t.name, t.module, t.torchrun) for t in s.then][1:]
        == [
            ("storage", "gpu_cluster.workloads.validate", True),
            ("fabric-only", "gpu_cluster.workloads.validate", True),
            ("ddp-data", "gpu_cluster.workloads.train.data", False),
            ("ddp", "gpu_cluster.workloads.train", True),
            ("judge", "gpu_cluster.workloads.validate", False),
        ]
    )
    # The gate names every pod the judge expects (it decides with them whether any never started).
    assert j.then[0].module_args[j.then[0].module_args.index("--nodes") + 1].count(",") == job.nodes - 1
    assert j.then[1].module_args[-2:] == ("--phase", "storage")
    assert dict(j.then[2].env) == dict(s.then[2].env) == FABRIC_ONLY_ENV
    assert [t.module_args for t in j.then[1:5]] == [t.module_args for t in s.then[1:5]]
    # The judge: Slurm drains failed nodes and finds them in SLURM_JOB_NODELIST; pods have
    # neither, so the JobSet's judge is told the pods' host names and drains nothing.
    assert "--drain" in s.then[-1].module_args and "--drain" not in j.then[-1].module_args
    names = pod_hostnames(j.name, j.replicated_job, 3)
    assert names == ("gpuc-validate-node-0-0", "gpuc-validate-node-0-1", "gpuc-validate-node-0-2")
    assert j.then[-1].module_args[-2:] == ("--expect-nodes", ",".join(names))
    assert (j.gpus_per_node, j.efa_per_node, j.nodes) == (8, 32, 3)
    # the fabric's common variables on both, each launcher's own part from the catalog on top
    w = wiring(it.network.fabric)
    assert dict(j.fabric_env) == {**it.software.fabric_env, **w.pod.env}
    assert dict(s.fabric_env) == {**it.software.fabric_env, **w.slurm.env}
    # The tuner is named only where the plugin's directory holds it: found at start, not fixed here.
    assert j.fabric_env["NCCL_NET_PLUGIN"] == "ofi" and "NCCL_TUNER_PLUGIN" not in s.fabric_env
    assert [f.dirs[0] for f in s.found_at_start] == ["/opt/amazon/efa/lib64", "/opt/amazon/ofi-nccl/lib64"]
    assert j.pod0_decides and j.rendezvous_host == "gpuc-validate-node-0-0.gpuc-validate"
    jobset.validate(j)


def test_both_launchers_render_scripts_that_parse() -> None:
    job = _job()
    assert subprocess.run(["bash", "-n"], input=sbatch.render(sbatch_spec(job)), text=True).returncode == 0
    j = jobset_spec(job, image="img:1", lustre_pvc="fsx-lustre")
    assert subprocess.run(["bash", "-n"], input=jobset.pod_script(j), text=True).returncode == 0


def test_bad_job_is_refused() -> None:
    with pytest.raises(ValueError, match="nodes"):
        sbatch.render(sbatch_spec(ValidationJob(nodes=0, workdir="/fsx/v")))
    with pytest.raises(ValueError, match="lustre_pvc"):
        jobset.render(jobset_spec(_job(), image="img:1", lustre_pvc="Bad_Claim"))


def test_both_launchers_build_torchrun_the_same_way() -> None:
    """One command builder: the same options, rendezvous settings included, on Slurm and in a pod."""
    job = _job()
    slurm = sbatch.render(sbatch_spec(job))
    pod = jobset.pod_script(jobset_spec(job, image="img:1", lustre_pvc="fsx-lustre"))

    def options(text: str) -> list[str]:
        words = " ".join(text.replace("\\\n", " ").split()).split(" -m torch.distributed.run ", 1)[1].split(" -m ")[0]
        return [
            w.split("=", 1)[0] if w.startswith(("--nnodes", "--rdzv-endpoint", "--rdzv-id")) else w
            for w in words.split()
        ]

    assert options(slurm) == options(pod)
    assert "--rdzv-conf=join_timeout=600,read_timeout=600" in options(slurm)
