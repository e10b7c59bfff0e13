"""Build on the meta device, materialise shard by shard, and count what each rank holds.

torchtitan's order (``torchtitan/train.py``): construct the model under ``torch.device("meta")``
(shapes only, no storage), apply the parallelism, then ``model.to_empty(device=...)``, which
allocates exactly the local shards the parallelism left on this rank, and initialise them.

Initialisation must give a shard the values the same slice of the one-process model has, or a
split run could not be compared with the reference. torchtitan relies on DTensor's offset-based
RNG tracker for that (``torch/distributed/tensor/_random.py``), which works on CUDA-like devices
only; here the value of every element is a pure function of ``(seed, parameter name, flat index
in the full tensor)``: a SplitMix64 hash of the index (Steele, Lea, Flood, "Fast splittable
pseudorandom number generators", OOPSLA 2014) turned into a uniform and then a normal by the
inverse CDF. A rank computes the values of its own elements from their global positions, which
DTensor reports (``compute_local_shape_and_global_offset``), in bounded chunks: it never builds a
full parameter, let alone the full model. The scheme is GPT-2's (as :class:`gpu_cluster.workloads.train.model.GPT`):
``N(0, 0.02)``, residual projections ``N(0, 0.02 / sqrt(2 * n_layers))``, LayerNorm weights 1,
biases 0.
"""

from __future__ import annotations

import hashlib
import math
import tracemalloc
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.distributed.tensor import DTensor

from gpu_cluster.workloads.parallel.memory import FIELDS as PEAK_FIELDS
from gpu_cluster.workloads.parallel.memory import Peak
from gpu_cluster.workloads.train.model import GPT, GPTConfig

INIT_CHUNK = 1 << 13
"""Elements initialised at a time: bounds the initialisation's scratch (a few float64/uint64 arrays)."""

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def meta_model(cfg: GPTConfig) -> GPT:
    """The model with every parameter on the meta device: shapes, no storage."""
    with torch.device("meta"):
        return GPT(cfg)


def _key(seed: int, name: str) -> np.ndarray:
    digest = hashlib.blake2b(f"{seed}/{name}".encode(), digest_size=8).digest()
    return np.array([int.from_bytes(digest, "little")], dtype=np.uint64)


def normal_at(seed: int, name: str, index: np.ndarray) -> np.ndarray:
    """Standard normal values of the elements at flat ``index`` (uint64) of parameter ``name``."""
    # Array arithmetic on uint64 wraps modulo 2**64, which SplitMix64 relies on.
    z = _key(seed, name) + (index + np.uint64(1)) * _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    z = z ^ (z >> np.uint64(31))
    u: np.ndarray = ((z >> np.uint64(11)).astype(np.float64) + 0.5) * (2.0**-53)  # in (0, 1), never 0 or 1
    t = torch.from_numpy(u)
    torch.special.ndtri(t, out=t)  # in place: the memory stays numpy's
    return u


def std_of(name: str, cfg: GPTConfig | None) -> float:
    """The normal's standard deviation for a matrix (vectors are filled with 0 or 1); a user's
    model (``cfg`` None) gets N(0, 0.02) for every matrix."""
    if cfg is None:
        return 0.02
    return 0.02 / math.sqrt(2 * cfg.n_layers) if name.endswith("proj.weight") else 0.02


def local_box(p: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...], tuple[int, ...]]:
    """This rank's part of ``p``: the local tensor, and its offset and shape in the full tensor.

    The part is taken to be one box of the full tensor. It is for every layout here, the 2-D
    mesh's ``_StridedShard`` included (an FSDP row slice inside a tensor-parallel row slice);
    tests/workloads/_materialise_worker.py gathers every layout and compares it with the whole
    model. A layout whose shard interleaves (not a box) would need per-dimension index lists.
    """
    if isinstance(p, DTensor):
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        local = p.to_local()
        shape, offset = compute_local_shape_and_global_offset(p.shape, p.device_mesh, p.placements)
        if tuple(local.shape) != tuple(shape):
            raise RuntimeError(f"local shard {tuple(local.shape)} is not the {tuple(shape)} DTensor reports")
        return local, tuple(int(o) for o in offset), tuple(int(s) for s in shape)
    return p, (0,) * p.dim(), tuple(p.shape)


