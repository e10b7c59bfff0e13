"""Every catalog instance type's fabric environment and device counts go through both
launchers as they are: the catalog is where a launch's fabric settings come from."""

from __future__ import annotations

import kubernetes_validate
import pytest

from gpu_cluster.components.catalog import load_catalog
from gpu_cluster.workloads.launch import jobset, sbatch

CATALOG = load_catalog()
NAMES = sorted(CATALOG.names())


@pytest.mark.parametrize("name", NAMES)
def test_catalog_entry_renders_with_both_launchers(name: str) -> None:
    it = CATALOG.get(name)
    sbatch.validate(
        sbatch.LaunchSpec(
            job_name="validate",
            nodes=2,
            module="gpu_cluster.workloads.validate",
            workdir="/fsx/runs/r1",
            gpus_per_node=it.accelerator.count,
            fabric_env=it.software.fabric_env,
        )
    )
    manifest = jobset.render(
        jobset.JobSetSpec(
            name="validate",
            nodes=2,
            image="registry.example/validate:1",
            module="gpu_cluster.workloads.validate",
            workdir="/fsx/runs/r1",
            gpus_per_node=it.accelerator.count,
            gpu_vendor=it.accelerator.vendor,
            efa_per_node=it.network.efa_interfaces,
            hugepages_2mi="5120Mi" if it.network.efa_interfaces else None,
            memory="512Gi",
            lustre_pvc="lustre",
            fabric_env=it.software.fabric_env,
        )
    )
    job = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]
    kubernetes_validate.validate(
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": job},
        kubernetes_validate.latest_version(),
        strict=True,
    )
    env = {e["name"]: e["value"] for e in job["template"]["spec"]["containers"][0]["env"]}
    assert {k: v.replace("$$", "$") for k, v in env.items() if k in it.software.fabric_env} == dict(
        it.software.fabric_env
    )
