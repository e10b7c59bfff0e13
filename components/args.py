"""``GpuClusterArgs``: the cluster description as a Pulumi component's inputs.

The same description a stack file holds under ``gpu-cluster:cluster`` (docs/stacks.md, "The
cluster description"), in types Pulumi's component analyzer (``pulumi.provider.experimental``) turns
into a schema: TypedDicts, as the component provider hands the component its inputs as plain
dicts. Values that decide the cluster's shape, and those checked before anything is created
(the deployer's CIDRs, the network's range), are plain; the ids of an existing network are
Inputs, since they usually come from another resource (an Output of a whole list too, for the
control plane's subnets).

Rules live in one place, ``gpu_cluster.components.spec.parse_spec``: :func:`to_spec` builds the raw
mapping from the args and parses it, so a bad argument gets the stack file's
``(config path, reason)`` error. An id that is an Output stands in the raw mapping as
``DEPLOY_TIME_ID`` (its form is checked only when it is a plain string); the Inputs themselves
go to the network as :class:`gpu_cluster.components.aws.network.ExistingNetwork`.
"""

from collections.abc import Mapping
from typing import Any, Optional, Required, TypedDict

import pulumi

from gpu_cluster.components.spec import DEPLOY_TIME_ID, ClusterSpec, SpecError, default_name, parse_spec


class CapacityArgs(TypedDict, total=False):
    """How the GPU nodes are bought."""

    type: Required[str]
    """on-demand, reservation, capacity-block (aws), flex-start (gcp) or spot."""
    id: str
    """The reservation: an AWS capacity reservation id (cr-...) or a GCP reservation name."""
    placement_group: str
    """AWS reservation (ODCR) only: the cluster placement group the reservation was created in."""


class ComputeArgs(TypedDict, total=False):
    """The GPU nodes."""

    instance_type: Required[str]
    """A catalog instance type offered on the cloud (p5.48xlarge, a3-megagpu-8g, ...)."""
    nodes: Required[int]
    """GPU nodes in the one group a job spans (1..2048)."""
    capacity: CapacityArgs
    """How the nodes are bought; on-demand when unset."""
    root_volume_gib: int
    """Root volume per node, GiB (default 500)."""
    image: str
    """AWS only: the node image, pinned (EKS release such as 1.33.5-20251120, or an AMI id for Slurm)."""


class InterconnectArgs(TypedDict, total=False):
    """The GPU fabric's placement."""

    placement: bool
    """Whether a cluster placement group / compact policy is made; derived from the capacity when unset."""


class LustreArgs(TypedDict, total=False):
    """The shared Lustre file system (FSx for Lustre, Managed Lustre)."""

    size_gib: Required[int]
    """Capacity in GiB (the cloud's sizes: FSx 1200 or multiples of 2400; Managed Lustre per tier)."""
    throughput_mbps_per_tib: Required[int]
    """125, 250, 500 or 1000 MB/s per TiB."""
    import_path: str
    """Object store prefix loaded into the file system (s3:// or gs://)."""
    export_path: str
    """AWS only: where changes are written back (the import path)."""
    mount_point: str
    """Where nodes and pods see the file system (default /fsx)."""
    kms_key_id: str
    """Customer-managed key; the service key when unset."""


class StorageArgs(TypedDict, total=False):
    """File system and checkpoint bucket."""

    lustre: Required[LustreArgs]
    """The Lustre file system."""
    bucket_name: str
    """Checkpoint bucket name; generated when unset."""


class OrchestrationArgs(TypedDict, total=False):
    """What schedules the jobs."""

    kind: Required[str]
    """eks or slurm on aws; gke or slurm on gcp."""
    kubernetes_version: str
    """Kubernetes minor version, e.g. "1.33" (eks, gke)."""
    endpoint: str
    """public (reachable from deployer_cidrs) or private (VPC only) Kubernetes API."""
    deployer_cidrs: list[str]
    """Where pulumi up runs from: the only public ranges the Kubernetes API admits."""
    login_nodes: int
    """Slurm login nodes (0..8)."""
    partition: str
    """Slurm partition of the GPU nodes (default gpu)."""
    deletion_protection: bool
    """GKE: the cluster's deletion_protection (default true); set false and update before destroying."""
    pull_through_cache: bool
    """AWS EKS: pull the job's image from public.ecr.aws through an ECR pull-through cache of the account."""
    ssh_key_name: str
    """AWS PCS: an existing EC2 key pair for the login nodes; access.ssh_command then runs commands over ssh through Session Manager."""


class NetworkArgs(TypedDict, total=False):
    """The cluster's network: a new one carved from cidr, or the caller's (vpc_id and node_subnet_id)."""

    cidr: str
    """The new network's range, a private /16 to /20 (default 10.0.0.0/16)."""
    vpc_id: pulumi.Input[str]
    """AWS: an existing VPC to build in; no network is then created. Needs node_subnet_id."""
    node_subnet_id: pulumi.Input[str]
    """AWS: the existing subnet, in zone, that the GPU nodes and the file system use."""
    control_plane_subnet_ids: pulumi.Input[list[pulumi.Input[str]]]
    """AWS EKS: existing subnets of another zone for the control plane (EKS needs two zones), or an Output of them."""


