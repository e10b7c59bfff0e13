"""The catalog's Lustre tiers: which sizes each cloud's Lustre service takes at each throughput.

The figures live in ``catalog.yaml`` (sections ``lustre`` and ``lustre_sources``), each cloud's
table with the page it was read from; this module loads and checks them. The per-cloud rules
(components/aws/rules.py, components/gcp/rules.py) word the spec's problems from them. Pure:
no Pulumi, no network.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from gpu_cluster.components.catalog import CATALOG_PATH, CatalogError, Source


@dataclass(frozen=True, slots=True, kw_only=True)
class Tier:
    """The sizes (GiB) one throughput tier takes: ``first`` (if any), then multiples of ``step``
    from ``min`` up to ``step_up_to``, then multiples of ``large_step`` up to ``max``."""

    throughput: int
    """MB/s per TiB of storage."""
    min: int
    step: int
    max: int
    step_up_to: int
    large_step: int
    first: int | None = None

    def size_ok(self, size_gib: int) -> bool:
        if size_gib == self.first:
            return True
        if not self.min <= size_gib <= self.max:
            return False
        if size_gib <= self.step_up_to:
            return size_gib % self.step == 0
        return size_gib % self.large_step == 0

    @property
    def single_step(self) -> bool:
        return self.step_up_to >= self.max


@dataclass(frozen=True, slots=True, kw_only=True)
class LustreTiers:
    cloud: str
    service: str
    """The service and deployment the figures are for, e.g. ``FSx for Lustre PERSISTENT_2``."""
    tiers: Mapping[int, Tier]
    source: Source

    @property
    def throughputs(self) -> tuple[int, ...]:
        return tuple(sorted(self.tiers))

    @property
    def max_gib(self) -> int:
        return max(t.max for t in self.tiers.values())

    def size_ok(self, size_gib: int, throughput: int) -> bool:
        return throughput in self.tiers and self.tiers[throughput].size_ok(size_gib)


def _int(raw: Mapping[str, Any], key: str, where: str) -> int:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CatalogError(f"{where}.{key}: {value!r} (allowed: a positive integer, GiB)")
    return value


def parse_lustre(doc: Mapping[str, Any]) -> dict[str, LustreTiers]:
    sources = {
        sid: Source(id=sid, title=str(s["title"]), url=str(s["url"]), read=str(s["read"]))
        for sid, s in (doc.get("lustre_sources") or {}).items()
    }
    out: dict[str, LustreTiers] = {}
    for cloud, raw in (doc.get("lustre") or {}).items():
        where = f"lustre.{cloud}"
        if raw.get("source") not in sources:
            raise CatalogError(
                f"{where}.source: unknown source id {raw.get('source')!r} (allowed: {', '.join(sources)})"
            )
        tiers: dict[int, Tier] = {}
        for tput, t in (raw.get("tiers") or {}).items():
            tw = f"{where}.tiers.{tput}"
            low, step, top = _int(t, "min", tw), _int(t, "step", tw), _int(t, "max", tw)
            up_to = _int(t, "step_up_to", tw) if "step_up_to" in t else top
            large = _int(t, "large_step", tw) if "large_step" in t else step
            first = _int(t, "first", tw) if "first" in t else None
            if not low <= up_to <= top or low % step or up_to % step:
                raise CatalogError(
                    f"{tw}: min {low}, step_up_to {up_to} and max {top} must be ordered and on the step {step}"
                )
            tiers[int(tput)] = Tier(
                throughput=int(tput), min=low, step=step, max=top, step_up_to=up_to, large_step=large, first=first
            )
        if not tiers:
            raise CatalogError(f"{where}.tiers: missing")
        out[str(cloud)] = LustreTiers(
            cloud=str(cloud), service=str(raw["service"]), tiers=tiers, source=sources[raw["source"]]
        )
    return out


@functools.cache
def load_lustre(path: Path | None = None) -> dict[str, LustreTiers]:
    """Per cloud, its Lustre tiers (cached like ``load_catalog``)."""
    with open(path or CATALOG_PATH, encoding="utf-8") as fh:
        return parse_lustre(yaml.safe_load(fh))


def lustre_tiers(cloud: str) -> LustreTiers:
    tiers = load_lustre()
    if cloud not in tiers:
        raise CatalogError(f"lustre.{cloud}: missing in {CATALOG_PATH.name} (clouds with one: {', '.join(tiers)})")
    return tiers[cloud]
