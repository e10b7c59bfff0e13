"""What a run's figures are held to: the run directory read back, each collective's figure at its
size, the bandwidth model's expected curve and floor (with its basis), and the verdict on a
cluster-wide figure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from gpu_cluster.components.bandwidth import CURVE_MIN_BYTES, FLOOR_MESSAGE_BYTES, SLOWDOWN_SEEN, Expected
from gpu_cluster.components.catalog import InstanceType
from gpu_cluster.workloads.validate.report import Curve
from gpu_cluster.workloads.validate.verdict import Measurement, Verdict


@dataclass(slots=True)
class RunFiles:
    root: Path
    phases: dict[str, dict[str, Any]]
    statuses: list[dict[str, Any]]
    ddp: dict[str, Any] | None
    nccl_logs: list[Path]
    unreadable: list[str]


def _read_json(path: Path, unreadable: list[str]) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        unreadable.append(f"{path.name}: {exc}")
        return None


def _read_object(path: Path, unreadable: list[str]) -> dict[str, Any] | None:
    """A run file that must hold one JSON object (what every phase and status writer writes)."""
    doc = _read_json(path, unreadable)
    if doc is not None and not isinstance(doc, dict):
        unreadable.append(f"{path.name}: a JSON {type(doc).__name__}, not the object a run writes")
        return None
    return doc


def load(root: Path) -> RunFiles:
    unreadable: list[str] = []
    phases = {}
    for p in sorted(root.glob("phase-*.json")):
        doc = _read_object(p, unreadable)
        if doc is not None:
            phases[p.stem[len("phase-") :]] = doc
    statuses = [d for p in sorted((root / "status").glob("*.json")) if (d := _read_object(p, unreadable)) is not None]
    ddp_path = root / "ddp.json"
    ddp = _read_json(ddp_path, unreadable) if ddp_path.exists() else None
    return RunFiles(
        root=root,
        phases=phases,
        statuses=statuses,
        ddp=ddp if isinstance(ddp, dict) else None,
        nccl_logs=sorted((root / "nccl").glob("*.log")) if (root / "nccl").is_dir() else [],
        unreadable=unreadable,
    )


def figure_at(op_result: Mapping[str, Any], size: int) -> tuple[int | None, float | None, str]:
    """(size judged, busbw there, note): the row at the size the floor is stated at; with no such row,
    the smallest larger one; with none larger, the largest (and the note says the sweep fell short).

    Both placements are measured; the better one is judged (nccl-tests prints both and users quote
    the better). None when there are no rows."""
    rows = list(op_result.get("rows", []))
    if not rows:
        return None, None, ""
    sizes = sorted({int(r["size_bytes"]) for r in rows})
    larger = [s for s in sizes if s >= size]
    at = larger[0] if larger else sizes[-1]
    note = "" if larger else f"sweep ended at {at} B, under the {size} B the floor is stated at"
    values = [float(r["busbw_gbps"]) for r in rows if int(r["size_bytes"]) == at and r.get("busbw_gbps") is not None]
    return at, (max(values) if values else None), note


def _largest(op_result: Mapping[str, Any]) -> tuple[int | None, float | None]:
    """busbw at the largest size (for figures with no floor)."""
    at, value, _ = figure_at(op_result, 1 << 62)
    return at, value


def transport_failure(basis: str, detail: str) -> Measurement:
    """The cluster's ``transport`` check, failed: the collectives did not run over the fabric
    the instance type has (``basis``: what was expected, ``detail``: what the logs showed)."""
    return Measurement(
        check="transport", scope="cluster", value=None, unit="", basis=basis, verdict=Verdict.FAIL, detail=detail
    )


def gdr_missing(basis: str, detail: str, share: float) -> Measurement:
    """The cluster's ``transport.gdr`` check, short: some network channels ran without GPUDirect
    RDMA. A warning: what it costs shows in the busbw figures, which the floors judge."""
    return Measurement(
        check="transport.gdr",
        scope="cluster",
        value=round(share, 3),
        unit="of channels",
        basis=f"{basis} with GPUDirect RDMA",
        verdict=Verdict.WARN,
        detail=detail,
    )


def expectation(
    it: InstanceType | None, op: str, nodes: int, path: str, message_bytes: int | None = None
) -> Expected | None:
    """The catalog's expected figure and floors for this op, node count and path (at
    ``message_bytes``, 8 GiB by default); None without a type."""
    if it is None:
        return None
    n = max(nodes, 2) if path in ("multi-node", "fabric-only") else nodes
    if message_bytes is None:
        return it.bandwidth.expected(op, n, path)  # type: ignore[arg-type]
    return it.bandwidth.expected(op, n, path, message_bytes)  # type: ignore[arg-type]


def basis_text(e: Expected) -> str:
    text = (
        f"expected {e.expected_gbps if e.expected_gbps is not None else '-'} GB/s ({e.path}, {e.op}, "
        f"{e.nodes} node(s)): {e.algorithm}, bound {e.bound_gbps}; {e.basis}"
    )
    if e.expected_gbps is not None:
        text += f"; basis {e.kind}"
        if e.widen > 1.0:
            text += f", floors widened x{e.widen:g}: {e.widen_why}"
    return text


def floor_basis(e: Expected | None) -> str:
    """What the floors stand on, in a few words, for the report's column beside them."""
    if e is None or e.expected_gbps is None:
        return ""
    return e.kind + (f", widened x{e.widen:g}" if e.widen > 1.0 else "")


