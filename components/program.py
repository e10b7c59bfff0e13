"""The Pulumi program body, shared by ``__main__.py`` (``pulumi up``) and the offline engine."""

from __future__ import annotations

from typing import Any

import pulumi

from components.cluster import GpuCluster
from components.spec import SpecError, default_name, parse_spec


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
    spec = spec_from_config()
    cluster = GpuCluster(spec.name, spec)
    return dict(cluster.outputs)
