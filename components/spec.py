"""The cluster description: one structured config object becomes a typed, checked ``ClusterSpec``.

A stack file holds the object under the config key ``gpu-cluster:cluster``. ``parse_spec``
checks every field and every rule that ties fields together, collects every problem as
``(config path, reason)`` and raises them together in one ``SpecError``, so a user fixes a
stack file in one pass. Nothing here imports Pulumi: the offline plan, the tests and the
validation job read specs without an engine.

Cloud rules that a provider would only enforce at ``pulumi up`` are checked here, each next to
the public page it comes from.
"""

from __future__ import annotations

import ipaddress
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, NoReturn, Sequence, cast

import yaml

from components.catalog import CatalogError, InstanceType, load_catalog
from components.spec_security import SecuritySpec, parse_security

CONFIG_KEY = "gpu-cluster:cluster"
SUPPORTED_CLOUDS = ("aws", "gcp")
ORCHESTRATORS: Mapping[str, tuple[str, ...]] = {"aws": ("eks", "slurm"), "gcp": ("gke", "slurm")}
CAPACITY_TYPES: Mapping[str, tuple[str, ...]] = {
    "aws": ("on-demand", "reservation", "capacity-block", "spot"),
    "gcp": ("on-demand", "reservation", "flex-start", "spot"),
}
# Capacity that the cloud hands over already placed on its network spine: a placement group
# or policy on top of it is refused (AWS: capacity blocks and ODCRs in a cluster placement
# group are created placed; GCP: reservation blocks are compact by construction).
PRE_PLACED = ("reservation", "capacity-block")
MAX_NODES = 2048

# FSx for Lustre PERSISTENT_2: 1200 GiB or a multiple of 2400 GiB; 125/250/500/1000 MB/s/TiB.
# Source: AWS FSx for Lustre API reference, CreateFileSystem StorageCapacity and
# PerUnitStorageThroughput (docs.aws.amazon.com/fsx/latest/APIReference/API_CreateFileSystem.html).
FSX_THROUGHPUTS = (125, 250, 500, 1000)
FSX_MAX_GIB = 2400 * 1000
# Google Cloud Managed Lustre: per_unit_storage_throughput 125/250/500/1000 MB/s/TiB. Each tier
# has its own minimum, maximum and step; the three faster tiers switch to a larger step above a
# threshold (an instance created at or below it can never grow past it). Source: Managed Lustre
# "Performance tiers" table (cloud.google.com/managed-lustre/docs/performance-tiers, read
# 2026-11; the same figures in .../docs/increase-capacity). The older create-instance page and
# the pulumi_gcp 10.2.0 docstring still say 9000..7632000 overall, which this table supersedes.
GCP_LUSTRE_MIN_GIB: Mapping[int, int] = {125: 72000, 250: 36000, 500: 18000, 1000: 9000}
GCP_LUSTRE_STEP_GIB: Mapping[int, int] = {125: 72000, 250: 36000, 500: 18000, 1000: 9000}
# Above this capacity the step becomes GCP_LUSTRE_LARGE_STEP_GIB (125 has a single step).
GCP_LUSTRE_STEP_UP_TO_GIB: Mapping[int, int] = {125: 12240000, 250: 6120000, 500: 3060000, 1000: 1530000}
GCP_LUSTRE_LARGE_STEP_GIB: Mapping[int, int] = {125: 72000, 250: 288000, 500: 144000, 1000: 72000}
GCP_LUSTRE_TIER_MAX_GIB: Mapping[int, int] = {125: 12240000, 250: 40032000, 500: 20016000, 1000: 10008000}
GCP_LUSTRE_MAX_GIB = max(GCP_LUSTRE_TIER_MAX_GIB.values())


def gcp_lustre_size_ok(size_gib: int, tput: int) -> bool:
    """Whether Managed Lustre accepts ``size_gib`` at ``tput`` MB/s/TiB (see the table above)."""
    if not GCP_LUSTRE_MIN_GIB[tput] <= size_gib <= GCP_LUSTRE_TIER_MAX_GIB[tput]:
        return False
    if size_gib <= GCP_LUSTRE_STEP_UP_TO_GIB[tput]:
        return size_gib % GCP_LUSTRE_STEP_GIB[tput] == 0
    return size_gib % GCP_LUSTRE_LARGE_STEP_GIB[tput] == 0


_AWS_REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d\Z")
_GCP_REGION = re.compile(r"^[a-z]+-[a-z]+\d\Z")
_AWS_RESERVATION = re.compile(r"^cr-[0-9a-f]{8}([0-9a-f]{9})?\Z")
_GCP_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?\Z")
_AWS_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\Z")
_GCP_LABEL = re.compile(r"^[a-z][a-z0-9_-]{0,62}\Z")
_GCP_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}\Z")
_K8S_VERSION = re.compile(r"^1\.(2[89]|3\d)\Z")
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}[a-z0-9]\Z")

