"""The shared GPT model split across ranks two ways, checked against a one-process run.

    torchrun --nproc-per-node 8 -m workloads.model_parallel --mode fsdp --steps 20 --json out.json
    torchrun --nproc-per-node 4 -m workloads.model_parallel --mode pipeline --microbatches 8
    torchrun --nproc-per-node 2 -m workloads.model_parallel --mode fsdp,pipeline --check-reference
    python -m workloads.model_parallel --mode reference      # the one-process run

``--mode`` takes one mode or a comma-separated list of the split modes, run one after the
other in the same job (one launch checks both on a cluster).

* ``fsdp``: FSDP2 (``fully_shard`` on every block, then on the whole model). Each rank holds
  1/world of every parameter and optimizer state and takes ``batch_size / world`` rows of
  the global batch; parameters are all-gathered for compute and gradients reduce-scattered
  (averaged), which is the gradient of the global batch's mean loss.
* ``pipeline``: ``torch.distributed.pipelining``: rank ``r`` owns a contiguous run of blocks
  (rank 0 also the embeddings, the last rank also the final LayerNorm and the head), wrapped
  in a ``PipelineStage``; ``ScheduleGPipe`` feeds ``--microbatches`` microbatches through,
  sending activations forward and their gradients back rank to rank. Every rank sees the
  whole batch (rank 0 feeds the inputs, the last rank scores the targets).
* ``reference``: the unsplit model on the whole batch in one process.

All three start from the same weights (seeded) and take the same batches (synthetic tokens
from :func:`workloads.data.synthetic_tokens`, or ``--data`` shards read in order), with AdamW.
The model's head is untied in all three: a pipeline puts the embedding and the head on
different ranks.

Tolerance: in fp32 the split runs differ from the reference only in the order of floating
point sums (gradients reduced across ranks or microbatches), so every step's loss must match
the reference within ``rtol = 1e-5`` (:data:`LOSS_RTOL`; observed differences on CPU are a
few 1e-7). ``--check-reference`` makes rank 0 run the reference after the split run and exit
1 if any step is outside it. The comparison is meant for fp32 (the default ``--dtype``);
in bf16 only the loss trend is comparable.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from workloads import device as devmod
from workloads.atomic import write_bytes_atomic
from workloads.cli import Problems, fail
from workloads.data import TokenWindows, check_shards, synthetic_tokens
from workloads.model import GPT, GPTConfig, lm_loss

LOSS_RTOL = 1e-5
"""Largest relative difference allowed between a split run's loss and the reference's, per step (fp32)."""
MODES = ("fsdp", "pipeline", "reference")


@dataclass(kw_only=True, frozen=True, slots=True)
class MPConfig:
    """One model-parallel run."""

    modes: tuple[str, ...]
    """``fsdp`` and/or ``pipeline`` in the order given, or ``reference`` alone."""
    model: GPTConfig
    """Model shape (head untied)."""
    batch_size: int
    """Global batch in sequences per step (split across ranks or microbatches)."""
    microbatches: int
    """Pipeline microbatches per step; must divide ``batch_size``."""
    steps: int
    """Optimizer steps."""
    lr: float
    """AdamW learning rate."""
    seed: int
    """Seeds the weights and the synthetic data."""
    data: str | None
    """Optional shard glob; windows are taken in order. ``None``: synthetic tokens."""
    check_reference: bool
    """Rank 0 reruns the reference and fails the job outside :data:`LOSS_RTOL`."""
    json_path: Path | None
    """Final metrics as JSON (rank 0)."""
    force_cpu: bool
    """gloo on CPU even where GPUs are visible."""


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m workloads.model_parallel",
                                 description="FSDP2 or pipeline-parallel training, checked against one process.")
    ap.add_argument("--mode", required=True,
                    help=f"one of {', '.join(MODES)}, or a comma-separated list of the split modes (fsdp,pipeline)")
    ap.add_argument("--vocab-size", default="256")
    ap.add_argument("--seq-len", default="16")
    ap.add_argument("--d-model", default="32")
    ap.add_argument("--n-layers", default="2", help="decoder blocks; at least the number of pipeline ranks")
    ap.add_argument("--n-heads", default="2")
    ap.add_argument("--batch-size", default="8", help="global sequences per step (default 8)")
    ap.add_argument("--microbatches", default="4", help="pipeline microbatches per step (default 4)")
    ap.add_argument("--steps", default="5")
    ap.add_argument("--lr", default="3e-3")
    ap.add_argument("--seed", default="0")
    ap.add_argument("--data", default=None, help="token shard glob (default: synthetic tokens)")
    ap.add_argument("--check-reference", action="store_true",
                    help=f"rank 0 also runs the reference; exit 1 if a loss differs by more than rtol {LOSS_RTOL}")
    ap.add_argument("--json", default=None)
    ap.add_argument("--cpu", action="store_true")
    return ap


def parse_config(argv: list[str] | None = None) -> MPConfig:
    a = build_parser().parse_args(argv)
    p = Problems()
    modes = tuple(m.strip() for m in a.mode.split(","))
    for m in modes:
        if m not in MODES:
            p.add("--mode", f"{m!r} (allowed: {', '.join(MODES)})")
    if "reference" in modes and len(modes) > 1:
        p.add("--mode", "reference runs alone (the split modes compare with it via --check-reference)")
    if len(set(modes)) != len(modes):
        p.add("--mode", f"{a.mode!r} names a mode twice")
    model = GPTConfig(
        vocab_size=p.integer("--vocab-size", a.vocab_size, lo=2),
        seq_len=p.integer("--seq-len", a.seq_len, lo=1),
        d_model=p.integer("--d-model", a.d_model, lo=1),
        n_layers=p.integer("--n-layers", a.n_layers, lo=1),
        n_heads=p.integer("--n-heads", a.n_heads, lo=1),
        tie_weights=False,
    )
    if not p:
        p.extend([(f"--{k.replace('_', '-')}", r) for k, r in model.problems()])
    batch = p.integer("--batch-size", a.batch_size, lo=1)
    micro = p.integer("--microbatches", a.microbatches, lo=1)
    if "pipeline" in modes and micro >= 1 and batch % micro:
        p.add("--microbatches", f"{micro} does not divide --batch-size {batch}")
    steps = p.integer("--steps", a.steps, lo=1)
    lr = p.number("--lr", a.lr, gt=0.0)
    seed = p.integer("--seed", a.seed, lo=0)
    if a.data is not None and not p:
        _, problems = check_shards(a.data, seq_len=model.seq_len, vocab_size=model.vocab_size)
        p.extend(problems)
    json_path = Path(a.json) if a.json else None
    if json_path is not None and not json_path.parent.is_dir():
        p.add("--json", f"directory {json_path.parent} does not exist")
    p.exit_if_any()
    return MPConfig(modes=modes, model=model, batch_size=batch, microbatches=micro, steps=steps,
                    lr=lr, seed=seed, data=a.data, check_reference=bool(a.check_reference),
                    json_path=json_path, force_cpu=bool(a.cpu))


def batches(cfg: MPConfig) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The ``steps`` global batches ``(inputs, targets)``, identical in every process."""
    t, b = cfg.model.seq_len, cfg.batch_size
    if cfg.data is None:
        n = cfg.steps * b * t + 1
        toks = torch.from_numpy(synthetic_tokens(n, cfg.model.vocab_size, np.random.default_rng(cfg.seed)))
        out = []
        for s in range(cfg.steps):
            rows = [toks[(s * b + j) * t : (s * b + j) * t + t + 1] for j in range(b)]
            w = torch.stack(rows)
            out.append((w[:, :-1].contiguous(), w[:, 1:].contiguous()))
        return out
    shards, _ = check_shards(cfg.data, seq_len=t, vocab_size=cfg.model.vocab_size)
    ds = TokenWindows(shards, t)
    out = []
    for s in range(cfg.steps):
        xs, ys = zip(*(ds[(s * b + j) % len(ds)] for j in range(b)))
        out.append((torch.stack(xs), torch.stack(ys)))
    return out


