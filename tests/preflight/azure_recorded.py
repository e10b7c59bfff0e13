"""ARM answers for the Azure preflight, in the shapes the REST reference gives (Resource SKUs -
List, Usage - List, Features - Get, Capacity Reservations - List By Capacity Reservation Group;
@azure-rest/arm-compute *Output interfaces, read 2026-12-01).
Trimmed to the fields the checks read, values made up for a test subscription."""

from __future__ import annotations

from typing import Any

SUB = "00000000-0000-0000-0000-000000000000"

H100_SKU: dict[str, Any] = {
    "resourceType": "virtualMachines",
    "name": "Standard_ND96isr_H100_v5",
    "tier": "Standard",
    "size": "ND96isr_H100_v5",
    "family": "standardNDSH100v5Family",
    "locations": ["eastus"],
    "locationInfo": [{"location": "eastus", "zones": ["1", "2"], "zoneDetails": []}],
    "capabilities": [{"name": "vCPUs", "value": "96"}, {"name": "GPUs", "value": "8"}],
    "restrictions": [],
}

H100_ZONE3_RESTRICTED: dict[str, Any] = {
    **H100_SKU,
    "locationInfo": [{"location": "eastus", "zones": ["1", "2", "3"]}],
    "restrictions": [
        {
            "type": "Zone",
            "values": ["eastus"],
            "restrictionInfo": {"locations": ["eastus"], "zones": ["3"]},
            "reasonCode": "NotAvailableForSubscription",
        }
    ],
}


# The AKS CPU pools' size (components/azure/orchestration_aks.py CPU_POOL_SIZE), as a SKU list shows it.
D4DS_SKU: dict[str, Any] = {
    "resourceType": "virtualMachines",
    "name": "Standard_D4ds_v5",
    "tier": "Standard",
    "size": "D4ds_v5",
    "family": "standardDDSv5Family",
    "locations": ["eastus"],
    "locationInfo": [{"location": "eastus", "zones": ["1", "2", "3"], "zoneDetails": []}],
    "capabilities": [{"name": "vCPUs", "value": "4"}],
    "restrictions": [],
}


def skus(*entries: dict[str, Any]) -> dict[str, Any]:
    other = {"resourceType": "disks", "name": "Premium_LRS", "locations": ["eastus"], "restrictions": []}
    return {"value": [other, *entries]}


def usages(limit: int, current: int, *, regional: int = 5000, d_series: int = 100) -> dict[str, Any]:
    return {
        "value": [
            {
                "name": {"value": "cores", "localizedValue": "Total Regional vCPUs"},
                "currentValue": 0,
                "limit": regional,
                "unit": "Count",
            },
            {
                "name": {"value": "standardDDSv5Family", "localizedValue": "Standard DDSv5 Family vCPUs"},
                "currentValue": 0,
                "limit": d_series,
                "unit": "Count",
            },
            {
                "name": {"value": "standardNDSH100v5Family", "localizedValue": "Standard NDSH100v5 Family vCPUs"},
                "currentValue": current,
                "limit": limit,
                "unit": "Count",
            },
        ]
    }


def feature(state: str, ns: str = "Microsoft.ContainerService", name: str = "AKSInfinibandSupport") -> dict[str, Any]:
    return {
        "id": f"/subscriptions/{SUB}/providers/Microsoft.Features/providers/{ns}/features/{name}",
        "name": f"{ns}/{name}",
        "properties": {"state": state},
        "type": "Microsoft.Features/providers/features",
    }


def capacity_reservations(group: str, *held: tuple[str, int, list[str]]) -> dict[str, Any]:
    """A group's reservations, each ``(size, capacity, zones)``; zones empty for a regional one."""
    return {
        "value": [
            {
                "name": f"r{i}",
                "id": f"{group}/capacityReservations/r{i}",
                "type": "Microsoft.Compute/capacityReservationGroups/capacityReservations",
                "location": "eastus",
                "sku": {"name": size, "capacity": capacity},
                **({"zones": zones} if zones else {}),
                "properties": {"provisioningState": "Succeeded"},
            }
            for i, (size, capacity, zones) in enumerate(held)
        ]
    }
