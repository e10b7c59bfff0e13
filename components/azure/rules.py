"""Azure rules on a whole, typed cluster description, each beside the page it follows.

``check(spec, raw)`` returns ``(config path, reason)`` problems, as ``gpu_cluster.components.spec`` reports
them; ``parse_spec`` calls it once the generic rules pass. The field rules below it (region and
zone names, capacity reservation group ids, container names, Lustre sizes, the export path,
tags, the node image) are called by the generic reader while it reads each field, so their
problems come with the others in one pass; each returns a reason, or None for a good value.
Pure: no Pulumi, no network.

What needs the subscription is asked by the Azure preflight (components/preflight/azure.py): the
ND family's vCPU quota, whether the size is offered in the region and zone (the catalog's region
list is the offline stand-in), the reservation group's capacity, the ``AKSInfinibandSupport`` and
``EncryptionAtHost`` feature registrations.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from typing import TYPE_CHECKING, Any, Mapping

from gpu_cluster.components.lustre_tiers import lustre_tiers

if TYPE_CHECKING:
    from gpu_cluster.components.spec_model import ClusterSpec

# VMs share an InfiniBand fabric only inside one scale set in Uniform orchestration with
# singlePlacementGroup true, and such a scale set holds at most 100 VMs (300 by a support
# request). MicrosoftDocs/azure-compute-docs articles/virtual-machines/setup-infiniband.md at
# 76e3d22 (ms.date 2026-09-25); virtual-machine-scale-sets-placement-groups.md at 0c6223e: a
# large scale set (singlePlacementGroup false) "does not support InfiniBand networking".
MAX_NODES_PER_SCALE_SET = 100

# "Don't use 172.16.0.0/16 in the VNet": the RDMA network of the InfiniBand sizes reserves it
# (setup-infiniband.md at 76e3d22).
RDMA_RESERVED = ipaddress.ip_network("172.16.0.0/16")

# The file system's subnet by size: 4-16 TiB a /27, 20-40 a /26, 44-92 a /25, 96-196 a /24, 200-400
# a /23 (MicrosoftDocs/azure-stack-docs azure-managed-lustre/amlfs-prerequisites.md at f1e86c5).
# The address plan (common.py) gives it a /24.
LUSTRE_SUBNET_MAX_TIB = 196

# Interactive retention of a Log Analytics workspace (components/azure/audit.py says where it is read).
LOG_ANALYTICS_MIN_DAYS = 30
LOG_ANALYTICS_MAX_DAYS = 730

# Blob soft delete: 1 to 365 days (pulumi-azure-native 3.29.0 storage DeleteRetentionPolicyArgs.days:
# "The minimum specified value can be 1 and the maximum value can be 365").
BLOB_SOFT_DELETE_MAX_DAYS = 365

# Kubernetes service and pod ranges of AKS (Azure CNI overlay: pods do not take VNet addresses).
# Our own choice, outside every range the spec admits for the VNet (network.cidr is a /16-/20
# private range; check() refuses a VNet over these). The service range "must
# not overlap with any Subnet IP ranges" and the DNS service IP "must be within the Kubernetes
# service address range" (pulumi-azure-native 3.29.0 ContainerServiceNetworkProfileArgs).
AKS_SERVICE_CIDR = "10.254.0.0/16"
AKS_DNS_SERVICE_IP = "10.254.0.10"
AKS_POD_CIDR = "10.253.0.0/16"


# The AKS Kubernetes release calendar: each minor's end of life, month precision (MicrosoftDocs/
# azure-aks-docs articles/aks/supported-kubernetes-versions.md:48-55 at fb060ab, ms.date 2026-08-05;
# "AKS follows a 12-month support policy for generally available (GA) Kubernetes versions", line 44).
# Minors older than the table ended before it; 1.38 and later are not GA in it. LTS (Premium tier)
# is not offered by this stack.
AKS_END_OF_LIFE: Mapping[str, tuple[int, int]] = {
    "1.32": (2026, 3),
    "1.33": (2026, 7),
    "1.34": (2026, 11),
    "1.35": (2027, 3),
    "1.36": (2027, 6),
    "1.37": (2027, 10),
}
AKS_VERSIONS_SOURCE = "learn.microsoft.com/azure/aks/supported-kubernetes-versions"


def today() -> datetime.date:
    """The date a version's support is judged on (tests pin it)."""
    return datetime.date.today()