def _fresh_model(cfg: MPConfig) -> GPT:
    torch.manual_seed(cfg.seed)
    return GPT(cfg.model)


def _adamw(params: Any, cfg: MPConfig) -> torch.optim.Optimizer:
    # foreach=False: the same per-parameter kernels whether a parameter is whole, a DTensor
    # shard or on a pipeline stage, so only the gradients' summation order differs.
    return torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.1, foreach=False)


def run_reference(cfg: MPConfig, device: torch.device | None = None) -> list[float]:
    """Loss per step of the unsplit model on the whole batch, in this process."""
    device = device or torch.device("cpu")
    model = _fresh_model(cfg).to(device)
    opt = _adamw(model.parameters(), cfg)
    losses = []
    for x, y in batches(cfg):
        loss = lm_loss(model(x.to(device)), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def run_fsdp(cfg: MPConfig, rt: devmod.Runtime) -> list[float]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if cfg.batch_size % rt.world_size:
        fail([("--batch-size", f"{cfg.batch_size} is not divisible by the {rt.world_size} ranks")])
    model = _fresh_model(cfg).to(rt.device)
    # An explicit mesh on the job's device type: left alone, FSDP picks CUDA whenever it is
    # visible, even for a --cpu run.
    mesh = init_device_mesh(rt.device.type, (rt.world_size,))
    for block in model.blocks.values():
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = _adamw(model.parameters(), cfg)
    per = cfg.batch_size // rt.world_size
    lo, hi = rt.rank * per, (rt.rank + 1) * per
    losses = []
    for x, y in batches(cfg):
        loss = lm_loss(model(x[lo:hi].to(rt.device)), y[lo:hi].to(rt.device))
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(float(mean) / rt.world_size)
    return losses


def stage_layers(n_layers: int, n_stages: int, stage: int) -> range:
    """Blocks of ``stage``: contiguous, the first ``n_layers % n_stages`` stages one extra."""
    base, extra = divmod(n_layers, n_stages)
    lo = stage * base + min(stage, extra)
    return range(lo, lo + base + (1 if stage < extra else 0))


def run_pipeline(cfg: MPConfig, rt: devmod.Runtime) -> list[float]:
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    n = rt.world_size
    if cfg.model.n_layers < n:
        fail([("--n-layers", f"{cfg.model.n_layers} blocks cannot fill {n} pipeline stages")])
    model = _fresh_model(cfg)  # whole model first: every stage then holds the reference's weights
    keep = stage_layers(cfg.model.n_layers, n, rt.rank)
    for i in range(cfg.model.n_layers):
        if i not in keep:
            del model.blocks[str(i)]
    if rt.rank != 0:
        model.tok_emb = None
        model.pos_emb = None
    if rt.rank != n - 1:
        model.ln_f = None
        model.head = None
    model.to(rt.device)
    stage = PipelineStage(model, rt.rank, n, rt.device)
    schedule = ScheduleGPipe(stage, n_microbatches=cfg.microbatches, loss_fn=lm_loss)
    opt = _adamw(model.parameters(), cfg)
    losses = []
    for x, y in batches(cfg):
        opt.zero_grad(set_to_none=True)
        mb_losses: list[torch.Tensor] = []
        if rt.rank == 0 and n > 1:
            schedule.step(x.to(rt.device))
        elif rt.rank == n - 1:
            args = (x.to(rt.device),) if n == 1 else ()
            schedule.step(*args, target=y.to(rt.device), losses=mb_losses)
        else:
            schedule.step()
        opt.step()
        # Equal microbatches: the batch's mean loss is the mean of the microbatch means.
        mean = torch.stack(mb_losses).mean().detach() if mb_losses else torch.zeros((), device=rt.device)
        dist.broadcast(mean, src=n - 1)
        losses.append(float(mean))
    return losses


def compare(losses: list[float], reference: list[float]) -> tuple[float, bool]:
    """Largest relative difference over the steps, and whether it is within :data:`LOSS_RTOL`."""
    worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, reference, strict=True))
    return worst, worst <= LOSS_RTOL


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(argv)
    if cfg.modes == ("reference",):
        t0 = time.perf_counter()
        losses = run_reference(cfg)
        return _finish(cfg, None, [("reference", losses, time.perf_counter() - t0)])
    rt = devmod.setup(force_cpu=True if cfg.force_cpu else None)
    try:
        if rt.device.type == "cpu":
            torch.use_deterministic_algorithms(True)
        runs = []
        for mode in cfg.modes:
            t0 = time.perf_counter()
            losses = run_fsdp(cfg, rt) if mode == "fsdp" else run_pipeline(cfg, rt)
            runs.append((mode, losses, time.perf_counter() - t0))
        code = _finish(cfg, rt, runs) if rt.is_main else 0
        verdict = torch.tensor([code], dtype=torch.int64, device=rt.device)
        dist.broadcast(verdict, src=0)  # every rank exits as rank 0 judged
        return int(verdict)
    finally:
        devmod.teardown()


