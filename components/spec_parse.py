"""Reading the cluster description: a raw ``gpu-cluster:cluster`` object becomes a ``ClusterSpec``.

``parse_spec`` checks every field and every rule that ties fields together, collects every
problem as ``(config path, reason)`` and raises them together in one ``SpecError``, so a user
fixes a stack file in one pass. The rules here are the generic ones; a rule that belongs to one
cloud lives beside it (components/<cloud>/rules.py): its field rules are called here as each
field is read, and its ``check`` on the whole typed spec once the generic rules pass. Only
``parse_spec`` builds a ``ClusterSpec`` (components/spec_model.py). Nothing here imports
Pulumi: the offline plan, the tests and the validation job read specs without an engine.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Literal, Mapping, Protocol, cast

from gpu_cluster.components.aws import rules as aws_rules
from gpu_cluster.components.azure import rules as azure_rules
from gpu_cluster.components.catalog import CatalogError, InstanceType, load_catalog
from gpu_cluster.components.gcp import rules as gcp_rules
from gpu_cluster.components.image_pins import PINS_KEY, check_pins
from gpu_cluster.components.lustre_tiers import load_lustre
from gpu_cluster.components.spec_model import (
    CAPACITY_TYPES,
    MAX_NODES,
    ORCHESTRATORS,
    PRE_PLACED,
    RULES_RAN,
    SUPPORTED_CLOUDS,
    Capacity,
    CapacitySpec,
    ClusterSpec,
    ComputeSpec,
    InterconnectSpec,
    LustreSpec,
    NetworkSpec,
    OrchestrationSpec,
    StorageSpec,
)
from gpu_cluster.components.spec_access import ssh_public_key
from gpu_cluster.components.spec_reader import SpecError, _Reader, short
from gpu_cluster.components.spec_security import parse_security

_K8S_VERSION = re.compile(r"^1\.(2[89]|3\d)\Z")
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}[a-z0-9]\Z")
KUBERNETES_KINDS = ("eks", "gke", "aks")


class CloudRules(Protocol):
    """What each cloud's rules module (components/<cloud>/rules.py) provides: the field rules,
    each returning a reason or None, and ``check`` on the whole typed spec."""

    REGION: re.Pattern[str]
    REGION_HINT: str
    BUCKET: re.Pattern[str]
    OBJECT_STORE_SCHEME: str
    RESERVATION_WHAT: str
    DEFAULT_KUBERNETES_VERSION: str

    def zone_in_region(self, region: str, zone: str) -> bool: ...
    def zone_example(self, region: str) -> str: ...
    def reservation_id(self, cid: str) -> str | None: ...
    def lustre_size(self, size: int, tput: int | None) -> str | None: ...
    def export_path(self, import_path: str | None, export: str) -> str | None: ...
    def tag(self, key: str, value: str) -> str | None: ...
    def node_image(self, raw: object, kind: str | None) -> str | None: ...
    def check(self, spec: ClusterSpec, raw: Mapping[str, Any]) -> list[tuple[str, str]]: ...


CLOUD_RULES: Mapping[str, CloudRules] = {"aws": aws_rules, "gcp": gcp_rules, "azure": azure_rules}

_TOP_KEYS = (
    "name",
    "cloud",
    "region",
    "zone",
    "zone_id",
    "compute",
    "interconnect",
    "storage",
    "orchestration",
    "network",
    "tags",
    "security",
    "images",
)


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

    name = (
        r.string(
            top,
            "name",
            "",
            default=default_name,
            pattern=_NAME,
            hint="2-32 characters: lower-case letters, digits, '-', starting with a letter",
        )
        or default_name
    )
    cloud = r.string(top, "cloud", "", allowed=SUPPORTED_CLOUDS)
    rules = CLOUD_RULES.get(cloud or "")

    region = r.string(
        top, "region", "", pattern=rules.REGION if rules else None, hint=rules.REGION_HINT if rules else ""
    )
    zone = r.string(top, "zone", "")
    if isinstance(top.get("zone"), list):
        r.replace_last(
            "zone",
            "EFA, GPUDirect networks and placement groups need every GPU node in one zone; give one zone, not a list",
        )
    if zone is not None and region is not None and rules is not None and not rules.zone_in_region(region, zone):
        r.bad(
            "zone", f"{zone!r} is not a zone of region {region!r} (allowed: zones such as {rules.zone_example(region)})"
        )

    # The zone ID's form and meaning are AWS rules (components/aws/rules.py).
    zone_id = r.string(top, "zone_id", "")
    if zone_id is not None and cloud != "aws":
        r.bad("zone_id", "only applies to aws (zone names are the same in every GCP project)")
        zone_id = None

    # compute
    comp = r.mapping(
        top.get("compute"),
        "compute",
        ("instance_type", "nodes", "capacity", "root_volume_gib", "image"),
        required=("instance_type", "nodes"),
    )
    itype = r.string(comp, "instance_type", "compute")
    instance: InstanceType | None = None
    if itype is not None:
        try:
            instance = catalog.get(itype)
        except CatalogError:
            offered = catalog.names(cloud) if cloud else catalog.names()
            r.bad("compute.instance_type", f"{itype!r} is not in the hardware catalog (allowed: {', '.join(offered)})")
    if instance is not None and cloud is not None and instance.cloud != cloud:
        r.bad(
            "compute.instance_type",
            f"{itype!r} is a {instance.cloud} type, not offered on {cloud} (allowed: {', '.join(catalog.names(cloud))})",
        )
        instance = None
    if instance is not None and cloud is not None:
        where = zone if cloud == "gcp" else region
        if where is not None and where not in instance.locations:
            kind = "zone" if cloud == "gcp" else "region"
            r.bad(
                kind,
                f"{itype} is not offered in {kind} {where!r} "
                f"(allowed: {', '.join(instance.locations)}; source: {catalog.source(instance.locations_source).url})",
            )
    nodes = r.integer(comp, "nodes", "compute", None, 1, MAX_NODES)
    root_gib = r.integer(comp, "root_volume_gib", "compute", 500, 100, 16384) or 500

    capacity = _parse_capacity(r, comp.get("capacity"), cloud, rules)

    # interconnect: placement is derived from the capacity unless the user says otherwise
    ic = r.mapping(top.get("interconnect"), "interconnect", ("placement",))
    placement_raw = ic.get("placement", "auto")
    # Azure has no placement group for the fabric: the InfiniBand fabric is the scale set
    # (components/azure/rules.py), so nothing is derived there.
    placement = capacity is not None and not capacity.pre_placed and cloud != "azure"
    if placement_raw not in ("auto", True, False):
        r.bad("interconnect.placement", f"{short(placement_raw)} is not allowed (allowed: auto, true, false)")
    elif placement_raw is True and capacity is not None and capacity.pre_placed:
        r.bad(
            "interconnect.placement",
            f"a {capacity.type} is already placed by the cloud; a placement group on top of it is refused "
            "(allowed: auto, false)",
        )
    elif isinstance(placement_raw, bool):
        placement = placement_raw
    # A cloud that takes no placement policy for this machine type and capacity (GCP: compact
    # placement with flex-start, components/gcp/rules.py) derives none and refuses an explicit one.
    refused = getattr(rules, "placement_refused", None)
    why = refused(itype, capacity.type, nodes) if refused and itype and capacity and nodes else None
    if why is not None:
        if placement_raw is True:
            r.bad("interconnect.placement", why)
        placement = False

    storage = _parse_storage(r, top.get("storage"), cloud, rules)
    pins, pin_problems = check_pins(top.get(PINS_KEY))
    for path, why in pin_problems:
        r.bad(path, why)
    orch = _parse_orchestration(
        r,
        top.get("orchestration"),
        cloud,
        rules,
        deployer_placeholder,
        itype if instance is not None else None,
        pins,
    )
    image = _parse_image(r, comp.get("image"), cloud, rules, orch.kind if orch else None)
    net = r.mapping(
        top.get("network"),
        "network",
        ("cidr", "vpc_id", "node_subnet_id", "control_plane_subnet_ids", "control_plane_zone_id"),
    )
    cidr = r.string(net, "cidr", "network", default="10.0.0.0/16") or "10.0.0.0/16"
    vpc_id, node_subnet_id = r.string(net, "vpc_id", "network"), r.string(net, "node_subnet_id", "network")
    if (vpc_id is None) != (node_subnet_id is None):
        r.bad(
            "network.vpc_id" if vpc_id is None else "network.node_subnet_id",
            "an existing network needs both network.vpc_id and network.node_subnet_id (allowed: both or neither)",
        )
    cp_raw = net.get("control_plane_subnet_ids") or []
    if not isinstance(cp_raw, list) or not all(isinstance(c, str) and c for c in cp_raw):
        r.bad("network.control_plane_subnet_ids", f"expected a list of subnet ids, got {short(cp_raw)}")
        cp_raw = []
    if cp_raw and vpc_id is None:
        r.bad("network.control_plane_subnet_ids", "only applies to an existing network (set network.vpc_id)")
    cp_zone_id = r.string(net, "control_plane_zone_id", "network")
    if cp_zone_id is not None and cloud != "aws":
        r.bad("network.control_plane_zone_id", "only applies to aws (EKS's second control-plane zone)")
        cp_zone_id = None
    elif cp_zone_id is not None and vpc_id is not None:
        r.bad(
            "network.control_plane_zone_id",
            "only applies to a network the stack creates (an existing one names its control-plane subnets: "
            "network.control_plane_subnet_ids)",
        )
    try:
        n = ipaddress.ip_network(cidr)
        if not n.is_private or not 16 <= n.prefixlen <= 20:
            r.bad("network.cidr", f"{cidr!r} must be a private range of size /16 to /20 (allowed: e.g. 10.0.0.0/16)")
    except ValueError:
        r.bad("network.cidr", f"{cidr!r} is not a CIDR block (allowed: e.g. 10.0.0.0/16)")
    tags = _parse_tags(r, top.get("tags"), rules)
    security = parse_security(r, top.get("security"))

    if r.problems:
        raise SpecError(r.problems)
    assert cloud is not None and region is not None and zone is not None
    assert itype is not None and nodes is not None and capacity is not None
    assert storage is not None and orch is not None
    spec = ClusterSpec(
        name=name,
        cloud=cast(Literal["aws", "gcp", "azure"], cloud),
        region=region,
        zone=zone,
        zone_id=zone_id,
        compute=ComputeSpec(instance_type=itype, nodes=nodes, capacity=capacity, root_volume_gib=root_gib, image=image),
        interconnect=InterconnectSpec(placement=placement),
        storage=storage,
        orchestration=orch,
        network=NetworkSpec(
            cidr=cidr,
            vpc_id=vpc_id,
            node_subnet_id=node_subnet_id,
            control_plane_subnet_ids=tuple(cp_raw),
            control_plane_zone_id=cp_zone_id,
        ),
        tags=tags,
        security=security,
        images=pins,
        rules=RULES_RAN,
    )
    # Rules that need the whole typed spec and belong to one cloud live beside that cloud
    # (components/<cloud>/rules.py, pure: no Pulumi); they run once the generic shape is valid,
    # and the spec leaves this function only if they pass.
    assert rules is not None
    cloud_problems = rules.check(spec, top)
    if cloud_problems:
        raise SpecError(cloud_problems)
    return spec


def _parse_capacity(r: _Reader, raw: Any, cloud: str | None, rules: CloudRules | None) -> CapacitySpec | None:
    if raw is None:
        return CapacitySpec(type="on-demand")
    allowed = CAPACITY_TYPES.get(cloud or "", tuple(sorted({t for ts in CAPACITY_TYPES.values() for t in ts})))
    if isinstance(raw, str):
        # `capacity: spot` reads naturally but the capacity is a mapping (it may carry an id): say how to write it.
        what = f"{{type: {raw}, id: ...}}" if raw in PRE_PLACED else f"{{type: {raw}}}"
        types = ", ".join(allowed)
        if raw in allowed:
            r.bad("compute.capacity", f"{raw!r} is a string; write the capacity as a mapping: {what} (types: {types})")
        else:
            r.bad(
                "compute.capacity", f"{short(raw)} is not a capacity (allowed: a mapping {{type: T}}, T one of {types})"
            )
        return None
    cap = r.mapping(raw, "compute.capacity", ("type", "id", "placement_group"), required=("type",))
    ctype = r.string(cap, "type", "compute.capacity", allowed=allowed)
    if ctype is None:
        return None
    cid = r.string(cap, "id", "compute.capacity")
    if ctype in PRE_PLACED:
        if cid is None:
            what = rules.RESERVATION_WHAT if rules else "reservation name"
            r.bad("compute.capacity.id", f"a {ctype} needs its {what}")
            return None
        why = rules.reservation_id(cid) if rules else None
        if why is not None:
            r.bad("compute.capacity.id", why)
            return None
    elif cid is not None:
        r.bad("compute.capacity.id", f"an id only applies to reservations (allowed with type: {', '.join(PRE_PLACED)})")
    # Which types and clouds may name a placement group is an AWS rule (components/aws/rules.py).
    pg = r.string(cap, "placement_group", "compute.capacity")
    if pg is not None and cloud != "aws":
        r.bad("compute.capacity.placement_group", "only applies to aws reservations (ODCR placement groups)")
        pg = None
    return CapacitySpec(type=cast(Capacity, ctype), id=cid, placement_group=pg)


def _parse_storage(r: _Reader, raw: Any, cloud: str | None, rules: CloudRules | None) -> StorageSpec | None:
    st = r.mapping(raw, "storage", ("lustre", "bucket_name"), required=("lustre",))
    lu = r.mapping(
        st.get("lustre"),
        "storage.lustre",
        ("size_gib", "throughput_mbps_per_tib", "import_path", "export_path", "mount_point", "kms_key_id"),
        required=("size_gib", "throughput_mbps_per_tib"),
    )
    # The tiers of each cloud's Lustre service are catalog facts (catalog.yaml, section lustre).
    tiers = load_lustre()
    size = r.integer(lu, "size_gib", "storage.lustre", None, 1, max(t.max_gib for t in tiers.values()))
    tput = r.integer(lu, "throughput_mbps_per_tib", "storage.lustre", None, 1, 100_000)
    offered = (
        tiers[cloud].throughputs
        if cloud in tiers
        else tuple(sorted({t for c in tiers.values() for t in c.throughputs}))
    )
    if tput is not None and tput not in offered:
        r.bad(
            "storage.lustre.throughput_mbps_per_tib", f"{tput} is not offered (allowed: {', '.join(map(str, offered))})"
        )
        tput = None
    why = rules.lustre_size(size, tput) if size is not None and rules is not None else None
    if why is not None:
        r.bad("storage.lustre.size_gib", why)
    scheme = rules.OBJECT_STORE_SCHEME if rules else ""
    import_path = r.string(lu, "import_path", "storage.lustre")
    export_path = r.string(lu, "export_path", "storage.lustre")
    for key, value in (("import_path", import_path), ("export_path", export_path)):
        if value is not None and scheme and not (value.startswith(scheme) and len(value) > len(scheme)):
            r.bad(
                f"storage.lustre.{key}",
                f"{value!r} is not an object store path on {cloud} (allowed: {scheme}bucket/prefix)",
            )
    why = rules.export_path(import_path, export_path) if export_path is not None and rules is not None else None
    if why is not None:
        r.bad("storage.lustre.export_path", why)
    if export_path is not None and import_path is None:
        r.bad(
            "storage.lustre.export_path",
            "an export path needs an import path (the data repository association holds both)",
        )
    mount = (
        r.string(
            lu,
            "mount_point",
            "storage.lustre",
            default="/fsx",
            pattern=re.compile(r"^/[A-Za-z0-9_./-]*\Z"),
            hint="an absolute path",
        )
        or "/fsx"
    )
    kms = r.string(lu, "kms_key_id", "storage.lustre")
    bucket = r.string(
        st,
        "bucket_name",
        "storage",
        pattern=rules.BUCKET if rules else None,
        hint="3-63 lower-case letters, digits, '-' (and '.' on AWS)",
    )
    if size is None or tput is None:
        return None
    return StorageSpec(
        lustre=LustreSpec(
            size_gib=size,
            throughput_mbps_per_tib=tput,
            import_path=import_path,
            export_path=export_path,
            mount_point=mount,
            kms_key_id=kms,
        ),
        bucket_name=bucket,
    )


# How a deployer finds the address to put in deployer_cidrs (any "what is my IP" service does).
MY_ADDRESS_HINT = "your address as seen from the internet, e.g. `curl -s https://checkip.amazonaws.com`, as a /32"


def _parse_image(r: _Reader, raw: Any, cloud: str | None, rules: CloudRules | None, kind: str | None) -> str | None:
    if raw is None:
        return None
    why = (
        rules.node_image(raw, kind)
        if rules
        else (
            f"only applies to aws for now (on {cloud} the node image follows the GKE release channel or Cluster "
            "Director's image)"
        )
    )
    if why is not None:
        r.bad("compute.image", why)
        return None
    return cast(str, raw)


def needs_deployer_placeholder(raw: Any) -> bool:
    """True when the offline plan would substitute :data:`DEPLOYER_PLACEHOLDER` for this object."""
    orch = raw.get("orchestration") if isinstance(raw, Mapping) else None
    return (
        isinstance(orch, Mapping)
        and orch.get("kind") in KUBERNETES_KINDS
        and orch.get("endpoint", "public") == "public"
        and not orch.get("deployer_cidrs")
    )


def _parse_orchestration(
    r: _Reader,
    raw: Any,
    cloud: str | None,
    rules: CloudRules | None,
    placeholder: bool = False,
    instance_type: str | None = None,
    pins: Mapping[str, str] | None = None,
) -> OrchestrationSpec | None:
    o = r.mapping(
        raw,
        "orchestration",
        (
            "kind",
            "kubernetes_version",
            "endpoint",
            "deployer_cidrs",
            "api_access_cidrs",
            "login_nodes",
            "partition",
            "size",
            "deletion_protection",
            "installer_image",
            "ssh_key_name",
            "ssh_public_key",
            "pull_through_cache",
        ),
        required=("kind",),
    )
    allowed = ORCHESTRATORS.get(cloud or "", ("eks", "gke", "aks", "slurm"))
    kind = r.string(o, "kind", "orchestration", allowed=allowed)
    # Only with a known cloud: without one, the kind is checked against every orchestrator alone.
    if kind is None and cloud and isinstance(o.get("kind"), str) and o["kind"] in ("eks", "gke", "aks", "slurm"):
        r.replace_last("orchestration.kind", f"{o['kind']!r} does not run on {cloud} (allowed: {', '.join(allowed)})")
    # The Kubernetes version a stack gets when it names none: the cloud's (on AWS the EKS pin of
    # components/aws/versions.py, in standard support).
    default_version = rules.DEFAULT_KUBERNETES_VERSION if rules else "1.33"
    version = (
        r.string(
            o,
            "kubernetes_version",
            "orchestration",
            default=default_version,
            pattern=_K8S_VERSION,
            hint="1.28 to 1.39, as a quoted string",
        )
        or default_version
    )
    if "kubernetes_version" in o and isinstance(o["kubernetes_version"], float):
        r.replace_last(
            "orchestration.kubernetes_version",
            f'{o["kubernetes_version"]!r} was read as a number; quote it (allowed: "1.28" to "1.39")',
        )
    if "api_access_cidrs" in o:
        r.bad(
            "orchestration.api_access_cidrs",
            "renamed to orchestration.deployer_cidrs (the ranges `pulumi up` "
            "runs from; the API admits no other public range)",
        )
    endpoint = r.string(o, "endpoint", "orchestration", default="public", allowed=("public", "private")) or "public"
    cidrs_raw = o.get("deployer_cidrs", [])
    cidrs: list[str] = []
    if not isinstance(cidrs_raw, list):
        r.bad("orchestration.deployer_cidrs", f"expected a list of CIDR blocks, got {short(cidrs_raw)}")
    else:
        for i, c in enumerate(cidrs_raw):
            path = f"orchestration.deployer_cidrs[{i}]"
            try:
                net = ipaddress.ip_network(str(c))
            except ValueError:
                r.bad(path, f"{short(c)} is not a CIDR block (allowed: e.g. {MY_ADDRESS_HINT})")
                continue
            if net.prefixlen == 0:
                r.bad(
                    path, f"{c} opens the API to the whole internet (allowed: specific ranges, e.g. {MY_ADDRESS_HINT})"
                )
                continue
            if not net.is_global:
                r.bad(
                    path,
                    f"{c} is not a global address range (private, shared or documentation), which the public endpoint never sees "
                    f"(allowed: public ranges, e.g. {MY_ADDRESS_HINT}; for access from inside the VPC "
                    "set orchestration.endpoint: private)",
                )
                continue
            cidrs.append(str(net))
    if (
        kind in KUBERNETES_KINDS
        and endpoint == "public"
        and isinstance(cidrs_raw, list)
        and not cidrs_raw
        and placeholder
    ):
        cidrs.append(DEPLOYER_PLACEHOLDER)
    elif kind in KUBERNETES_KINDS and endpoint == "public" and isinstance(cidrs_raw, list) and not cidrs_raw:
        r.bad(
            "orchestration.deployer_cidrs",
            f"required for {kind} with a public endpoint: `pulumi up` deploys the in-cluster layer (device plugins, "
            f"CSI volume, JobSet controller) through the cluster's API, so it must reach it from where it runs "
            f"(allowed: {MY_ADDRESS_HINT}; or set orchestration.endpoint: private and deploy that layer from inside "
            'the VPC, docs/stacks.md "A private cluster")',
        )
    login = r.integer(o, "login_nodes", "orchestration", 1, 0, 8)
    partition = (
        r.string(
            o,
            "partition",
            "orchestration",
            default="gpu",
            pattern=re.compile(r"^[a-z][a-z0-9]{0,9}\Z"),
            hint="1-10 lower-case letters and digits",
        )
        or "gpu"
    )
    # AWS PCS's controller size (SMALL | MEDIUM | LARGE); its limits are components/aws/rules.py's.
    size = r.string(o, "size", "orchestration", allowed=("SMALL", "MEDIUM", "LARGE"))
    if size is not None and (cloud != "aws" or kind != "slurm"):
        r.bad("orchestration.size", "only applies to slurm on aws (the AWS PCS controller's size)")
        size = None
    # AWS PCS login nodes: an existing EC2 key pair by name (EC2 API CreateKeyPair, KeyName: "Up to
    # 255 ASCII characters"); components/aws/orchestration_pcs.py puts it in the login template.
    key_name = r.string(
        o,
        "ssh_key_name",
        "orchestration",
        pattern=re.compile(r"^[\x20-\x7e]{1,255}\Z"),
        hint="an EC2 key pair name: 1-255 printable ASCII characters",
    )
    if key_name is not None and (cloud != "aws" or kind != "slurm"):
        r.bad("orchestration.ssh_key_name", "only applies to slurm on aws (the AWS PCS login nodes' key pair)")
        key_name = None
    ssh_key = ssh_public_key(r, o, cloud, kind, placeholder)
    cache = o.get("pull_through_cache", False)
    if not isinstance(cache, bool):
        r.bad("orchestration.pull_through_cache", f"expected true or false, got {short(cache)}")
        cache = False
    elif cache and (cloud != "aws" or kind != "eks"):
        r.bad("orchestration.pull_through_cache", f"only applies to eks (kind is {kind}, cloud {cloud})")
        cache = False
    protect = o.get("deletion_protection", True)
    if not isinstance(protect, bool):
        r.bad("orchestration.deletion_protection", f"expected true or false, got {short(protect)}")
        protect = True
    elif "deletion_protection" in o and (cloud != "gcp" or kind != "gke"):
        r.bad("orchestration.deletion_protection", f"only applies to gke (kind is {kind}, cloud {cloud})")
        protect = True
    if kind != "slurm":
        for key in ("login_nodes", "partition"):
            if key in o:
                r.bad(f"orchestration.{key}", f"only applies to slurm (kind is {kind})")
    else:
        for key in ("endpoint", "deployer_cidrs"):
            if key in o:
                r.bad(f"orchestration.{key}", "only applies to eks, gke and aks (kind is slurm)")
    # GCP only (components/gcp/rules.py): the NCCL plugin installer's image, by digest.
    check_installer = getattr(rules, "installer_image", None)
    installer_missing = getattr(rules, "installer_image_missing", None)
    installer = o.get("installer_image")
    if installer is not None:
        why = (
            check_installer(installer, instance_type, kind)
            if check_installer
            else f"only applies to gke on gcp (cloud is {cloud})"
        )
        if why is not None:
            r.bad("orchestration.installer_image", why)
            installer = None
    elif kind == "gke" and instance_type and not placeholder and installer_missing:
        # The offline plan (placeholder) plans no installer without it and says so (a plan caveat).
        # A pin of the catalog's installer tag (images:, components/image_pins.py) names it too.
        missing = installer_missing(instance_type, pins or {})
        if missing is not None:
            r.bad("orchestration.installer_image", missing)
    if kind is None or login is None:
        return None
    return OrchestrationSpec(
        kind=cast(Literal["eks", "gke", "aks", "slurm"], kind),
        kubernetes_version=version,
        endpoint=cast(Literal["public", "private"], endpoint),
        deployer_cidrs=tuple(cidrs),
        login_nodes=login,
        partition=partition,
        size=size,
        deletion_protection=protect,
        installer_image=installer,
        ssh_key_name=key_name,
        ssh_public_key=ssh_key,
        pull_through_cache=cache,
    )


def _parse_tags(r: _Reader, raw: Any, rules: CloudRules | None) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        r.bad("tags", f"expected a mapping of strings, got {short(raw)}")
        return {}
    tags: dict[str, str] = {}
    for key, value in raw.items():
        path = f"tags.{key}"
        if not isinstance(key, str) or not isinstance(value, str):
            r.bad(path, f"tag keys and values must be strings, got {short(value)}")
            continue
        why = rules.tag(key, value) if rules else None
        if why is not None:
            r.bad(path, why)
            continue
        tags[key] = value
    return tags