Capacity = Literal["on-demand", "reservation", "capacity-block", "spot", "flex-start"]


class SpecError(ValueError):
    """Every problem found in a cluster description, each as (config path, reason)."""

    def __init__(self, problems: Sequence[tuple[str, str]]):
        self.problems = list(problems)
        super().__init__(self.render())

    def render(self) -> str:
        lines = [f"{len(self.problems)} problem(s) in the cluster description:"]
        lines += [f"  {path}: {reason}" for path, reason in self.problems]
        return "\n".join(lines)


def fail_cli(err: SpecError, prefix: str = "gpu-cluster") -> NoReturn:
    """How every CLI reports a bad stack: the list on stderr, exit 2, no traceback."""
    print(f"{prefix}: {err.render()}", file=sys.stderr)
    raise SystemExit(2)


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacitySpec:
    type: Capacity
    """on-demand | reservation | capacity-block (AWS) | flex-start (GCP) | spot."""
    id: str | None = None
    """AWS capacity reservation id (``cr-...``) for a reservation or capacity block; GCP reservation name."""
    placement_group: str | None = None
    """AWS reservation (ODCR) only: the cluster placement group the reservation was created in.
    An ODCR made in a placement group matches only launches into that group, one made without
    matches only launches outside any group; unset means the latter (rules: components/aws/rules.py)."""

    @property
    def pre_placed(self) -> bool:
        return self.type in PRE_PLACED


@dataclass(frozen=True, slots=True, kw_only=True)
class ComputeSpec:
    instance_type: str
    """A catalog instance type offered on the stack's cloud."""
    nodes: int
    """GPU nodes in the one node group a job spans (1..2048)."""
    capacity: CapacitySpec
    root_volume_gib: int = 500
    """Root volume per node; container images for training are large."""
    image: str | None = None
    """The node image, pinned: EKS an EKS-optimised AL2023 NVIDIA release (``1.33.5-20251120``),
    PCS an AMI id. Unset: looked up once at the first ``pulumi up`` and then kept (later ups
    ignore a newer release) until the stack sets one."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InterconnectSpec:
    placement: bool
    """Whether a cluster placement group/compact policy is created (derived unless set)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LustreSpec:
    size_gib: int
    throughput_mbps_per_tib: int
    import_path: str | None = None
    """Object store prefix loaded into the file system (``s3://`` on AWS, ``gs://`` on GCP).
    Optional, and only for a bucket the deployer owns, in the stack's region (an FSx data
    repository association to a bucket of another account or region fails at ``pulumi up``; the
    preflight checks it). Bundled stacks set none: a stack file never points at a bucket that the
    stack neither creates nor can know exists."""
    export_path: str | None = None
    """Where changes are written back (AWS data repository association only)."""
    mount_point: str = "/fsx"
    kms_key_id: str | None = None
    """Customer-managed key; the service key is used when unset."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StorageSpec:
    lustre: LustreSpec
    bucket_name: str | None = None
    """Checkpoint bucket name; generated from the stack when unset."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OrchestrationSpec:
    kind: Literal["eks", "gke", "slurm"]
    kubernetes_version: str = "1.33"
    endpoint: Literal["public", "private"] = "public"
    """Kubernetes API endpoint. public: reachable only from ``deployer_cidrs`` (and the VPC), so
    ``pulumi up`` can deploy the in-cluster layer; private: VPC only, and the in-cluster layer
    is deployed by a program run from inside the VPC."""
    deployer_cidrs: tuple[str, ...] = ()
    """Where ``pulumi up`` and ``workloads.validate submit`` run from; the only public ranges
    the API admits."""
    login_nodes: int = 1
    """Slurm login nodes."""
    partition: str = "gpu"
    """Slurm partition (queue) name for the GPU nodes."""

    @property
    def api_access_cidrs(self) -> tuple[str, ...]:
        """The public ranges the API endpoint admits: the deployers', unless it is private."""
        return self.deployer_cidrs if self.kind != "slurm" and self.endpoint == "public" else ()

    @property
    def in_cluster(self) -> bool:
        """Whether ``pulumi up`` of this stack creates the in-cluster layer through the API."""
        return self.kind != "slurm" and self.endpoint == "public"


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkSpec:
    cidr: str = "10.0.0.0/16"
    """The cluster's address range (VPC on AWS, subnet base on GCP)."""
    # An existing network (the caller's): no network is created; the cloud's rules check the
    # ids' form (components/<cloud>/rules.py). ``DEPLOY_TIME_ID`` stands for an id that is an
    # output of another resource (components/args.py), known only at ``pulumi up``.
    vpc_id: str | None = None
    node_subnet_id: str | None = None
    control_plane_subnet_ids: tuple[str, ...] = ()

    @property
    def existing(self) -> bool:
        return self.vpc_id is not None


