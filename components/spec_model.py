"""The cluster description's model: the typed, checked ``ClusterSpec`` and its parts.

Only ``parse_spec`` (components/spec_parse.py) builds a ``ClusterSpec``: it runs every generic
rule and the cloud's own (components/<cloud>/rules.py) first, then hands the constructor a token
that says so. Built any other way (directly, or with ``dataclasses.replace``), the constructor
refuses with ``TypeError``, since a spec that skipped its rules would reach ``pulumi up`` with
values no rule has seen. To change a spec, change the raw object and parse it again.
The parts (``ComputeSpec``, ``LustreSpec``, ...) are plain values, meaningful only inside one.
Pure: no Pulumi.
"""

from __future__ import annotations

import re

from dataclasses import InitVar, dataclass, field
from typing import Literal, Mapping

from gpu_cluster.components.catalog import InstanceType, load_catalog
from gpu_cluster.components.spec_security import SecuritySpec

SUPPORTED_CLOUDS = ("aws", "gcp", "azure")
ORCHESTRATORS: Mapping[str, tuple[str, ...]] = {
    "aws": ("eks", "slurm"),
    "gcp": ("gke", "slurm"),
    "azure": ("aks", "slurm"),
}
# Azure Slurm's key (orchestration.ssh_public_key): an OpenSSH public key line; what the offline plan
# puts in place of a missing one is no key anyone holds ("AAAA" alone).
SSH_KEY = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+( [\x20-\x7e]*)?\Z")
SSH_KEY_PLACEHOLDER = "ssh-ed25519 AAAA gpu-cluster-offline-placeholder"
CAPACITY_TYPES: Mapping[str, tuple[str, ...]] = {
    "aws": ("on-demand", "reservation", "capacity-block", "spot"),
    "gcp": ("on-demand", "reservation", "flex-start", "spot"),
    # Azure: pay-as-you-go, a capacity reservation group, spot (components/azure/rules.py).
    "azure": ("on-demand", "reservation", "spot"),
}
# Capacity that the cloud hands over already placed on its network spine: a placement group
# or policy on top of it is refused (AWS: capacity blocks and ODCRs in a cluster placement
# group are created placed; GCP: reservation blocks are compact by construction).
PRE_PLACED = ("reservation", "capacity-block")
MAX_NODES = 2048

Capacity = Literal["on-demand", "reservation", "capacity-block", "spot", "flex-start"]


class RulesRan:
    """The token ``parse_spec`` passes to ``ClusterSpec`` once every rule has passed."""

    __slots__ = ()


RULES_RAN = RulesRan()


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacitySpec:
    type: Capacity
    """on-demand | reservation | capacity-block (AWS) | flex-start (GCP) | spot."""
    id: str | None = None
    """AWS capacity reservation id (``cr-...``) for a reservation or capacity block; GCP reservation name;
    Azure capacity reservation group resource id."""
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
    kind: Literal["eks", "gke", "aks", "slurm"]
    kubernetes_version: str = "1.33"
    endpoint: Literal["public", "private"] = "public"
    """Kubernetes API endpoint. public: reachable only from ``deployer_cidrs`` (and the VPC), so
    ``pulumi up`` can deploy the in-cluster layer; private: VPC only, and the in-cluster layer
    is deployed by a program run from inside the VPC."""
    deployer_cidrs: tuple[str, ...] = ()
    """Where ``pulumi up`` and ``gpu_cluster.workloads.validate submit`` run from; the only public ranges
    the API admits."""
    login_nodes: int = 1
    """Slurm login nodes."""
    partition: str = "gpu"
    """Slurm partition (queue) name for the GPU nodes."""
    size: str | None = None
    """AWS PCS: the controller's size, SMALL (up to 32 instances), MEDIUM (512) or LARGE (2048). PCS
    cannot change it in place: a new size replaces the cluster with its queue and node groups. So
    it is never derived from the node count: unset is SMALL, and more instances than SMALL holds
    are refused until the stack names the size (components/aws/rules.py)."""
    installer_image: str | None = None
    """GKE: the NCCL plugin installer's image by digest (``repo[:tag]@sha256:...``). Required where
    the catalog has no published digest for the fabric's installer (gIB, TCPX:
    components/gcp/rules.py), optional where it has one (then this one is used instead)."""
    deletion_protection: bool = True
    """GKE: the cluster's ``deletion_protection`` (a pulumi-gcp field, checked by the provider when it
    deletes, not Pulumi's ``protect``). Set false and ``pulumi up`` before ``pulumi destroy``."""
    pull_through_cache: bool = False
    """AWS EKS: pull the job's image from public.ecr.aws through an ECR pull-through cache rule of the
    account (components/aws/image_cache.py): one pull from ECR Public fills it, every node pulls from
    the account's registry, and the anonymous monthly cap of ECR Public is not spent per node."""
    ssh_key_name: str | None = None
    """AWS PCS: an existing EC2 key pair the login nodes accept for ``ec2-user`` (their launch
    template's KeyName, as aws-hpc-recipes' PCS login template sets it). With it the stack output
    ``access.ssh_command`` is an ssh through Session Manager that runs commands (``validate submit``
    uses it); without it, an interactive Session Manager shell only."""
    ssh_public_key: str | None = None
    """Azure Slurm: the OpenSSH public key the controller (the login node) and the GPU nodes accept for
    their admin user; Azure creates no Linux VM without a key once passwords are off
    (components/azure/orchestration_slurm.py). The offline plan stands a placeholder in for a missing one."""

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
    control_plane_zone_id: str | None = None
    """AWS EKS, a network the stack creates: the zone ID (``use1-az4``) of the control plane's second
    subnet. Unset: the first zone of the account, by name, that is neither the nodes' zone nor one
    EKS refuses, looked up at ``pulumi up`` (components/aws/network_rules.py)."""

    @property
    def existing(self) -> bool:
        return self.vpc_id is not None


DEPLOY_TIME_ID = "(an output of another resource)"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSpec:
    name: str
    """Prefix of every resource name."""
    cloud: Literal["aws", "gcp", "azure"]
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
    images: Mapping[str, str] = field(default_factory=dict)
    """Image pins, ``repo:tag`` to ``sha256:...``: what is pulled by digest instead of by that tag
    (components/image_pins.py; ``gpu-cluster pin STACK`` writes them)."""
    rules: InitVar[RulesRan | None] = None
    """:data:`RULES_RAN`, from ``parse_spec`` only: the rules ran on these values."""

    def __post_init__(self, rules: RulesRan | None) -> None:
        if rules is not RULES_RAN:
            raise TypeError(
                "a ClusterSpec is built by gpu_cluster.components.spec.parse_spec, which runs its rules; "
                "construct the raw gpu-cluster:cluster object and parse it (dataclasses.replace "
                "and direct construction would skip the rules)"
            )

    @property
    def instance(self) -> InstanceType:
        return load_catalog().get(self.compute.instance_type)

    @property
    def total_gpus(self) -> int:
        return self.compute.nodes * self.instance.accelerator.count
