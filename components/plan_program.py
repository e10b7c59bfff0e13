"""The offline plan of a program of the user's own: ``gpu-cluster plan STACK --program __main__.py``.

A library program builds its clusters itself (``GpuCluster(name, GpuClusterArgs(...))`` beside
its own VPC, providers and whatever else), so there is no ``gpu-cluster:cluster`` object to read.
The program runs under the same strict mocks as the bundled one, with the stack file's whole
``config:`` as Pulumi would hand it over, and every :class:`GpuCluster` it builds is planned from
the spec that cluster parsed and the launch facts it exports: the same cost, floors, validation
time and liveness sections as a bundled stack's plan.
"""

from __future__ import annotations

import json
import runpy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from gpu_cluster.components import cluster as cluster_mod
from gpu_cluster.components.engine import OfflineRun, run_program
from gpu_cluster.components.spec import ClusterSpec, SpecError
from gpu_cluster.components.stack_locate import locate, stack_name

# Which cloud's answers the mocks give: a program names its cloud's provider config (aws:region,
# gcp:project, azure-native:location) or the cluster object's cloud.
_CLOUD_OF_PREFIX = {"aws": "aws", "aws-native": "aws", "gcp": "gcp", "azure-native": "azure"}


def stack_config(stack: str) -> tuple[str, dict[str, str]]:
    """(stack name, the stack file's ``config:`` as Pulumi passes it to a program: strings, objects
    as JSON); SpecError for a missing or unreadable file."""
    located = locate(stack)
    if not located.found:
        raise SpecError([(str(located.path), located.missing())])
    try:
        doc = yaml.safe_load(located.path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SpecError([(str(located.path), f"cannot be read as a stack file: {exc}")]) from None
    config = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(config, Mapping):
        raise SpecError([(str(located.path), "a stack file needs a 'config:' mapping")])
    plain = {
        str(k): json.dumps(v) if isinstance(v, (dict, list)) else str(v).lower() if isinstance(v, bool) else str(v)
        for k, v in config.items()
    }
    return stack_name(located.path), plain


def cloud_of(config: Mapping[str, str]) -> str:
    raw = config.get("gpu-cluster:cluster")
    if raw:
        cloud = json.loads(raw).get("cloud") if raw.startswith("{") else None
        if cloud in ("aws", "gcp", "azure"):
            return str(cloud)
    for key in config:
        prefix = key.split(":", 1)[0]
        if prefix in _CLOUD_OF_PREFIX:
            return _CLOUD_OF_PREFIX[prefix]
    return "aws"


def run_user_program(stack: str, program: Path) -> list[tuple[ClusterSpec, OfflineRun]]:
    """Run ``program`` on ``stack``'s config; one (spec, run) per cluster it builds, each run's
    outputs that cluster's launch facts (what ``validate`` reads from a stack file's outputs)."""
    if not program.is_file():
        raise SpecError([(str(program), "no such program file (allowed: your project's __main__.py)")])
    name, config = stack_config(stack)
    built: list[Any] = []

    def body() -> dict[str, Any]:
        runpy.run_path(str(program), run_name="__main__")
        return {f"cluster{i}": c.stack_outputs for i, c in enumerate(built)}

    cluster_mod.BUILT = built
    try:
        run = run_program(name, body, cloud=cloud_of(config), config=config)
    finally:
        cluster_mod.BUILT = None
    if not built:
        raise SpecError([(str(program), "builds no GpuCluster: nothing of gpu-cluster's to plan")])
    planned = []
    for i, c in enumerate(built):
        one = OfflineRun(
            stack=name, resources=run.resources, outputs=dict(run.outputs[f"cluster{i}"]), invokes=run.invokes
        )
        planned.append((c.spec, one))
    return planned


def plan_program(
    stack: str, program: Path, plan_one: Callable[[str, ClusterSpec, OfflineRun], Any]
) -> list[tuple[Any, OfflineRun, ClusterSpec | None]]:
    """(``plan_one(label, spec, run)``, run, spec) for every cluster of the program: its summary."""
    found = run_user_program(stack, program)
    label = stack_name(locate(stack).path)
    return [
        (plan_one(label if len(found) == 1 else f"{label}/{spec.name}", spec, run), run, spec) for spec, run in found
    ]
