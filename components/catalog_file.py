"""The catalog file itself: where it lives, the clouds and fabrics it knows, its sources, and the
error a missing or malformed entry raises. Pure: no Pulumi, no torch (:mod:`gpu_cluster.components.catalog`
is the reader most code imports).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping


CATALOG_PATH = Path(__file__).with_name("catalog.yaml")

Cloud = Literal["aws", "gcp", "azure"]
Fabric = Literal["efa", "tcpx", "tcpxo", "rdma", "infiniband"]

CLOUDS: tuple[Cloud, ...] = ("aws", "gcp", "azure")
FABRICS: tuple[Fabric, ...] = ("efa", "tcpx", "tcpxo", "rdma", "infiniband")


class CatalogError(LookupError):
    """An instance type the catalog does not hold, or a malformed catalog file."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    id: str
    title: str
    url: str
    read: str


def _sources(doc: Mapping[str, Any]) -> dict[str, Source]:
    return {
        sid: Source(id=sid, title=str(s["title"]), url=str(s["url"]), read=str(s["read"]))
        for sid, s in doc["sources"].items()
    }
