"""The nccl-tests table: its rows and columns, its summary.

``Row`` and ``OpResult`` hold measured figures and print them as nccl-tests does (``src/common.cu``), so a
run reads like a published nccl-tests log and its JSON carries the same columns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of a non-empty sequence."""
    if not values:
        raise ValueError("percentile of nothing")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def _time_str(time_us: float) -> str:
    # nccl-tests keeps the column 7 wide by dropping decimals as the time grows.
    if time_us >= 10000.0:
        return f"{time_us:7.0f}"
    if time_us >= 100.0:
        return f"{time_us:7.1f}"
    return f"{time_us:7.2f}"


def header_lines() -> list[str]:
    """nccl-tests' three header lines."""
    lead, block = 52, 33  # widths of the (size..root) cells and of one placement's cells
    title = "#" + " " * (lead - 1) + "out-of-place".center(block) + "in-place".center(block)
    return [
        title.rstrip(),
        f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}"
        f"  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}"
        f"  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}",
        f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}"
        f"  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}"
        f"  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}",
    ]


@dataclass(frozen=True, slots=True, kw_only=True)
class EventStats:
    """Per-launch CUDA-event times of the slowest rank, microseconds."""

    min: float
    p50: float
    p99: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One measured (size, placement) of one op."""

    op: str
    """Collective name."""
    size_bytes: int
    """Bytes the bandwidth counts (nccl-tests' printed size)."""
    count: int
    """Elements as nccl-tests prints them (see :class:`Layout`)."""
    dtype: str
    """Element type (torch name)."""
    in_place: bool
    """Output aliases the input as nccl-tests' in-place column does."""
    time_us: float
    """Time per call, host timer, averaged over ranks (nccl-tests' default ``-a 1``)."""
    algbw_gbps: float
    """``size_bytes / 1e9 / seconds``."""
    busbw_gbps: float
    """``algbw`` times the op's nccl-tests factor."""
    wrong: int | None
    """Wrong elements summed over ranks; None when not checked."""
    event_us: EventStats | None = None
    """CUDA-event per-launch times (GPU only)."""
    slowest_us: float | None = None
    """The slowest rank's time per call (what the job's slowest rank waits for)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "size_bytes": self.size_bytes,
            "count": self.count,
            "dtype": self.dtype,
            "in_place": self.in_place,
            "time_us": self.time_us,
            "slowest_us": self.slowest_us,
            "algbw_gbps": self.algbw_gbps,
            "busbw_gbps": self.busbw_gbps,
            "wrong": self.wrong,
            "event_us": None
            if self.event_us is None
            else {"min": self.event_us.min, "p50": self.event_us.p50, "p99": self.event_us.p99},
        }


def _cells(row: Row | None, checked: bool) -> str:
    if row is None:
        return f"  {'N/A':>7}  {'N/A':>6}  {'N/A':>6}  {'N/A':>6}"
    wrong = str(row.wrong) if checked and row.wrong is not None else "N/A"
    return f"  {_time_str(row.time_us)}  {row.algbw_gbps:6.2f}  {row.busbw_gbps:6.2f}  {wrong:>6}"


def format_row(
    *,
    size_bytes: int,
    count: int,
    type_name: str,
    redop: str,
    root: int,
    out_of_place: Row | None,
    in_place: Row | None,
    checked: bool,
) -> str:
    """One nccl-tests table line; a placement that was not run shows ``N/A``."""
    return (
        f"{size_bytes:12d}  {count:12d}  {type_name:>8}  {redop:>6}  {root:6d}"
        + _cells(out_of_place, checked)
        + _cells(in_place, checked)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class OpResult:
    """All rows of one op and the summary lines nccl-tests prints under them."""

    op: str
    world_size: int
    backend: str
    dtype: str
    rows: tuple[Row, ...]

    @property
    def avg_busbw_gbps(self) -> float:
        """nccl-tests' "Avg bus bandwidth": mean over every measured column."""
        return sum(r.busbw_gbps for r in self.rows) / len(self.rows) if self.rows else 0.0

    @property
    def peak(self) -> Row | None:
        return max(self.rows, key=lambda r: r.busbw_gbps, default=None)

    @property
    def largest(self) -> Row | None:
        """Best placement at the largest size: the figure to hold against a floor."""
        if not self.rows:
            return None
        top = max(r.size_bytes for r in self.rows)
        return max((r for r in self.rows if r.size_bytes == top), key=lambda r: r.busbw_gbps)

    @property
    def wrong_total(self) -> int:
        return sum(r.wrong or 0 for r in self.rows)

    def summary_lines(self) -> list[str]:
        lines = [f"# Avg bus bandwidth    : {self.avg_busbw_gbps:g}"]
        peak, largest = self.peak, self.largest
        if peak is not None and largest is not None:
            lines.append(f"# Peak bus bandwidth   : {peak.busbw_gbps:g} (at {peak.size_bytes} B)")
            lines.append(f"# Largest-size busbw   : {largest.busbw_gbps:g} (at {largest.size_bytes} B)")
        lines.append(f"# Wrong elements       : {self.wrong_total} {'OK' if self.wrong_total == 0 else 'FAILED'}")
        return lines

    def to_json(self) -> dict[str, Any]:
        peak, largest = self.peak, self.largest
        return {
            "op": self.op,
            "world_size": self.world_size,
            "backend": self.backend,
            "dtype": self.dtype,
            "rows": [r.to_json() for r in self.rows],
            "avg_busbw_gbps": self.avg_busbw_gbps,
            "peak_busbw_gbps": None if peak is None else peak.busbw_gbps,
            "peak_size_bytes": None if peak is None else peak.size_bytes,
            "largest_size_bytes": None if largest is None else largest.size_bytes,
            "largest_size_busbw_gbps": None if largest is None else largest.busbw_gbps,
            "wrong_total": self.wrong_total,
        }
