"""GCP rules on a whole, typed cluster description, each beside the page it follows.

``check(spec, raw)`` returns ``(config path, reason)`` problems, as ``components.spec`` reports
them; ``parse_spec`` calls it once the generic rules pass. The field rules below it (region and
zone names, reservation names, bucket names, Lustre sizes, the export path, labels, the node
image) are called by the generic reader while it reads each field, so their problems come with
the others in one pass; each returns a reason, or None for a good value. Pure: no Pulumi, no
network.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Mapping

from components.lustre_tiers import lustre_tiers

if TYPE_CHECKING:
    from components.spec_model import ClusterSpec

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
        problems.append(
            (
                "network.vpc_id",
                "an existing network is supported on aws only for now (allowed on gcp: leave network.vpc_id unset)",
            )
        )
    itype = spec.compute.instance_type
    cap = spec.compute.capacity.type
    if spec.orchestration.kind == "slurm":
        allowed = CLUSTER_DIRECTOR_CAPACITY.get(itype)
        if allowed is None:
            problems.append(
                (
                    "compute.instance_type",
                    f"Cluster Director (orchestration.kind: slurm) does not offer {itype} "
                    f"(allowed: {', '.join(CLUSTER_DIRECTOR_CAPACITY)})",
                )
            )
        elif cap not in allowed:
            problems.append(
                (
                    "compute.capacity.type",
                    f"Cluster Director offers {itype} as {', '.join(allowed)}, not {cap} "
                    f"(on-demand is for N2 only; allowed: {', '.join(allowed)})",
                )
            )
    elif cap not in GKE_GPU_CAPACITY:
        problems.append(
            (
                "compute.capacity.type",
                f"GCP offers {itype} through reservations, flex-start and spot, not {cap} "
                f"(allowed: {', '.join(GKE_GPU_CAPACITY)})",
            )
        )
    return problems


# ---------------------------------------------------------------------------------------------
# Field rules, called by the generic reader (components/spec_parse.py) as it reads each field.

REGION = re.compile(r"^[a-z]+-[a-z]+\d\Z")
REGION_HINT = "a GCP region such as us-central1"
# Resource names (reservations, buckets here): RFC 1035 labels, lower case, 1-63 characters.
NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?\Z")
BUCKET = NAME
OBJECT_STORE_SCHEME = "gs://"
RESERVATION_WHAT = "reservation name"
DEFAULT_KUBERNETES_VERSION = "1.33"
# Labels: keys start with a lower-case letter; keys and values are lower-case letters, digits,
# '_' and '-', at most 63 characters.
_LABEL = re.compile(r"^[a-z][a-z0-9_-]{0,62}\Z")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}\Z")


def zone_in_region(region: str, zone: str) -> bool:
    return re.fullmatch(re.escape(region) + r"-[a-z]", zone) is not None


def zone_example(region: str) -> str:
    return f"{region}-a"


def reservation_id(cid: str) -> str | None:
    if not NAME.match(cid):
        return f"{cid!r} is not a reservation name (allowed: lower-case RFC 1035 name)"
    return None


def lustre_size(size: int, tput: int | None) -> str | None:
    """Each Managed Lustre tier has its own sizes; with a throughput that is not offered there is
    nothing to check the size against (the throughput's own problem says so)."""
    tiers = lustre_tiers("gcp")
    tier = tiers.tiers.get(tput) if tput is not None else None
    if tier is None or tier.size_ok(size):
        return None
    steps = (
        f"multiples of {tier.step} from {tier.min} to {tier.max}"
        if tier.single_step
        else f"multiples of {tier.step} from {tier.min} to {tier.step_up_to}, then multiples of {tier.large_step} "
        f"up to {tier.max}"
    )
    return (
        f"{size} GiB is not a Managed Lustre size at {tput} MB/s/TiB (allowed: {steps}; "
        f"source: {tiers.source.url.removeprefix('https://')})"
    )


def export_path(import_path: str | None, export: str) -> str | None:
    return "Managed Lustre has no automatic export (allowed on aws only)"


def tag(key: str, value: str) -> str | None:
    if not (_LABEL.match(key) and _LABEL_VALUE.match(value)):
        return (
            "GCP labels are lower-case letters, digits, '_' and '-', at most 63 characters "
            "(allowed: keys starting with a letter)"
        )
    return None


def node_image(raw: object, kind: str | None) -> str | None:
    return (
        "only applies to aws for now (on gcp the node image follows the GKE release channel or Cluster "
        "Director's image)"
    )
