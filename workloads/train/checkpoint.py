"""Checkpoints: written atomically with DCP, loaded exactly at the same world size and
resharded at another.

A checkpoint is ``<ckpt-dir>/step_<N>/``: DCP's files, then a ``COMPLETE`` marker that rank 0
writes once every rank's files are on disk, then a rename from ``.step_<N>.tmp/``; a start-up
loads only a ``step_<N>`` holding the marker, so a checkpoint half-written by a killed job is
never read. The marker also records the layout that wrote it (world size, micro-batch,
accumulation).

What must match to resume (:func:`identity`): the seed, the model (the GPT's shape, or the
``--model`` spec and its parameter names and shapes) and the data (the shard list, or the
``--dataset`` spec and its length). What may change: the world size, the micro-batch and the
accumulation. DCP stores a DDP model's replicated tensors once and loads them into any number
of ranks (its load plans map saved items to whatever the loading ranks ask for); the sampler
goes on from the global count of samples consumed in the epoch
(:class:`gpu_cluster.workloads.train.sampling.ResumableSampler`). Per-rank RNG streams are restored only at
the same world size; at another each rank's streams are reseeded from (seed, step, rank).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from gpu_cluster.workloads.runtime import device as devmod
from gpu_cluster.workloads.runtime.atomic import publish_dir
from gpu_cluster.workloads.train.config import Parts, TrainConfig

COMPLETE_MARKER = "COMPLETE"
_STEP_DIR = re.compile(r"^step_(\d+)$")


@dataclass(slots=True)
class Progress:
    """Where training stands; saved in every checkpoint."""

    step: int = 0
    """Optimizer steps taken."""
    epoch: int = 0
    """Sampler epoch the next batch comes from."""
    batch_in_epoch: int = 0
    """Optimizer steps taken within the epoch."""
    samples_in_epoch: int = 0
    """Samples consumed this epoch over all ranks: where the sampler goes on, at any world size."""
    loss_first: float | None = None
    """Mean loss over ranks at step 1 (kept so a resumed run reports the whole run)."""
    loss_last: float | None = None
    """Mean loss over ranks at the latest step."""


def complete_checkpoints(ckpt_dir: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every checkpoint holding the completion marker, oldest first."""
    if not ckpt_dir.is_dir():
        return []
    found = []
    for child in ckpt_dir.iterdir():
        m = _STEP_DIR.match(child.name)
        if m and (child / COMPLETE_MARKER).is_file():
            found.append((int(m.group(1)), child))
    return sorted(found)


def rng_state(device: torch.device) -> dict[str, Any]:
    return {
        "torch_cpu": torch.get_rng_state(),
        "torch_cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
        "python": random.getstate(),
        "numpy": np.random.get_state(),
    }


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch_cpu"])
    if device.type == "cuda" and state["torch_cuda"] is not None:
        torch.cuda.set_rng_state(state["torch_cuda"], device)
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def seed_rank_streams(seed: int, rank: int, step: int = 0) -> None:
    """Per-rank streams for anything random inside a step (nothing in the bundled GPT; a user's
    dropout would use them). Derived from (seed, step, rank), so a reshard is reproducible."""
    s = seed * 1_000_003 + 1 + rank + step * 7_919
    torch.manual_seed(s)
    random.seed(s)
    np.random.seed(s % 2**32)


def identity(cfg: TrainConfig, parts: Parts, model: torch.nn.Module) -> dict[str, Any]:
    """What must match between the run that wrote a checkpoint and the run resuming from it."""
    if cfg.dataset_spec is None:
        data = hashlib.sha256("\n".join(f"{s.path.name}:{s.n_tokens}" for s in parts.shards).encode()).hexdigest()
    else:
        length = len(parts.dataset) if hasattr(parts.dataset, "__len__") else None
        data = f"{cfg.dataset_spec} (len {length})"
    if cfg.model_spec is None:
        model_id: Any = asdict(cfg.model)
    else:
        shapes = "\n".join(f"{n}:{tuple(p.shape)}" for n, p in model.state_dict().items())
        model_id = f"{cfg.model_spec} (state {hashlib.sha256(shapes.encode()).hexdigest()[:16]})"
    return {"seed": cfg.seed, "model": model_id, "data": data}