def fill_box(
    local: torch.Tensor, seed: int, name: str, full_shape: tuple[int, ...], offset: tuple[int, ...], std: float
) -> None:
    """Write into ``local`` the values of the box at ``offset`` of the full ``full_shape`` tensor."""
    shape = tuple(local.shape)
    nd = len(full_shape)
    strides = [int(np.prod(full_shape[d + 1 :], dtype=np.int64)) for d in range(nd)]
    rows_per_chunk = max(1, INIT_CHUNK // max(int(np.prod(shape[1:], dtype=np.int64)), 1))
    # Flat index in the full tensor of every element of one local row, less the row's own term.
    row_index = np.zeros(shape[1:], dtype=np.uint64)
    for d in range(1, nd):
        ax = (np.arange(shape[d], dtype=np.uint64) + np.uint64(offset[d])) * np.uint64(strides[d])
        row_index = row_index + ax.reshape([-1 if k == d - 1 else 1 for k in range(nd - 1)])
    for r0 in range(0, shape[0], rows_per_chunk):
        r1 = min(shape[0], r0 + rows_per_chunk)
        rows = (np.arange(r0, r1, dtype=np.uint64) + np.uint64(offset[0])) * np.uint64(strides[0])
        values = normal_at(seed, name, rows.reshape([-1] + [1] * (nd - 1)) + row_index)
        values *= std
        local[r0:r1].copy_(torch.from_numpy(values))
        del values


@torch.no_grad()
def init_local(model: nn.Module, cfg: GPTConfig | None, seed: int) -> int:
    """Fill this rank's shard of every parameter with the one-process model's values for it.

    Returns the peak host scratch of the initialisation in bytes, as ``tracemalloc`` measured it
    (numpy reports its array memory to ``tracemalloc``; all the scratch here is numpy's).
    """
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    for name, p in model.named_parameters():
        local, offset, _ = local_box(p)
        if p.dim() == 1:
            local.fill_(1.0 if name.endswith("weight") else 0.0)
        else:
            fill_box(local, seed, name, tuple(p.shape), offset, std_of(name, cfg))
    peak = tracemalloc.get_traced_memory()[1] - base
    if not tracing:
        tracemalloc.stop()
    return max(0, peak)


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def storage_bytes(tensors: Any) -> int:
    """Bytes of the distinct storages behind ``tensors`` (local shards for DTensors; meta is 0)."""
    seen: set[int] = set()
    total = 0
    for t in tensors:
        loc = _local(t)
        if loc.device.type == "meta":
            continue
        st = loc.untyped_storage()
        if st.nbytes() == 0 or st.data_ptr() in seen:
            continue
        seen.add(st.data_ptr())
        total += st.nbytes()
    return total


def optimizer_state_bytes(opt: torch.optim.Optimizer) -> int:
    """Bytes of the optimizer's tensor state on this rank (AdamW: two moments per parameter)."""
    return storage_bytes(
        v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor) and v.dim() > 0
    )


@dataclass(slots=True)
class Residency:
    """One rank's parameter memory through a run, in bytes."""

    materialised: int = 0
    """Parameter storage right after ``to_empty`` + initialisation (the shards, with FSDP's padding)."""
    peak_materialise: int = 0
    """Largest parameter storage plus initialisation scratch alive during materialisation."""
    peak_between_steps: int = 0
    """Largest parameter storage measured after any optimizer step."""
    grads: int = 0
    """Gradient storage after the last step."""
    optimizer: int = 0
    """Optimizer state after the last step."""
    device_peak: int | None = None
    """CUDA allocator peak over materialisation and training (everything, activations too); None on CPU."""
    samples: list[int] = field(default_factory=list)
    """Parameter storage after each step."""
    peak: Peak | None = None
    """Everything alive at the training steps' peak, by kind (:mod:`gpu_cluster.workloads.parallel.memory`)."""

    def figures(self) -> list[int]:
        return [
            self.materialised,
            self.peak_materialise,
            self.peak_between_steps,
            self.grads,
            self.optimizer,
            -1 if self.device_peak is None else self.device_peak,
            *(self.peak.figures() if self.peak is not None else [-1] * len(PEAK_FIELDS)),
        ]


FIGURES = (
    "params_materialised",
    "params_peak_materialise",
    "params_peak_between_steps",
    "grads",
    "optimizer_state",
    "device_peak",
    *(f"peak_{f}" for f in PEAK_FIELDS),
)
"""Names of :meth:`Residency.figures`, in order (bytes; ``device_peak`` -1 off GPU, ``peak_*`` -1 unmeasured).

``peak_total`` is everything the rank held at the peak of its training steps; with
``params_peak_materialise`` (shards plus initialisation scratch, all there is while
materialising) it is what a budget over everything compares with."""


def materialise(model: nn.Module, cfg: GPTConfig | None, seed: int, device: torch.device) -> Residency:
    """Allocate this rank's shards of a meta-built, already parallelised ``model`` and initialise them."""
    before = storage_bytes(model.parameters())
    if before:
        raise RuntimeError(f"materialise expects a meta-built model; {before} bytes are already allocated")
    model.to_empty(device=device)
    res = Residency()
    res.materialised = storage_bytes(model.parameters())
    res.peak_materialise = res.materialised + init_local(model, cfg, seed)
    return res