DEPLOY_TIME_ID = "(an output of another resource)"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSpec:
    name: str
    """Prefix of every resource name."""
    cloud: Literal["aws", "gcp"]
    region: str
    zone: str
    """The one zone all GPU nodes share: EFA and placement groups do not span zones."""
    compute: ComputeSpec
    zone_id: str | None = None
    """AWS only, optional: the zone ID behind ``zone`` in the deploying account (``use1-az4``, from
    ``aws ec2 describe-availability-zones``). Zone names map to different IDs in every account;
    with the ID the spec can check offline what is tied to IDs (zones EKS refuses, zones the
    catalog knows offer the type) and the node subnet is created by ID."""
    interconnect: InterconnectSpec
    storage: StorageSpec
    orchestration: OrchestrationSpec
    network: NetworkSpec = field(default_factory=NetworkSpec)
    tags: Mapping[str, str] = field(default_factory=dict)
    security: SecuritySpec = field(default_factory=SecuritySpec)
    """Flow logs, log retention, checkpoint version expiry, policy exceptions (components/spec_security.py)."""

    @property
    def instance(self) -> InstanceType:
        return load_catalog().get(self.compute.instance_type)

    @property
    def total_gpus(self) -> int:
        return self.compute.nodes * self.instance.accelerator.count


# ---------------------------------------------------------------------------------------------
# Parsing: a small reader that records problems instead of raising at the first one.


class _Reader:
    def __init__(self) -> None:
        self.problems: list[tuple[str, str]] = []

    def bad(self, path: str, reason: str) -> None:
        self.problems.append((path, reason))

    def mapping(self, obj: Any, path: str, allowed: Sequence[str], required: Sequence[str] = ()) -> dict[str, Any]:
        if obj is None:
            obj = {}
        if not isinstance(obj, Mapping):
            self.bad(path, f"expected a mapping, got {type(obj).__name__} {_short(obj)}")
            return {}
        out: dict[str, Any] = {}
        for key, value in obj.items():
            if key not in allowed:
                self.bad(f"{path}.{key}" if path else str(key), f"unknown key (allowed: {', '.join(allowed)})")
            else:
                out[key] = value
        for key in required:
            if key not in out or out[key] is None:
                self.bad(f"{path}.{key}" if path else key, "required")
        return out

    def string(self, obj: Mapping[str, Any], key: str, path: str, default: str | None = None,
               pattern: re.Pattern[str] | None = None, allowed: Sequence[str] | None = None,
               hint: str = "") -> str | None:
        full = f"{path}.{key}" if path else key
        if key not in obj or obj[key] is None:
            return default
        value = obj[key]
        if not isinstance(value, str) or isinstance(value, bool):
            self.bad(full, f"expected a string, got {type(value).__name__} {_short(value)}")
            return default
        if allowed is not None and value not in allowed:
            self.bad(full, f"{value!r} is not allowed (allowed: {', '.join(allowed)})")
            return default
        if pattern is not None and not pattern.match(value):
            self.bad(full, f"{value!r} is malformed (allowed: {hint or pattern.pattern})")
            return default
        return value

    def integer(self, obj: Mapping[str, Any], key: str, path: str, default: int | None, lo: int, hi: int) -> int | None:
        full = f"{path}.{key}" if path else key
        if key not in obj or obj[key] is None:
            return default
        value = obj[key]
        if isinstance(value, bool) or not isinstance(value, int):
            self.bad(full, f"expected an integer, got {type(value).__name__} {_short(value)} (allowed: {lo}..{hi})")
            return default
        if not lo <= value <= hi:
            self.bad(full, f"{value} is out of range (allowed: {lo}..{hi})")
            return default
        return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_TOP_KEYS = ("name", "cloud", "region", "zone", "zone_id", "compute", "interconnect", "storage", "orchestration",
             "network", "tags", "security")


# What the offline plan (and only it) puts in place of missing deployer_cidrs: TEST-NET-1
# (RFC 5737), an address no deployer has, so a plan never passes for a deployable stack.
DEPLOYER_PLACEHOLDER = "192.0.2.1/32"


