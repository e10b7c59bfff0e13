"""The validation run as a scheduler job: the phases of ``workloads.validate`` as steps.

On Slurm it is one batch job whose steps are: the main phase (srun, one torchrun per node),
the fabric-only phase (NVLink P2P and shared memory off), synthetic data for the short DDP
run, the DDP run, and the judge on the batch host, whose exit status (0 pass, 1 warn, 2 fail,
3 could not run) becomes the job's. Every step runs even when an earlier one failed, so the
report lands whatever happened.

On Kubernetes it is one JobSet whose pods run the same steps in turn (``jobset_spec``): the
torchrun steps on every pod, the data and judge steps on pod 0, whose status is the job's.

``stack_job`` is the job a stack creates once its nodes are up: everything on the Lustre
mount, the interpreter and this package from a checkout on shared storage.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from components.catalog import load_catalog
from workloads.launch.common import Step
from workloads.launch.jobset import JobSetSpec
from workloads.launch.jobset import render as render_jobset
from workloads.launch.jobset import to_yaml
from workloads.launch.sbatch import LaunchSpec
from workloads.launch.sbatch import render as render_sbatch
from workloads.validate.launchargs import FABRIC_ONLY_ENV, ddp_args, synthetic_data_args


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationJob:
    """What the validation job needs to know about the cluster (the stack outputs)."""

    nodes: int
    """Nodes to validate."""
    workdir: str
    """Run directory on shared storage (under the Lustre mount on a cluster)."""
    instance_type: str | None = None
    """Catalog type: GPUs per node, fabric environment and floors. None: CPU nodes, no floors."""
    python: str = "python3"
    """Interpreter with torch and this package on every node."""
    partition: str | None = None
    procs_per_node: int | None = None
    """Ranks per node on CPU nodes (ignored with an instance type: one per GPU)."""
    drain: bool = True
    """Drain the nodes the judge fails (Slurm ``scontrol update state=drain``)."""
    time_limit_min: int = 60
    run_args: tuple[str, ...] = ()
    """Extra arguments for every ``validate run`` phase (e.g. ``--multi-max 64M`` on small clusters)."""
    extra_env: Mapping[str, str] = field(default_factory=dict)
    exclusive: bool = True
    rdzv_port: int = 29500




@dataclass(frozen=True, slots=True, kw_only=True)
class _Phases:
    first_args: tuple[str, ...]
    then: tuple[Step, ...]


def _phases(job: ValidationJob, *, expect_nodes: tuple[str, ...] = ()) -> _Phases:
    """The validation phases in order, shared by both launchers."""
    out = job.workdir.rstrip("/")
    typed = ("--instance-type", job.instance_type) if job.instance_type else ()
    run = ("run", "--out", out, *typed, *job.run_args)
    data = Path(out) / "data"
    judge_args = ["judge", "--out", out, *typed]
    if expect_nodes:
        judge_args += ["--expect-nodes", ",".join(expect_nodes)]
    if job.drain:
        judge_args.append("--drain")
    return _Phases(
        first_args=(*run, "--phase", "main"),
        then=(
            Step(name="fabric-only", module="workloads.validate", module_args=(*run, "--phase", "fabric"),
                 env=FABRIC_ONLY_ENV),
            Step(name="ddp-data", module="workloads.data", module_args=tuple(synthetic_data_args(data)), torchrun=False),
            Step(name="ddp", module="workloads.ddp_train",
                 module_args=tuple(ddp_args(data, Path(out), instance_type=job.instance_type))),
            Step(name="judge", module="workloads.validate", module_args=tuple(judge_args), torchrun=False),
        ),
    )


def sbatch_spec(job: ValidationJob) -> LaunchSpec:
    it = load_catalog().get(job.instance_type) if job.instance_type else None
    phases = _phases(job)
    return LaunchSpec(
        job_name="gpuc-validate",
        nodes=job.nodes,
        module="workloads.validate",
        module_args=phases.first_args,
        workdir=job.workdir.rstrip("/"),
        python=job.python,
        gpus_per_node=it.accelerator.count if it else 0,
        procs_per_node=None if it else job.procs_per_node,
        partition=job.partition,
        time_limit_min=job.time_limit_min,
        exclusive=job.exclusive,
        rdzv_port=job.rdzv_port,
        kill_on_bad_exit=False,
        fabric_env=dict(it.software.fabric_env) if it else {},
        extra_env=dict(job.extra_env),
        then=phases.then,
    )


JOBSET_NAME = "gpuc-validate"
JOBSET_REPLICATED_JOB = "node"


def pod_hostnames(name: str, replicated_job: str, nodes: int) -> tuple[str, ...]:
    """The host names the JobSet gives its pods (``<jobset>-<rjob>-<job>-<pod>``): the node
    names every rank reports under, so the judge can name a pod that never reported."""
    return tuple(f"{name}-{replicated_job}-0-{i}" for i in range(nodes))


def jobset_spec(
    job: ValidationJob,
    *,
    image: str,
    lustre_pvc: str | None,
    namespace: str = "default",
    efa_per_node: int = 0,
    gpu_vendor: str = "nvidia",
    node_selector: Mapping[str, str] | None = None,
    tolerate_taints: tuple[str, ...] = (),
    lustre_mount: str = "/fsx",
    hugepages_2mi: str | None = None,
    cpu: str | None = None,
    name: str = JOBSET_NAME,
    wait_for_path: str | None = None,
) -> JobSetSpec:
    """The validation run as one JobSet. ``job.drain`` is ignored: the pods carry no
    credentials to cordon nodes, and their host names are pods', not nodes'."""
    it = load_catalog().get(job.instance_type) if job.instance_type else None
    nodes = pod_hostnames(name, JOBSET_REPLICATED_JOB, job.nodes)
    phases = _phases(replace(job, drain=False), expect_nodes=nodes)
    return JobSetSpec(
        name=name,
        nodes=job.nodes,
        image=image,
        module="workloads.validate",
        module_args=phases.first_args,
        workdir=job.workdir.rstrip("/"),
        namespace=namespace,
        replicated_job=JOBSET_REPLICATED_JOB,
        python=job.python,
        gpus_per_node=it.accelerator.count if it else 0,
        gpu_vendor=gpu_vendor,
        procs_per_node=None if it else job.procs_per_node,
        efa_per_node=efa_per_node,
        hugepages_2mi=hugepages_2mi,
        cpu=cpu,
        lustre_pvc=lustre_pvc,
        lustre_mount=lustre_mount,
        rdzv_port=job.rdzv_port,
        fabric_env=dict(it.software.fabric_env) if it else {},
        extra_env=dict(job.extra_env),
        node_selector=dict(node_selector or {}),
        tolerate_taints=tolerate_taints,
        then=phases.then,
        wait_for_path=wait_for_path,
    )


# The image the stack's validation JobSet runs when the stack's config sets none
# (``gpu-cluster:validation_image``): NVIDIA's public NGC PyTorch image, which has torch,
# NCCL, numpy, PyYAML and matplotlib; the workloads package comes from the Lustre checkout
# (PYTHONPATH), so any image with torch will do. Whether the image's NCCL finds the fabric's
# net plugin is what the judge's transport check reports (a Socket fallback fails the run).
DEFAULT_IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"
IMAGE_CONFIG_KEY = "validation_image"


def validation_image() -> str:
    """The stack config's ``gpu-cluster:validation_image``, else ``DEFAULT_IMAGE``. Imports
    pulumi only here, so the launchers stay usable without it."""
    import pulumi

    return pulumi.Config("gpu-cluster").get(IMAGE_CONFIG_KEY) or DEFAULT_IMAGE


def package_path(mount_point: str, image: str) -> str | None:
    """What the stack's JobSet pods wait for: the package's checkout on Lustre when the image
    is the default one (which lacks it); nothing when the stack names its own image."""
    return f"{mount_point.rstrip('/')}/{REPO_DIR}/workloads/validate" if image == DEFAULT_IMAGE else None


# Where a stack expects this repository on the cluster's shared file system: its checkout at
# <mount>/gpu-cluster and a virtualenv in it (the README's "make venv" run there). The stack
# cannot put it there itself (no node exists before it); the validation job names the paths.
REPO_DIR = "gpu-cluster"
VALIDATION_DIR = "validation"


def stack_job(*, cluster_name: str, mount_point: str, nodes: int, instance_type: str,
              partition: str | None = None, python: str | None = None) -> ValidationJob:
    """The validation job a stack creates: run directory ``<mount>/validation/<cluster>``,
    the package from ``<mount>/gpu-cluster`` (PYTHONPATH), its virtualenv's interpreter
    unless ``python`` names the image's."""
    mount = mount_point.rstrip("/")
    repo = f"{mount}/{REPO_DIR}"
    return ValidationJob(
        nodes=nodes,
        workdir=f"{mount}/{VALIDATION_DIR}/{cluster_name}",
        instance_type=instance_type,
        python=python or f"{repo}/.venv/bin/python",
        partition=partition,
        extra_env={"PYTHONPATH": repo},
    )