def aks_version(version: str, on: datetime.date | None = None) -> str | None:
    """Why AKS would not create ``version`` on ``on`` (default today), or None. A minor whose
    end-of-life month has begun is refused: AKS creates clusters on supported minors only, and a
    minor in its last month leaves no time to run. An alias minor ("1.35") is what AKS takes at
    create (it runs the minor's latest GA patch, supported-kubernetes-versions.md:133)."""
    on = on or today()
    major, minor = (int(x) for x in version.split(".")[:2])
    key = f"{major}.{minor}"
    ga = ", ".join(v for v, (y, m) in AKS_END_OF_LIFE.items() if (on.year, on.month) < (y, m))
    if key not in AKS_END_OF_LIFE:
        newest = max(AKS_END_OF_LIFE, key=lambda v: tuple(int(x) for x in v.split(".")))
        newer = (major, minor) > tuple(int(x) for x in newest.split("."))
        why = "is not generally available on AKS yet" if newer else "is past its AKS end of life"
        return f"AKS {version!r} {why} (allowed: {ga}; source: {AKS_VERSIONS_SOURCE})"
    year, month = AKS_END_OF_LIFE[key]
    if (on.year, on.month) >= (year, month):
        return (
            f"AKS {version!r} reaches its end of life in {datetime.date(year, month, 1):%B %Y} and AKS no longer "
            f"creates it (allowed: {ga or 'none listed: the calendar read is out of date'}; source: "
            f"{AKS_VERSIONS_SOURCE})"
        )
    return None


# On-demand capacity reservations: "Support for other VM series isn't currently available: ...
# ND-series", and among the deployment constraints not supported, "Virtual Machine Scale Sets with
# single placement group set to true", which an InfiniBand pool needs (above)
# (MicrosoftDocs/azure-compute-docs articles/virtual-machines/capacity-reservation-overview.md
# @05a4485, "Limitations and restrictions", ms.date 2026-02-17).
RESERVATION_UNSUPPORTED_PREFIX = "Standard_ND"
RESERVATION_SOURCE = "learn.microsoft.com/azure/virtual-machines/capacity-reservation-overview, Limitations"


def reservation_refused(instance_type: str) -> str | None:
    """Why a capacity reservation group cannot hold ``instance_type``'s pool, or None."""
    if not instance_type.startswith(RESERVATION_UNSUPPORTED_PREFIX):
        return None
    return (
        f"'reservation' is refused for {instance_type}: on-demand capacity reservations support neither the "
        "ND-series nor a scale set with singlePlacementGroup true, which InfiniBand needs (allowed: "
        f"on-demand, spot; source: {RESERVATION_SOURCE})"
    )