def parse_spec(raw: Any, default_name: str = "gpu", *, deployer_placeholder: bool = False) -> ClusterSpec:
    """Check a raw ``gpu-cluster:cluster`` object and return the typed spec, or raise SpecError.

    ``deployer_placeholder``: the offline plan's mode; a public Kubernetes endpoint without
    ``deployer_cidrs`` gets :data:`DEPLOYER_PLACEHOLDER` instead of an error."""
    r = _Reader()
    catalog = load_catalog()
    top = r.mapping(raw, "", _TOP_KEYS, required=("cloud", "region", "zone", "compute", "storage", "orchestration"))

    name = r.string(top, "name", "", default=default_name, pattern=_NAME,
                    hint="2-32 characters: lower-case letters, digits, '-', starting with a letter") or default_name
    cloud = r.string(top, "cloud", "", allowed=SUPPORTED_CLOUDS)
    if cloud is None and isinstance(top.get("cloud"), str) and top["cloud"] == "azure":
        r.problems[-1] = ("cloud", "'azure' is in the hardware catalog but has no components yet (allowed: aws, gcp)")

    region_pattern = _AWS_REGION if cloud == "aws" else _GCP_REGION if cloud == "gcp" else None
    region = r.string(top, "region", "", pattern=region_pattern,
                      hint="an AWS region such as us-east-1" if cloud == "aws" else "a GCP region such as us-central1")
    zone = r.string(top, "zone", "")
    if isinstance(top.get("zone"), list):
        r.problems[-1] = ("zone", "EFA, GPUDirect networks and placement groups need every GPU node in one zone; give one zone, not a list")
    if zone is not None and region is not None and not _zone_in_region(cloud, region, zone):
        example = f"{region}a" if cloud == "aws" else f"{region}-a"
        r.bad("zone", f"{zone!r} is not a zone of region {region!r} (allowed: zones such as {example})")

    # The zone ID's form and meaning are AWS rules (components/aws/rules.py).
    zone_id = r.string(top, "zone_id", "")
    if zone_id is not None and cloud != "aws":
        r.bad("zone_id", "only applies to aws (zone names are the same in every GCP project)")
        zone_id = None

    # compute
    comp = r.mapping(top.get("compute"), "compute", ("instance_type", "nodes", "capacity", "root_volume_gib", "image"),
                     required=("instance_type", "nodes"))
    itype = r.string(comp, "instance_type", "compute")
    instance: InstanceType | None = None
    if itype is not None:
        try:
            instance = catalog.get(itype)
        except CatalogError:
            offered = catalog.names(cloud) if cloud else catalog.names()
            r.bad("compute.instance_type", f"{itype!r} is not in the hardware catalog (allowed: {', '.join(offered)})")
    if instance is not None and cloud is not None and instance.cloud != cloud:
        r.bad("compute.instance_type",
              f"{itype!r} is a {instance.cloud} type, not offered on {cloud} (allowed: {', '.join(catalog.names(cloud))})")
        instance = None
    if instance is not None and cloud is not None:
        where = zone if cloud == "gcp" else region
        if where is not None and where not in instance.locations:
            kind = "zone" if cloud == "gcp" else "region"
            r.bad(kind, f"{itype} is not offered in {kind} {where!r} "
                        f"(allowed: {', '.join(instance.locations)}; source: {catalog.source(instance.locations_source).url})")
    nodes = r.integer(comp, "nodes", "compute", None, 1, MAX_NODES)
    root_gib = r.integer(comp, "root_volume_gib", "compute", 500, 100, 16384) or 500

    capacity = _parse_capacity(r, comp.get("capacity"), cloud)

    # interconnect: placement is derived from the capacity unless the user says otherwise
    ic = r.mapping(top.get("interconnect"), "interconnect", ("placement",))
    placement_raw = ic.get("placement", "auto")
    placement = capacity is not None and not capacity.pre_placed
    if placement_raw not in ("auto", True, False):
        r.bad("interconnect.placement", f"{_short(placement_raw)} is not allowed (allowed: auto, true, false)")
    elif placement_raw is True and capacity is not None and capacity.pre_placed:
        r.bad("interconnect.placement",
              f"a {capacity.type} is already placed by the cloud; a placement group on top of it is refused "
              "(allowed: auto, false)")
    elif isinstance(placement_raw, bool):
        placement = placement_raw

    storage = _parse_storage(r, top.get("storage"), cloud)
    orch = _parse_orchestration(r, top.get("orchestration"), cloud, deployer_placeholder)
    image = _parse_image(r, comp.get("image"), cloud, orch.kind if orch else None)
    net = r.mapping(top.get("network"), "network", ("cidr", "vpc_id", "node_subnet_id", "control_plane_subnet_ids"))
    cidr = r.string(net, "cidr", "network", default="10.0.0.0/16") or "10.0.0.0/16"
    vpc_id, node_subnet_id = r.string(net, "vpc_id", "network"), r.string(net, "node_subnet_id", "network")
    if (vpc_id is None) != (node_subnet_id is None):
        r.bad("network.vpc_id" if vpc_id is None else "network.node_subnet_id",
              "an existing network needs both network.vpc_id and network.node_subnet_id (allowed: both or neither)")
    cp_raw = net.get("control_plane_subnet_ids") or []
    if not isinstance(cp_raw, list) or not all(isinstance(c, str) and c for c in cp_raw):
        r.bad("network.control_plane_subnet_ids", f"expected a list of subnet ids, got {_short(cp_raw)}")
        cp_raw = []
    if cp_raw and vpc_id is None:
        r.bad("network.control_plane_subnet_ids", "only applies to an existing network (set network.vpc_id)")
    try:
        n = ipaddress.ip_network(cidr)
        if not n.is_private or not 16 <= n.prefixlen <= 20:
            r.bad("network.cidr", f"{cidr!r} must be a private range of size /16 to /20 (allowed: e.g. 10.0.0.0/16)")
    except ValueError:
        r.bad("network.cidr", f"{cidr!r} is not a CIDR block (allowed: e.g. 10.0.0.0/16)")
    tags = _parse_tags(r, top.get("tags"), cloud)
    security = parse_security(r, top.get("security"))

    if r.problems:
        raise SpecError(r.problems)
    assert cloud is not None and region is not None and zone is not None
    assert itype is not None and nodes is not None and capacity is not None
    assert storage is not None and orch is not None
    spec = ClusterSpec(
        name=name,
        cloud=cast(Literal["aws", "gcp"], cloud),
        region=region,
        zone=zone,
        zone_id=zone_id,
        compute=ComputeSpec(instance_type=itype, nodes=nodes, capacity=capacity, root_volume_gib=root_gib, image=image),
        interconnect=InterconnectSpec(placement=placement),
        storage=storage,
        orchestration=orch,
        network=NetworkSpec(cidr=cidr, vpc_id=vpc_id, node_subnet_id=node_subnet_id,
                            control_plane_subnet_ids=tuple(cp_raw)),
        tags=tags,
        security=security,
    )
    # Rules that need the whole typed spec and belong to one cloud live beside that cloud
    # (components/<cloud>/rules.py, pure: no Pulumi); they run once the generic shape is valid.
    cloud_problems = _cloud_rules(spec.cloud)(spec, top)
    if cloud_problems:
        raise SpecError(cloud_problems)
    return spec


