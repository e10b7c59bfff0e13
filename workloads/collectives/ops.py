"""The collectives, one entry each: what nccl-tests' per-op ``struct testColl`` holds.

Each :class:`OpSpec` says how an op's buffers are laid out (``*GetCollByteCount``), its bus
bandwidth factor (``doc/PERFORMANCE.md``), its reduction and root as the table prints them,
which placements torch offers, and how to build one checked case of it (``*InitData``,
``*RunColl``). The harness in :mod:`gpu_cluster.workloads.collectives` knows no op by name: a sixth op is one
more entry in :data:`OP_SPECS`.

Check data stays at or under the largest integer each dtype holds exactly, so every reduction
order gives the same answer and a check can demand equality.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.distributed as dist

from gpu_cluster.workloads.runtime.device import global_rank

# name -> (torch dtype, nccl-tests' type name for the table). Aliases are nccl-tests' names.
DTYPES: dict[str, tuple[torch.dtype, str]] = {
    "float32": (torch.float32, "float"),
    "float16": (torch.float16, "half"),
    "bfloat16": (torch.bfloat16, "bfloat16"),
    "float64": (torch.float64, "double"),
    "int32": (torch.int32, "int32"),
    "int64": (torch.int64, "int64"),
    "int8": (torch.int8, "int8"),
    "uint8": (torch.uint8, "uint8"),
}
DTYPE_ALIASES = {
    "float": "float32",
    "half": "float16",
    "double": "float64",
    "int": "int32",
    "bf16": "bfloat16",
    "fp32": "float32",
    "fp16": "float16",
}

# Largest integer each dtype holds exactly: check data stays at or under it, so every
# reduction order gives the same, exact answer and a comparison can demand equality.
_EXACT_LIMIT: dict[torch.dtype, int] = {
    torch.float16: 2048,
    torch.bfloat16: 256,
    torch.float32: 1 << 24,
    torch.float64: 1 << 53,
    torch.int8: 127,
    torch.uint8: 255,
    torch.int32: (1 << 31) - 1,
    torch.int64: (1 << 63) - 1,
}

_CHUNK = 1 << 20  # elements per step when filling/checking, bounds the check's extra memory


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """Element counts of one row, as nccl-tests' ``*GetCollByteCount`` gives them."""

    count: int
    """The count nccl-tests prints: per rank for all_gather/reduce_scatter, per peer for
    all_to_all, the whole buffer otherwise."""
    send_elems: int
    """Elements in each rank's input."""
    recv_elems: int
    """Elements in each rank's output."""
    nbytes: int
    """Bytes the bandwidth is computed from; the size printed in the row."""


@dataclass(slots=True, kw_only=True)
class Case:
    """Buffers and the launch of one (op, size, placement)."""

    launch: Callable[[], None]
    prepare: Callable[[], None]
    """Writes the check inputs (and clears outputs)."""
    result: torch.Tensor
    expected: Callable[[torch.Tensor], torch.Tensor]
    """Global output index -> expected value (int64)."""
    buffers: list[torch.Tensor] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseInputs:
    """What a case builder gets: the row's layout, placement, this rank in the group and the
    send/receive buffers already allocated (an unused one is empty)."""

    lay: Layout
    in_place: bool
    rank: int
    n: int
    group: Any
    send: torch.Tensor
    recv: torch.Tensor
    plain: Callable[[torch.Tensor | int, torch.Tensor], torch.Tensor]
    """(source rank, index) -> the value that rank holds: for ops that move data."""
    red_in: Callable[[torch.Tensor], torch.Tensor]
    """index -> this rank's input to a sum."""
    red_sum: Callable[[torch.Tensor], torch.Tensor]
    """index -> the sum over the group's ranks."""


Shape = Literal["whole", "gathered", "scattered", "exchanged"]


@dataclass(frozen=True, slots=True, kw_only=True)
class OpSpec:
    """One collective, as nccl-tests' per-op file describes it."""

    name: str
    shape: Shape
    """whole: every rank's buffer is the whole size (all_reduce, broadcast); gathered: each rank
    sends a share, receives the whole; scattered: sends the whole, receives a share; exchanged:
    sends and receives the whole, a share per peer."""
    bus_factor: Callable[[int], float]
    """world size -> busbw / algbw."""
    redop: str
    root: int
    in_place: bool
    """torch has an in-place form (output aliases input)."""
    out_of_place: bool
    """torch has an out-of-place form without a timed copy in front."""
    build: Callable[[CaseInputs], Case]


def _collective(name: str) -> Callable[..., Any]:
    # torch 2.13 renamed the tensor forms; older torch (GPU images) has only the old names.
    new = {"all_gather": "all_gather_single", "reduce_scatter": "reduce_scatter_single"}[name]
    old = {"all_gather": "all_gather_into_tensor", "reduce_scatter": "reduce_scatter_tensor"}[name]
    fn = getattr(dist, new, None) or getattr(dist, old)
    return fn  # type: ignore[no-any-return]


