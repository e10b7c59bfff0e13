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
  type, or a named type with the same NICs); with none, the lowest efficiency any measured type in
  the catalog reaches for that op, and the basis says so.
- ``expected`` = efficiency x bound, and for all_reduce at most the single-node figure (the two
  intra-node phases run on NVLink: every published 2-node 8 x H100 figure, 479.3 on p5 and 467.5
  on 8 x 400G IB, sits at or under the single-node 480.4).
- floors: warn under WARN_OF_EXPECTED x expected, fail under FAIL_OF_EXPECTED x expected, at the
  message size the expected figure is stated at (FLOOR_MESSAGE_BYTES).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping

Path = Literal["single-node", "multi-node", "fabric-only", "pair"]
PATHS: tuple[Path, ...] = ("single-node", "multi-node", "fabric-only", "pair")

WARN_OF_EXPECTED = 0.90
"""nccl-tests fails a run under 0.9 x NCCL_TESTS_MIN_BW (src/common.cu); here 0.9 is the warn tier."""
FAIL_OF_EXPECTED = 0.75
"""Below three quarters of the expected figure a cluster is failed; the gap to 0.9 is room for noise."""
FLOOR_MESSAGE_BYTES = 8 << 30
"""The size floors are stated at: the largest row most published runs share (8 GiB)."""


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


@dataclass(frozen=True, slots=True, kw_only=True)
class Expected:
    path: Path
    op: str
    nodes: int
    message_bytes: int
    bound_gbps: float | None
    algorithm: str
    expected_gbps: float | None
    floor_warn_gbps: float | None
    floor_fail_gbps: float | None
    basis: str


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
    efficiency: Mapping[str, tuple[float, str]] = field(default_factory=dict)
    """op -> (measured / bound, where that came from); filled in when the catalog is loaded."""
    note: str = ""

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
        return b, "ring: node NIC bandwidth B"

    def single_node_reference(self, op: str) -> Reference | None:
        refs = [r for r in self.references if r.path == "single-node" and r.op == op]
        return max(refs, key=lambda r: (r.kind == "measured", r.message_bytes)) if refs else None

    def expected(self, op: str, nodes: int, path: Path) -> Expected:
        size = FLOOR_MESSAGE_BYTES
        bound, algorithm = self.bound(op, nodes, path)
        n = 2 if path == "pair" else 1 if path == "single-node" else nodes
        value: float | None
        if path == "single-node":
            ref = self.single_node_reference(op)
            if ref is None:
                value, basis = None, f"no published single-node {op} for this GPU board: no floor"
            else:
                value = ref.gbps
                basis = (
                    f"{ref.kind} {ref.gbps:g} GB/s at {_size(ref.message_bytes)} on {ref.hardware or 'this type'} "
                    f"({ref.source})"
                )
        else:
            eff = self.efficiency.get(op)
            if eff is None or bound is None:
                value, basis = None, f"no efficiency for {op} on this fabric: no floor"
            else:
                value = eff[0] * bound
                basis = f"{eff[0]:.3f} x bound ({eff[1]})"
                single = self.single_node_reference(op) if op == "all_reduce" and path != "fabric-only" else None
                if single is not None and single.gbps < value:
                    value = single.gbps
                    basis += f"; capped at the single-node {single.gbps:g} ({single.source})"
        # Floors come from the expected figure as printed, so a reader can redo the sums.
        value = None if value is None else round(value, 1)
        warn = None if value is None else round(WARN_OF_EXPECTED * value, 1)
        fail = None if value is None else round(FAIL_OF_EXPECTED * value, 1)
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
        )


def _size(n: int) -> str:
    return f"{n / 2**30:g} GiB" if n >= 2**30 else f"{n / 2**20:g} MiB"


def calibrate(models: Mapping[str, BandwidthModel]) -> dict[str, dict[str, tuple[float, str]]]:
    """Per type and op, the efficiency (measured / bound) and where it came from.

    A type takes its calibration type's NIC-bound multi-node measurements; an op with none takes the
    lowest efficiency any type in the catalog reaches for that op (stated in the basis)."""
    own: dict[str, dict[str, tuple[float, str]]] = {}
    for name, m in models.items():
        for ref in m.references:
            if not ref.calibrates or ref.path != "multi-node":
                continue
            bound, _ = m.bound(ref.op, ref.nodes, "multi-node")
            assert bound is not None
            own.setdefault(name, {})[ref.op] = (
                ref.gbps / bound,
                f"{ref.gbps:g} GB/s {ref.op} on {ref.nodes} x {ref.hardware or name} at "
                f"{_size(ref.message_bytes)}, {ref.source}",
            )
    lowest: dict[str, tuple[float, str]] = {}
    for name, per_op in own.items():
        for op, (eff, why) in per_op.items():
            if op not in lowest or eff < lowest[op][0]:
                lowest[op] = (eff, f"lowest measured in the catalog: {why}")
    out: dict[str, dict[str, tuple[float, str]]] = {}
    for name, m in models.items():
        mine = dict(own.get(m.calibration, {}))
        if m.calibration != name:
            mine = {op: (e, f"same NICs as {m.calibration}: {why}") for op, (e, why) in mine.items()}
        for op, fallback in lowest.items():
            if op not in mine:
                mine[op] = (fallback[0], f"no {op} measured on this fabric; {fallback[1]}")
        out[name] = mine
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
