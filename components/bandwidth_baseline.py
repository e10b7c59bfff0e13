"""A provider's own baseline for a type across nodes, and the floors held to it.

Where a cloud publishes what healthy nodes of one of its types reach (Azure's SKU baseline for
Standard_ND96isr_H100_v5: about 450 GB/s of NCCL all_reduce busbw at 16 G, warn under 400, drain the
node under 300), the validation's floors are never looser. It is no one run, so the bandwidth model
fits nothing on it; it only raises the expected figure and the floors of the multi-node and pair
paths, at sizes where the curve puts the busbw within 5% of the baseline's own size, and at node
counts whose bound admits the baseline's figure (Azure's page gives one figure for 2 nodes or more,
with SHARP/CollNet on; the model's bound has no in-network reduction, so from 9 ND H100 nodes on,
where that bound falls under 450 GB/s, the model's own floors stand, and the note says so).

Pure: the catalog parses it (``bandwidth.provider_baseline``), the model applies it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from gpu_cluster.components.catalog_file import CatalogError

MIN_SCALE = 0.95
"""The baseline holds the floors only where busbw at the size is at least this share of busbw at
the baseline's own size (latency a small part of the time; the curve is least sure below that)."""

PATHS = ("multi-node", "pair")


@dataclass(frozen=True, slots=True, kw_only=True)
class Baseline:
    """What a provider expects of ``op`` at ``message_bytes`` on ``min_nodes`` or more nodes, and the
    figures under which it says to look again (warn) and to take the node out (fail)."""

    op: str
    message_bytes: int
    expected_gbps: float
    warn_gbps: float
    fail_gbps: float
    min_nodes: int
    source: str

    def describe(self) -> str:
        size = f"{self.message_bytes / 2**30:g} GiB"
        return (
            f"the provider's baseline (about {self.expected_gbps:g} GB/s expected, warn under {self.warn_gbps:g}, "
            f"fail under {self.fail_gbps:g} at {size} on {self.min_nodes}+ nodes; {self.source})"
        )


class Held(NamedTuple):
    expected: float
    warn: float
    fail: float
    note: str
    """'' where the baseline changed nothing."""


def hold(
    base: Baseline | None,
    path: str,
    op: str,
    nodes: int,
    figures: Held,
    curve: Callable[[float, int], float],
    size: int,
    bound: float | None,
) -> Held:
    """``figures`` (the model's expected, warn and fail at ``size`` bytes) held to ``base``; ``curve``
    is the model's busbw for a plateau at a size (its latency), which carries the baseline's figures
    from its size to this one.
    Only where the model's bound for these nodes admits the baseline's figure: the page gives one
    figure for any node count from ``min_nodes``, and beyond the node count where the algorithm's
    bound (no in-network reduction) falls under it, the model does not claim it."""
    if base is None or path not in PATHS or op != base.op or nodes < base.min_nodes:
        return figures
    scale = curve(base.expected_gbps, size) / curve(base.expected_gbps, base.message_bytes)
    if scale < MIN_SCALE or bound is None or base.expected_gbps * scale > bound:
        return figures
    warn, fail = round(base.warn_gbps * scale, 1), round(base.fail_gbps * scale, 1)
    if warn <= figures.warn and fail <= figures.fail:
        return figures
    # The provider measured its own fabric: where it expects more than the model, so does the model.
    return Held(
        expected=max(figures.expected, round(base.expected_gbps * scale, 1)),
        warn=max(figures.warn, warn),
        fail=max(figures.fail, fail),
        note=f"held to {base.describe()}",
    )


def parse(raw: Any, where: str, sources: Mapping[str, Any]) -> Baseline | None:
    """``bandwidth.provider_baseline`` of a catalog entry (None where it has none)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise CatalogError(f"{where}: {raw!r} (allowed: a mapping)")
    keys = ("op", "message_bytes", "expected_gbps", "warn_gbps", "fail_gbps", "min_nodes", "source")
    missing = [k for k in keys if k not in raw]
    if missing:
        raise CatalogError(f"{where}: missing {', '.join(missing)}")
    if raw["source"] not in sources:
        raise CatalogError(f"{where}.source: unknown source id {raw['source']!r}")
    b = Baseline(
        op=str(raw["op"]),
        message_bytes=int(raw["message_bytes"]),
        expected_gbps=float(raw["expected_gbps"]),
        warn_gbps=float(raw["warn_gbps"]),
        fail_gbps=float(raw["fail_gbps"]),
        min_nodes=int(raw["min_nodes"]),
        source=str(raw["source"]),
    )
    if not 0 < b.fail_gbps < b.warn_gbps <= b.expected_gbps or b.min_nodes < 2:
        raise CatalogError(
            f"{where}: {dict(raw)!r} (allowed: 0 < fail_gbps < warn_gbps <= expected_gbps, min_nodes >= 2)"
        )
    return b
