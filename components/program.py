"""The Pulumi program body, shared by ``__main__.py`` (``pulumi up``) and the offline engine."""

from __future__ import annotations

from typing import Any

import pulumi

from gpu_cluster.components.cluster import GpuCluster
from gpu_cluster.components.spec import SpecError, default_name, parse_spec


# Set by the offline engine only: the plan stands a placeholder in for missing deployer_cidrs.
OFFLINE_PLAN = False


def spec_from_config() -> Any:
    """The stack's cluster spec, or Pulumi's input-property error listing every problem."""
    # get_object, not require_object: a null or missing cluster object gets the same list of
    # required keys as the offline plan gives, instead of a bare ConfigMissingError.
    raw = pulumi.Config("gpu-cluster").get_object("cluster")
    try:
        return parse_spec(raw, default_name=default_name(pulumi.get_stack()), deployer_placeholder=OFFLINE_PLAN)
    except SpecError as err:
        raise pulumi.InputPropertiesError(
            err.render(),
            [{"property_path": f"gpu-cluster:cluster.{path}", "reason": reason} for path, reason in err.problems],
        ) from None


def build() -> dict[str, Any]:
    """The cluster, or (``gpu-cluster:layer: in-cluster``) the in-cluster layer of a private
    cluster built by the stack ``gpu-cluster:cluster_stack`` (components/k8s/layer.py)."""
    from gpu_cluster.components.k8s.layer import LAYER_IN_CLUSTER, LAYER_KEY, STACK_KEY, InClusterLayer, LayerArgs

    config = pulumi.Config("gpu-cluster")
    spec = spec_from_config()
    layer = config.get(LAYER_KEY)
    if layer is None:
        cluster = GpuCluster.from_spec(spec.name, spec)
        return dict(cluster.outputs)
    problems = []
    if layer != LAYER_IN_CLUSTER:
        problems.append((f"gpu-cluster:{LAYER_KEY}", f"{layer!r} (allowed: {LAYER_IN_CLUSTER})"))
    source = config.get(STACK_KEY)
    if not source:
        problems.append(
            (
                f"gpu-cluster:{STACK_KEY}",
                "required with the in-cluster layer: the cluster stack, e.g. my-org/gpu-cluster/h100-eks",
            )
        )
    if spec.orchestration.kind == "slurm":
        problems.append(("gpu-cluster:cluster.orchestration.kind", "slurm has no in-cluster layer (allowed: eks, gke)"))
    if problems:
        raise pulumi.InputPropertiesError(
            "the in-cluster layer stack is misconfigured", [{"property_path": p, "reason": r} for p, r in problems]
        )
    ref = pulumi.StackReference(f"{spec.name}-cluster", stack_name=source)
    InClusterLayer(f"{spec.name}-layer", LayerArgs(spec=spec, outputs=ref.outputs))
    return {"in_cluster_layer_of": source}
