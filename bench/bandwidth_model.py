"""Does the bandwidth model predict, or only remember? Leave-one-out over the published runs.

    python -m bench.bandwidth_model [--logs DIR]

For every healthy published run in the corpus (``../shared/data/nccl-logs``, ``cases.yaml``) that a
catalog reference stands for (same source, path, op and node count), the catalog is loaded again
WITHOUT that reference (and its curve) wherever it appears, so the run's own figure neither sets the
type's efficiency nor its latency. The model then predicts the run at its largest size (the plateau)
and at 32 MiB (nccl-tests' default ``-e``), and the run's printed out-of-place busbw is set beside it:
predicted / measured, side by side, worst plateau ratio last. A run no reference stands for is
listed as such.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

import yaml

from components.catalog import CATALOG_PATH, CatalogError, parse_catalog
from workloads.validate import nccltests

REPO = Path(__file__).resolve().parents[1]
TOLERANCE = 0.15
SMALL = 32 << 20


def _default_logs() -> Path:
    for base in (REPO.parent, REPO.parent.parent):
        p = base / "shared" / "data" / "nccl-logs"
        if (p / "cases.yaml").is_file():
            return p
    return REPO.parent / "shared" / "data" / "nccl-logs"


def _sections(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [doc.get("instances") or {}, doc.get("judge_types") or {}]


def _matches(ref: dict[str, Any], path: str, op: str, nodes: int, printed: dict[int, float]) -> bool:
    """A reference stands for a run when it is the run's own row: same path, op and node count, and
    the figure the run printed at the reference's size."""
    size = int(ref.get("message_bytes", 0))
    return (
        ref.get("path") == path
        and ref.get("op") == op
        and int(ref.get("nodes", 0)) == nodes
        and size in printed
        and abs(float(ref.get("gbps", -1)) - printed[size]) < 0.006
    )


def _predict(
    doc: dict[str, Any], path: str, op: str, nodes: int, printed: dict[int, float], sizes: list[int]
) -> tuple[str, list[float | None]] | None:
    """(type, predictions at sizes) with every matching reference left out; None if none matches."""
    owner = None
    trimmed = copy.deepcopy(doc)
    for section in _sections(trimmed):
        for name, raw in section.items():
            refs = raw.get("bandwidth", {}).get("references") or []
            keep = [r for r in refs if not _matches(r, path, op, nodes, printed)]
            if len(keep) != len(refs):
                owner = owner or name
                raw["bandwidth"]["references"] = keep
    if owner is None:
        return None
    cat = parse_catalog(trimmed)
    it = cat.judge_type(owner)
    out: list[float | None] = []
    for s in sizes:
        e = it.bandwidth.expected(op, nodes, path, s)  # type: ignore[arg-type]
        out.append(e.expected_gbps)
    return owner, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.bandwidth_model", description=__doc__.split("\n\n")[0])
    ap.add_argument("--logs", type=Path, default=_default_logs())
    args = ap.parse_args(argv)
    cases_file = args.logs / "cases.yaml"
    if not cases_file.is_file():
        print(f"bench.bandwidth_model: no corpus at {args.logs} (cases.yaml missing)", file=sys.stderr)
        return 3
    doc = yaml.safe_load(CATALOG_PATH.read_text(encoding="utf-8"))
    cases = yaml.safe_load(cases_file.read_text(encoding="utf-8"))
    rows: list[tuple[float, str]] = []
    skipped: list[str] = []
    for c in cases:
        if c["expected"] != "healthy":
            continue
        run = nccltests.parse((args.logs / c["file"]).read_text(encoding="utf-8"), c["file"])[0]
        oop = {int(r["size_bytes"]): float(r["busbw_gbps"]) for r in run.rows if not r["in_place"]}
        largest = max(oop)
        op = c["collective"].removesuffix("_perf")
        path = "single-node" if c["nodes"] == 1 else "multi-node"
        try:
            got = _predict(doc, path, op, int(c["nodes"]), oop, [largest, SMALL])
        except CatalogError as exc:
            skipped.append(f"{c['file']}: {exc}")
            continue
        if got is None:
            skipped.append(f"{c['file']}: no catalog reference stands for this run")
            continue
        if got[1][0] is None:
            skipped.append(f"{c['file']}: {got[0]} has no other {path} {op} figure to predict it from")
            continue
        owner, (p_big, p_small) = got
        m_small = oop.get(SMALL)
        r_big = p_big / oop[largest] if p_big else float("nan")
        r_small = p_small / m_small if p_small and m_small else None
        flag = "" if abs(r_big - 1) <= TOLERANCE else "  <- outside +-15%"
        line = (
            f"{c['file'][:40]:<40} {owner:<26} {nccltests._size_label(largest):>7} "
            f"{p_big or float('nan'):>8.1f} {oop[largest]:>8.2f} {r_big:>6.3f}   "
            f"{p_small if p_small else float('nan'):>7.1f} {m_small if m_small else float('nan'):>7.2f} "
            f"{(f'{r_small:.3f}' if r_small else '-'):>6}{flag}"
        )
        rows.append((abs(r_big - 1), line))
    print("leave-one-out: each healthy published run predicted by a catalog without it (predicted / measured)")
    print(
        f"{'run':<40} {'type':<26} {'plateau':>7} {'pred':>8} {'meas':>8} {'ratio':>6}   "
        f"{'pred32M':>7} {'meas32M':>7} {'ratio':>6}"
    )
    for _, line in sorted(rows):
        print(line)
    for s in skipped:
        print(f"not predicted: {s}")
    worst = max((d for d, _ in rows), default=0.0)
    inside = sum(1 for d, _ in rows if d <= TOLERANCE)
    print(f"worst plateau ratio off by {worst:.1%}; {inside} of {len(rows)} within +-{TOLERANCE:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