CloudRules = Callable[["ClusterSpec", Mapping[str, Any]], list[tuple[str, str]]]


def _cloud_rules(cloud: str) -> CloudRules:
    """``components.<cloud>.rules.check``: (typed spec, raw top-level mapping) -> problems."""
    if cloud == "aws":
        from components.aws import rules as aws_rules
        return aws_rules.check
    from components.gcp import rules as gcp_rules
    return gcp_rules.check


def _zone_in_region(cloud: str | None, region: str, zone: str) -> bool:
    if cloud == "aws":
        return re.fullmatch(re.escape(region) + r"[a-z]", zone) is not None
    if cloud == "gcp":
        return re.fullmatch(re.escape(region) + r"-[a-z]", zone) is not None
    return True


def _parse_capacity(r: _Reader, raw: Any, cloud: str | None) -> CapacitySpec | None:
    if raw is None:
        return CapacitySpec(type="on-demand")
    cap = r.mapping(raw, "compute.capacity", ("type", "id", "placement_group"), required=("type",))
    allowed = CAPACITY_TYPES.get(cloud or "", tuple(sorted({t for ts in CAPACITY_TYPES.values() for t in ts})))
    ctype = r.string(cap, "type", "compute.capacity", allowed=allowed)
    if ctype is None:
        return None
    cid = r.string(cap, "id", "compute.capacity")
    if ctype in PRE_PLACED:
        if cid is None:
            what = "capacity reservation id (cr-...)" if cloud == "aws" else "reservation name"
            r.bad("compute.capacity.id", f"a {ctype} needs its {what}")
            return None
        if cloud == "aws" and not _AWS_RESERVATION.match(cid):
            r.bad("compute.capacity.id", f"{cid!r} is not a capacity reservation id (allowed: cr- and 8 or 17 hex digits)")
            return None
        if cloud == "gcp" and not _GCP_NAME.match(cid):
            r.bad("compute.capacity.id", f"{cid!r} is not a reservation name (allowed: lower-case RFC 1035 name)")
            return None
    elif cid is not None:
        r.bad("compute.capacity.id", f"an id only applies to reservations (allowed with type: {', '.join(PRE_PLACED)})")
    # Which types and clouds may name a placement group is an AWS rule (components/aws/rules.py).
    pg = r.string(cap, "placement_group", "compute.capacity")
    if pg is not None and cloud != "aws":
        r.bad("compute.capacity.placement_group", "only applies to aws reservations (ODCR placement groups)")
        pg = None
    return CapacitySpec(type=cast(Capacity, ctype), id=cid, placement_group=pg)


