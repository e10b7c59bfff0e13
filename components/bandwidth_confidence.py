"""How sure the bandwidth model is: each published multi-node run of the catalog predicted without it
(leave-one-out), and from those errors, per kind of basis (and per GPU count), how far the floors
are widened (:class:`gpu_cluster.components.bandwidth.Confidence`, read by ``BandwidthModel.widening``).

Pure: the catalog calls :func:`confidence` once its models are calibrated.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from typing import Mapping

from gpu_cluster.components.bandwidth import (
    CURVE_MIN_BYTES,
    KINDS,
    OPS_WITH_FLOORS,
    BandwidthModel,
    Confidence,
    Expected,
    Reference,
    Spread,
    calibrate,
    calibrate_latency,
)

Z_ONE_SIDED_99 = 2.326
"""A normal's 99th percentile in standard deviations: the floors of a figure of a kind sit under
99 % of the over-predictions its held-out runs suggest."""
MIN_SAMPLES = 3
"""A kind with fewer held-out runs borrows the spread of every non-measured run pooled."""


def _ident(r: Reference) -> tuple[str, str, int, int, float]:
    return (r.source, r.op, r.nodes, r.message_bytes, r.gbps)


def _refit(models: Mapping[str, BandwidthModel]) -> dict[str, BandwidthModel]:
    lat = calibrate_latency(models)
    eff = calibrate(models, lat)
    return {n: replace(m, efficiency=eff[n], latency=lat[n], confidence=None) for n, m in models.items()}


def held_out(models: Mapping[str, BandwidthModel]) -> list[tuple[str, Reference, Expected, Expected | None]]:
    """Every published multi-node run of the catalog predicted by the catalog without it (and
    without its curve, wherever else the same figure stands): (type, the run, the prediction at its
    size, the prediction at 32 MiB or None without a 32 MiB row). Predictions are unwidened."""
    out = []
    seen: set[tuple[str, str, int, int, float]] = set()
    for name, m in models.items():
        for ref in m.references:
            if ref.path != "multi-node" or ref.kind != "measured" or ref.op not in OPS_WITH_FLOORS:
                continue
            ident = _ident(ref)
            owner = next(
                (n for n, o in models.items() if ref.hardware.split(" ")[0] == n and ref in o.references), name
            )
            if ident in seen or owner != name:
                continue
            seen.add(ident)
            trimmed = _refit(
                {
                    n: replace(o, references=tuple(r for r in o.references if _ident(r) != ident))
                    for n, o in models.items()
                }
            )
            e = trimmed[name].expected(ref.op, ref.nodes, "multi-node", ref.message_bytes)
            curve = dict(ref.curve)
            e32 = (
                trimmed[name].expected(ref.op, ref.nodes, "multi-node", CURVE_MIN_BYTES)
                if CURVE_MIN_BYTES in curve
                else None
            )
            if e.expected_gbps is not None:
                out.append((name, ref, e, e32))
    return out


def _spread_of(kind: str, samples: list[tuple[str, float]], pooled: list[tuple[str, float]], gpus: int = 0) -> Spread:
    if kind == "measured":
        worst = max([1.0, *(r for _, r in samples)])
        how = (
            f"largest over-prediction of {len(samples)} held-out run(s) on a measured basis"
            if samples
            else "no held-out run on a measured basis"
        )
        return Spread(kind=kind, widen=worst, samples=tuple(samples), how=how)
    use, whose = (samples, f"{kind} figures") if len(samples) >= MIN_SAMPLES else (pooled, "non-measured figures")
    whose += f" of {gpus}-GPU types" if gpus else ""
    if len(use) < 2:
        return Spread(kind=kind, widen=1.0, samples=tuple(samples), how=f"too few held-out {whose} to say")
    logs = [math.log(r) for _, r in use]
    mu, sd = statistics.mean(logs), statistics.stdev(logs)
    widen = max(1.0, math.exp(mu + Z_ONE_SIDED_99 * sd))
    how = (
        f"99th percentile of the leave-one-out errors of {len(use)} {whose}: predicted/measured "
        f"{min(r for _, r in use):.2f}..{max(r for _, r in use):.2f}"
    )
    return Spread(kind=kind, widen=widen, samples=tuple(samples), how=how)


def confidence(models: Mapping[str, BandwidthModel]) -> Confidence:
    """Leave-one-out over the catalog's own published multi-node runs (:func:`held_out`): per kind
    of basis, the spread of predicted / measured at each run's size; and at 32 MiB, the spread of
    the latency's part (the 32 MiB ratio over the plateau's), pooled over every kind."""
    by_kind: dict[str, list[tuple[str, float]]] = {k: [] for k in KINDS}
    classes: dict[int, dict[str, list[tuple[str, float]]]] = {}
    size: list[tuple[str, float]] = []
    for name, ref, e, e32 in held_out(models):
        assert e.expected_gbps is not None
        label = f"{ref.op} {ref.nodes} x {ref.hardware or name} ({ref.source})"
        ratio = e.expected_gbps / ref.gbps
        by_kind[e.kind].append((label, ratio))
        classes.setdefault(models[name].gpus, {k: [] for k in KINDS})[e.kind].append((label, ratio))
        m32 = dict(ref.curve).get(CURVE_MIN_BYTES)
        if e32 is not None and e32.expected_gbps is not None and m32:
            size.append((label, (e32.expected_gbps / m32) / ratio))

    def spreads(samples: Mapping[str, list[tuple[str, float]]], gpus: int = 0) -> dict[str, Spread]:
        pooled = [s for k in KINDS if k != "measured" for s in samples[k]]
        return {k: _spread_of(k, samples[k], pooled, gpus) for k in KINDS}

    plateau = spreads(by_kind)
    by_gpus = {
        gpus: spreads(samples, gpus)
        for gpus, samples in classes.items()
        if sum(len(v) for k, v in samples.items() if k != "measured") >= MIN_SAMPLES
    }
    if len(size) >= 2:
        logs = [math.log(r) for _, r in size]
        widen = max(1.0, math.exp(statistics.mean(logs) + Z_ONE_SIDED_99 * statistics.stdev(logs)))
        how = (
            f"at 32 MiB the latency's part of {len(size)} held-out runs' errors spans "
            f"{min(r for _, r in size):.2f}..{max(r for _, r in size):.2f}; its 99th percentile"
        )
    else:
        widen, how = 1.0, "too few held-out curves to say"
    return Confidence(
        plateau=plateau, by_gpus=by_gpus, size=Spread(kind="size", widen=widen, samples=tuple(size), how=how)
    )