class SecurityArgs(TypedDict, total=False):
    """The audit trail and deliberate policy exceptions."""

    flow_logs: bool
    """VPC / subnet flow logs (default true; false needs exceptions["flow-logs"])."""
    log_retention_days: int
    """How long the log bucket keeps flow and access logs."""
    checkpoint_noncurrent_days: int
    """Overwritten checkpoint versions expire after this many days."""
    exceptions: dict[str, str]
    """Policy rule -> why this cluster departs from it."""


class GpuClusterArgs(TypedDict, total=False):
    """A multi-node GPU training cluster: the stack file's gpu-cluster:cluster object, as arguments."""

    name: str
    """Prefix of every resource name (2-32 characters); the component's name when unset."""
    cloud: Required[str]
    """aws or gcp."""
    region: Required[str]
    """The region, e.g. us-east-1 or us-central1."""
    zone: Required[str]
    """The one zone every GPU node shares, e.g. us-east-1a or us-central1-a."""
    zone_id: str
    """AWS only: the zone ID behind zone in the deploying account (use1-az4)."""
    compute: Required[ComputeArgs]
    """The GPU nodes."""
    interconnect: InterconnectArgs
    """Placement of the GPU fabric."""
    storage: Required[StorageArgs]
    """File system and checkpoint bucket."""
    orchestration: Required[OrchestrationArgs]
    """EKS, GKE or Slurm."""
    network: NetworkArgs
    """A new network, or the caller's."""
    tags: dict[str, str]
    """Tags (AWS) or labels (GCP) merged into every resource."""
    security: SecurityArgs
    """Audit trail settings."""
    images: dict[str, str]
    """Image pins: repo:tag -> sha256 digest, pulled by that digest instead of by the tag
    (components/image_pins.py; gpu-cluster pin writes them into a stack file)."""


_NETWORK_IDS = ("vpc_id", "node_subnet_id")


def _plain(value: Any) -> Any:
    """Args as the stack file's raw object: TypedDicts are dicts; lists stay lists."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    # Numbers cross the engine as floats; pulumi 3.272's ComponentProvider.map_input_properties
    # converts integer properties with int() and then stores the float anyway (no `continue`),
    # so whole floats are taken as the integers they are (a fraction still fails the spec).
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _id(value: Any) -> str:
    return value if isinstance(value, str) else DEPLOY_TIME_ID


def to_raw(args: Mapping[str, Any]) -> dict[str, Any]:
    """The raw ``gpu-cluster:cluster`` object these args describe (network Inputs as placeholders)."""
    raw: dict[str, Any] = _plain({k: v for k, v in args.items() if k != "network"})
    network = args.get("network")
    if isinstance(network, Mapping):
        net: dict[str, Any] = {
            k: _plain(v) for k, v in network.items() if k not in (*_NETWORK_IDS, "control_plane_subnet_ids")
        }
        for key in _NETWORK_IDS:
            if network.get(key) is not None:
                net[key] = _id(network[key])
        if network.get("control_plane_subnet_ids") is not None:
            ids = network["control_plane_subnet_ids"]
            if isinstance(ids, pulumi.Output):  # how many is known at deploy time: one stands for them
                net["control_plane_subnet_ids"] = [DEPLOY_TIME_ID]
            else:
                net["control_plane_subnet_ids"] = [_id(i) for i in ids] if isinstance(ids, (list, tuple)) else ids
        raw["network"] = net
    elif network is not None:
        raw["network"] = network
    return raw


def to_spec(resource_name: str, args: Mapping[str, Any]) -> ClusterSpec:
    """The checked spec, or Pulumi's input-property error listing every problem (as the stack path)."""
    try:
        return parse_spec(to_raw(args), default_name=default_name(resource_name))
    except SpecError as err:
        raise pulumi.InputPropertiesError(
            err.render(), [{"property_path": path, "reason": reason} for path, reason in err.problems]
        ) from None


def existing_network(spec: ClusterSpec, args: Optional[Mapping[str, Any]] = None) -> Any:
    """The caller's network as Inputs for the cloud's build (None when the cluster makes its own)."""
    if not spec.network.existing:
        return None
    from gpu_cluster.components.aws.network import ExistingNetwork

    net = (args or {}).get("network") or {}
    given_vpc, given_subnet = net.get("vpc_id"), net.get("node_subnet_id")
    vpc: pulumi.Input[str] = given_vpc if given_vpc is not None else str(spec.network.vpc_id)
    subnet: pulumi.Input[str] = given_subnet if given_subnet is not None else str(spec.network.node_subnet_id)
    cps = net.get("control_plane_subnet_ids", list(spec.network.control_plane_subnet_ids))
    if not isinstance(cps, pulumi.Output):
        cps = tuple(cps or ())
    return ExistingNetwork(vpc_id=vpc, node_subnet_id=subnet, control_plane_subnet_ids=cps)