def _parse_storage(r: _Reader, raw: Any, cloud: str | None) -> StorageSpec | None:
    st = r.mapping(raw, "storage", ("lustre", "bucket_name"), required=("lustre",))
    lu = r.mapping(st.get("lustre"), "storage.lustre",
                   ("size_gib", "throughput_mbps_per_tib", "import_path", "export_path", "mount_point", "kms_key_id"),
                   required=("size_gib", "throughput_mbps_per_tib"))
    size = r.integer(lu, "size_gib", "storage.lustre", None, 1, max(FSX_MAX_GIB, GCP_LUSTRE_MAX_GIB))
    tput = r.integer(lu, "throughput_mbps_per_tib", "storage.lustre", None, 1, 100_000)
    if tput is not None and tput not in FSX_THROUGHPUTS:
        r.bad("storage.lustre.throughput_mbps_per_tib", f"{tput} is not offered (allowed: {', '.join(map(str, FSX_THROUGHPUTS))})")
        tput = None
    if size is not None and cloud == "aws":
        if not (size == 1200 or (size % 2400 == 0 and 2400 <= size <= FSX_MAX_GIB)):
            r.bad("storage.lustre.size_gib",
                  f"{size} GiB is not a PERSISTENT_2 size (allowed: 1200, or a multiple of 2400 up to {FSX_MAX_GIB})")
    if size is not None and cloud == "gcp" and tput is not None and not gcp_lustre_size_ok(size, tput):
        low, step, up_to = GCP_LUSTRE_MIN_GIB[tput], GCP_LUSTRE_STEP_GIB[tput], GCP_LUSTRE_STEP_UP_TO_GIB[tput]
        big, top = GCP_LUSTRE_LARGE_STEP_GIB[tput], GCP_LUSTRE_TIER_MAX_GIB[tput]
        steps = (f"multiples of {step} from {low} to {top}" if up_to >= top else
                 f"multiples of {step} from {low} to {up_to}, then multiples of {big} up to {top}")
        r.bad("storage.lustre.size_gib",
              f"{size} GiB is not a Managed Lustre size at {tput} MB/s/TiB (allowed: {steps}; "
              "source: cloud.google.com/managed-lustre/docs/performance-tiers)")
    scheme = {"aws": "s3://", "gcp": "gs://"}.get(cloud or "", "")
    import_path = r.string(lu, "import_path", "storage.lustre")
    export_path = r.string(lu, "export_path", "storage.lustre")
    for key, value in (("import_path", import_path), ("export_path", export_path)):
        if value is not None and scheme and not (value.startswith(scheme) and len(value) > len(scheme)):
            r.bad(f"storage.lustre.{key}", f"{value!r} is not an object store path on {cloud} (allowed: {scheme}bucket/prefix)")
    if export_path is not None and cloud == "gcp":
        r.bad("storage.lustre.export_path", "Managed Lustre has no automatic export (allowed on aws only)")
    if export_path is not None and import_path is None:
        r.bad("storage.lustre.export_path", "an export path needs an import path (the data repository association holds both)")
    elif export_path is not None and cloud == "aws" and export_path != import_path:
        # One FSx data repository association links one S3 prefix both ways.
        r.bad("storage.lustre.export_path", f"{export_path!r} differs from import_path {import_path!r}; an FSx data "
                                            "repository association imports from and exports to the same S3 prefix "
                                            "(allowed: the import path)")
    mount = r.string(lu, "mount_point", "storage.lustre", default="/fsx",
                     pattern=re.compile(r"^/[A-Za-z0-9_./-]*\Z"), hint="an absolute path") or "/fsx"
    kms = r.string(lu, "kms_key_id", "storage.lustre")
    bucket = r.string(st, "bucket_name", "storage", pattern=_AWS_BUCKET if cloud == "aws" else _GCP_NAME,
                      hint="3-63 lower-case letters, digits, '-' (and '.' on AWS)")
    if size is None or tput is None:
        return None
    return StorageSpec(
        lustre=LustreSpec(size_gib=size, throughput_mbps_per_tib=tput, import_path=import_path,
                          export_path=export_path, mount_point=mount, kms_key_id=kms),
        bucket_name=bucket,
    )


# How a deployer finds the address to put in deployer_cidrs (any "what is my IP" service does).
MY_ADDRESS_HINT = "your address as seen from the internet, e.g. `curl -s https://checkip.amazonaws.com`, as a /32"


# EKS AMI release versions are "<kubernetes major.minor.patch>-<YYYYMMDD>" (the value of the
# SSM parameter .../recommended/release_version, and of the node group's releaseVersion;
# EKS user guide, "Retrieve recommended Amazon Linux AMI IDs", read 2026-11).
_EKS_RELEASE = re.compile(r"^1\.[0-9]{2}\.[0-9]{1,3}-20[0-9]{6}\Z")
_AMI_ID = re.compile(r"^ami-([0-9a-f]{8}|[0-9a-f]{17})\Z")


