"""A user's job, in one of the three sharding patterns, onto a deployed stack.

    gpu-cluster validate render STACK --out DIR --job ddp|model-parallel|tasks --job-arg ARG ...

The same launcher model as the validation job (:mod:`gpu_cluster.workloads.launch.job`): one torchrun per
node, the c10d rendezvous, the job's code carried by the job, and the fabric's wiring from the
catalog (the pod's annotations, sidecar, volumes and capabilities; on Slurm the environment,
library path and plugin script), hardened the same way. The job's own arguments go to its
module unchanged; its run directory is ``<mount>/jobs/<cluster>/<run-id>``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from gpu_cluster.components.catalog import load_catalog
from gpu_cluster.components.contract import ClusterOutputs
from gpu_cluster.workloads.launch import fabric as fabric_wiring
from gpu_cluster.workloads.launch import validation as vjob
from gpu_cluster.workloads.launch.bundle import Bundle
from gpu_cluster.workloads.launch.common import LaunchSpecError
from gpu_cluster.workloads.launch.jobset import JobSetSpec
from gpu_cluster.workloads.launch.sbatch import LaunchSpec

# The pattern a user names -> the module every rank runs.
PATTERNS = {
    "ddp": "gpu_cluster.workloads.train",
    "model-parallel": "gpu_cluster.workloads.parallel",
    "tasks": "gpu_cluster.workloads.tasks",
}
JOBS_DIR = "jobs"


def user_job(
    outputs: ClusterOutputs,
    pattern: str,
    job_args: Sequence[str],
    run_id: str,
    bundle: Bundle,
    *,
    python: str | None = None,
    image: str | None = None,
    cpu: bool = False,
    procs_per_node: int | None = None,
    extra_env: Mapping[str, str] | None = None,
    time_limit_min: int = 60,
    rdzv_port: int = 29500,
    exclusive: bool = True,
) -> LaunchSpec | JobSetSpec:
    """The scheduler job that runs ``pattern``'s module with ``job_args`` on every node."""
    if pattern not in PATTERNS:
        raise LaunchSpecError(
            "user job", [("--job", f"{pattern!r} is not a job pattern (allowed: {', '.join(PATTERNS)})")]
        )
    module = PATTERNS[pattern]
    # The code, interpreter and run directory exactly as the validation job gets them.
    base = vjob.for_cluster(
        outputs,
        run_id,
        bundle,
        python=python,
        cpu=cpu,
        procs_per_node=procs_per_node,
        extra_env=extra_env,
        time_limit_min=time_limit_min,
        rdzv_port=rdzv_port,
        exclusive=exclusive,
        runs_dir=JOBS_DIR,
    )
    it = load_catalog().get(base.instance_type) if base.instance_type else None
    if outputs.scheduler.kind == "slurm":
        slurm = fabric_wiring.wiring(it.network.fabric if it else None).slurm.for_collectives(
            it.software.collectives if it else None
        )
        return LaunchSpec(
            job_name=f"gpuc-{pattern}",
            nodes=base.nodes,
            module=module,
            module_args=tuple(job_args),
            workdir=base.workdir,
            python=base.python,
            gpus_per_node=it.accelerator.count if it else 0,
            procs_per_node=None if it else base.procs_per_node,
            partition=base.partition,
            time_limit_min=base.time_limit_min,
            exclusive=base.exclusive,
            rdzv_port=base.rdzv_port,
            fabric_env={**(it.software.fabric_env if it else {}), **slurm.env},
            library_path=slurm.library_path,
            env_script=slurm.env_script,
            discover=slurm.discover,
            found_at_start=slurm.found_at_start,
            extra_env=dict(base.extra_env),
            prologue=base.prologue,
            first_step=pattern,
        )
    # The validation JobSet's pod options (devices, wiring, claim, selector, code ConfigMap),
    # with the user's module as its only step.
    name = f"gpuc-{pattern}-{run_id}"
    spec = vjob.cluster_jobset(outputs, base, run_id, image=image)
    return replace(
        spec, name=name, module=module, module_args=tuple(job_args), then=(), configmaps={name: vjob.BUNDLE_MOUNT}
    )