def _plain_modulus(dtype: torch.dtype) -> int:
    return min(_EXACT_LIMIT[dtype], 1 << 16)


def _reduce_terms(dtype: torch.dtype, n: int) -> tuple[int, int]:
    """``(ma, k)`` of the reduction check data, exact and meaningful at any rank count.

    Element ``i`` belongs to rank ``i % n``, which alone adds ``i % ma``; besides, every rank adds 1
    where ``(i + r) % n < k``, which for each ``i`` holds for exactly ``k`` ranks. The sum is
    ``i % ma + k``: at most ``ma - 1 + k``, inside the dtype's exact range whatever the order. Each
    rank's data lands in the result (its own elements, and the ones it adds 1 to), so a rank that
    is dropped, doubled or shifted shows, at 512 ranks in bf16 as at 2. The older ``i % ma + r % mb``
    scheme shrank ``ma`` to 1 and ``mb`` to 1 past 512 ranks in bf16 (4,096 in fp16): every input 0."""
    limit = _EXACT_LIMIT[dtype]
    ma = max(2, min(limit // 2, 1 << 16))
    k = max(1, min(n, limit - ma))
    return ma, k


def reduce_data(
    dtype: torch.dtype, n: int, rank: int
) -> tuple[Callable[[torch.Tensor], torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]:
    """(index -> this rank's input to a sum, index -> the sum over the ``n`` ranks), see _reduce_terms."""
    ma, k = _reduce_terms(dtype, n)

    def red_in(idx: torch.Tensor) -> torch.Tensor:
        return torch.where(idx % n == rank, idx % ma, 0) + ((idx + rank) % n < k).to(idx.dtype)

    return red_in, lambda idx: idx % ma + k


def _chunks(numel: int) -> Iterator[tuple[int, int]]:
    for start in range(0, numel, _CHUNK):
        yield start, min(start + _CHUNK, numel)


def _fill(buf: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    flat = buf.view(-1)
    for start, stop in _chunks(flat.numel()):
        idx = torch.arange(start, stop, device=flat.device, dtype=torch.int64)
        flat[start:stop] = fn(idx).to(flat.dtype)


def count_wrong(buf: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> int:
    flat = buf.view(-1)
    total = torch.zeros((), dtype=torch.int64, device=flat.device)
    for start, stop in _chunks(flat.numel()):
        idx = torch.arange(start, stop, device=flat.device, dtype=torch.int64)
        total += (flat[start:stop] != fn(idx).to(flat.dtype)).sum()
    return int(total.item())


# ----------------------------------------------------------------------------- the ops


def _all_reduce(c: CaseInputs) -> Case:
    buf, send, recv = c.send, c.send, c.recv

    def prepare() -> None:
        recv.zero_()
        _fill(send, c.red_in)

    return Case(
        launch=lambda: dist.all_reduce(buf, group=c.group),
        prepare=prepare,
        result=buf,
        expected=c.red_sum,
        buffers=[send, recv],
    )


def _broadcast(c: CaseInputs) -> Case:
    root = OP_SPECS["broadcast"].root
    src = root if c.group is None else global_rank(c.group, root)  # torch wants a global rank
    buf, send, recv = c.send, c.send, c.recv

    def prepare() -> None:
        send.zero_()
        recv.zero_()
        if c.rank == root:
            _fill(send, lambda idx: c.plain(root, idx))

    return Case(
        launch=lambda: dist.broadcast(buf, src=src, group=c.group),
        prepare=prepare,
        result=buf,
        expected=lambda idx: c.plain(root, idx),
        buffers=[send, recv],
    )


def _all_gather(c: CaseInputs) -> Case:
    gather = _collective("all_gather")
    k, send, recv = c.lay.count, c.send, c.recv
    inp = recv.narrow(0, c.rank * k, k) if c.in_place else send

    def prepare() -> None:
        recv.zero_()
        _fill(inp, lambda idx: c.plain(c.rank, idx))

    return Case(
        launch=lambda: gather(recv, inp, group=c.group),
        prepare=prepare,
        result=recv,
        expected=lambda idx: c.plain(idx // k, idx % k),
        buffers=[send, recv],
    )


def _reduce_scatter(c: CaseInputs) -> Case:
    scatter = _collective("reduce_scatter")
    k, send, recv = c.lay.count, c.send, c.recv
    out = send.narrow(0, c.rank * k, k) if c.in_place else recv

    def prepare() -> None:
        recv.zero_()
        _fill(send, c.red_in)

    return Case(
        launch=lambda: scatter(out, send, group=c.group),
        prepare=prepare,
        result=out,
        expected=lambda idx: c.red_sum(c.rank * k + idx),
        buffers=[send, recv],
    )


def _all_to_all(c: CaseInputs) -> Case:
    k, send, recv = c.lay.count, c.send, c.recv

    def prepare() -> None:
        recv.zero_()
        _fill(send, lambda idx: c.plain(c.rank, idx))

    return Case(
        launch=lambda: dist.all_to_all_single(recv, send, group=c.group),
        prepare=prepare,
        result=recv,
        expected=lambda idx: c.plain(idx // k, c.rank * k + idx % k),
        buffers=[send, recv],
    )


OP_SPECS: dict[str, OpSpec] = {
    s.name: s
    for s in (
        OpSpec(
            name="all_reduce",
            shape="whole",
            bus_factor=lambda n: 2.0 * (n - 1) / n,
            redop="sum",
            root=-1,
            in_place=True,
            out_of_place=False,
            build=_all_reduce,
        ),
        OpSpec(
            name="all_gather",
            shape="gathered",
            bus_factor=lambda n: (n - 1) / n,
            redop="none",
            root=-1,
            in_place=True,
            out_of_place=True,
            build=_all_gather,
        ),
        OpSpec(
            name="reduce_scatter",
            shape="scattered",
            bus_factor=lambda n: (n - 1) / n,
            redop="sum",
            root=-1,
            in_place=True,
            out_of_place=True,
            build=_reduce_scatter,
        ),
        OpSpec(
            name="broadcast",
            shape="whole",
            bus_factor=lambda n: 1.0,
            redop="none",
            root=0,
            in_place=True,
            out_of_place=False,
            build=_broadcast,
        ),
        OpSpec(
            name="all_to_all",
            shape="exchanged",
            bus_factor=lambda n: (n - 1) / n,
            redop="none",
            root=-1,
            in_place=False,
            out_of_place=True,
            build=_all_to_all,
        ),
    )
}
OPS: tuple[str, ...] = tuple(OP_SPECS)


def op_spec(op: str) -> OpSpec:
    try:
        return OP_SPECS[op]
    except KeyError:
        raise ValueError(f"unknown op {op!r} (allowed: {', '.join(OPS)})") from None


def busbw_factor(op: str, world_size: int) -> float:
    """nccl-tests' bus-bandwidth factor (``doc/PERFORMANCE.md``)."""
    return op_spec(op).bus_factor(world_size)


def bandwidths(op: str, nbytes: int, seconds: float, world_size: int) -> tuple[float, float]:
    """``(algbw, busbw)`` in GB/s for ``nbytes`` moved in ``seconds`` per call."""
    algbw = nbytes / 1e9 / seconds
    return algbw, algbw * busbw_factor(op, world_size)


def layout(op: str, size_bytes: int, elem_size: int, world_size: int) -> Layout:
    """Counts for ``size_bytes`` of ``op``: gathered/scattered/exchanged buffers are rounded
    down to a multiple of the world size so every rank holds the same share."""
    shape = op_spec(op).shape
    total = size_bytes // elem_size
    if shape == "whole":
        return Layout(count=total, send_elems=total, recv_elems=total, nbytes=total * elem_size)
    per = total // world_size
    whole = per * world_size
    send, recv = {"gathered": (per, whole), "scattered": (whole, per), "exchanged": (whole, whole)}[shape]
    return Layout(count=per, send_elems=send, recv_elems=recv, nbytes=whole * elem_size)


def redop_name(op: str) -> str:
    return op_spec(op).redop


def root_of(op: str) -> int:
    return op_spec(op).root


def make_case(
    op: str, lay: Layout, *, in_place: bool, rank: int, n: int, dtype: torch.dtype, device: torch.device, group: Any
) -> Case | None:
    """Buffers, launch and check of one row on ``group`` (None: the default group), where
    ``rank`` and ``n`` are this process's rank in ``group`` and the group's size.

    None where torch has no such form: no in-place all_to_all (send and receive may not alias),
    no out-of-place all_reduce or broadcast (a copy in front would be timed with the call)."""
    spec = op_spec(op)
    if not (spec.in_place if in_place else spec.out_of_place):
        return None
    pm = _plain_modulus(dtype)
    red_in, red_sum = reduce_data(dtype, n, rank)
    # In-place rows use one buffer; the other is left empty so the row holds no more memory
    # (and disturbs the allocator no more) than a bare call would.
    need_send = not (in_place and op == "all_gather")
    need_recv = not in_place or op == "all_gather"
    send = torch.zeros(lay.send_elems if need_send else 0, dtype=dtype, device=device)
    recv = torch.zeros(lay.recv_elems if need_recv else 0, dtype=dtype, device=device)
    return spec.build(
        CaseInputs(
            lay=lay,
            in_place=in_place,
            rank=rank,
            n=n,
            group=group,
            send=send,
            recv=recv,
            plain=lambda r, idx: (idx + 13 * r) % pm,
            red_in=red_in,
            red_sum=red_sum,
        )
    )