def _parse_image(r: _Reader, raw: Any, cloud: str | None, kind: str | None) -> str | None:
    if raw is None:
        return None
    if cloud != "aws":
        r.bad("compute.image", f"only applies to aws for now (on {cloud} the node image follows the GKE release "
                               "channel or Cluster Director's image)")
        return None
    pattern, example = (_EKS_RELEASE, "an EKS AL2023 NVIDIA release such as 1.33.5-20251120") if kind == "eks" \
        else (_AMI_ID, "an AMI id such as ami-0123456789abcdef0")
    if not isinstance(raw, str) or not pattern.match(raw):
        r.bad("compute.image", f"{_short(raw)} is not a node image for {kind} (allowed: {example})")
        return None
    return raw


def _default_kubernetes_version(cloud: str | None) -> str:
    """The Kubernetes version a stack gets when it names none: on AWS the EKS pin of
    components/aws/versions.py (in standard support), elsewhere the generic default."""
    if cloud == "aws":
        from components.aws.versions import EKS_KUBERNETES_VERSION
        return EKS_KUBERNETES_VERSION
    return "1.33"


def needs_deployer_placeholder(raw: Any) -> bool:
    """True when the offline plan would substitute :data:`DEPLOYER_PLACEHOLDER` for this object."""
    orch = raw.get("orchestration") if isinstance(raw, Mapping) else None
    return (isinstance(orch, Mapping) and orch.get("kind") in ("eks", "gke")
            and orch.get("endpoint", "public") == "public" and not orch.get("deployer_cidrs"))


def _parse_orchestration(r: _Reader, raw: Any, cloud: str | None, placeholder: bool = False) -> OrchestrationSpec | None:
    o = r.mapping(raw, "orchestration", ("kind", "kubernetes_version", "endpoint", "deployer_cidrs", "api_access_cidrs",
                                         "login_nodes", "partition"), required=("kind",))
    allowed = ORCHESTRATORS.get(cloud or "", ("eks", "gke", "slurm"))
    kind = r.string(o, "kind", "orchestration", allowed=allowed)
    if kind is None and isinstance(o.get("kind"), str) and o["kind"] in ("eks", "gke", "aks", "slurm"):
        r.problems[-1] = ("orchestration.kind", f"{o['kind']!r} does not run on {cloud} (allowed: {', '.join(allowed)})")
    default_version = _default_kubernetes_version(cloud)
    version = r.string(o, "kubernetes_version", "orchestration", default=default_version, pattern=_K8S_VERSION,
                       hint="1.28 to 1.39, as a quoted string") or default_version
    if "kubernetes_version" in o and isinstance(o["kubernetes_version"], float):
        r.problems[-1] = ("orchestration.kubernetes_version",
                          f"{o['kubernetes_version']!r} was read as a number; quote it (allowed: \"1.28\" to \"1.39\")")
    if "api_access_cidrs" in o:
        r.bad("orchestration.api_access_cidrs", "renamed to orchestration.deployer_cidrs (the ranges `pulumi up` "
                                                "runs from; the API admits no other public range)")
    endpoint = r.string(o, "endpoint", "orchestration", default="public", allowed=("public", "private")) or "public"
    cidrs_raw = o.get("deployer_cidrs", [])
    cidrs: list[str] = []
    if not isinstance(cidrs_raw, list):
        r.bad("orchestration.deployer_cidrs", f"expected a list of CIDR blocks, got {_short(cidrs_raw)}")
    else:
        for i, c in enumerate(cidrs_raw):
            path = f"orchestration.deployer_cidrs[{i}]"
            try:
                net = ipaddress.ip_network(str(c))
            except ValueError:
                r.bad(path, f"{_short(c)} is not a CIDR block (allowed: e.g. {MY_ADDRESS_HINT})")
                continue
            if net.prefixlen == 0:
                r.bad(path, f"{c} opens the API to the whole internet (allowed: specific ranges, e.g. {MY_ADDRESS_HINT})")
                continue
            if not net.is_global:
                r.bad(path, f"{c} is not a global address range (private, shared or documentation), which the public endpoint never sees "
                            f"(allowed: public ranges, e.g. {MY_ADDRESS_HINT}; for access from inside the VPC "
                            "set orchestration.endpoint: private)")
                continue
            cidrs.append(str(net))
    if kind in ("eks", "gke") and endpoint == "public" and isinstance(cidrs_raw, list) and not cidrs_raw and placeholder:
        cidrs.append(DEPLOYER_PLACEHOLDER)
    elif kind in ("eks", "gke") and endpoint == "public" and isinstance(cidrs_raw, list) and not cidrs_raw:
        r.bad("orchestration.deployer_cidrs",
              f"required for {kind} with a public endpoint: `pulumi up` deploys the in-cluster layer (device plugins, "
              f"CSI volume, JobSet controller) through the cluster's API, so it must reach it from where it runs "
              f"(allowed: {MY_ADDRESS_HINT}; or set orchestration.endpoint: private and deploy that layer from inside "
              "the VPC, README \"Private clusters\")")
    login = r.integer(o, "login_nodes", "orchestration", 1, 0, 8)
    partition = r.string(o, "partition", "orchestration", default="gpu", pattern=re.compile(r"^[a-z][a-z0-9]{0,9}\Z"),
                         hint="1-10 lower-case letters and digits") or "gpu"
    if kind != "slurm":
        for key in ("login_nodes", "partition"):
            if key in o:
                r.bad(f"orchestration.{key}", f"only applies to slurm (kind is {kind})")
    else:
        for key in ("endpoint", "deployer_cidrs"):
            if key in o:
                r.bad(f"orchestration.{key}", "only applies to eks and gke (kind is slurm)")
    if kind is None or login is None:
        return None
    return OrchestrationSpec(kind=cast(Literal["eks", "gke", "slurm"], kind), kubernetes_version=version,
                             endpoint=cast(Literal["public", "private"], endpoint), deployer_cidrs=tuple(cidrs),
                             login_nodes=login, partition=partition)


