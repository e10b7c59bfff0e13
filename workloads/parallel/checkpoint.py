"""Distributed checkpoints of a split run (FSDP2, tensor parallel, 2-D, pipeline) with
``torch.distributed.checkpoint``, resumable at another layout.

Each rank saves only what it holds: ``get_state_dict(model, optimizer)``
(``torch/distributed/checkpoint/state_dict.py``, torch 2.13) gives the model's and AdamW's state
keyed by the parameters' fully qualified names, as DTensor shards under FSDP2 and tensor parallel
and as whole tensors of the stage's own blocks in a pipeline (a stage keeps its blocks' names,
so the keys of all stages together are the whole model's). DCP writes every rank's shards with a
global metadata file; a load asks for the pieces the loading layout holds and DCP's planner reads
them from whichever saved chunks cover them, so a checkpoint written by FSDP on 4 ranks loads into
FSDP on 2, or tensor parallel's column/row shards into FSDP's row shards, or any into a pipeline.

Published atomically, as the DDP job's (:mod:`gpu_cluster.workloads.train.checkpoint`): DCP's files go to
``.step_<N>.tmp/``, rank 0 writes the ``COMPLETE`` marker once every rank's files are on disk,
then renames the directory to ``step_<N>/``; a start-up reads only the newest directory with a
marker. The marker records the step, the losses so far, the layout that wrote it (mode, world
size) and the run's identity (seed, model, data, global batch, learning rate), which must match
to resume; the layout may change. The data is a pure function of the step (``run.batches``), so
a resumed run takes step ``N + 1``'s batch next.

Test hooks: ``GPUC_CRASH_AT_STEP=N`` makes rank ``GPUC_CRASH_RANK`` (default 1) exit hard before
step ``N``, on the first attempt only (``TORCHELASTIC_RESTART_COUNT`` 0), as a killed rank;
``GPUC_CRASH_IN_CHECKPOINT=N`` inside step ``N``'s write, before its marker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from gpu_cluster.workloads.runtime import device as devmod
from gpu_cluster.workloads.train.checkpoint import latest_checkpoint, save_checkpoint
from gpu_cluster.workloads.train.checkpoint import step_crash_hook as crash_hook

__all__ = ["crash_hook", "load_latest", "save"]

IDENTITY_KEYS = ("seed", "model", "data", "batch_size", "lr")


def _options() -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    # Flattened: AdamW's param_groups keyed by parameter name, not by group index. Unflattened,
    # every pipeline stage saves "param_groups.0" with its own parameter list, DCP keeps one of
    # them, and the other stage loads a group without its hyperparameters (KeyError 'betas',
    # seen here). _flatten_optim_state_dict's docstring: "to support optimizer resharding for
    # MPMD, e.g., pipeline parallelism" (torch 2.13, torch/distributed/checkpoint/state_dict.py).
    return StateDictOptions(flatten_optimizer_state_dict=True)


def _state(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    msd, osd = get_state_dict(model, opt, options=_options())
    return {"model": msd, "optim": osd}


def save(
    ckpt_dir: Path,
    step: int,
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    rt: devmod.Runtime,
    marker: dict[str, Any],
    keep: int = 2,
) -> None:
    """Write step ``step``'s checkpoint from every rank and publish it once complete."""
    save_checkpoint(ckpt_dir, step, _state(model, opt), rt, keep, marker)


def mismatches(saved: dict[str, Any], identity: dict[str, Any]) -> list[tuple[str, str]]:
    """``(flag, reason)`` for every part of the run's identity that differs from the checkpoint's."""
    theirs = saved.get("identity", {})
    flags = {"seed": "--seed", "model": "--model", "data": "--dataset", "batch_size": "--batch-size", "lr": "--lr"}
    return [
        (flags[k], f"{identity.get(k)!r} differs from {theirs.get(k)!r} of the checkpoint; resume with the same value")
        for k in IDENTITY_KEYS
        if theirs.get(k) != identity.get(k)
    ]


def load_latest(
    ckpt_dir: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, rt: devmod.Runtime
) -> tuple[Path, dict[str, Any]] | None:
    """Load the newest complete checkpoint into this rank's shards; ``None`` when there is none.

    The caller checks the marker's identity first (:func:`peek`); here the state is read."""
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
    from torch.distributed.checkpoint.state_dict import set_state_dict

    found = latest_checkpoint(ckpt_dir, rt)
    if found is None:
        return None
    path, marker = found
    state = _state(model, opt)  # this layout's keys and shards, the optimizer's state initialised
    dcp_load(state, checkpoint_id=path)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"], options=_options())
    return path, marker


def peek(ckpt_dir: Path, rt: devmod.Runtime) -> tuple[Path, dict[str, Any]] | None:
    """The newest complete checkpoint and its marker (rank 0 decides for every rank)."""
    return latest_checkpoint(ckpt_dir, rt)
