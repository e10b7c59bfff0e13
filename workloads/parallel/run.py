"""The shared GPT split across ranks four ways, never whole on any rank, checked against one process.

    torchrun --nproc-per-node 8 -m gpu_cluster.workloads.parallel --mode fsdp --steps 20 --json out.json
    torchrun --nproc-per-node 8 -m gpu_cluster.workloads.parallel --mode 2d --tp 4
    torchrun --nproc-per-node 4 -m gpu_cluster.workloads.parallel --mode pipeline-1f1b --microbatches 8
    torchrun --nproc-per-node 2 -m gpu_cluster.workloads.parallel --mode fsdp,tp,pipeline --check-reference \
        --memory-budget-mib 1.3    # measured: one device peaks at 1.44 MiB, these modes at <= 1.17
    python -m gpu_cluster.workloads.parallel --mode reference      # the one-process run

``--mode`` takes one mode or a comma-separated list of the split modes, run one after the
other in the same job (one launch checks several on a cluster).

Your own model and data: ``--model MODULE:FACTORY`` (called under the meta device),
``--dataset MODULE:FACTORY`` (map-style ``(input, target)``), ``--loss`` and ``--plan
MODULE:FUNCTION`` returning a :class:`~gpu_cluster.workloads.parallel.plans.ShardingPlan`, or the plan
derived from the model's layer types (:func:`~gpu_cluster.workloads.parallel.plans.derive_plan`).
``--ckpt-dir DIR --ckpt-every K``: distributed checkpoints (:mod:`gpu_cluster.workloads.parallel.checkpoint`),
resumed from the newest complete one at whatever mode and world size the run has now.

Every split mode builds the model on the meta device, applies its parallelism, and only then
allocates and initialises this rank's shards (:mod:`gpu_cluster.workloads.parallel`), so the whole model
never exists on any rank: a model larger than one GPU fits as long as its shards do.

* ``fsdp``: FSDP2 (``fully_shard`` on every block, then on the whole model). Each rank holds
  1/world of every parameter and optimizer state and takes ``batch_size / world`` rows of
  the global batch; parameters are all-gathered for compute one block at a time and gradients
  reduce-scattered (averaged), which is the gradient of the global batch's mean loss. On GPU
  the all-gathered parameters are bf16 (``MixedPrecisionPolicy``), gradients reduced in fp32.
* ``tp``: tensor parallel over all ranks (column-/row-wise linear layers through DTensor's
  ``parallelize_module``); every rank sees the whole batch and holds ~1/world of each matrix.
* ``2d``: FSDP2 over ``world / --tp`` data-parallel groups of ``--tp``-way tensor parallel,
  on a ``(dp, tp)`` device mesh.
* ``pipeline`` / ``pipeline-1f1b``: ``torch.distributed.pipelining``: rank ``r`` owns a
  contiguous run of blocks (rank 0 also the embeddings, the last rank also the final LayerNorm
  and the head), wrapped in a ``PipelineStage``; ``ScheduleGPipe`` or ``Schedule1F1B`` feeds
  ``--microbatches`` microbatches through (1F1B needs at least as many as stages).
* ``reference``: the unsplit model on the whole batch in one process.

All start from the same weights (the index-addressed initialisation gives a shard exactly the
values of the same slice of the one-process model) and take the same batches (synthetic tokens
from :func:`gpu_cluster.workloads.train.data.synthetic_tokens`, or ``--data`` shards read in order), with AdamW.
The model's head is untied: a pipeline puts the embedding and the head on different ranks.

Memory: every rank measures the bytes of its parameter storage (the local shards, FSDP's
padding included) after materialisation, at the peak of materialisation (shards plus the
initialisation's scratch), and after every step, plus its gradients and optimizer state; and
the peak of everything it holds during the training steps, by kind: parameters (FSDP's
all-gathered blocks included while they live), gradients, optimizer state, activations
(:mod:`gpu_cluster.workloads.parallel.memory`: live tensor storages on CPU, the allocator's peak on GPU).
Rank 0 prints them per rank beside the full model's size and, with ``--check-reference``, the
one-device peak of the reference run measured the same way, and each mode's largest per-rank
peak as a fraction of it. ``--memory-budget-mib`` (``--param-budget-mib``, its older name, is
the same flag) fails the job if any rank's peak while materialising or while training exceeds
the budget: a budget over everything, not over parameters alone.

Tolerance: in fp32 the split runs differ from the reference only in the order of floating
point sums (gradients reduced across ranks or microbatches, row-wise partial sums), so every
step's loss must match the reference within ``rtol = 1e-5`` (:data:`LOSS_RTOL`).
``--check-reference`` makes rank 0 run the reference after the split runs (holding the whole
model: a check for sizes that fit one process) and exit 1 if any step is outside it. A run
in bf16 (``--precision``, default bf16 on GPU for ``fsdp`` and ``2d``) reports its difference
from the reference without a verdict: only the trend is comparable.
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.distributed as dist

from gpu_cluster.workloads.runtime import device as devmod
from gpu_cluster.workloads.runtime.atomic import write_bytes_atomic
from gpu_cluster.workloads.parallel import memory
from gpu_cluster.workloads.parallel.materialise import FIGURES, Residency
from gpu_cluster.workloads.parallel.plans import stage_layers
from gpu_cluster.workloads.parallel.config import LOSS_RTOL, MIB, MODES, MPConfig, parse_config
from gpu_cluster.workloads.parallel.steps import (
    batches,
    loss_fn,
    param_count,
    run_reference,
    run_reference_measured,
    run_split,
    uses_bf16,
    world_problems,
)

__all__ = [
    "LOSS_RTOL",
    "MODES",
    "MPConfig",
    "batches",
    "compare",
    "loss_fn",
    "main",
    "parse_config",
    "run_reference",
    "run_reference_measured",
    "stage_layers",
    "world_problems",
]


def gather_residency(res: Residency, rt: devmod.Runtime) -> list[dict[str, int | None]]:
    """Every rank's figures (bytes), on every rank."""
    mine = torch.tensor(res.figures(), dtype=torch.int64, device=rt.device)
    out = [torch.zeros_like(mine) for _ in range(rt.world_size)]
    dist.all_gather(out, mine)
    rows = []
    for t in out:
        row: dict[str, int | None] = dict(zip(FIGURES, (int(v) for v in t.tolist()), strict=True))
        for k in ("device_peak", *(f"peak_{f}" for f in memory.FIELDS)):
            if row[k] == -1:
                row[k] = None
        rows.append(row)
    return rows