def report_path(job: ValidationJob) -> str:
    return f"{job.workdir.rstrip('/')}/report.json"


def sbatch_output(job: ValidationJob) -> dict[str, Any]:
    """The stack output of a Slurm cluster: the rendered batch script and how to submit it."""
    script_path = f"{str(Path(job.workdir).parent)}/validate.sbatch"
    return {
        "kind": "sbatch",
        "script": render_sbatch(sbatch_spec(job)),
        "path": script_path,
        # --chdir and --output must exist when the job starts, before its script could make them.
        "submit_command": f"mkdir -p {job.workdir.rstrip('/')} && sbatch {script_path}",
        "report": report_path(job),
    }


def jobset_output(job: ValidationJob, spec: JobSetSpec) -> dict[str, Any]:
    """The stack output of a Kubernetes cluster: the JobSet it created and how to follow it."""
    return {
        "kind": "jobset",
        "name": spec.name,
        "namespace": spec.namespace,
        "manifest": to_yaml(render_jobset(spec)),
        "watch_command": f"kubectl -n {spec.namespace} get jobset {spec.name}",
        # Pod 0 runs the judge; the index label is the Job controller's (Kubernetes 1.28+).
        "logs_command": f"kubectl -n {spec.namespace} logs -f -l jobset.sigs.k8s.io/jobset-name={spec.name},"
                        "batch.kubernetes.io/job-completion-index=0",
        "report": report_path(job),
    }