def _finish(cfg: MPConfig, rt: devmod.Runtime | None, runs: list[tuple[str, list[float], float]]) -> int:
    world = rt.world_size if rt else 1
    check = cfg.check_reference and rt is not None
    ref = run_reference(cfg, rt.device if rt else None) if check else None
    out_runs = []
    for mode, losses, elapsed in runs:
        line = (f"model_parallel {mode}: {world} ranks, loss {losses[0]:.6f} -> {losses[-1]:.6f} "
                f"over {cfg.steps} steps in {elapsed:.1f} s")
        worst: float | None = None
        ok: bool | None = None
        if ref is not None:
            worst, ok = compare(losses, ref)
            line += (f"; max relative difference from the reference {worst:.2e} "
                     f"({'within' if ok else 'OUTSIDE'} rtol {LOSS_RTOL})")
        print(line, flush=True)
        out_runs.append({"mode": mode, "losses": losses, "elapsed_s": elapsed,
                         "max_rel_diff": worst, "match": ok})
    match = None if ref is None else all(r["match"] for r in out_runs)
    if ref is not None:
        print(f"reference (one process): loss {ref[0]:.6f} -> {ref[-1]:.6f}", flush=True)
    result: dict[str, Any] = {
        "job": "model_parallel", "world_size": world, "model": asdict(cfg.model),
        "batch_size": cfg.batch_size, "microbatches": cfg.microbatches, "steps": cfg.steps,
        "loss_rtol": LOSS_RTOL, "reference_losses": ref, "runs": out_runs, "match": match,
    }
    if cfg.json_path is not None:
        write_bytes_atomic(cfg.json_path, (json.dumps(result, indent=2) + "\n").encode())
    return 1 if match is False else 0


if __name__ == "__main__":
    from workloads.device import exit_process

    exit_process(main())