def check(spec: ClusterSpec, raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    if spec.orchestration.kind == "aks":
        refused = aks_version(spec.orchestration.kubernetes_version)
        if refused:
            problems.append(("orchestration.kubernetes_version", refused))
    if spec.network.existing:
        problems.append(
            (
                "network.vpc_id",
                "an existing network is supported on aws only for now (allowed on azure: leave network.vpc_id unset)",
            )
        )
    cidr = ipaddress.ip_network(spec.network.cidr)
    if cidr.overlaps(RDMA_RESERVED):
        problems.append(
            (
                "network.cidr",
                f"{spec.network.cidr} overlaps 172.16.0.0/16, which the InfiniBand (RDMA) network of the ND sizes "
                "reserves (allowed: a private range outside it, e.g. 10.0.0.0/16; source: learn.microsoft.com/azure/"
                "virtual-machines/setup-infiniband)",
            )
        )
    if spec.orchestration.kind == "aks":
        for what, rng in (("service", AKS_SERVICE_CIDR), ("pod", AKS_POD_CIDR)):
            if cidr.overlaps(ipaddress.ip_network(rng)):
                problems.append(
                    (
                        "network.cidr",
                        f"{spec.network.cidr} overlaps {rng}, the AKS {what} range this cluster uses "
                        "(allowed: a private range outside 10.253.0.0/16 and 10.254.0.0/16, e.g. 10.0.0.0/16)",
                    )
                )
    days = spec.security.log_retention_days
    if not LOG_ANALYTICS_MIN_DAYS <= days <= LOG_ANALYTICS_MAX_DAYS:
        problems.append(
            (
                "security.log_retention_days",
                f"{days} days is outside what a Log Analytics workspace keeps, where Azure sends the control-plane "
                f"and storage logs (allowed: {LOG_ANALYTICS_MIN_DAYS} to {LOG_ANALYTICS_MAX_DAYS}; source: "
                "learn.microsoft.com/azure/azure-monitor/logs/data-retention-configure)",
            )
        )
    if spec.security.checkpoint_noncurrent_days > BLOB_SOFT_DELETE_MAX_DAYS:
        problems.append(
            (
                "security.checkpoint_noncurrent_days",
                f"{spec.security.checkpoint_noncurrent_days} days is longer than blob soft delete keeps a deleted or "
                f"overwritten checkpoint (allowed: 1 to {BLOB_SOFT_DELETE_MAX_DAYS}; source: the storage API's "
                "DeleteRetentionPolicy.days, learn.microsoft.com/azure/storage/blobs/soft-delete-blob-overview)",
            )
        )
    if spec.compute.capacity.type == "reservation":
        refused = reservation_refused(spec.compute.instance_type)
        if refused:
            problems.append(("compute.capacity.type", refused))
    if spec.compute.nodes > MAX_NODES_PER_SCALE_SET:
        problems.append(
            (
                "compute.nodes",
                f"{spec.compute.nodes} nodes do not fit one InfiniBand fabric: VMs share InfiniBand only inside one "
                f"single-placement-group scale set, of at most {MAX_NODES_PER_SCALE_SET} VMs (300 after a support "
                f"request, which the spec does not know of) (allowed: 1..{MAX_NODES_PER_SCALE_SET}; source: "
                "learn.microsoft.com/azure/virtual-machines/setup-infiniband)",
            )
        )
    ic = raw.get("interconnect")
    if isinstance(ic, Mapping) and ic.get("placement") is True:
        # A proximity placement group is no InfiniBand requirement (no IB page names one) and is
        # a colocation constraint that can fail allocation (proximity-placement-groups.md at 0c6223e).
        problems.append(
            (
                "interconnect.placement",
                "on azure the InfiniBand fabric is the scale set itself; no proximity placement group is created "
                "(allowed: auto, false)",
            )
        )
    lu = spec.storage.lustre
    if lu.size_gib > LUSTRE_SUBNET_MAX_TIB * 1024:
        problems.append(
            (
                "storage.lustre.size_gib",
                f"{lu.size_gib} GiB needs a Managed Lustre subnet larger than the /24 this cluster carves for it, "
                f"which holds file systems up to {LUSTRE_SUBNET_MAX_TIB} TiB (allowed: up to "
                f"{LUSTRE_SUBNET_MAX_TIB * 1024} GiB; source: learn.microsoft.com/azure/azure-managed-lustre/"
                "amlfs-prerequisites)",
            )
        )
    if lu.import_path is not None:
        problems.append(
            (
                "storage.lustre.import_path",
                "Managed Lustre blob integration is not built yet (allowed on azure: leave it unset)",
            )
        )
    if lu.kms_key_id is not None:
        problems.append(
            (
                "storage.lustre.kms_key_id",
                "a customer-managed key for Managed Lustre is not built yet (allowed on azure: leave it unset)",
            )
        )
    if spec.orchestration.kind == "slurm" and spec.orchestration.login_nodes != 1:
        # Slurm on Azure is the stack's own (docs/azure.md, "Slurm"): the controller VM is also the
        # login node, reached through Azure Bastion (components/azure/orchestration_slurm.py).
        problems.append(
            (
                "orchestration.login_nodes",
                f"{spec.orchestration.login_nodes}: on azure the Slurm controller is the one login node, reached "
                "through Azure Bastion (allowed: 1)",
            )
        )
    if spec.orchestration.kind == "aks" and spec.orchestration.endpoint == "private":
        problems.append(
            (
                "orchestration.endpoint",
                "a private AKS cluster is not built yet (allowed on azure: public, with deployer_cidrs)",
            )
        )
    return problems


# ---------------------------------------------------------------------------------------------
# Field rules, called by the generic reader (components/spec_parse.py) as it reads each field.

# Region names are lower-case letters with an optional trailing digit (eastus, eastus2,
# westus3, swedencentral), as the catalog's region lists show.
REGION = re.compile(r"^[a-z]+[0-9]?\Z")
REGION_HINT = "an Azure region such as eastus2"
# Blob container names: 3-63 characters, lower-case letters, digits and '-', starting and ending
# with a letter or digit, no '--' (learn.microsoft.com/rest/api/storageservices/naming-and-
# referencing-containers--blobs--and-metadata, read 2026-12-01).
BUCKET = re.compile(r"^(?=.{3,63}\Z)[a-z0-9]+(-[a-z0-9]+)*\Z")
# Blob integration is not built yet (check refuses import_path); no path is an Azure one.
OBJECT_STORE_SCHEME = "https://"
RESERVATION_WHAT = "capacity reservation group resource id"
# The AKS minor a stack gets when it names none: 1.35, GA March 2026 and supported until March 2027
# (AKS_END_OF_LIFE); from 1.35 the Ubuntu node image is 24.04 (upgrade-os-version.md:41 at fb060ab),
# which the amdgpu installer's repository (noble) and the DOCA driver's ubuntu24.04 container match.
DEFAULT_KUBERNETES_VERSION = "1.35"
# A capacity reservation group is named by its ARM resource id (the VMSS
# capacityReservation.capacityReservationGroup is a SubResource id, pulumi-azure-native 3.29.0
# compute CapacityReservationProfileArgs); ARM ids are /subscriptions/<id>/resourceGroups/<rg>/
# providers/<namespace>/<type>/<name>.
_RESERVATION_GROUP = re.compile(
    r"^/subscriptions/[0-9a-fA-F-]{36}/resourceGroups/[^/]+/providers/Microsoft\.Compute/"
    r"capacityReservationGroups/[^/]+\Z",
    re.IGNORECASE,
)
# Tags: keys and values at most 256 characters, keys non-empty and without < > % & \ ? /
# (ARM ProxyResourceWithTags.tags, learn.microsoft.com/javascript/api/@azure/arm-billing/
# proxyresourcewithtags, read 2026-12-01).
_TAG_KEY_FORBIDDEN = set("<>%&\\?/")
ZONES = ("1", "2", "3")


def zone_in_region(region: str, zone: str) -> bool:
    """Azure zones are numbered 1-3 in every region that has them; which regions have zones, and
    whether the size is offered in the zone, only the subscription can tell."""
    return zone in ZONES


def zone_example(region: str) -> str:
    return "1"


def reservation_id(cid: str) -> str | None:
    if not _RESERVATION_GROUP.match(cid):
        return (
            f"{cid!r} is not a capacity reservation group id (allowed: /subscriptions/<subscription id>/"
            "resourceGroups/<group>/providers/Microsoft.Compute/capacityReservationGroups/<name>)"
        )
    return None


def lustre_size(size: int, tput: int | None) -> str | None:
    """Each Managed Lustre SKU has its own smallest size and increment; with a throughput that is
    not offered there is nothing to check the size against (its own problem says so)."""
    tiers = lustre_tiers("azure")
    tier = tiers.tiers.get(tput) if tput is not None else None
    if tier is None or tier.size_ok(size):
        return None
    return (
        f"{size} GiB is not an Azure Managed Lustre size at {tput} MB/s/TiB (AMLFS-Durable-Premium-{tput}) "
        f"(allowed: multiples of {tier.step} GiB ({tier.step // 1024} TiB) from {tier.min} to {tier.max}; "
        f"source: {tiers.source.url.removeprefix('https://')})"
    )


def export_path(import_path: str | None, export: str) -> str | None:
    return "Managed Lustre has no automatic export (allowed on aws only)"


def tag(key: str, value: str) -> str | None:
    if not key or len(key) > 256 or len(value) > 256 or _TAG_KEY_FORBIDDEN & set(key):
        return (
            "Azure tag keys are 1-256 characters without < > % & \\ ? /, values at most 256 characters "
            "(allowed: e.g. team: ml)"
        )
    return None


def node_image(raw: object, kind: str | None) -> str | None:
    return (
        "only applies to aws for now (on azure the nodes run AKS's Ubuntu image, os SKU Ubuntu, "
        "components/azure/orchestration_aks.py)"
    )
