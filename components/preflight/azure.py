"""The Azure preflight: what only the subscription can answer, asked through Azure Resource Manager.

* the size is offered in the region and the zone, and not restricted for this subscription
  (Resource SKUs - List: each SKU's ``locationInfo[].zones`` and ``restrictions[]`` of type
  ``Location`` or ``Zone`` with ``restrictionInfo.locations|zones`` and a ``reasonCode`` such as
  ``NotAvailableForSubscription``; @azure-rest/arm-compute ResourceSkuOutput,
  ResourceSkuRestrictionsOutput, ResourceSkuRestrictionInfoOutput, learn.microsoft.com/javascript/
  api/@azure-rest/arm-compute, read 2026-12-01);
* the size's vCPU family quota in the region covers the nodes (Usage - List: ``name.value`` the
  family, as the SKU's ``family`` names it, ``currentValue`` and ``limit`` in vCPUs, same package),
  and so do the AKS CPU pools' family quota and the region's total (``cores``) for all of them;
* for AKS, the subscription feature ``Microsoft.ContainerService/AKSInfinibandSupport`` is
  Registered (use-amd-gpus.md at fb060ab; Features - Get answers ``properties.state``), and so is
  ``Microsoft.Compute/EncryptionAtHost``, which the CPU pools' encryption at host needs before a pool
  can be created with it (enable-host-encryption.md:38-48 at fb060ab; components/azure/orchestration_aks.py);
* a capacity reservation group the stack names exists and reserves the size for every node in the
  stack's zone (Capacity Reservations - List By Capacity Reservation Group, ``GET {group}/
  capacityReservations``: each reservation's ``sku.name`` and ``sku.capacity``, and ``zones``, empty
  for a regional one; learn.microsoft.com/rest/api/compute/capacity-reservations and the
  capacityReservationGroups/capacityReservations template reference, "the SKU name and capacity
  is required to be set", read 2026-12-01).

Answers come as JSON from ``https://management.azure.com``; the token is the deployer's
(``AZURE_ACCESS_TOKEN``, else ``az account get-access-token``), the subscription
``AZURE_SUBSCRIPTION_ID``, else ``az account show``. The API versions are those of
pulumi-azure-native 3.29.0's defaults where it has the resource (compute 2024-11-01), else the
Features API 2021-07-01 and Resource SKUs 2021-07-01 (not re-read this session).
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Mapping, Protocol

from gpu_cluster.components.preflight import (
    Check,
    Context,
    CouldNotCheck,
    Fatal,
    NotApplicable,
    Problem,
    deployer_ranges,
)

__all__ = ["AzureClients", "Fatal", "checks"]

ARM = "https://management.azure.com"
COMPUTE_API = "2024-11-01"
SKUS_API = "2021-07-01"
FEATURES_API = "2021-07-01"
IB_FEATURE = ("Microsoft.ContainerService", "AKSInfinibandSupport")
HOST_ENCRYPTION_FEATURE = ("Microsoft.Compute", "EncryptionAtHost")


class Arm(Protocol):
    """GET a path under the subscription's ARM endpoint; the JSON answer, or None for a 404."""

    subscription: str

    def get(self, path: str, api_version: str, query: Mapping[str, str] | None = None) -> Any: ...


