"""Storage acceptance: every rank of every node reads and writes the shared file system at once,
then the job saves and loads a distributed checkpoint there.

Run as the validation phase ``storage`` (``gpu_cluster.workloads.validate run --phase storage``):

1. **Streaming write**: each rank writes one file of ``file_bytes`` in large sequential blocks
   and fsyncs it; the ranks start together (a barrier) and the aggregate is all the bytes over
   the slowest rank's time, the figure a file system's provisioned throughput is stated in.
2. **Streaming read**: each rank reads a file another node wrote (the next node's rank of the
   same local index), so its own page cache does not answer; where the job has one node the
   read is of its own file and says so (``cached: true``).
3. **Checkpoint**: ``torch.distributed.checkpoint`` saves a state dict of ``ckpt_bytes`` per rank
   and loads it back into fresh tensors, checked element for element; seconds and GB/s of each.

Files go under ``<run dir>/storage-test`` and are removed afterwards. The judge holds the
aggregates against what the stack provisioned (``mount.capacity_gib`` x
``mount.throughput_mbps_per_tib`` in the stack outputs, given to the phase as
``--storage-expect-gbps``); on CPU runs and without that figure they are information.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch
import torch.distributed as dist

from gpu_cluster.workloads.validate.verdict import Measurement, Verdict

BLOCK_BYTES = 16 << 20
"""Write and read block: large enough for Lustre's 1 MiB RPCs to stream (FSx and Managed
Lustre both state throughput for large sequential IO)."""

WARN_OF_PROVISIONED = 0.5
"""The aggregate write or read below this fraction of the provisioned throughput is a WARN: the
clients of a validation job (a few ranks per node) need not drive a large file system to its
full rate, so the storage phase never fails a cluster on throughput alone."""


def provisioned_gbps(capacity_gib: int, throughput_mbps_per_tib: int) -> float | None:
    """Baseline throughput a Lustre file system is provisioned for, GB/s: throughput per TiB of
    storage times the TiB (FSx for Lustre PERSISTENT_2 and Google Managed Lustre both state it so:
    docs.aws.amazon.com/fsx/latest/LustreGuide/performance.html, cloud.google.com/managed-lustre/
    docs/performance-tiers, read 2026-12). None when either is unknown."""
    if capacity_gib <= 0 or throughput_mbps_per_tib <= 0:
        return None
    return capacity_gib / 1024 * throughput_mbps_per_tib * 1e6 / 1e9


@dataclass(frozen=True, slots=True, kw_only=True)
class StorageConfig:
    file_bytes: int
    """Bytes each rank writes, then reads."""
    ckpt_bytes: int
    """Bytes of checkpoint state each rank saves and loads."""
    block_bytes: int = BLOCK_BYTES


def _write(path: Path, nbytes: int, block: memoryview) -> float:
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        left = nbytes
        while left > 0:
            left -= os.write(fd, block[: min(left, len(block))])
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - start


def _read(path: Path, block_bytes: int) -> tuple[float, int]:
    start = time.perf_counter()
    got = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        while chunk := os.read(fd, block_bytes):
            got += len(chunk)
    finally:
        os.close(fd)
    return time.perf_counter() - start, got


def read_partner(rank: int, ranks_by_node: dict[str, list[int]]) -> int:
    """The rank whose file ``rank`` reads: the same local index on the next node (cyclic), so
    the data crosses the network rather than coming from this node's page cache."""
    nodes = list(ranks_by_node)
    here = next(n for n, rs in ranks_by_node.items() if rank in rs)
    local = ranks_by_node[here].index(rank)
    there = ranks_by_node[nodes[(nodes.index(here) + 1) % len(nodes)]]
    return there[local % len(there)]


def _gather(value: Any, side: Any, world: int) -> list[Any]:
    out: list[Any] = [None] * world
    dist.all_gather_object(out, value, group=side)
    return out


def _aggregate(per_rank: Sequence[tuple[str, float, int]]) -> tuple[float, dict[str, float]]:
    """(all bytes over the slowest rank's seconds, per node the same over its own ranks), GB/s."""
    total = sum(b for _, _, b in per_rank)
    slowest = max(s for _, s, _ in per_rank)
    by_node: dict[str, tuple[float, int]] = {}
    for node, s, b in per_rank:
        t, n = by_node.get(node, (0.0, 0))
        by_node[node] = (max(t, s), n + b)
    return total / 1e9 / slowest, {n: b / 1e9 / t for n, (t, b) in by_node.items()}


