"""GCP rules on a whole, typed cluster description, each beside the page it follows.

``check(spec, raw)`` returns ``(config path, reason)`` problems, as ``components.spec`` reports
them; ``parse_spec`` calls it once the generic rules pass. Pure: no Pulumi, no network.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from components.spec import ClusterSpec

# How GCP hands out its GPU machine types (A3 High, A3 Mega, A3 Ultra, A4): reservations
# (future reservations, also in calendar mode), flex-start and spot; plain on-demand is not one
# of the consumption options. docs.cloud.google.com/ai-hypercomputer/docs/consumption-models
# (read 2026-12): "Future reservations ... A4X, A4, or A3 Ultra", "calendar mode ... A4 or A3
# Ultra", "Flex-start: Any GPU machine except A4X", "Spot: Any GPU machine except A4X".
GKE_GPU_CAPACITY = ("reservation", "flex-start", "spot")

# Cluster Director's consumption options per machine (GoogleCloudPlatform/cluster-director-mcp
# assets/GEMINI.md at e459bc6, "Comparison of consumption options", a copy of the product docs):
# future reservations A4X, A4, A3 Ultra, A3 Mega; calendar mode A4, A3 Ultra; flex-start A4,
# A3 Ultra, A3 Mega; spot A4, A3 Ultra, A3 Mega, N2; on-demand N2 only. A3 High is not offered.
CLUSTER_DIRECTOR_CAPACITY: Mapping[str, tuple[str, ...]] = {
    "a3-megagpu-8g": ("reservation", "flex-start", "spot"),
    "a3-ultragpu-8g": ("reservation", "flex-start", "spot"),
    "a4-highgpu-8g": ("reservation", "flex-start", "spot"),
}


def check(spec: ClusterSpec, raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    if spec.network.existing:
        # Not built yet: the caller's network would need the GKE secondary ranges, the private
        # service access peering Managed Lustre attaches through, and the firewall (network.py).
        problems.append(("network.vpc_id", "an existing network is supported on aws only for now "
                                           "(allowed on gcp: leave network.vpc_id unset)"))
    itype = spec.compute.instance_type
    cap = spec.compute.capacity.type
    if spec.orchestration.kind == "slurm":
        allowed = CLUSTER_DIRECTOR_CAPACITY.get(itype)
        if allowed is None:
            problems.append(("compute.instance_type",
                             f"Cluster Director (orchestration.kind: slurm) does not offer {itype} "
                             f"(allowed: {', '.join(CLUSTER_DIRECTOR_CAPACITY)})"))
        elif cap not in allowed:
            problems.append(("compute.capacity.type",
                             f"Cluster Director offers {itype} as {', '.join(allowed)}, not {cap} "
                             f"(on-demand is for N2 only; allowed: {', '.join(allowed)})"))
    elif cap not in GKE_GPU_CAPACITY:
        problems.append(("compute.capacity.type",
                         f"GCP offers {itype} through reservations, flex-start and spot, not {cap} "
                         f"(allowed: {', '.join(GKE_GPU_CAPACITY)})"))
    return problems
