"""The bandwidth model: what busbw a healthy cluster of N nodes should reach, per op and path.

The catalog gives, per instance type, the NVLink/xGMI bandwidth per GPU, the GPU-fabric NICs
(count and line rate) and published nccl-tests measurements with their source. This module turns
those into an expected busbw for an op, a node count and a path, and the floors a run is held to:

- ``bound``: what the algorithm could reach if the NICs ran at line rate (nccl-tests busbw, GB/s).
  * multi-node and pair all_reduce: NCCL's hierarchical algorithms (tree, NVLS-tree) reduce-scatter
    inside the node over NVLink, all-reduce between nodes one rail at a time, then all-gather inside
    the node. Each GPU's NIC carries 2 (N-1)/N of its 1/G shard, so with node NIC bandwidth B,
    busbw <= B x (G N - 1) / (G (N - 1)) (B x (8N-1)/(8(N-1)) for 8 GPUs: 750 GB/s at N = 2 for 400 GB/s,
    423 at N = 16, tending to B). A flat ring over all G x N ranks is bounded by B at every N, the
    limit the hierarchical bound tends to.
  * multi-node and pair all_gather / reduce_scatter: NCCL runs a ring; every node boundary carries
    (n-1)/n of the data per ring, so busbw <= B at every N.
  * fabric-only (NVLink P2P, SHM and NVLS off): every hop of the ring leaves through a NIC, so
    busbw <= B / G, the NIC bandwidth per GPU, for every op and N.
  * single-node: a ring over NVLink is bounded by the per-direction NVLink bandwidth per GPU; NVLS
    (in-switch reduction) exceeds it, so the single-node figure comes from measurements only.
- ``efficiency``: measured / bound for a published multi-node measurement of the same op (on this
  type, or a named type with the same NICs: basis *measured*); with none, the median of the types of
  the same fabric and GPU count that measured it, or for reduce_scatter all_gather's (*fabric*); with
  none, the median of every type that measured it (*extrapolated*). The basis is named in the report.
- ``expected`` = efficiency x bound, and for all_reduce at most the single-node figure (the two
  intra-node phases run on NVLink: every published 2-node 8 x H100 figure, 479.3 on p5 and 467.5
  on 8 x 400G IB, sits at or under the single-node 480.4).
- size: nccl-tests times a call as latency plus size over bandwidth, so in busbw terms
  ``time(S) = latency + S / plateau`` and ``busbw(S) = S / (latency + S / plateau)`` (S in GB). The
  latency is fitted on the published curves (each reference's ``curve``, sizes from
  CURVE_MIN_BYTES up, least squares on the relative error); the plateau is the efficiency x bound,
  and a reference measured at a size short of the plateau is first lifted to it with the same
  latency. ``expected(..., message_bytes=S)`` is then the figure at any size, so a sweep that ends
  at 32 MiB is held to what a healthy cluster reaches at 32 MiB.
- floors: warn under WARN_OF_EXPECTED x expected, fail under FAIL_OF_EXPECTED x expected, at the
  message size judged (FLOOR_MESSAGE_BYTES when the sweep reaches it), each divided by how far the
  figure's basis is from the case: the spread of the leave-one-out errors of figures of that basis
  over the catalog's own published runs (:func:`confidence`: each run predicted by the catalog
  without it), times the spread at 32 MiB in proportion to the latency's share of the time at the
  size judged. Below CURVE_MIN_BYTES the model gives no figure and no floor.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Literal, Mapping, NamedTuple, Sequence

from gpu_cluster.components.bandwidth_baseline import Baseline, Held, hold

Path = Literal["single-node", "multi-node", "fabric-only", "pair"]
PATHS: tuple[Path, ...] = ("single-node", "multi-node", "fabric-only", "pair")

WARN_OF_EXPECTED = 0.90
"""nccl-tests fails a run under 0.9 x NCCL_TESTS_MIN_BW (src/common.cu); here 0.9 is the warn tier."""
FAIL_OF_EXPECTED = 0.75
"""Below three quarters of the expected figure a cluster is failed; the gap to 0.9 is room for noise."""
FLOOR_MESSAGE_BYTES = 8 << 30
"""The size floors are stated at: the largest row most published runs share (8 GiB)."""
CURVE_MIN_BYTES = 32 << 20
"""Smallest size the latency is fitted from: nccl-tests' default ``-e 32M`` ends here, and below it
NCCL's LL/LL128 protocols make the curve something other than latency plus bandwidth."""
SLOWDOWN_SEEN = 2.0
"""A sweep shorter than :meth:`BandwidthModel.shortest_sweep` (which sees this slowdown) is not passed."""
OPS_WITH_FLOORS = ("all_reduce", "all_gather", "reduce_scatter")
"""Ops the model gives a floor for. reduce_scatter runs the same ring as all_gather and moves the same
bytes per NIC (nccl-tests doc/PERFORMANCE.md: same busbw factor), so with no reduce_scatter measured it
takes all_gather's efficiency and says so. alltoall, sendrecv, broadcast, reduce: no published
multi-node figure in the catalog, so no floor."""
_BORROW = {"reduce_scatter": "all_gather"}