def layout(cfg: TrainConfig, rt: devmod.Runtime) -> dict[str, int]:
    """How the run is laid out; free to change between a checkpoint and its resume."""
    return {"world_size": rt.world_size, "batch_size": cfg.batch_size, "grad_accum": cfg.grad_accum}


def save_checkpoint(
    ckpt_dir: Path, step: int, state: dict[str, Any], rt: devmod.Runtime, keep: int, marker: Mapping[str, Any]
) -> None:
    """Write step ``step``'s checkpoint from every rank and publish it once complete.

    Every rank saves its part of ``state`` with DCP into ``.step_<N>.tmp/``; rank 0 then writes
    the ``COMPLETE`` marker (the step, ``marker``, the time), renames the directory to
    ``step_<N>/`` and keeps the newest ``keep`` complete ones (all when 0). The DDP job and the
    split runs (:mod:`gpu_cluster.workloads.parallel.checkpoint`) both publish this way."""
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    final = ckpt_dir / f"step_{step}"
    tmp = ckpt_dir / f".step_{step}.tmp"
    if rt.is_main:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    dist.barrier()
    dcp_save(state, checkpoint_id=tmp)
    checkpoint_crash_hook(step, tmp, rt.rank)
    dist.barrier()  # every rank's files are on disk before the marker says so
    if rt.is_main:
        doc = json.dumps({"step": step, **marker, "time": time.time()})
        publish_dir(tmp, final, COMPLETE_MARKER, doc.encode())
        if keep:
            for _, old in complete_checkpoints(ckpt_dir)[:-keep]:
                shutil.rmtree(old, ignore_errors=True)
    dist.barrier()


def latest_checkpoint(ckpt_dir: Path, rt: devmod.Runtime) -> tuple[Path, dict[str, Any]] | None:
    """The newest complete checkpoint and its marker, decided by rank 0 for every rank (one
    decision, whatever each node's file system cache says); stale temporaries are removed."""
    found: list[Any] = [None]
    if rt.is_main:
        if ckpt_dir.is_dir():
            for stale in ckpt_dir.glob(".step_*.tmp"):
                shutil.rmtree(stale, ignore_errors=True)
        ok = complete_checkpoints(ckpt_dir)
        if ok:
            path = ok[-1][1]
            try:
                marker = json.loads((path / COMPLETE_MARKER).read_text())
            except (OSError, ValueError):
                marker = {}
            found = [(str(path), marker)]
    dist.broadcast_object_list(found, src=0)
    if found[0] is None:
        return None
    return Path(found[0][0]), dict(found[0][1])


def checkpoint_crash_hook(step: int, tmp: Path, rank: int) -> None:
    at = os.environ.get("GPUC_CRASH_IN_CHECKPOINT")
    if not at or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") not in ("", "0"):
        return
    if step == int(at) and rank == int(os.environ.get("GPUC_CRASH_RANK", "1")):
        files = sorted(p.name for p in tmp.iterdir())
        print(
            f"[rank {rank}] GPUC_CRASH_IN_CHECKPOINT={at}: exiting hard inside the step {step} checkpoint "
            f"write, before its marker; {tmp.name} holds {files}",
            file=sys.stderr,
            flush=True,
        )
        os._exit(1)


def step_crash_hook(next_step: int, rank: int) -> None:
    """Test hook: ``GPUC_CRASH_AT_STEP=N`` makes rank ``GPUC_CRASH_RANK`` (default 1) exit hard
    before step ``N``, on the first attempt only (``TORCHELASTIC_RESTART_COUNT`` 0), as a killed rank."""
    at = os.environ.get("GPUC_CRASH_AT_STEP")
    if not at or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") not in ("", "0"):
        return
    if next_step == int(at) and rank == int(os.environ.get("GPUC_CRASH_RANK", "1")):
        print(
            f"[rank {rank}] GPUC_CRASH_AT_STEP={at}: exiting hard before step {next_step}", file=sys.stderr, flush=True
        )
        os._exit(1)
