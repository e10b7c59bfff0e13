"""GCP preflight checks, made with Google's client libraries (REST transport) and the
deployer's Application Default Credentials.

The clients are built in one place (:class:`GcpClients`), so the tests point the same
libraries at a loopback server that answers with recorded responses in the documented REST
shapes; everything from the request the library sends to the object it parses is the library's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import google.auth
from google.api_core import exceptions as gexc
from google.auth import credentials as ga_credentials
from google.auth import exceptions as auth_exc
from google.auth.transport.requests import AuthorizedSession
from google.cloud import compute_v1, hypercomputecluster_v1, service_usage_v1
import requests

from gpu_cluster.components.gcp import binauthz
from gpu_cluster.components.gcp.apis import for_orchestrator
from gpu_cluster.components.gcp.rules import GKE_RELEASE_CHANNEL
from gpu_cluster.components.k8s.image_uses import gke_pulled_images
from gpu_cluster.components.preflight import (
    Check,
    Context,
    CouldNotCheck,
    Fatal,
    NotApplicable,
    Problem,
    deployer_ranges,
)

__all__ = ["Fatal", "GcpClients", "checks"]

CLUSTER_DIRECTOR_API = "hypercomputecluster.googleapis.com"

# Compute Engine GPU quota metrics per machine type: (standard, preemptible), regional; plus the
# project-wide GPUS_ALL_REGIONS. Each is a list of names in the order they are tried: the first one
# the region's answer lists is the quota checked. Sources, which do not agree for the newer GPUs,
# so both are asked for and the one Google answers with decides:
# - the names requested and queried in public deployment guides (`gcloud compute regions
#   describe`), read 2026-12 beside Compute Engine "Allocation quotas", GPU quotas
#   (cloud.google.com/compute/resource-usage#gpus_quota; its table was not in a stored copy);
# - Google's cluster-toolkit quota validator (pkg/validators/quota.go at 1047080, last changed
#   ee50893, and its quota_test.go): an accelerator type containing "h100" is charged to
#   NVIDIA_H100_GPUS, A3 Mega's nvidia-h100-mega-80gb included (test "A3 Mega (H100)"), others to
#   NVIDIA_<TYPE>_GPUS built from the type (nvidia-h200-141gb -> NVIDIA_H200_141GB_GPUS,
#   nvidia-b200 -> NVIDIA_B200_GPUS), and spot to the PREEMPTIBLE_ name.
# The installed compute_v1 (1.48.0) enum holds only PREEMPTIBLE_NVIDIA_H100_GPUS and
# COMMITTED_NVIDIA_H100_GPUS of these, which does not matter: Quota.metric is a string field, so
# the library hands over whatever name the service answers with (tests/preflight/test_gcp.py).
_H100 = ("NVIDIA_H100_GPUS",)
_H100_MEGA = ("NVIDIA_H100_MEGA_GPUS", "NVIDIA_H100_GPUS")
_H200 = ("NVIDIA_H200_GPUS", "NVIDIA_H200_141GB_GPUS")
_B200 = ("NVIDIA_B200_GPUS",)


def _both(names: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return names, tuple(f"PREEMPTIBLE_{n}" for n in names)


GPU_QUOTA_METRICS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "a3-highgpu-8g": _both(_H100),
    "a3-megagpu-8g": _both(_H100_MEGA),
    "a3-ultragpu-8g": _both(_H200),
    "a4-highgpu-8g": _both(_B200),
}
ALL_REGIONS_METRIC = "GPUS_ALL_REGIONS"
# Which quota each consumption option is charged against. Source: Cluster Director "Choose a
# consumption option" (GoogleCloudPlatform/cluster-director-mcp assets/GEMINI.md at e459bc6, a
# copy of cloud.google.com/cluster-director/docs/consumption-options): blocks of capacity raise
# quota before delivery, calendar mode charges none, flex-start and spot charge preemptible
# quota, on-demand standard quota.
QUOTA_KIND = {"on-demand": 0, "spot": 1, "flex-start": 1}


@dataclass(frozen=True, slots=True)
class GcpClients:
    project: str
    machine_types: Any
    reservations: Any
    regions: Any
    projects: Any
    service_usage: Any
    cluster_director: Any
    session: Any
    """An authorised HTTP session (google-auth's AuthorizedSession) for the GKE API, whose client
    library is not a dependency: only projects.locations.getServerConfig is read through it."""
    container_endpoint: str
    binauthz_endpoint: str = "https://binaryauthorization.googleapis.com"
    """Binary Authorization's REST endpoint (projects.getPolicy), read through ``session``."""

    @classmethod
    def build(cls, project: str, credentials: ga_credentials.Credentials, endpoint: str | None = None) -> GcpClients:
        """``endpoint``: one base URL for every API (tests); unset, each library's own."""

        def opts(default_host: str) -> dict[str, str]:
            return {"api_endpoint": endpoint} if endpoint else {"api_endpoint": default_host}

        kw: dict[str, Any] = {"credentials": credentials, "transport": "rest"}
        return cls(
            project=project,
            machine_types=compute_v1.MachineTypesClient(client_options=opts("compute.googleapis.com"), **kw),
            reservations=compute_v1.ReservationsClient(client_options=opts("compute.googleapis.com"), **kw),
            regions=compute_v1.RegionsClient(client_options=opts("compute.googleapis.com"), **kw),
            projects=compute_v1.ProjectsClient(client_options=opts("compute.googleapis.com"), **kw),
            service_usage=service_usage_v1.ServiceUsageClient(client_options=opts("serviceusage.googleapis.com"), **kw),
            cluster_director=hypercomputecluster_v1.HypercomputeClusterClient(
                client_options=opts("hypercomputecluster.googleapis.com"), **kw
            ),
            session=AuthorizedSession(credentials),  # type: ignore[no-untyped-call]
            container_endpoint=(endpoint or "https://container.googleapis.com").rstrip("/"),
            binauthz_endpoint=(endpoint or "https://binaryauthorization.googleapis.com").rstrip("/"),
        )

    @classmethod
    def from_environment(cls, project: str) -> GcpClients:
        try:
            credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
        except auth_exc.DefaultCredentialsError:
            raise Fatal(
                "no Google credentials found (run `gcloud auth application-default login`, or set "
                "GOOGLE_APPLICATION_CREDENTIALS)"
            ) from None
        return cls.build(project, credentials)


def call(what: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
    """One API call; credentials and reachability problems become :class:`Fatal`, a refused
    permission or a disabled API :class:`CouldNotCheck`; NotFound is left to the caller."""
    try:
        return fn(**kwargs)
    except (auth_exc.RefreshError, gexc.Unauthenticated, gexc.Unauthorized) as exc:
        raise Fatal(f"Google refused the credentials on {what}: {exc}") from None
    except auth_exc.TransportError as exc:
        raise Fatal(f"Google endpoint unreachable on {what}: {exc}") from None
    except gexc.NotFound:
        raise
    except (gexc.PermissionDenied, gexc.Forbidden) as exc:  # REST answers 403 Forbidden, gRPC PERMISSION_DENIED
        raise CouldNotCheck(f"{what}: permission denied ({exc.message})") from None
    except gexc.GoogleAPICallError as exc:
        raise CouldNotCheck(f"{what}: {exc}") from None
    except OSError as exc:  # requests' ConnectionError is an OSError
        raise Fatal(f"Google endpoint unreachable on {what}: {exc}") from None


def _enabled(ctx: Context) -> dict[str, bool]:
    c: GcpClients = ctx.clients

    def fetch() -> dict[str, bool]:
        needed = for_orchestrator(ctx.spec.orchestration.kind)
        try:
            resp = call(
                "serviceusage services.batchGet",
                c.service_usage.batch_get_services,
                request={
                    "parent": f"projects/{c.project}",
                    "names": [f"projects/{c.project}/services/{s}" for s in needed],
                },
            )
        except gexc.NotFound:
            raise Fatal(f"project {c.project!r} does not exist or these credentials cannot see it") from None
        state = {
            s.config.name or s.name.rsplit("/", 1)[-1]: s.state == service_usage_v1.State.ENABLED for s in resp.services
        }
        return {api: state.get(api, False) for api in needed}

    result: dict[str, bool] = ctx.cached("apis", fetch)
    return result


def check_apis(ctx: Context) -> list[Problem]:
    """The stack enables every API it needs itself (gcp.projects.Service, components/gcp/
    services.py), so one that is off is not a problem for ``pulumi up``; it is a note, since
    enabling takes the deployer's serviceusage permission and a few minutes. Checks that read
    through an API that is off cannot run and say so."""
    off = [api for api, on in _enabled(ctx).items() if not on]
    project = ctx.clients.project
    for api in off:
        ctx.notes.append(
            f"{api} is not enabled in project {project!r}; `pulumi up` enables it "
            "(needs roles/serviceusage.serviceUsageAdmin), or `gcloud services enable "
            f"{api} --project {project}` first"
        )
    return []


def _needs_compute(ctx: Context) -> None:
    if not _enabled(ctx).get("compute.googleapis.com", False):
        raise CouldNotCheck("the Compute Engine API is not enabled in the project")


def check_machine_type(ctx: Context) -> list[Problem]:
    """The machine type is offered in the zone (machineTypes.get answers 404 where it is not)."""
    _needs_compute(ctx)
    c: GcpClients = ctx.clients
    spec = ctx.spec
    try:
        call(
            "compute machineTypes.get",
            c.machine_types.get,
            project=c.project,
            zone=spec.zone,
            machine_type=spec.compute.instance_type,
        )
    except gexc.NotFound:
        return [
            Problem(
                "zone",
                f"{spec.compute.instance_type} is not offered in {spec.zone} (allowed: a zone listed by "
                f"`gcloud compute machine-types list --filter=name={spec.compute.instance_type}`)",
            )
        ]
    return []


def _short(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def check_reservation(ctx: Context) -> list[Problem]:
    """The reservation exists in the zone, is READY, reserves this machine type, and has room
    for every node (count minus the VMs already using it)."""
    spec = ctx.spec
    cap = spec.compute.capacity
    if cap.type != "reservation":
        raise NotApplicable(f"{cap.type} capacity")
    _needs_compute(ctx)
    c: GcpClients = ctx.clients
    try:
        r = call("compute reservations.get", c.reservations.get, project=c.project, zone=spec.zone, reservation=cap.id)
    except gexc.NotFound:
        elsewhere = _reservation_zones(c, cap.id or "")
        where = (
            f"it is in {', '.join(elsewhere)}; allowed: zone {elsewhere[0]}, or a reservation in {spec.zone}"
            if elsewhere
            else "allowed: a reservation listed by `gcloud compute reservations list`"
        )
        return [
            Problem(
                "compute.capacity.id", f"no reservation {cap.id!r} in {spec.zone} of project {c.project!r} ({where})"
            )
        ]
    problems: list[Problem] = []
    if r.status != "READY":
        problems.append(Problem("compute.capacity.id", f"reservation {cap.id!r} is {r.status} (allowed: READY)"))
    sr = r.specific_reservation
    mtype = sr.instance_properties.machine_type
    if not mtype:
        ctx.notes.append(
            f"reservation {cap.id!r} reserves by instance template ({sr.source_instance_template or '?'}); "
            "its machine type was not compared"
        )
    elif _short(mtype) != spec.compute.instance_type:
        problems.append(
            Problem(
                "compute.instance_type",
                f"{spec.compute.instance_type} does not match reservation "
                f"{cap.id!r}, which reserves {_short(mtype)} (allowed: {_short(mtype)})",
            )
        )
    count, used = int(sr.count), int(sr.in_use_count)
    if count < spec.compute.nodes:
        problems.append(
            Problem(
                "compute.nodes",
                f"{spec.compute.nodes} nodes do not fit reservation {cap.id!r}, which "
                f"holds {count} VMs (allowed: 1..{count})",
            )
        )
    elif count - used < spec.compute.nodes:
        problems.append(
            Problem(
                "compute.nodes",
                f"{spec.compute.nodes} nodes do not fit reservation {cap.id!r}: {used} of "
                f"its {count} VMs are in use, {count - used} free (allowed: 1..{count - used})",
            )
        )
    return problems


def _reservation_zones(c: GcpClients, name: str) -> list[str]:
    """The zones where the project has a reservation of this name (reservations.aggregatedList)."""
    pages = call(
        "compute reservations.aggregatedList",
        c.reservations.aggregated_list,
        request={"project": c.project, "filter": f"name = {name}"},
    )
    return sorted(
        scope.rsplit("/", 1)[-1] for scope, scoped in pages if any(r.name == name for r in scoped.reservations)
    )


def _quota_map(quotas: Any) -> dict[str, tuple[float, float]]:
    return {q.metric: (float(q.limit), float(q.usage)) for q in quotas}


def check_gpu_quota(ctx: Context) -> list[Problem]:
    """The regional GPU quota the nodes are charged against (standard for on-demand, preemptible
    for spot and flex-start), and the project's GPUS_ALL_REGIONS, cover nodes x GPUs beside what
    is already in use. VMs from a reservation are charged to the reservation, not here."""
    spec = ctx.spec
    cap = spec.compute.capacity.type
    if cap not in QUOTA_KIND:
        raise NotApplicable(f"VMs from a {cap} use the quota the reservation already holds")
    _needs_compute(ctx)
    metrics = GPU_QUOTA_METRICS.get(spec.compute.instance_type)
    if metrics is None:
        raise CouldNotCheck(f"no GPU quota metric known for {spec.compute.instance_type} (components/preflight/gcp.py)")
    candidates = metrics[QUOTA_KIND[cap]]
    c: GcpClients = ctx.clients
    need = spec.compute.nodes * spec.instance.accelerator.count
    region = call("compute regions.get", c.regions.get, project=c.project, region=spec.region)
    project = call("compute projects.get", c.projects.get, project=c.project)
    problems: list[Problem] = []
    for scope, quotas, names in (
        (spec.region, region.quotas, candidates),
        ("all regions", project.quotas, (ALL_REGIONS_METRIC,)),
    ):
        held = _quota_map(quotas)
        name = next((n for n in names if n in held), names[0])
        found = held.get(name)
        if found is None:
            # Name what the answer does hold, so a metric renamed by Google shows up here instead
            # of reading as no quota at all.
            gpu = sorted(m for m in held if "GPU" in m)
            problems.append(
                Problem(
                    "compute.nodes",
                    f"{need} GPUs need quota {' or '.join(names)} in {scope}, and the project has none "
                    f"(allowed: request {name} >= {need}; GPU quotas it holds there: {', '.join(gpu) or 'none'})",
                )
            )
            continue
        limit, usage = found
        if limit - usage < need:
            problems.append(
                Problem(
                    "compute.nodes",
                    f"{spec.compute.nodes} x {spec.compute.instance_type} need {need} GPUs "
                    f"of quota {name} in {scope}: limit {limit:.0f}, {usage:.0f} in use, "
                    f"{limit - usage:.0f} free (allowed: at most {int(limit - usage) // spec.instance.accelerator.count} "
                    f"nodes, or request {name} >= {usage + need:.0f})",
                )
            )
    return problems


def check_cluster_director(ctx: Context) -> list[Problem]:
    """Where the stack runs on Cluster Director, the project can use it in the stack's region.
    How this is determined: the Cluster Director API must be enabled, and its locations.list
    (projects.locations.list, cloud.google.com/cluster-director/docs/reference/rest) must name
    the region for this project. A project the service has not admitted (allowlisted) cannot
    list it; a refusal is reported as could-not-check, since a missing IAM permission
    (hypercomputecluster.locations.list) reads the same."""
    spec = ctx.spec
    if spec.orchestration.kind != "slurm":
        raise NotApplicable(f"{spec.orchestration.kind}, not Cluster Director")
    c: GcpClients = ctx.clients
    if not _enabled(ctx).get(CLUSTER_DIRECTOR_API, False):
        raise CouldNotCheck(f"{CLUSTER_DIRECTOR_API} is not enabled, so the project's access cannot be read")
    try:
        resp = call(
            "hypercomputecluster locations.list",
            c.cluster_director.list_locations,
            request={"name": f"projects/{c.project}"},
        )
    except gexc.NotFound:
        return [
            Problem(
                "orchestration.kind",
                f"Cluster Director answers that project {c.project!r} has no locations; "
                "the project is not admitted to it (allowed: request access, or kind: gke)",
            )
        ]
    regions = sorted(loc.location_id for loc in resp.locations)
    if spec.region in regions:
        return []
    return [
        Problem(
            "region",
            f"Cluster Director does not offer {spec.region} to project {c.project!r} (allowed: "
            f"{', '.join(regions) if regions else 'none: the project is not admitted; request access'})",
        )
    ]


def _rest_get(c: GcpClients, what: str, path: str, base: str | None = None) -> dict[str, Any]:
    """GET a REST resource (GKE's unless ``base`` names another API) through the authorised
    session, with :func:`call`'s mapping of failures: refused credentials and an unreachable
    endpoint are Fatal, a refusal CouldNotCheck."""
    try:
        resp = c.session.get(f"{base or c.container_endpoint}{path}", timeout=30)
    except auth_exc.RefreshError as exc:
        raise Fatal(f"Google refused the credentials on {what}: {exc}") from None
    except requests.RequestException as exc:
        raise Fatal(f"Google endpoint unreachable on {what}: {exc}") from None
    if resp.status_code == 401:
        raise Fatal(f"Google refused the credentials on {what}: HTTP 401")
    try:
        body = resp.json()
    except ValueError:
        body = {}
    if resp.status_code != 200 or not isinstance(body, dict):
        message = body.get("error", {}).get("message", "") if isinstance(body, dict) else ""
        raise CouldNotCheck(f"{what}: HTTP {resp.status_code} {message}".rstrip())
    return body


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _minor_key(minor: str) -> tuple[int, ...]:
    return tuple(int(p) for p in minor.split(".") if p.isdigit())


def check_gke_version(ctx: Context) -> list[Problem]:
    """The GKE minor the stack asks for is one the cluster's release channel offers for new
    clusters in the zone: projects.locations.getServerConfig (cloud.google.com/kubernetes-engine/
    docs/reference/rest/v1/projects.locations/getServerConfig; ServerConfig.channels[]: channel,
    defaultVersion, validVersions[], upgradeTargetVersion, read 2026-12-01)."""
    spec = ctx.spec
    if spec.orchestration.kind != "gke":
        raise NotApplicable(f"{spec.orchestration.kind}, not GKE")
    if not _enabled(ctx).get("container.googleapis.com", False):
        raise CouldNotCheck("the Kubernetes Engine API is not enabled, so the channel's versions cannot be read")
    c: GcpClients = ctx.clients
    body = _rest_get(c, "container getServerConfig", f"/v1/projects/{c.project}/locations/{spec.zone}/serverConfig")
    channel = next((ch for ch in body.get("channels") or [] if ch.get("channel") == GKE_RELEASE_CHANNEL), None)
    if channel is None:
        raise CouldNotCheck(f"getServerConfig for {spec.zone} lists no {GKE_RELEASE_CHANNEL} channel")
    offered = sorted({_minor(v) for v in channel.get("validVersions") or []}, key=_minor_key)
    want = spec.orchestration.kubernetes_version
    if want in offered:
        return []
    default = channel.get("defaultVersion")
    return [
        Problem(
            "orchestration.kubernetes_version",
            f"GKE's {GKE_RELEASE_CHANNEL} channel does not create {want!r} clusters in {spec.zone} (allowed: "
            f"{', '.join(offered) or 'none listed'}"
            + (f"; its default is {_minor(default)} ({default})" if default else "")
            + ")",
        )
    ]


def check_binary_authorization(ctx: Context) -> list[Problem]:
    """The project's Binary Authorization policy (projects.getPolicy, REST GET /v1/projects/{project}/
    policy, the Policy of components/gcp/binauthz.py) against every image the cluster pulls: an image
    an enforced rule would refuse is a problem, naming the image, who pulls it and the rule; one a
    dry-run rule would refuse, or that needs attestations this check cannot see, a note."""
    spec = ctx.spec
    if spec.orchestration.kind != "gke":
        raise NotApplicable(f"{spec.orchestration.kind}, not GKE")
    if not _enabled(ctx).get("binaryauthorization.googleapis.com", False):
        raise CouldNotCheck(
            "the Binary Authorization API is not enabled, so the project's policy cannot be read "
            "(`pulumi up` enables it; the policy is then the API's default)"
        )
    c: GcpClients = ctx.clients
    policy = _rest_get(c, "binaryauthorization getPolicy", f"/v1/projects/{c.project}/policy", c.binauthz_endpoint)
    key = f"{spec.zone}.{spec.name}"
    problems: list[Problem] = []
    for v in binauthz.evaluate(policy, key, gke_pulled_images(spec)):
        if v.attestation:
            ctx.notes.append(f"Binary Authorization: {v.image.ref} ({v.image.who}) needs an attestation: {v.why}")
        elif v.refused:
            problems.append(
                Problem(
                    "orchestration",
                    f"project {c.project!r}'s Binary Authorization policy would refuse {v.image.ref} ({v.image.who}, "
                    f"namespace {v.image.namespace}): {v.why}; allow it (admissionWhitelistPatterns namePattern "
                    f"{binauthz.allowlist_name(v.image.ref)!r}) or attest it",
                )
            )
        elif v.dry_run:
            ctx.notes.append(f"Binary Authorization (dry run) would refuse {v.image.ref} ({v.image.who}): {v.why}")
    if policy.get("globalPolicyEvaluationMode") != "ENABLE" and problems:
        ctx.notes.append(
            "Binary Authorization: globalPolicyEvaluationMode is not ENABLE, so GKE's own system images face the "
            "same rules (" + binauthz.SOURCE + ")"
        )
    return problems


def checks(checkip_url: str | None) -> list[Check]:
    return [
        Check("APIs enabled", check_apis),
        Check("machine type offered in the zone", check_machine_type),
        Check("reservation", check_reservation),
        Check("GPU quota", check_gpu_quota),
        Check("GKE version on the release channel", check_gke_version),
        Check("Binary Authorization policy", check_binary_authorization),
        Check("Cluster Director access", check_cluster_director),
        Check("deployer ranges", lambda ctx: deployer_ranges(ctx, checkip_url)),
    ]
