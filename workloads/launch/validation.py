"""The validation run as a scheduler job: the phases of ``workloads.validate`` as steps.

On Slurm it is one batch job whose steps are: the main phase (srun, one torchrun per node),
the fabric-only phase (NVLink P2P and shared memory off), synthetic data for the short DDP
run, the DDP run, and the judge on the batch host, whose exit status (0 pass, 1 warn, 2 fail,
3 could not run) becomes the job's. Every step runs even when an earlier one failed, so the
report lands whatever happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from components.catalog import load_catalog
from workloads.launch.sbatch import LaunchSpec, Step
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


def sbatch_spec(job: ValidationJob) -> LaunchSpec:
    it = load_catalog().get(job.instance_type) if job.instance_type else None
    out = job.workdir.rstrip("/")
    typed = ("--instance-type", job.instance_type) if job.instance_type else ()
    run = ("run", "--out", out, *typed, *job.run_args)
    data = Path(out) / "data"
    judge_args = ["judge", "--out", out, *typed]
    if job.drain:
        judge_args.append("--drain")
    return LaunchSpec(
        job_name="gpuc-validate",
        nodes=job.nodes,
        module="workloads.validate",
        module_args=(*run, "--phase", "main"),
        workdir=out,
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
        then=(
            Step(name="fabric-only", module="workloads.validate", module_args=(*run, "--phase", "fabric"),
                 env=FABRIC_ONLY_ENV),
            Step(name="ddp-data", module="workloads.data", module_args=tuple(synthetic_data_args(data)), torchrun=False),
            Step(name="ddp", module="workloads.ddp_train",
                 module_args=tuple(ddp_args(data, Path(out), instance_type=job.instance_type))),
            Step(name="judge", module="workloads.validate", module_args=tuple(judge_args), torchrun=False),
        ),
    )