BUDGET_FIGURES = ("params_peak_materialise", "peak_total")
"""What a budget over everything is compared with: all a rank holds while materialising, and at
its training peak (``params_peak_materialise`` is at least ``params_materialised``)."""


def over_budget(rows: list[dict[str, int | None]], budget: int | None) -> list[str]:
    """``rank R: figure X bytes`` for every figure of :data:`BUDGET_FIGURES` above ``budget``."""
    if budget is None:
        return []
    return [
        f"rank {r}: {k} {row[k]} bytes"
        for r, row in enumerate(rows)
        for k in BUDGET_FIGURES
        if (row.get(k) or 0) > budget
    ]


def peak_fraction(rows: list[dict[str, int | None]], one_device: memory.Peak | None) -> float | None:
    """The largest rank's peak as a fraction of the one-device peak (``None`` unmeasured)."""
    if one_device is None or not one_device.total or not rows:
        return None
    return max(max(row.get(k) or 0 for k in BUDGET_FIGURES) for row in rows) / one_device.total


def compare(losses: list[float], reference: list[float]) -> tuple[float, bool]:
    """Largest relative difference over the steps, and whether it is within :data:`LOSS_RTOL`."""
    worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, reference, strict=True))
    return worst, worst <= LOSS_RTOL


@dataclass(slots=True)
class SplitRun:
    mode: str
    losses: list[float]
    elapsed_s: float
    per_rank: list[dict[str, int | None]]
    bf16: bool


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(argv)
    if cfg.modes == ("reference",):
        t0 = time.perf_counter()
        losses = run_reference(cfg)
        return _finish(cfg, None, [SplitRun("reference", losses, time.perf_counter() - t0, [], False)])
    # GPT returns the head's output, a view; FSDP2 warns that an in-place op on it would skip
    # its backward hook. lm_loss takes it out of place, so the warning is noise here.
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
    rt = devmod.setup(force_cpu=True if cfg.force_cpu else None)
    try:
        if problems := world_problems(cfg, rt.world_size):
            devmod.fail_together(problems)  # every rank sees the same problems
        if rt.device.type == "cpu":
            torch.use_deterministic_algorithms(True)
        runs = []
        for mode in cfg.modes:
            t0 = time.perf_counter()
            losses, res = run_split(mode, cfg, rt)
            elapsed = time.perf_counter() - t0
            runs.append(SplitRun(mode, losses, elapsed, gather_residency(res, rt), uses_bf16(cfg, mode, rt.device)))
        code = _finish(cfg, rt, runs) if rt.is_main else 0
        verdict = torch.tensor([code], dtype=torch.int64, device=rt.device)
        dist.broadcast(verdict, src=0)  # every rank exits as rank 0 judged
        return int(verdict)
    finally:
        devmod.teardown()