def model_curve(it: InstanceType | None, op: str, nodes: int, path: str, sizes: Iterable[int]) -> list[Expected]:
    """The model's expected figure and floors at each size the model covers (for the report's plot:
    the floors move with the size, as the latency's share and the widening for it do)."""
    if it is None:
        return []
    out = []
    for size in sorted(set(sizes)):
        if size >= CURVE_MIN_BYTES and (e := expectation(it, op, nodes, path, size)) and e.expected_gbps:
            out.append(e)
    return out


def model_for(it: InstanceType | None, op: str, nodes: int, path: str, op_result: Mapping[str, Any]) -> list[Expected]:
    return model_curve(it, op, nodes, path, (int(r["size_bytes"]) for r in op_result.get("rows", [])))


def observed_curve(
    op_result: Mapping[str, Any],
    scope: str,
    warn: float | None,
    fail: float | None,
    at: int | None = None,
    model: list[Expected] | None = None,
) -> Curve:
    """What the judge judges, per size: the better placement (all_reduce and broadcast have only the
    in-place one), with the floors marked at the size they apply to."""
    best: dict[int, float] = {}
    for r in op_result.get("rows", []):
        if r.get("busbw_gbps") is not None:
            s = int(r["size_bytes"])
            best[s] = max(best.get(s, 0.0), float(r["busbw_gbps"]))
    return curve_of(str(op_result.get("op", "?")), scope, sorted(best.items()), warn, fail, at, model or [])


def curve_of(
    op: str,
    scope: str,
    points: list[tuple[int, float]],
    warn: float | None,
    fail: float | None,
    at: int | None,
    model: list[Expected],
) -> Curve:
    return Curve(
        op=op,
        scope=scope,
        points=points,
        floor_warn=warn,
        floor_fail=fail,
        floor_at=at,
        expected=[(e.message_bytes, float(e.expected_gbps or 0.0)) for e in model],
        model_floors=[
            (e.message_bytes, float(e.floor_warn_gbps or 0.0), float(e.floor_fail_gbps or 0.0)) for e in model
        ],
    )


def wrong_results(op_result: Mapping[str, Any]) -> int:
    return sum(int(r.get("wrong") or 0) for r in op_result.get("rows", []))


def judge_cluster_figure(
    check: str,
    res: Mapping[str, Any],
    e: Expected | None,
    no_floor: str,
    it: InstanceType | None = None,
    nodes: int = 0,
    path: str = "",
) -> Measurement:
    """One cluster figure against its expected figure, at the size the floor is stated at. A sweep
    that stopped short is judged at its largest size against the model's expectation at that size
    (with ``it``, ``nodes`` and ``path`` given), and the detail says so: a short sweep can FAIL."""
    at, value, short = figure_at(res, e.message_bytes if e else 1 << 62)
    if e is not None and it is not None and at is not None and at != e.message_bytes:
        # The floor of the size judged (a row above 8 GiB where 8 GiB is missing, or a short sweep's last).
        e = expectation(it, e.op, nodes or e.nodes, path or e.path, at) or e
    if short and e is not None and it is not None and at is not None:
        short = (
            f"sweep ended at {human_bytes(at)}, short of the {human_bytes(FLOOR_MESSAGE_BYTES)} the floor is stated at: "
            f"judged against the model's {e.expected_gbps} GB/s at {human_bytes(at)}"
        )
    elif short and e is not None:
        short += "; no size model here, so a FAIL reads as WARN"
    m = Measurement(
        check=check,
        scope="cluster",
        value=value,
        unit="GB/s",
        floor_warn=e.floor_warn_gbps if e else None,
        floor_fail=e.floor_fail_gbps if e else None,
        basis=basis_text(e) if e else no_floor,
        at_bytes=at,
        floor_basis=floor_basis(e),
    ).judge()
    if e is not None and e.expected_gbps is None:
        m.basis = basis_text(e)
    if e is not None and not e.valid and at is not None:
        # Below the smallest size the model holds at there is nothing to hold the run to: not a pass.
        m.verdict = Verdict.UNKNOWN
        m.detail = (
            f"sweep ended at {human_bytes(at)}, under the {human_bytes(CURVE_MIN_BYTES)} the bandwidth model holds from: "
            "nothing to judge it against (rerun with -e 8G, or at least -e 32M)"
        )
        return m
    if short and e is not None:
        m.detail = short
        if it is None and m.verdict == Verdict.FAIL:
            m.verdict = Verdict.WARN
        elif it is not None and at is not None and m.verdict == Verdict.PASS:
            need = it.bandwidth.shortest_sweep(e.op, nodes or e.nodes, path or e.path)  # type: ignore[arg-type]
            if need is None or at < need:
                # Floors this wide at this size would pass a cluster at half its bandwidth: not evidence.
                m.verdict = Verdict.UNKNOWN
                m.detail = (
                    f"{short}; at {human_bytes(at)} the floors (widened x{e.widen:g} for the latency's share) "
                    f"would pass a cluster at 1/{SLOWDOWN_SEEN:g} of its bandwidth: not judged, "
                    + (
                        f"run to at least {need} bytes (-e {human_bytes(need).replace(' GiB', 'G').replace(' MiB', 'M')})"
                        if need is not None
                        else f"and no size up to {human_bytes(FLOOR_MESSAGE_BYTES)} would: run to it and compare nodes"
                    )
                )
    return m


def human_bytes(n: int) -> str:
    return f"{n / 2**30:g} GiB" if n >= 2**30 else f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n} B"