def busbw_at(plateau_gbps: float, latency_s: float, size_bytes: int) -> float:
    """busbw at ``size_bytes`` of a curve with this plateau and latency (busbw terms)."""
    x = size_bytes / 1e9
    return x / (latency_s + x / plateau_gbps)


def plateau_from(gbps: float, size_bytes: int, latency_s: float) -> float:
    """The plateau a curve with this latency has when it reads ``gbps`` at ``size_bytes``."""
    x = size_bytes / 1e9
    t = x / gbps - latency_s
    return x / t if t > 0 else gbps


def fit_latency(points: Sequence[tuple[int, float]]) -> float | None:
    """Seconds of latency (busbw terms) that best explain a published curve, or None with fewer than
    two usable sizes. Fits ``time = latency + S / plateau`` minimising the relative error of the time,
    on sizes from CURVE_MIN_BYTES up (the protocol switch below it is not latency plus bandwidth)."""
    pts = [(s / 1e9, b) for s, b in points if s >= CURVE_MIN_BYTES and b > 0]
    if len({x for x, _ in pts}) < 2:
        return None
    # (lat + x c) / t = 1 with t = x / b: rows (1/t, x/t), least squares, two unknowns.
    a11 = a12 = a22 = r1 = r2 = 0.0
    for x, b in pts:
        t = x / b
        u, v = 1.0 / t, x / t
        a11, a12, a22, r1, r2 = a11 + u * u, a12 + u * v, a22 + v * v, r1 + u, r2 + v
    det = a11 * a22 - a12 * a12
    if det == 0:
        return None
    lat = (r1 * a22 - r2 * a12) / det
    return max(lat, 0.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Reference:
    """One published nccl-tests figure (out-of-place busbw of the row named)."""

    path: Path
    op: str
    nodes: int
    message_bytes: int
    gbps: float
    source: str
    kind: Literal["measured", "gate"] = "measured"
    """'gate': a health check's pass threshold (Azure NHC), not a typical measurement."""
    hardware: str = ""
    calibrates: bool = False
    """This figure is NIC-bound and sets the fabric's efficiency for its op."""
    curve: tuple[tuple[int, float], ...] = ()
    """Rows of the same published table, (size, out-of-place busbw), that the latency is fitted on."""

    @property
    def latency_s(self) -> float | None:
        return fit_latency(self.curve)


@dataclass(frozen=True, slots=True, kw_only=True)
class Expected:
    path: Path
    op: str
    nodes: int
    message_bytes: int
    bound_gbps: float | None
    algorithm: str
    expected_gbps: float | None
    """At ``message_bytes``."""
    floor_warn_gbps: float | None
    floor_fail_gbps: float | None
    basis: str
    plateau_gbps: float | None = None
    """What the curve tends to at large sizes."""
    latency_us: float | None = None
    """The latency of the curve (busbw terms), fitted on published curves."""
    kind: str = "measured"
    """What the figure stands on (:data:`KINDS`): measured on this type (or the type with the same
    NICs it is calibrated on), borrowed from the same fabric, or extrapolated from other fabrics."""
    widen: float = 1.0
    """The floors are WARN_OF_EXPECTED and FAIL_OF_EXPECTED of the figure divided by this: how far
    figures of this kind, at this size, have missed published runs they were not fitted on."""
    widen_why: str = ""
    valid: bool = True
    """False below CURVE_MIN_BYTES: the model says nothing there, and no floor is given."""


KINDS = ("measured", "fabric", "extrapolated")
"""How far a figure's basis is from the case, nearest first."""


class Efficiency(NamedTuple):
    value: float
    """Plateau / bound."""
    why: str
    kind: str = "measured"
    """Of :data:`KINDS`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Spread:
    """How far the model's figures of one kind missed published runs held out of the catalog."""

    kind: str
    widen: float
    """>= 1: what the floors of a figure of this kind are divided by."""
    samples: tuple[tuple[str, float], ...]
    """(the run held out, predicted / measured)."""
    how: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Confidence:
    """Leave-one-out over the catalog's own multi-node references (:func:`confidence`)."""

    plateau: Mapping[str, Spread]
    """Per kind, at the size each run was published at (its largest), over every held-out run."""
    by_gpus: Mapping[int, Mapping[str, Spread]] = field(default_factory=dict)
    """The same over the runs of types with as many GPUs per node: what a type's floors are widened
    by, where there are enough of them (an efficiency borrowed by one T4 from eight-H100 types
    misses by more than one borrowed between eight-GPU types)."""
    size: Spread
    """At 32 MiB over the same runs, the error the latency adds to the plateau's (the ratio of the
    two ratios); applied in proportion to the latency's share of the time at the size judged."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BandwidthModel:
    op: str
    """The op the multi-node and pair floors are judged with (the one published for this type)."""
    gpus: int
    nvlink_gbytes_per_gpu: float | None
    """Vendor's NVLink/xGMI bandwidth per GPU, both directions together (GB/s)."""
    nvlink_source: str
    nic_gbps: float
    """Line rate of one GPU-fabric NIC, Gbit/s."""
    nics: int
    """GPU-fabric NICs per node (host NICs such as GCP's gVNIC excluded)."""
    nic_source: str
    references: tuple[Reference, ...]
    calibration: str
    """Instance type whose calibrating measurement gives the efficiency (this type by default)."""
    efficiency: Mapping[str, Efficiency] = field(default_factory=dict)
    """op -> (plateau / bound, where that came from, its kind); filled in when the catalog is loaded."""
    latency: Mapping[str, tuple[float, str]] = field(default_factory=dict)
    """'single-node' | 'multi-node' -> (seconds, where that came from); filled in when loaded."""
    note: str = ""
    name: str = ""
    """The instance type this model is of."""
    fabric: str = ""
    """The type's GPU fabric (catalog ``network.fabric``): figures of the same fabric are borrowed first."""
    confidence: Confidence | None = None
    """Filled in when the catalog is loaded; None: floors are not widened (a figure with no record)."""
    baseline: Baseline | None = None
    """The provider's own baseline for this type across nodes, where it publishes one."""

    @property
    def nic_gbytes_per_node(self) -> float:
        return self.nic_gbps * self.nics / 8.0

    @property
    def nic_gbytes_per_gpu(self) -> float:
        return self.nic_gbytes_per_node / self.gpus

    def bound(self, op: str, nodes: int, path: Path) -> tuple[float | None, str]:
        b, g = self.nic_gbytes_per_node, self.gpus
        if path == "single-node":
            if self.nvlink_gbytes_per_gpu is None:
                return None, "ring over NVLink/xGMI (no vendor figure)"
            return self.nvlink_gbytes_per_gpu / 2, "ring over NVLink/xGMI, one direction per GPU (NVLS exceeds it)"
        if path == "fabric-only":
            return b / g, "ring, every hop through a NIC: NIC bandwidth per GPU"
        n = 2 if path == "pair" else nodes
        if n < 2:
            raise ValueError(f"{path} needs at least 2 nodes, got {n}")
        if op == "all_reduce":
            return b * (g * n - 1) / (g * (n - 1)), f"hierarchical (tree/NVLS-tree): B x ({g}N-1)/({g}(N-1))"
        if op == "alltoall":
            # Every rank sends (N-1)/N of its message to the other nodes: G ranks' worth leaves a
            # node through B, so algbw <= B N / (G (N-1)) and busbw (x (GN-1)/GN) likewise.
            return (
                b * n / (g * (n - 1)) * (g * n - 1) / (g * n),
                f"alltoall: B x N/({g}(N-1)) x ({g}N-1)/({g}N), each rank's share to the other nodes",
            )
        return b, "ring: node NIC bandwidth B"

    def single_node_reference(self, op: str) -> Reference | None:
        refs = [r for r in self.references if r.path == "single-node" and r.op == op]
        return max(refs, key=lambda r: (r.kind == "measured", r.message_bytes)) if refs else None

    def latency_for(self, path: Path, op: str = "") -> tuple[float, str]:
        """The curve's latency for this path kind and op: the op's own curves first (an all_reduce
        and an all_gather of one fabric differ by 3x on A3 Mega), then any op's."""
        kind = "single-node" if path == "single-node" else "multi-node"
        return self.latency.get(
            f"{kind}/{op}", self.latency.get(kind, (0.0, "no published curve: bandwidth only, no latency"))
        )

    def single_node_curve(self, op: str) -> tuple[float, float, str] | None:
        """(plateau, latency, basis) of the single-node figure, None without one."""
        ref = self.single_node_reference(op)
        if ref is None:
            return None
        lat, _ = self.latency_for("single-node", op)
        basis = (
            f"{ref.kind} {ref.gbps:g} GB/s at {_size(ref.message_bytes)} on {ref.hardware or 'this type'} "
            f"({ref.source})"
        )
        return plateau_from(ref.gbps, ref.message_bytes, lat), lat, basis

    def expected(self, op: str, nodes: int, path: Path, message_bytes: int = FLOOR_MESSAGE_BYTES) -> Expected:
        size = message_bytes
        bound, algorithm = self.bound(op, nodes, path)
        n = 2 if path == "pair" else 1 if path == "single-node" else nodes
        value: float | None = None
        plateau: float | None = None
        kind = "measured"
        lat, lat_why = self.latency_for(path, op)
        valid = size >= CURVE_MIN_BYTES
        if not valid:
            basis = (
                f"no floor at {_size(size)}: the model holds from {_size(CURVE_MIN_BYTES)} (below it NCCL's "
                "LL/LL128 protocols make the curve something other than latency plus bandwidth, and no "
                "published curve is fitted there)"
            )
        elif path == "single-node":
            single = self.single_node_curve(op)
            if single is None:
                basis = f"no published single-node {op} for this GPU board: no floor"
            else:
                plateau, lat, basis = single
                value = busbw_at(plateau, lat, size)
        else:
            eff = self.efficiency.get(op)
            if eff is None or bound is None:
                basis = f"no floor for {op}: no {op} measured on this fabric or any other in the catalog"
            else:
                kind = eff.kind
                if path == "fabric-only" and kind == "measured":
                    kind = "fabric"  # the efficiency was measured with NVLink and SHM on
                plateau = eff.value * bound
                value = busbw_at(plateau, lat, size)
                basis = f"plateau {eff.value:.3f} x bound ({eff.why})"
                single = self.single_node_curve(op) if op == "all_reduce" and path != "fabric-only" else None
                if single is not None and busbw_at(single[0], single[1], size) < value:
                    value = busbw_at(single[0], single[1], size)
                    plateau, lat = single[0], single[1]
                    lat_why = self.latency_for("single-node", op)[1]
                    basis += f"; capped at the single-node curve ({single[2]})"
        if path == "single-node" and valid:
            lat_why = self.latency_for(path, op)[1]
        widen, widen_why = 1.0, ""
        if value is not None:
            basis += f"; latency {lat * 1e6:.0f} us ({lat_why})"
            if size != FLOOR_MESSAGE_BYTES:
                basis += f"; at {_size(size)}"
            assert plateau is not None
            widen, widen_why = self.widening(kind, lat, plateau, size)
        # Floors come from the expected figure as printed, so a reader can redo the sums.
        value = None if value is None else round(value, 1)
        widen = round(widen, 2)
        warn = None if value is None else round(WARN_OF_EXPECTED * value / widen, 1)
        fail = None if value is None else round(FAIL_OF_EXPECTED * value / widen, 1)
        if value is not None and plateau is not None and warn is not None and fail is not None:

            def curve(p: float, s: int) -> float:
                return busbw_at(p, lat, s)

            value, warn, fail, note = hold(self.baseline, path, op, n, Held(value, warn, fail, ""), curve, size, bound)
            basis += f"; {note}" if note else ""
        return Expected(
            path=path,
            op=op,
            nodes=n,
            message_bytes=size,
            bound_gbps=None if bound is None else round(bound, 1),
            algorithm=algorithm,
            expected_gbps=value,
            floor_warn_gbps=warn,
            floor_fail_gbps=fail,
            basis=basis,
            plateau_gbps=None if plateau is None else round(plateau, 1),
            latency_us=None if value is None else round(lat * 1e6, 1),
            kind=kind,
            widen=widen,
            widen_why=widen_why,
            valid=valid,
        )

    def shortest_sweep(self, op: str, nodes: int, path: Path) -> int | None:
        """Smallest size (a power of two, CURVE_MIN_BYTES..FLOOR_MESSAGE_BYTES) where a cluster at
        1/SLOWDOWN_SEEN of the expected plateau, same latency (the slowdown hardest to see small),
        is under the warn floor; a shorter sweep cannot tell it from a healthy one. None: no size."""
        size = CURVE_MIN_BYTES
        while size <= FLOOR_MESSAGE_BYTES:
            e = self.expected(op, nodes, path, size)
            if e.expected_gbps is None or e.plateau_gbps is None or e.floor_warn_gbps is None:
                return None
            slow = busbw_at(e.plateau_gbps / SLOWDOWN_SEEN, (e.latency_us or 0.0) * 1e-6, size)
            if slow < e.floor_warn_gbps:
                return size
            size *= 2
        return None

    def widening(self, kind: str, latency_s: float, plateau_gbps: float, size: int) -> tuple[float, str]:
        """(factor >= 1 the floors are divided by, why): the spread of the leave-one-out errors of
        figures of ``kind`` (:func:`confidence`), times the latency's at 32 MiB in proportion to the
        latency's share of the time at ``size`` (all of it at 32 MiB, almost none at 8 GiB)."""
        conf = self.confidence
        if conf is None:
            return 1.0, ""
        spread = conf.by_gpus.get(self.gpus, conf.plateau).get(kind)
        w_kind = spread.widen if spread is not None else 1.0
        x, x32 = size / 1e9, CURVE_MIN_BYTES / 1e9
        share = latency_s / (latency_s + x / plateau_gbps) if latency_s > 0 else 0.0
        share32 = latency_s / (latency_s + x32 / plateau_gbps) if latency_s > 0 else 0.0
        w_size = math.exp(math.log(conf.size.widen) * min(1.0, share / share32)) if share32 > 0 else 1.0
        parts = []
        if spread is not None and w_kind > 1.0:
            parts.append(f"x{w_kind:.2f} for a figure on a {kind} basis ({spread.how})")
        if w_size > 1.005:
            parts.append(
                f"x{w_size:.2f} for the size (latency {share:.0%} of the time at {_size(size)}; {conf.size.how})"
            )
        return w_kind * w_size, "; ".join(parts)


def _size(n: int) -> str:
    return f"{n / 2**30:g} GiB" if n >= 2**30 else f"{n / 2**20:g} MiB"


def calibrate_latency(models: Mapping[str, BandwidthModel]) -> dict[str, dict[str, tuple[float, str]]]:
    """Per type, the latency of its curves, keyed 'single-node' / 'multi-node' (any op) and
    'single-node/<op>' / 'multi-node/<op>': the median of its own references' fitted curves; else
    its calibration type's; else the median over the types of its fabric with such a curve; else
    over every type with one (each stated in the basis)."""

    def kinds(r: Reference) -> tuple[str, str]:
        kind = "single-node" if r.path == "single-node" else "multi-node"
        return kind, f"{kind}/{r.op}"

    own: dict[str, dict[str, tuple[float, str]]] = {}
    for name, m in models.items():
        fits: dict[str, list[tuple[float, Reference]]] = {}
        for r in m.references:
            lat = r.latency_s
            if lat is None:
                continue
            for key in kinds(r):
                fits.setdefault(key, []).append((lat, r))
        for key, fs in fits.items():
            why = ", ".join(f"{r.op} on {r.nodes} node(s) of {r.hardware or name} ({r.source})" for _, r in fs)
            own.setdefault(name, {})[key] = (statistics.median(f for f, _ in fs), f"fitted on {why}")

    def pool(names: list[str], key: str, label: str) -> tuple[float, str] | None:
        lats = [(own[n][key][0], n) for n in names if key in own.get(n, {})]
        if not lats:
            return None
        return (
            statistics.median(x for x, _ in lats),
            f"median of the {key} curves of {len(lats)} {label}type(s): {', '.join(sorted(n for _, n in lats))}",
        )

    keys = sorted({k for v in own.values() for k in v})
    out: dict[str, dict[str, tuple[float, str]]] = {}
    for name, m in models.items():
        mine = dict(own.get(name, {}))
        for key, val in own.get(m.calibration, {}).items():
            mine.setdefault(key, (val[0], f"{m.calibration}'s curve: {val[1]}"))
        # Pools nearest first: the fabric's types with as many GPUs per node, then any such type,
        # then every type (one T4 per node over EFA has a latency eight H100s do not).
        alike = [n for n, o in models.items() if n != name and o.gpus == m.gpus]
        fabric = [n for n in alike if models[n].fabric and models[n].fabric == m.fabric]
        pools = [(fabric, f"{m.fabric} {m.gpus}-GPU "), (alike, f"{m.gpus}-GPU "), (list(models), "")]
        for key in keys:
            # A type with its own curve of any op keeps it before a pool's curve of the op.
            if key in mine or ("/" in key and key.split("/")[0] in mine):
                continue
            got = next((g for names, label in pools if (g := pool(names, key, label)) is not None), None)
            if got is not None:
                mine[key] = (got[0], f"no curve of this type; {got[1]}")
        out[name] = mine
    return out


def calibrate(
    models: Mapping[str, BandwidthModel],
    latency: Mapping[str, Mapping[str, tuple[float, str]]] | None = None,
) -> dict[str, dict[str, Efficiency]]:
    """Per type and op, the efficiency (plateau / bound), where it came from and its kind.

    In order: the type's calibration type's NIC-bound multi-node measurement of the op, lifted to
    its plateau with that type's latency (measured: this type, or one the catalog says has the same
    NICs); the median over the other types of its fabric that measured the op (fabric); for
    reduce_scatter, all_gather's (the same ring moving the same bytes per NIC: fabric); the median
    over every type that measured the op (extrapolated): a prediction, where the lowest would only
    remember the worst run."""
    latency = latency if latency is not None else calibrate_latency(models)
    own: dict[str, dict[str, tuple[float, str]]] = {}
    for name, m in models.items():
        for ref in m.references:
            if not ref.calibrates or ref.path != "multi-node":
                continue
            mine = latency.get(name, {})
            lat = mine.get(f"multi-node/{ref.op}", mine.get("multi-node", (0.0, "")))[0]
            bound, _ = m.bound(ref.op, ref.nodes, "multi-node")
            assert bound is not None
            own.setdefault(name, {})[ref.op] = (
                plateau_from(ref.gbps, ref.message_bytes, lat) / bound,
                f"{ref.gbps:g} GB/s {ref.op} on {ref.nodes} x {ref.hardware or name} at "
                f"{_size(ref.message_bytes)}, {ref.source}",
            )

    def median_of(names: list[str], op: str, label: str) -> tuple[float, str] | None:
        effs = sorted((own[n][op][0], n) for n in names if op in own.get(n, {}))
        if not effs:
            return None
        return (
            statistics.median(e for e, _ in effs),
            f"median of {len(effs)} {label}type(s) measured: " + ", ".join(f"{n} {e:.3f}" for e, n in effs),
        )

    ops = sorted({op for per_op in own.values() for op in per_op} | set(_BORROW))
    out: dict[str, dict[str, Efficiency]] = {}
    for name, m in models.items():
        effs: dict[str, Efficiency] = {}
        for op, (e, why) in own.get(m.calibration, {}).items():
            effs[op] = Efficiency(e, why if m.calibration == name else f"same NICs as {m.calibration}: {why}")
        # Types of this fabric with as many GPUs behind each node's NICs (one T4 per node on EFA is
        # not the regime eight H100s are), not counting the ones whose figures this type already has.
        peers = [
            n
            for n, o in models.items()
            if o.fabric
            and o.fabric == m.fabric
            and o.gpus == m.gpus
            and n not in (name, m.calibration)
            and o.calibration != m.calibration
        ]
        for op in ops:
            if op in effs:
                continue
            same = median_of(peers, op, f"{m.fabric} ")
            if same is not None:
                effs[op] = Efficiency(same[0], f"no {op} measured on this type; {same[1]}", "fabric")
        for op, donor in _BORROW.items():
            if op not in effs and donor in effs:
                d = effs[donor]
                kind = "fabric" if d.kind == "measured" else d.kind
                effs[op] = Efficiency(d.value, f"{donor}'s ring, same bytes per NIC: {d.why}", kind)
        for op in ops:
            if op in effs:
                continue
            anyone = median_of(list(own), op, "")
            if anyone is not None:
                effs[op] = Efficiency(anyone[0], f"no {op} measured on this fabric; {anyone[1]}", "extrapolated")
        for op, donor in _BORROW.items():
            if op not in effs and donor in effs:
                d = effs[donor]
                effs[op] = Efficiency(d.value, f"{donor}'s ring, same bytes per NIC: {d.why}", d.kind)
        out[name] = effs
    return out


def phase_floors(model: BandwidthModel, nodes: int) -> list[Expected]:
    """The figures the validation job is held to on ``nodes`` nodes, in the order its phases run:
    single-node all_reduce, multi-node and fabric-only all_reduce (and the type's own op), pairs."""
    ops = ["all_reduce"] + ([model.op] if model.op != "all_reduce" else [])
    out = [model.expected("all_reduce", 1, "single-node")]
    if nodes >= 2:
        out += [model.expected(op, nodes, "multi-node") for op in ops]
        out += [model.expected(op, nodes, "fabric-only") for op in ops]
        out.append(model.expected(model.op, 2, "pair"))
    return out
