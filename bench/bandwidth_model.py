"""Does the bandwidth model predict, or only remember? Leave-one-out over the published runs.

    python -m bench.bandwidth_model [--logs DIR]

For every healthy published run in the corpus (``../shared/data/nccl-logs``, ``cases.yaml``) that a
catalog reference stands for (same path, op and node count, and the figure the run printed), the
catalog is loaded again WITHOUT that reference (and its curve) wherever it appears, so the run's own
figure neither sets the type's efficiency, nor its latency, nor the spread its floors are widened
by. The model then predicts the run at its largest size (the plateau) and at 32 MiB (nccl-tests'
default ``-e``), and the run's printed out-of-place busbw is set beside it: predicted / measured,
worst plateau ratio last, with the basis the prediction stood on (measured, fabric, extrapolated).

Then the verdict the held-out catalog's widened floors give the run, judged whole and cut at 32 MiB
(the judge's own ``judge_cluster_figure``): a healthy run judged FAIL is misjudged, and so is a
degraded run not judged FAIL. The summary counts both, per size. Beside each run, the shortest sweep
whose floors would see a cluster at half its bandwidth (``BandwidthModel.shortest_sweep``): a sweep
that ends before it is not passed.

Last, 16 x p5.48xlarge sweeps on the published 16-node EFA plateau (p5en, held out), healthy and at
1/2 to 1/16 of it, cut at 8 GiB, 32 MiB and 512 KiB, judged as ``validate judge --nccl-tests`` does:
a degraded PASS or a healthy FAIL is misjudged.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

import yaml

from gpu_cluster.components.catalog import (
    CATALOG_PATH,
    Catalog,
    CatalogError,
    InstanceType,
    load_catalog,
    parse_catalog,
)
from gpu_cluster.workloads.validate import nccltests
from gpu_cluster.workloads.validate.figures import expectation, judge_cluster_figure
from gpu_cluster.workloads.validate.verdict import Verdict

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


def _held_out(
    doc: dict[str, Any], path: str, op: str, nodes: int, printed: dict[int, float]
) -> tuple[Catalog, InstanceType] | None:
    """The catalog with every reference of this run left out, and the type one belonged to; None
    when no reference stands for the run."""
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
    return cat, cat.judge_type(owner)


def _floors(it: InstanceType, run: nccltests.NcclTestsRun, op: str, nodes: int, path: str, cut: int | None) -> str:
    """The verdict of the floors alone (the judge's judge_cluster_figure), on the run whole or cut."""
    rows = [r for r in run.rows if cut is None or int(r["size_bytes"]) <= cut]
    e = expectation(it, op, nodes, path)
    m = judge_cluster_figure(f"{path}.{op}", {"op": op, "rows": rows}, e, "", it, nodes, path)
    return m.verdict.name


def _judge(cat: Catalog, it: InstanceType, run: nccltests.NcclTestsRun, nodes: int, cut: int | None) -> str:
    """The verdict the whole judge gives (op read from the file, transport, floors), as the CLI does."""
    part = copy.copy(run)
    part.rows = [r for r in run.rows if cut is None or int(r["size_bytes"]) <= cut]
    return nccltests.judge_runs([part], it.name, nodes, catalog=cat).verdict.name


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
    judged: list[str] = []
    wrong = {k: [0, 0] for k in ("floors whole", "floors 32M", "judge whole", "judge 32M")}
    for c in cases:
        run = nccltests.parse((args.logs / c["file"]).read_text(encoding="utf-8"), c["file"])[0]
        op = c["collective"].removesuffix("_perf")
        nodes = int(c["nodes"])
        path = "single-node" if nodes == 1 else "multi-node"
        oop = {int(r["size_bytes"]): float(r["busbw_gbps"]) for r in run.rows if not r["in_place"]}
        held: tuple[Catalog, InstanceType] | None = None
        try:
            if c["expected"] == "healthy":
                held = _held_out(doc, path, op, nodes, oop)
            elif c.get("instance_type"):
                # No reference stands for a degraded run: the whole catalog judges it.
                held = load_catalog(), load_catalog().judge_type(c["instance_type"])
        except CatalogError as exc:
            skipped.append(f"{c['file']}: {exc}")
            continue
        if held is None:
            if c["expected"] == "healthy":
                skipped.append(f"{c['file']}: no catalog reference stands for this run")
            continue
        cat, it = held
        largest = max(oop)
        e_big = it.bandwidth.expected(op, nodes, path, largest)  # type: ignore[arg-type]
        e_small = it.bandwidth.expected(op, nodes, path, SMALL)  # type: ignore[arg-type]
        if c["expected"] == "healthy" and e_big.expected_gbps is None:
            skipped.append(f"{c['file']}: {it.name} has no other {path} {op} figure to predict it from")
            continue
        verdicts = {
            "floors whole": _floors(it, run, op, nodes, path, None),
            "floors 32M": _floors(it, run, op, nodes, path, SMALL) if SMALL in oop else "-",
            "judge whole": _judge(cat, it, run, nodes, None),
            "judge 32M": _judge(cat, it, run, nodes, SMALL) if SMALL in oop else "-",
        }
        bad = {"healthy": {Verdict.FAIL.name}, "degraded": {Verdict.PASS.name, Verdict.WARN.name}}.get(
            c["expected"], set()
        )
        for key, v in verdicts.items():
            if v != "-" and c["expected"] in ("healthy", "degraded"):
                wrong[key][1] += 1
                wrong[key][0] += v in bad
        judge_bad = verdicts["judge whole"] in bad or verdicts["judge 32M"] in bad
        need = it.bandwidth.shortest_sweep(op, nodes, path)  # type: ignore[arg-type]
        judged.append(
            f"{c['file'][:40]:<40} {c['expected']:<8} {e_big.kind:<12} x{e_big.widen:<5.2f} x{e_small.widen:<5.2f} "
            f"{(nccltests._size_label(need) if need else '-'):>7} "
            + " ".join(f"{v:<8}" for v in verdicts.values())
            + ("  <- misjudged" if judge_bad else "")
        )
        if c["expected"] != "healthy":
            continue
        assert e_big.expected_gbps is not None
        p_big, p_small = e_big.expected_gbps, e_small.expected_gbps
        m_small = oop.get(SMALL)
        r_big = p_big / oop[largest]
        r_small = p_small / m_small if p_small and m_small else None
        flag = "" if abs(r_big - 1) <= TOLERANCE else "  <- outside +-15%"
        line = (
            f"{c['file'][:40]:<40} {it.name:<26} {e_big.kind:<12} {nccltests._size_label(largest):>7} "
            f"{p_big:>8.1f} {oop[largest]:>8.2f} {r_big:>6.3f}   "
            f"{p_small if p_small else float('nan'):>7.1f} {m_small if m_small else float('nan'):>7.2f} "
            f"{(f'{r_small:.3f}' if r_small else '-'):>6}{flag}"
        )
        rows.append((abs(r_big - 1), line))
    print("leave-one-out: each healthy published run predicted by a catalog without it (predicted / measured)")
    print(
        f"{'run':<40} {'type':<26} {'basis':<12} {'plateau':>7} {'pred':>8} {'meas':>8} {'ratio':>6}   "
        f"{'pred32M':>7} {'meas32M':>7} {'ratio':>6}"
    )
    for _, line in sorted(rows):
        print(line)
    for s in skipped:
        print(f"not predicted: {s}")
    worst = max((d for d, _ in rows), default=0.0)
    inside = sum(1 for d, _ in rows if d <= TOLERANCE)
    print(f"worst plateau ratio off by {worst:.1%}; {inside} of {len(rows)} within +-{TOLERANCE:.0%}")
    print()
    print(
        "each run judged by the catalog without it, whole and cut at 32 MiB: by the widened floors alone, then by the "
        "whole judge (op, transport, floors) as the CLI does; healthy judged FAIL, or degraded not FAIL, is misjudged"
    )
    print(
        f"{'run':<40} {'label':<8} {'basis':<12} {'widen':<6} {'@32M':<6} {'2x from':>7} {'floors':<8} {'fl@32M':<8} "
        f"{'judge':<8} {'jd@32M':<8}"
    )
    for line in judged:
        print(line)
    for key, (bad_n, n) in wrong.items():
        print(f"misjudged by the {key.replace('32M', 'cut at 32 MiB')}: {bad_n} of {n}")
    print()
    _slower_sweeps(doc)
    return 0


P5EN_16 = ("multi-node", "all_reduce", 16, {16 << 30: 369.86})
"""The published 16-node EFA all_reduce (04-p5en-16node-efa-allreduce-partial.log, 16 GiB row)."""
CUTS = (8 << 30, SMALL, 512 << 10)


def _slower_sweeps(doc: dict[str, Any]) -> None:
    """16 x p5 at the published 16-node plateau and at 1/2..1/16 of it (same latency: the slowdown
    hardest to see at small sizes), each cut at CUTS, judged by the catalog without that figure."""
    from tests.workloads.nccl_fabricate import curve, nccl_tests_log

    held = _held_out(doc, *P5EN_16)
    if held is None:
        print("16 x p5 sweeps: the catalog no longer holds the p5en 16-node figure")
        return
    cat = held[0]
    it = cat.judge_type("p5.48xlarge")
    plateau = next(iter(P5EN_16[3].values()))
    lat_us = it.bandwidth.latency_for("multi-node", "all_reduce")[0] * 1e6
    need = it.bandwidth.shortest_sweep("all_reduce", 16, "multi-node")
    print(
        f"16 x p5.48xlarge all_reduce at {plateau} GB/s (the published 16-node EFA plateau, held out) / k, "
        f"latency {lat_us:.0f} us; the floors see 1/2 from {nccltests._size_label(need) if need else 'nowhere'}"
    )
    print(f"{'k':>3} " + " ".join(f"{'cut ' + nccltests._size_label(c):<14}" for c in CUTS))
    bad = 0
    for k in (1, 2, 4, 8, 16):
        cells = []
        for cut in CUTS:
            text = nccl_tests_log("all_reduce", 16, 8, curve(plateau / k, lat_us), max_bytes=cut, min_bytes=8)
            v = nccltests.judge_runs(nccltests.parse(text), it.name, 16, catalog=cat).verdict.name
            bad += (k == 1 and v == "FAIL") or (k > 1 and v == "PASS")
            cells.append(f"{v:<14}")
        print(f"{k:>3} " + " ".join(cells))
    print(f"misjudged 16 x p5 sweeps (degraded PASS or healthy FAIL): {bad} of {5 * len(CUTS)}")


if __name__ == "__main__":
    sys.exit(main())