def _mib(v: int | None) -> str:
    return "n/a" if v is None else f"{v / MIB:.3f}"


def _finish(cfg: MPConfig, rt: devmod.Runtime | None, runs: list[SplitRun]) -> int:
    world = rt.world_size if rt else 1
    check = cfg.check_reference and rt is not None
    ref, one = run_reference_measured(cfg, rt.device if rt else None) if check else (None, None)
    full_bytes = param_count(cfg) * 4  # fp32 parameters: what the whole model holds
    budget = cfg.memory_budget_bytes
    out_runs = []
    for run in runs:
        line = (
            f"model_parallel {run.mode}: {world} ranks, loss {run.losses[0]:.6f} -> {run.losses[-1]:.6f} "
            f"over {cfg.steps} steps in {run.elapsed_s:.1f} s{' (bf16)' if run.bf16 else ''}"
        )
        worst: float | None = None
        ok: bool | None = None
        if ref is not None:
            worst, within = compare(run.losses, ref)
            ok = None if run.bf16 else within
            verdict = (
                "bf16: trend only, no verdict" if run.bf16 else f"{'within' if ok else 'OUTSIDE'} rtol {LOSS_RTOL}"
            )
            line += f"; max relative difference from the reference {worst:.2e} ({verdict})"
        print(line, flush=True)
        over = over_budget(run.per_rank, budget)
        frac = peak_fraction(run.per_rank, one)
        for r, row in enumerate(run.per_rank):
            print(
                f"  rank {r}: params {_mib(row['params_materialised'])} MiB resident, "
                f"peak {_mib(row['params_peak_materialise'])} MiB while materialising, "
                f"{_mib(row['params_peak_between_steps'])} MiB after steps; grads {_mib(row['grads'])} MiB, "
                f"optimizer {_mib(row['optimizer_state'])} MiB; device peak {_mib(row['device_peak'])} MiB "
                f"(full model {_mib(full_bytes)} MiB)",
                flush=True,
            )
            print(
                f"    training peak {_mib(row['peak_total'])} MiB = params {_mib(row['peak_params'])} + grads "
                f"{_mib(row['peak_grads'])} + optimizer {_mib(row['peak_optimizer'])} + activations "
                f"{_mib(row['peak_activations'])} + other {_mib(row['peak_other'])}",
                flush=True,
            )
        if frac is not None and one is not None:
            print(f"  largest rank's peak / one-device peak {_mib(one.total)} MiB: {frac:.3f}", flush=True)
        if budget is not None:
            print(
                f"  budget {_mib(budget)} MiB per rank: "
                f"{'every rank within' if not over else 'OVER: ' + '; '.join(over)}",
                flush=True,
            )
        out_runs.append(
            {
                "mode": run.mode,
                "losses": run.losses,
                "elapsed_s": run.elapsed_s,
                "bf16": run.bf16,
                "max_rel_diff": worst,
                "match": ok,
                "per_rank": run.per_rank,
                "within_budget": None if budget is None else not over,
                "peak_fraction": frac,
            }
        )
    judged = [r["match"] for r in out_runs if r["match"] is not None]
    match = None if ref is None or not judged else all(judged)
    if ref is not None:
        print(f"reference (one process): loss {ref[0]:.6f} -> {ref[-1]:.6f}", flush=True)
    result: dict[str, Any] = {
        "job": "model_parallel",
        "world_size": world,
        "model": asdict(cfg.model),
        "batch_size": cfg.batch_size,
        "microbatches": cfg.microbatches,
        "tp": cfg.tp,
        "steps": cfg.steps,
        "precision": cfg.precision,
        "loss_rtol": LOSS_RTOL,
        "full_model_param_bytes": full_bytes,
        "memory_budget_bytes": budget,
        "one_device_peak": None if one is None else asdict(one),
        "reference_losses": ref,
        "runs": out_runs,
        "match": match,
    }
    if cfg.json_path is not None:
        write_bytes_atomic(cfg.json_path, (json.dumps(result, indent=2) + "\n").encode())
    failed = match is False or any(r["within_budget"] is False for r in out_runs)
    return 1 if failed else 0


if __name__ == "__main__":
    from gpu_cluster.workloads.runtime.device import exit_process

    exit_process(main())