def _parse_tags(r: _Reader, raw: Any, cloud: str | None) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        r.bad("tags", f"expected a mapping of strings, got {_short(raw)}")
        return {}
    tags: dict[str, str] = {}
    for key, value in raw.items():
        path = f"tags.{key}"
        if not isinstance(key, str) or not isinstance(value, str):
            r.bad(path, f"tag keys and values must be strings, got {_short(value)}")
            continue
        if cloud == "gcp" and not (_GCP_LABEL.match(key) and _GCP_LABEL_VALUE.match(value)):
            r.bad(path, "GCP labels are lower-case letters, digits, '_' and '-', at most 63 characters "
                        "(allowed: keys starting with a letter)")
            continue
        if cloud == "aws" and (len(key) > 128 or len(value) > 256 or key.lower().startswith("aws:")):
            r.bad(path, "AWS tag keys are at most 128 characters, values 256, and 'aws:' is reserved")
            continue
        tags[key] = value
    return tags


# ---------------------------------------------------------------------------------------------
# Stack files

STACKS_DIR = Path(__file__).resolve().parent.parent / "stacks"


def stack_path(stack: str) -> Path:
    """A bundled stack's name (``aws-h100-eks``) or a path to a stack file."""
    p = Path(stack)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return p
    return STACKS_DIR / f"Pulumi.{stack}.yaml"


def bundled_stacks() -> list[str]:
    return sorted(p.name[len("Pulumi."):-len(".yaml")] for p in STACKS_DIR.glob("Pulumi.*.yaml"))


def stack_name(path: Path) -> str:
    n = path.name
    return n[len("Pulumi."):-len(".yaml")] if n.startswith("Pulumi.") and n.endswith(".yaml") else path.stem


def read_stack_file(stack: str) -> tuple[str, Any]:
    """Return (stack name, raw cluster object) of a stack file; SpecError for a bad file."""
    path = stack_path(stack)
    if not path.exists():
        raise SpecError([(str(path), f"no such stack file (bundled stacks: {', '.join(bundled_stacks())})")])
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "unknown position"
        raise SpecError([(str(path), f"not valid YAML at {where}: {getattr(exc, 'problem', exc)}")]) from None
    if not isinstance(doc, Mapping) or not isinstance(doc.get("config"), Mapping):
        raise SpecError([(str(path), "a stack file needs a 'config:' mapping")])
    if CONFIG_KEY not in doc["config"]:
        raise SpecError([(f"config.{CONFIG_KEY}", "required (the cluster description)")])
    return stack_name(path), doc["config"][CONFIG_KEY]


def load_stack(stack: str, *, deployer_placeholder: bool = False) -> tuple[str, ClusterSpec]:
    name, raw = read_stack_file(stack)
    return name, parse_spec(raw, default_name=default_name(name), deployer_placeholder=deployer_placeholder)


def default_name(stack: str) -> str:
    cleaned = re.sub(r"[^a-z0-9-]", "-", stack.lower()).strip("-")[:32] or "gpu"
    return cleaned if cleaned[0].isalpha() else f"c-{cleaned}"[:32]


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> int:
    """``python -m components.spec STACK``: check a stack file and print the parsed spec."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m components.spec STACK (a bundled stack name or a stack file)", file=sys.stderr)
        return 2
    try:
        name, spec = load_stack(args[0])
    except SpecError as err:
        fail_cli(err)
    out(f"{name}: ok ({spec.cloud} {spec.compute.nodes} x {spec.compute.instance_type}, {spec.orchestration.kind})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