def _az(*args: str) -> str:
    try:
        done = subprocess.run(["az", *args, "-o", "tsv"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Fatal(
            f"no Azure credentials: set AZURE_ACCESS_TOKEN and AZURE_SUBSCRIPTION_ID, or install the Azure CLI "
            f"and run `az login` ({exc})"
        ) from None
    if done.returncode != 0 or not done.stdout.strip():
        raise Fatal(f"`az {' '.join(args)}` failed ({done.stderr.strip()[:200]}); run `az login`")
    return done.stdout.strip()


class AzureClients:
    """ARM over HTTPS with a bearer token: the preflight reads, it never writes."""

    def __init__(self, subscription: str, token: str, opener: Callable[..., Any] = urllib.request.urlopen) -> None:
        self.subscription = subscription
        self._token = token
        self._open = opener

    @classmethod
    def from_environment(cls, subscription: str | None = None) -> "AzureClients":
        token = os.environ.get("AZURE_ACCESS_TOKEN") or _az(
            "account", "get-access-token", "--resource", ARM + "/", "--query", "accessToken"
        )
        sub = subscription or os.environ.get("AZURE_SUBSCRIPTION_ID") or _az("account", "show", "--query", "id")
        return cls(sub, token)

    def get(self, path: str, api_version: str, query: Mapping[str, str] | None = None) -> Any:
        params = urllib.parse.urlencode({"api-version": api_version, **dict(query or {})})
        url = f"{ARM}{path}?{params}"
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {self._token}"})
        try:
            with self._open(req, timeout=30) as resp:
                return json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            if exc.code in (401, 403):
                raise CouldNotCheck(f"ARM refused {path} ({exc.code}): the caller lacks read access there") from None
            raise CouldNotCheck(f"ARM answered {exc.code} for {path}") from None
        except (OSError, ValueError) as exc:
            raise Fatal(f"{ARM} did not answer ({exc})") from None


def _vm_skus(ctx: Context) -> list[Mapping[str, Any]]:
    """The region's VM sizes, as the subscription sees them (one SKU list a run)."""
    arm: Arm = ctx.clients

    def fetch() -> list[Mapping[str, Any]]:
        answer = arm.get(
            f"/subscriptions/{arm.subscription}/providers/Microsoft.Compute/skus",
            SKUS_API,
            {"$filter": f"location eq '{ctx.spec.region}'"},
        ) or {"value": []}
        return [dict(s) for s in answer.get("value", []) if s.get("resourceType") == "virtualMachines"]

    found: list[Mapping[str, Any]] = ctx.cached("skus", fetch)
    return found


def _sku(ctx: Context, size: str | None = None) -> Mapping[str, Any] | None:
    name = (size or ctx.spec.compute.instance_type).lower()
    return next((s for s in _vm_skus(ctx) if str(s.get("name", "")).lower() == name), None)


def _usages(ctx: Context) -> Mapping[str, Mapping[str, Any]]:
    """Usage - List by ``name.value`` (a family, or ``cores``: Total Regional vCPUs)."""
    arm: Arm = ctx.clients

    def fetch() -> Mapping[str, Mapping[str, Any]]:
        answer = arm.get(
            f"/subscriptions/{arm.subscription}/providers/Microsoft.Compute/locations/{ctx.spec.region}/usages",
            COMPUTE_API,
        )
        return {str((u.get("name") or {}).get("value")): u for u in (answer or {}).get("value", [])}

    found: Mapping[str, Mapping[str, Any]] = ctx.cached("usages", fetch)
    return found


def _vcpus(sku: Mapping[str, Any]) -> int:
    return next((int(c.get("value", 0)) for c in sku.get("capabilities") or [] if c.get("name") == "vCPUs"), 0)


def _cpu_pools(ctx: Context) -> tuple[str, int]:
    """AKS's CPU pools (system and controllers): their size and node count (components/azure/
    orchestration_aks.py); none on other orchestrators."""
    if ctx.spec.orchestration.kind != "aks":
        return "", 0
    from gpu_cluster.components.azure.orchestration_aks import CONTROLLER_NODES, CPU_POOL_SIZE, SYSTEM_NODES

    return CPU_POOL_SIZE, SYSTEM_NODES + CONTROLLER_NODES


def _short(ctx: Context, usage: str, need: int, what: str, path: str) -> list[Problem]:
    u = _usages(ctx).get(usage)
    if u is None:
        raise CouldNotCheck(f"no usage entry for {usage} in {ctx.spec.region}")
    free = int(u.get("limit", 0)) - int(u.get("currentValue", 0))
    if need <= free:
        return []
    return [
        Problem(
            path,
            f"{what} need {need} vCPUs of {usage} in {ctx.spec.region}; the quota leaves {free} (limit "
            f"{u.get('limit')}, in use {u.get('currentValue')}) (allowed: request more quota, or fewer nodes)",
        )
    ]


def sku_offered(ctx: Context) -> list[Problem]:
    spec = ctx.spec
    itype, region, zone = spec.compute.instance_type, spec.region, spec.zone
    sku = _sku(ctx)
    if sku is None:
        return [
            Problem(
                "region", f"{itype} is not offered in {region} to this subscription (allowed: a region that lists it)"
            )
        ]
    problems = []
    for r in sku.get("restrictions") or []:
        info = r.get("restrictionInfo") or {}
        why = r.get("reasonCode", "restricted")
        if r.get("type") == "Location" and region.lower() in [loc.lower() for loc in info.get("locations") or []]:
            problems.append(Problem("region", f"{itype} is restricted in {region} for this subscription ({why})"))
        if r.get("type") == "Zone" and zone in (info.get("zones") or []):
            problems.append(
                Problem("zone", f"{itype} is restricted in zone {zone} of {region} for this subscription ({why})")
            )
    zones = sorted(
        {
            z
            for li in sku.get("locationInfo") or []
            if str(li.get("location", "")).lower() == region.lower()
            for z in li.get("zones") or []
        }
    )
    if zone not in zones:
        problems.append(
            Problem(
                "zone", f"{itype} is not offered in zone {zone} of {region} (allowed: {', '.join(zones) or 'no zone'})"
            )
        )
    return problems


def family_quota(ctx: Context) -> list[Problem]:
    spec = ctx.spec
    sku = _sku(ctx)
    if sku is None or not sku.get("family"):
        raise CouldNotCheck(f"the SKU list names no family for {spec.compute.instance_type} in {spec.region}")
    need = spec.compute.nodes * spec.instance.vcpu
    return _short(
        ctx, str(sku["family"]), need, f"{spec.compute.nodes} x {spec.compute.instance_type}", "compute.nodes"
    )


def cpu_pool_quota(ctx: Context) -> list[Problem]:
    """The AKS CPU pools' own family (a D-series, not the ND family the GPU nodes count against)."""
    size, nodes = _cpu_pools(ctx)
    if not nodes:
        raise NotApplicable("no CPU pools")
    sku = _sku(ctx, size)
    if sku is None or not sku.get("family") or not _vcpus(sku):
        raise CouldNotCheck(f"the SKU list names no family or vCPUs for {size} in {ctx.spec.region}")
    return _short(ctx, str(sku["family"]), nodes * _vcpus(sku), f"the {nodes} x {size} of the CPU pools", "region")


def regional_quota(ctx: Context) -> list[Problem]:
    """Total Regional vCPUs (usage ``cores``): every VM of the cluster counts against it as well as
    against its family: "two tiers ... The first tier is the Total Regional vCPUs, and the second
    tier is the various VM size family cores such as the D-series vCPUs. Anytime a new VM is
    deployed the vCPUs for the VM must not exceed" either (MicrosoftDocs/azure-compute-docs
    articles/virtual-machines/quotas.md at 0277390, ms.date 2026-01-16)."""
    spec = ctx.spec
    size, nodes = _cpu_pools(ctx)
    cpu = _sku(ctx, size) if nodes else None
    need = spec.compute.nodes * spec.instance.vcpu + (nodes * _vcpus(cpu) if cpu else 0)
    if nodes and cpu is None:
        raise CouldNotCheck(f"the SKU list names no {size} in {spec.region}")
    what = f"{spec.compute.nodes} x {spec.compute.instance_type}" + (f" and {nodes} x {size}" if nodes else "")
    return _short(ctx, "cores", need, what, "compute.nodes")


def _feature(ctx: Context, ns: str, feature: str, without: str) -> list[Problem]:
    if ctx.spec.orchestration.kind != "aks":
        raise NotApplicable("not aks")
    arm: Arm = ctx.clients
    answer = arm.get(
        f"/subscriptions/{arm.subscription}/providers/Microsoft.Features/providers/{ns}/features/{feature}",
        FEATURES_API,
    )
    state = ((answer or {}).get("properties") or {}).get("state", "NotRegistered")
    if state != "Registered":
        return [
            Problem(
                "orchestration.kind",
                f"the subscription feature {ns}/{feature} is {state}: {without} "
                f"(allowed: Registered; `az feature register --namespace {ns} --name {feature}`, then "
                f"`az provider register --namespace {ns}`)",
            )
        ]
    return []


def infiniband_feature(ctx: Context) -> list[Problem]:
    return _feature(ctx, *IB_FEATURE, "the ND pool's nodes would not land on one InfiniBand network")


def host_encryption_feature(ctx: Context) -> list[Problem]:
    return _feature(
        ctx,
        *HOST_ENCRYPTION_FEATURE,
        "the system and controller pools encrypt at host, which AKS allows only once it is Registered",
    )


def reservation_group(ctx: Context) -> list[Problem]:
    cap = ctx.spec.compute.capacity
    if cap.type != "reservation" or cap.id is None:
        raise NotApplicable("no reservation")
    arm: Arm = ctx.clients
    if arm.get(cap.id, COMPUTE_API) is None:
        return [Problem("compute.capacity.id", f"{cap.id} does not exist or is not visible to this caller")]
    spec = ctx.spec
    size, zone, nodes = spec.compute.instance_type, spec.zone, spec.compute.nodes
    listing = arm.get(f"{cap.id}/capacityReservations", COMPUTE_API) or {"value": []}
    reserved = 0
    for r in listing.get("value", []):
        sku = r.get("sku") or {}
        # A zonal reservation holds VMs of its zone only; one without zones serves the region.
        if str(sku.get("name", "")).lower() == size.lower() and (not r.get("zones") or zone in r["zones"]):
            reserved += int(sku.get("capacity") or 0)
    if reserved >= nodes:
        return []
    if listing.get("nextLink"):
        raise CouldNotCheck(f"{cap.id} lists more reservations than one page; {reserved} of {nodes} found so far")
    return [
        Problem(
            "compute.capacity.id",
            f"{cap.id} reserves {reserved} x {size} in zone {zone} of {spec.region}; the stack asks for {nodes} "
            "(allowed: a group whose reservations of this size in this zone, or regional ones, hold every node; "
            "or fewer nodes)",
        )
    ]


def checks(checkip: str | None) -> list[Check]:
    return [
        Check("deployer ranges", lambda ctx: deployer_ranges(ctx, checkip)),
        Check("size offered in the region and zone", sku_offered),
        Check("vCPU family quota", family_quota),
        Check("CPU pools' vCPU family quota", cpu_pool_quota),
        Check("regional vCPU quota", regional_quota),
        Check("InfiniBand feature on the subscription", infiniband_feature),
        Check("encryption at host on the subscription", host_encryption_feature),
        Check("capacity reservation group", reservation_group),
    ]