def measure(
    root: Path,
    cfg: StorageConfig,
    *,
    rank: int,
    world: int,
    node: str,
    ranks_by_node: dict[str, list[int]],
    side: Any,
    device: torch.device,
) -> dict[str, Any]:
    """Run the three tests on every rank at once; every rank returns the same result."""
    work = root / "storage-test"
    mine = work / f"r{rank}.bin"
    if rank == 0:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
    dist.barrier(group=side)
    block = memoryview(os.urandom(min(cfg.block_bytes, cfg.file_bytes) or 1))
    dist.barrier(group=side)  # every rank starts the clock together
    wrote = _write(mine, cfg.file_bytes, block)
    writes = _gather((node, wrote, cfg.file_bytes), side, world)
    partner = read_partner(rank, ranks_by_node)
    dist.barrier(group=side)
    read_s, got = _read(work / f"r{partner}.bin", cfg.block_bytes)
    reads = _gather((node, read_s, got), side, world)
    write_gbps, write_nodes = _aggregate(writes)
    read_gbps, read_nodes = _aggregate(reads)
    short = [r for r, (_, _, b) in enumerate(reads) if b != cfg.file_bytes]
    mine.unlink(missing_ok=True)
    ckpt = _checkpoint(work / "ckpt", cfg.ckpt_bytes, rank=rank, world=world, side=side, device=device)
    dist.barrier(group=side)
    if rank == 0:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "file_bytes_per_rank": cfg.file_bytes,
        "block_bytes": cfg.block_bytes,
        "ranks": world,
        "nodes": len(ranks_by_node),
        "cached": len(ranks_by_node) == 1,
        "write_gbps": write_gbps,
        "read_gbps": read_gbps,
        "write_s": max(s for _, s, _ in writes),
        "read_s": max(s for _, s, _ in reads),
        "per_node": {n: {"write_gbps": write_nodes[n], "read_gbps": read_nodes.get(n)} for n in write_nodes},
        "short_reads": short,
        "checkpoint": ckpt,
    }


def _checkpoint(path: Path, nbytes: int, *, rank: int, world: int, side: Any, device: torch.device) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    n = max(1, nbytes // 4)
    gen = torch.Generator().manual_seed(1234 + rank)
    state = {f"rank{rank}.weight": torch.randn(n, generator=gen).to(device)}
    dist.barrier(group=side)
    t0 = time.perf_counter()
    dcp_save(state, checkpoint_id=str(path))
    dist.barrier(group=side)
    save_s = time.perf_counter() - t0
    back = {k: torch.zeros_like(v) for k, v in state.items()}
    dist.barrier(group=side)
    t0 = time.perf_counter()
    dcp_load(back, checkpoint_id=str(path))
    dist.barrier(group=side)
    load_s = time.perf_counter() - t0
    ok = all(torch.equal(back[k], v) for k, v in state.items())
    oks = _gather(ok, side, world)
    total = n * 4 * world
    return {
        "bytes_per_rank": n * 4,
        "bytes": total,
        "save_s": save_s,
        "load_s": load_s,
        "save_gbps": total / 1e9 / save_s,
        "load_gbps": total / 1e9 / load_s,
        "ok": all(oks),
        "bad_ranks": [r for r, good in enumerate(oks) if not good],
    }


def judge_storage(st: Mapping[str, Any], *, floors: bool) -> list[Measurement]:
    """The storage phase's figures: the aggregate write and read held against the provisioned
    throughput (a WARN below half of it, never a FAIL: a validation job's few ranks per node need
    not saturate a large file system), the checkpoint's save and load as information, and a
    checkpoint that did not load back exactly as a FAIL."""
    expect = st.get("expect_gbps") if floors else None
    ranks, nbytes = st.get("ranks"), st.get("file_bytes_per_rank")
    how = f"{ranks} ranks on {st.get('nodes')} node(s), {nbytes} B each"
    basis = (
        f"provisioned {expect:.3g} GB/s (capacity x throughput per TiB); warn < {WARN_OF_PROVISIONED:g} x"
        if expect
        else "information (no provisioned figure, or a CPU run)"
    )
    out = []
    for what in ("write", "read"):
        m = Measurement(
            check=f"storage.{what}",
            scope="cluster",
            value=st.get(f"{what}_gbps"),
            unit="GB/s",
            floor_warn=WARN_OF_PROVISIONED * expect if expect else None,
            basis=f"{basis}; {how}"
            + ("; read of its own file (one node: page cache)" if what == "read" and st.get("cached") else ""),
        ).judge()
        out.append(m)
    ck = st.get("checkpoint") or {}
    for what in ("save", "load"):
        out.append(
            Measurement(
                check=f"storage.checkpoint_{what}",
                scope="cluster",
                value=ck.get(f"{what}_gbps"),
                unit="GB/s",
                basis=f"information: {ck.get('bytes')} B in {ck.get(f'{what}_s', 0):.3g} s "
                "(torch.distributed.checkpoint)",
            ).judge()
        )
    if ck and not ck.get("ok"):
        out.append(
            Measurement(
                check="storage.checkpoint_roundtrip",
                scope="cluster",
                value=None,
                unit="",
                verdict=Verdict.FAIL,
                detail=f"ranks {ck.get('bad_ranks')} loaded other values than they saved",
            )
        )
    return out
