"""GCP rules on a whole, typed cluster description, each beside the page it follows.

``check(spec, raw)`` returns ``(config path, reason)`` problems, as ``gpu_cluster.components.spec`` reports
them; ``parse_spec`` calls it once the generic rules pass. The field rules below it (region and
zone names, reservation names, bucket names, Lustre sizes, the export path, labels, the node
image) are called by the generic reader while it reads each field, so their problems come with
the others in one pass; each returns a reason, or None for a good value. Pure: no Pulumi, no
network.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Mapping

from gpu_cluster.components.lustre_tiers import lustre_tiers

# The Kubernetes service account GKE jobs run as to reach the checkpoint bucket: cluster-toolkit's
# default name (modules/scheduler/gke-cluster/main.tf at 1047080; components/gcp/workload_identity.py
# binds it). Here, in a module without the GCP SDK, because the job's image list reads it on every
# cloud's plan (an AWS or Azure plan must not need pulumi_gcp).
CHECKPOINT_KSA = "workload-identity-k8s-sa"

if TYPE_CHECKING:
    from gpu_cluster.components.spec_model import ClusterSpec

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
    if spec.orchestration.kind == "gke":
        problems += _gke_version(spec.orchestration.kubernetes_version)
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


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def _gke_version(version: str) -> list[tuple[str, str]]:
    if _minor(version) >= _minor(GKE_OLDEST_SUPPORTED):
        return []
    ended = GKE_END_OF_SUPPORT.get(version)
    when = f"its support ended {ended}" if ended else "it is older than 1.33, whose support ended 2026-08-03"
    return [
        (
            "orchestration.kubernetes_version",
            f"GKE {version!r} is out of support ({when}) and the REGULAR channel no longer creates it "
            f"(allowed: {GKE_OLDEST_SUPPORTED} or newer, default {DEFAULT_KUBERNETES_VERSION}; source: "
            "cloud.google.com/kubernetes-engine/docs/release-schedule)",
        )
    ]


# Compact placement is refused with DWS flex-start where GKE does not offer it; the spec then
# derives no placement policy (``interconnect.placement: auto``) and refuses an explicit ``true``.
# cluster-toolkit modules/compute/gke-node-pool/main.tf at 1047080 holds both preconditions:
# "placement_policy cannot be COMPACT when enable_queued_provisioning is true, unless using TPUs"
# (every multi-node flex-start pool here is queued: components/gcp/compute.py), and "Compact
# placement with DWS Flex start is only supported for A3 Ultra, A4, and H4D machine types"
# (regex ^(a3-ultragpu-|a4-|h4d-); docs/slurm-dws-flex.md says the same for Slurm).
FLEX_START_COMPACT_PREFIXES = ("a3-ultragpu-", "a4-", "h4d-")


def queued_provisioning(capacity_type: str, nodes: int) -> bool:
    """A multi-node flex-start job is provisioned all at once through a ProvisioningRequest
    (cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest); one node needs no queue."""
    return capacity_type == "flex-start" and nodes > 1


def placement_refused(instance_type: str, capacity_type: str, nodes: int) -> str | None:
    """Why GCP takes no compact placement policy for this pool, or None where it does."""
    if capacity_type != "flex-start":
        return None
    if queued_provisioning(capacity_type, nodes):
        return (
            "a multi-node flex-start pool is provisioned through queued provisioning, which takes no COMPACT "
            "placement policy (allowed: auto, false; source: cluster-toolkit modules/compute/gke-node-pool/main.tf)"
        )
    if not instance_type.startswith(FLEX_START_COMPACT_PREFIXES):
        return (
            f"compact placement with flex-start is offered for A3 Ultra, A4 and H4D only, not {instance_type} "
            "(allowed: auto, false; source: cluster-toolkit modules/compute/gke-node-pool/main.tf)"
        )
    return None


# ---------------------------------------------------------------------------------------------
# Field rules, called by the generic reader (components/spec_parse.py) as it reads each field.

REGION = re.compile(r"^[a-z]+-[a-z]+\d\Z")
REGION_HINT = "a GCP region such as us-central1"
# Resource names (reservations, buckets here): RFC 1035 labels, lower case, 1-63 characters.
NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?\Z")
BUCKET = NAME
OBJECT_STORE_SCHEME = "gs://"
RESERVATION_WHAT = "reservation name"
# The GKE minor a stack gets when it names none: the REGULAR channel's default for cluster
# creation (GKE Regular channel release notes, docs.cloud.google.com/feeds/gke-regular-channel-
# release-notes.xml, entry of 2026-09-17, read 2026-12-01: "Version 1.35.8-gke.1036000 is now the
# default version for cluster creation in the Regular channel").
DEFAULT_KUBERNETES_VERSION = "1.35"
# The channel every GKE cluster here is enrolled in (components/gcp/orchestration_gke.py) and
# whose offered versions the preflight reads (components/preflight/gcp.py).
GKE_RELEASE_CHANNEL = "REGULAR"
# GKE minors past the end of their support, refused offline; the preflight then asks the channel
# itself (get_server_config's validVersions). End of support per endoflife.date's reading of
# cloud.google.com/kubernetes-engine/docs/release-schedule (endoflife.date/api/v1/products/
# google-kubernetes-engine, generated 2026-04-10, read 2026-12-01): 1.34 "eolFrom": "2026-10-01";
# 1.33's maintenance ended 2026-08-03 (issue 25 quoting the same source; the excerpt read here was
# cut before that date). Every older minor ended before them.
GKE_END_OF_SUPPORT: Mapping[str, str] = {"1.33": "2026-08-03", "1.34": "2026-10-01"}
GKE_OLDEST_SUPPORTED = "1.35"
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


# The NCCL plugin installer every GKE GPU node runs (components/k8s/gke_installers.py) is privileged,
# so it is pulled by digest (Checkov CKV_K8S_43): a tag can be moved to other bytes under a running
# fleet. Where the catalog holds a digest from a published reference (fabrics.<f>.installer.digest:
# TCPXO, from NVIDIA/aicr's image inventory) that one is used; where no published reference gives
# one (gIB nccl-plugin-gib:v1.1.1 and TCPX v3.1.9: container-engine-accelerators at 992db81 and
# cluster-toolkit at 1047080 name the tags only, as do NVIDIA/aicr, gpu-recipes and every other
# stored reference read 2026-12-01), the stack must supply it. A reference by digest: optional
# registry host and port, path, optional tag, then ``@sha256:`` and 64 lower-case hex digits
# (the OCI distribution spec's digest form for sha256).
INSTALLER_IMAGE_KEY = "orchestration.installer_image"
DIGEST_REF = re.compile(
    r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)+"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?@sha256:[0-9a-f]{64}\Z"
)
# How a user gets the digest of a published tag (go-containerregistry's crane, `crane digest IMAGE`;
# docs/crane_digest.md): asked of the registry itself, not guessed.
DIGEST_HOW = "`crane digest {ref}` (go-containerregistry)"


def _installer_ref(instance_type: str) -> tuple[str, str | None]:
    from gpu_cluster.components.catalog import installer_fact, load_catalog

    fact = installer_fact(load_catalog().get(instance_type).network.fabric)
    return f"{fact.image}:{fact.tag}", fact.digest


def installer_image(raw: object, instance_type: str | None, kind: str | None) -> str | None:
    """Why ``orchestration.installer_image`` is refused, or None for a good value."""
    if kind != "gke":
        return f"only applies to gke (the NCCL plugin installer DaemonSet; kind is {kind})"
    ref = _installer_ref(instance_type)[0] if instance_type else "the fabric's installer image"
    if not isinstance(raw, str) or not DIGEST_REF.match(raw):
        return (
            f"{_short(raw)} is not an image reference by digest (allowed: registry/path[:tag]@sha256:<64 hex "
            f"digits>, e.g. {ref}@sha256:... with the digest from {DIGEST_HOW.format(ref=ref)})"
        )
    return None


def installer_image_missing(instance_type: str, pins: Mapping[str, str] | None = None) -> str | None:
    """Why a GKE stack for ``instance_type`` must set ``orchestration.installer_image``, or None
    where the catalog pins the installer by a published digest or the stack's ``images`` pins its tag."""
    ref, digest = _installer_ref(instance_type)
    if digest or (pins or {}).get(ref):
        return None
    return (
        f"required for {instance_type} on gke: its NCCL plugin installer runs privileged on every GPU node and "
        f"is pulled only by digest, and no published reference gives the digest of {ref} (container-engine-"
        f"accelerators and cluster-toolkit name the tag only), so the stack names it (allowed: "
        f"{ref}@sha256:<64 hex digits>, the digest from {DIGEST_HOW.format(ref=ref)}; or your own mirror of "
        f"that image, by digest; or pin the tag: `gpu-cluster pin STACK` writes images: {{{ref}: sha256:...}})"
    )


def _short(raw: object) -> str:
    text = repr(raw)
    return text if len(text) <= 80 else text[:77] + "..."
