"""The rendered job as the liveness model reads it (components/liveness, a shared module): its
manifests or batch script, and what the launcher knows it declares (the environment, the library
path, what it sources, what it finds at start, its rendezvous ports), as plain data."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpu_cluster.components.liveness.model import FoundAtStart, Job
from gpu_cluster.workloads.launch.fabric import Discover, FoundDir
from gpu_cluster.workloads.launch.jobset import JobSetSpec
from gpu_cluster.workloads.launch.sbatch import LaunchSpec
from gpu_cluster.workloads.launch.slurm_env import MIN_PYTHON, interpreter_candidates


def _found(found: tuple[FoundDir, ...], discover: Discover | None, env_script: str | None) -> tuple[FoundAtStart, ...]:
    out = [FoundAtStart(what=f.what, candidates=f.dirs, marker=f.marker) for f in found]
    out += [
        FoundAtStart(what=f"{var}: {f.what}", candidates=f.dirs, marker=name, optional=True)
        for f in found
        for var, name in f.exports.items()
    ]
    if discover is not None and discover.plugin_root:
        rel = (
            env_script[len(discover.plugin_root) :]
            if env_script and env_script.startswith(discover.plugin_root)
            else ""
        )
        roots = [f"(the files of package {discover.plugin_package})"] if discover.plugin_package else []
        out.append(
            FoundAtStart(
                what="the fabric plugin's root",
                candidates=(*roots, discover.plugin_root),
                marker=rel.lstrip("/"),
            )
        )
    return tuple(out)


def from_jobset(spec: JobSetSpec, manifests: Sequence[Mapping[str, Any]]) -> Job:
    return Job(
        scheduler="kubernetes",
        name=spec.name,
        nodes=spec.nodes,
        gpus_per_node=spec.gpus_per_node,
        manifests=tuple(manifests),
        env=spec.environment(),
        library_path=tuple(spec.library_path),
        sourced=(spec.env_script,) if spec.env_script else (),
        found_at_start=_found(spec.found_at_start, spec.discover, spec.env_script),
        ports=spec.rdzv_ports,
        image=spec.image,
        # `validate submit` makes the code ConfigMap, named after the JobSet, beside it
        # (workloads/validate/commands.py, kube.configmap(manifest name, namespace)).
        created_at_submit=tuple(f"ConfigMap {spec.namespace}/{cm}" for cm in spec.configmaps if cm == spec.name),
    )


def from_sbatch(spec: LaunchSpec) -> Job:
    return Job(
        scheduler="slurm",
        name=spec.job_name,
        nodes=spec.nodes,
        gpus_per_node=spec.gpus_per_node,
        partition=spec.partition,
        env=spec.environment(),
        library_path=tuple(spec.library_path),
        sourced=(spec.env_script,) if spec.env_script else (),
        found_at_start=_found(spec.found_at_start, spec.discover, spec.env_script),
        ports=(spec.rdzv_port,),
        interpreters=interpreter_candidates(spec.prologue or ""),
        python_min=MIN_PYTHON,
        workdir=spec.workdir,
    )
