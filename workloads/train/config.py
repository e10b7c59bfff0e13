"""Data-parallel training of the shared GPT model, resumable bit for bit.

    torchrun --nproc-per-node 8 -m workloads.ddp_train --data '/fsx/data/train-*.bin' \\
        --steps 200 --ckpt-dir /fsx/ckpt/run1 --ckpt-every 50 --instance-type p5.48xlarge \\
        --json /fsx/out/ddp.json

What it shows about a cluster: the gradient all-reduce works across every rank, shared storage
serves the data and holds checkpoints, and a job killed part-way resumes where it stopped.

* Data: token shards (see :mod:`workloads.data`) matched by ``--data``, cut into windows of
  ``seq_len + 1`` tokens, split across ranks by ``DistributedSampler`` (shuffled per epoch
  with ``set_epoch``; an incomplete last batch is dropped, so an epoch has
  ``len(sampler) // batch_size`` steps).
* Model: DDP with ``gradient_as_bucket_view=True`` (gradients live in the all-reduce buckets:
  one copy fewer), AdamW, bf16 autocast on GPUs; fp32 with deterministic kernels on CPU.
* Checkpoints: ``torch.distributed.checkpoint`` every ``--ckpt-every`` steps, written into
  ``<ckpt-dir>/.step_<N>.tmp/``; when every rank has written, rank 0 adds a ``COMPLETE``
  marker and renames the directory to ``step_<N>/``. A start-up loads only a ``step_<N>``
  holding the marker, so a checkpoint half-written by a killed job is never read. It holds
  the model, the optimizer, the step, the sampler position (epoch and batch within it) and
  every rank's RNG states (torch CPU and CUDA, python ``random``, numpy), so a resumed run
  takes exactly the steps the uninterrupted run would have: on CPU the final parameters are
  bitwise identical (checked by the tests with 2 ranks; with 3+ ranks the all-reduce's
  summation order may differ after a restart, because DDP rebuilds its buckets).
* Measurement: every rank times every step (including the batch fetch, excluding checkpoint
  writes); the slowest rank decides each step (all-reduce MAX); the median over steps,
  without the first step of the run (warm-up), gives step time, samples/s and tokens/s per
  GPU (per process on CPU) and model FLOPs utilisation against ``--peak-tflops`` or the
  catalog's figure for ``--instance-type`` (FLOPs per token: :func:`workloads.model.flops_per_token`).

Test hook: ``GPUC_CRASH_AT_STEP=N`` makes rank ``GPUC_CRASH_RANK`` (default 1) exit hard
(``os._exit(1)``) just before step N (1-based) in the first attempt only (torchrun's
``TORCHELASTIC_RESTART_COUNT`` unset or 0), so ``--max-restarts 1`` resumes instead of
crashing again. ``GPUC_CRASH_IN_CHECKPOINT=N`` makes the same rank exit hard inside the step N
checkpoint, after its DCP files are written and before the completion marker and rename.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import re
import shutil
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import Dataset
from torch.utils.data.distributed import DistributedSampler

from workloads import device as devmod
from workloads.atomic import fsync_dir, write_bytes_atomic
from workloads.cli import Problems, fail, output_dir_problem
from workloads.data import Shard, TokenWindows, check_shards
from workloads.model import GPT, GPTConfig, flops_per_token, lm_loss, total_params

COMPLETE_MARKER = "COMPLETE"
_STEP_DIR = re.compile(r"^step_(\d+)$")


@dataclass(kw_only=True, frozen=True, slots=True)
class TrainConfig:
    """Everything a run depends on, parsed and checked from the flags."""

    data: str
    """Glob of token shards on shared storage, e.g. ``/fsx/data/train-*.bin``."""
    model: GPTConfig
    """Model shape."""
    batch_size: int
    """Sequences per rank per step (the global batch is ``batch_size * world_size``)."""
    steps: int
    """Optimizer steps in total; a resumed run stops at the same step as an uninterrupted one."""
    lr: float
    """Peak AdamW learning rate."""
    warmup_steps: int
    """Linear learning-rate warm-up from ``lr / warmup_steps`` to ``lr``; 0 for none."""
    weight_decay: float
    """AdamW decoupled weight decay."""
    seed: int
    """Seeds initial weights, the sampler's shuffle and every rank's RNG streams."""
    ckpt_dir: Path | None
    """Where ``step_<N>/`` checkpoints go (shared storage); ``None`` for no checkpoints."""
    ckpt_every: int
    """Checkpoint every this many steps (and never otherwise)."""
    ckpt_keep: int
    """Complete checkpoints to keep (older ones are deleted); 0 keeps all."""
    log_every: int
    """Rank 0 prints the loss and step time every this many steps."""
    peak_tflops: float | None
    """Peak dense bf16 TFLOP/s of one accelerator, the MFU denominator; ``None``: no MFU."""
    peak_source: str | None
    """Where ``peak_tflops`` came from (the flag, or the catalog entry)."""
    json_path: Path | None
    """Final metrics as JSON (written by rank 0, atomically)."""
    force_cpu: bool
    """Run on CPU with gloo even where GPUs are visible."""


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m workloads.ddp_train",
        description="DDP training of a small GPT on token shards, with exact resume.",
    )
    ap.add_argument("--data", required=True,
                    help="glob of token shards (quote it), e.g. '/fsx/data/train-*.bin'")
    m = ap.add_argument_group("model")
    m.add_argument("--vocab-size", default="256", help="token ids the model covers (default 256)")
    m.add_argument("--seq-len", default="16", help="tokens per training window (default 16)")
    m.add_argument("--d-model", default="32", help="residual width (default 32)")
    m.add_argument("--n-layers", default="2", help="decoder blocks (default 2)")
    m.add_argument("--n-heads", default="2", help="attention heads, dividing --d-model (default 2)")
    m.add_argument("--untied", action="store_true", help="separate output head instead of the tied embedding")
    t = ap.add_argument_group("training")
    t.add_argument("--batch-size", default="8", help="sequences per rank per step (default 8)")
    t.add_argument("--steps", default="20", help="optimizer steps in total (default 20)")
    t.add_argument("--lr", default="3e-3", help="AdamW learning rate (default 3e-3)")
    t.add_argument("--warmup-steps", default="0", help="linear LR warm-up steps (default 0)")
    t.add_argument("--weight-decay", default="0.1", help="AdamW weight decay (default 0.1)")
    t.add_argument("--seed", default="0", help="seed for weights, shuffle and RNG streams (default 0)")
    t.add_argument("--cpu", action="store_true", help="run on CPU/gloo even if GPUs are visible")
    c = ap.add_argument_group("checkpoints")
    c.add_argument("--ckpt-dir", default=None,
                   help="checkpoint directory on shared storage; resumes from its newest complete step_<N>")
    c.add_argument("--ckpt-every", default="0",
                   help="checkpoint every K steps (needs --ckpt-dir; default 0 = never)")
    c.add_argument("--ckpt-keep", default="2", help="complete checkpoints to keep, 0 = all (default 2)")
    o = ap.add_argument_group("reporting")
    o.add_argument("--log-every", default="10", help="print every N steps (default 10)")
    o.add_argument("--peak-tflops", default=None, help="peak dense bf16 TFLOP/s per accelerator, for MFU")
    o.add_argument("--instance-type", default=None,
                   help="take the MFU peak from the hardware catalog entry of this instance type")
    o.add_argument("--json", default=None, help="write the final metrics to this JSON file")
    return ap


def _peak_from_catalog(instance_type: str, p: Problems) -> tuple[float | None, str | None]:
    try:
        # Imported here: a run given --peak-tflops must not need the catalog at all.
        from components.catalog import load_catalog
    except ImportError as e:
        p.add("--instance-type", f"the hardware catalog cannot be loaded ({e}); give --peak-tflops instead")
        return None, None
    try:
        it = load_catalog().get(instance_type)
    except Exception as e:  # the catalog's own error names the allowed types
        p.add("--instance-type", str(e))
        return None, None
    peak = it.accelerator.peak_dense_bf16_tflops
    if not peak or peak <= 0:
        p.add("--instance-type", f"the catalog has no peak dense bf16 TFLOP/s for {instance_type}; "
                                 "give --peak-tflops instead")
        return None, None
    return float(peak), f"catalog {instance_type} ({it.accelerator.model})"


def parse_config(argv: list[str] | None = None) -> tuple[TrainConfig, list[Shard]]:
    """Convert and check every flag and every shard; all problems reported at once, exit 2."""
    a = build_parser().parse_args(argv)
    p = Problems()
    model = GPTConfig(
        vocab_size=p.integer("--vocab-size", a.vocab_size, lo=2),
        seq_len=p.integer("--seq-len", a.seq_len, lo=1),
        d_model=p.integer("--d-model", a.d_model, lo=1),
        n_layers=p.integer("--n-layers", a.n_layers, lo=1),
        n_heads=p.integer("--n-heads", a.n_heads, lo=1),
        tie_weights=not a.untied,
    )
    if not p:
        p.extend([(f"--{k.replace('_', '-')}", r) for k, r in model.problems()])
    batch_size = p.integer("--batch-size", a.batch_size, lo=1)
    steps = p.integer("--steps", a.steps, lo=1)
    lr = p.number("--lr", a.lr, gt=0.0)
    warmup = p.integer("--warmup-steps", a.warmup_steps, lo=0)
    wd = p.number("--weight-decay", a.weight_decay, ge=0.0)
    seed = p.integer("--seed", a.seed, lo=0)
    ckpt_every = p.integer("--ckpt-every", a.ckpt_every, lo=0)
    ckpt_keep = p.integer("--ckpt-keep", a.ckpt_keep, lo=0)
    log_every = p.integer("--log-every", a.log_every, lo=1)
    ckpt_dir = Path(a.ckpt_dir) if a.ckpt_dir else None
    if ckpt_every and ckpt_dir is None:
        p.add("--ckpt-every", f"{ckpt_every} needs --ckpt-dir")
    if ckpt_dir is not None and (why := output_dir_problem(ckpt_dir)):
        p.add("--ckpt-dir", why)
    peak: float | None = None
    source: str | None = None
    if a.peak_tflops is not None and a.instance_type is not None:
        p.add("--peak-tflops", "give either --peak-tflops or --instance-type, not both")
    elif a.peak_tflops is not None:
        peak = p.number("--peak-tflops", a.peak_tflops, gt=0.0)
        source = "--peak-tflops"
    elif a.instance_type is not None:
        peak, source = _peak_from_catalog(a.instance_type, p)
    json_path = Path(a.json) if a.json else None
    if json_path is not None and not json_path.parent.is_dir():
        p.add("--json", f"directory {json_path.parent} does not exist")
    shards: list[Shard] = []
    if not any(w == "--seq-len" or w == "--vocab-size" for w, _ in p.items):
        shards, shard_problems = check_shards(a.data, seq_len=model.seq_len, vocab_size=model.vocab_size)
        p.extend(shard_problems)
    p.exit_if_any()
    cfg = TrainConfig(
        data=a.data, model=model, batch_size=batch_size, steps=steps, lr=lr,
        warmup_steps=warmup, weight_decay=wd, seed=seed, ckpt_dir=ckpt_dir,
        ckpt_every=ckpt_every, ckpt_keep=ckpt_keep, log_every=log_every, peak_tflops=peak,
        peak_source=source, json_path=json_path, force_cpu=bool(a.cpu),
    )
    return cfg, shards


# --- checkpoints -------------------------------------------------------------------------


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


def _rng_state(device: torch.device) -> dict[str, Any]:
    return {
        "torch_cpu": torch.get_rng_state(),
        "torch_cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
        "python": random.getstate(),
        "numpy": np.random.get_state(),
    }


def _set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch_cpu"])
    if device.type == "cuda" and state["torch_cuda"] is not None:
        torch.cuda.set_rng_state(state["torch_cuda"], device)
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


@dataclass(slots=True)
class Progress:
    """Where training stands; saved in every checkpoint."""

    step: int = 0
    """Optimizer steps taken."""
    epoch: int = 0
    """Sampler epoch the next batch comes from."""
    batch_in_epoch: int = 0
    """Index of the next batch within the epoch."""
    loss_first: float | None = None
    """Mean loss over ranks at step 1 (kept so a resumed run reports the whole run)."""
    loss_last: float | None = None
    """Mean loss over ranks at the latest step."""


def _identity(cfg: TrainConfig, rt: devmod.Runtime, shards: list[Shard]) -> dict[str, Any]:
    """What must match between the run that wrote a checkpoint and the run resuming from it."""
    data = hashlib.sha256("\n".join(f"{s.path.name}:{s.n_tokens}" for s in shards).encode()).hexdigest()
    return {
        "world_size": rt.world_size, "batch_size": cfg.batch_size, "seed": cfg.seed,
        "model": asdict(cfg.model), "data": data,
    }


def save_checkpoint(ckpt_dir: Path, step: int, state: dict[str, Any], rt: devmod.Runtime, keep: int) -> None:
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    final = ckpt_dir / f"step_{step}"
    tmp = ckpt_dir / f".step_{step}.tmp"
    if rt.is_main:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    dist.barrier()
    dcp_save(state, checkpoint_id=tmp)
    _checkpoint_crash_hook(step, tmp, rt.rank)
    dist.barrier()  # every rank's files are written before the marker claims completeness
    if rt.is_main:
        marker = json.dumps({"step": step, "world_size": rt.world_size, "time": time.time()})
        write_bytes_atomic(tmp / COMPLETE_MARKER, marker.encode())
        fsync_dir(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        fsync_dir(ckpt_dir)
        if keep:
            for _, old in complete_checkpoints(ckpt_dir)[:-keep]:
                shutil.rmtree(old, ignore_errors=True)
    dist.barrier()


# --- training ----------------------------------------------------------------------------


def param_digest(model: torch.nn.Module) -> tuple[str, float]:
    """SHA-256 of every parameter's bytes in name order (bitwise equality), and their sum."""
    h = hashlib.sha256()
    total = 0.0
    for name, p in model.named_parameters():
        t = p.detach().to("cpu", copy=True).contiguous()
        h.update(name.encode())
        h.update(t.numpy().tobytes())
        total += float(t.double().sum())
    return h.hexdigest(), total


def _crash_hook(next_step: int, rank: int) -> None:
    at = os.environ.get("GPUC_CRASH_AT_STEP")
    if not at or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") not in ("", "0"):
        return
    if next_step == int(at) and rank == int(os.environ.get("GPUC_CRASH_RANK", "1")):
        print(f"[rank {rank}] GPUC_CRASH_AT_STEP={at}: exiting hard before step {next_step}",
              file=sys.stderr, flush=True)
        os._exit(1)


def _checkpoint_crash_hook(step: int, tmp: Path, rank: int) -> None:
    at = os.environ.get("GPUC_CRASH_IN_CHECKPOINT")
    if not at or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") not in ("", "0"):
        return
    if step == int(at) and rank == int(os.environ.get("GPUC_CRASH_RANK", "1")):
        files = sorted(p.name for p in tmp.iterdir())
        print(f"[rank {rank}] GPUC_CRASH_IN_CHECKPOINT={at}: exiting hard inside the step {step} checkpoint "
              f"write, before its marker; {tmp.name} holds {files}", file=sys.stderr, flush=True)
        os._exit(1)


def _lr_at(cfg: TrainConfig, step: int) -> float:
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    return cfg.lr


def _percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def train(cfg: TrainConfig, shards: list[Shard], rt: devmod.Runtime) -> dict[str, Any]:
    on_gpu = rt.device.type == "cuda"
    if not on_gpu:
        # CPU runs are the reference: the same flags give the same bits, resumed or not.
        torch.use_deterministic_algorithms(True)
    dataset = TokenWindows(shards, cfg.model.seq_len)
    # DistributedSampler needs only len(); TokenWindows is a map-style dataset by shape.
    sampler: DistributedSampler[Any] = DistributedSampler(
        cast("Dataset[Any]", dataset), num_replicas=rt.world_size, rank=rt.rank,
        shuffle=True, seed=cfg.seed, drop_last=True,
    )
    steps_per_epoch = len(sampler) // cfg.batch_size
    if steps_per_epoch < 1:
        fail([("--batch-size", f"{cfg.batch_size} sequences per rank x {rt.world_size} ranks "
               f"exceeds the {len(dataset)} windows of seq_len {cfg.model.seq_len} in {cfg.data}: "
               "lower --batch-size or --seq-len, or add data")])

    torch.manual_seed(cfg.seed)  # identical initial weights on every rank
    model = GPT(cfg.model).to(rt.device)
    ddp = DDP(model, device_ids=[rt.device.index] if on_gpu else None, gradient_as_bucket_view=True)
    opt = torch.optim.AdamW(ddp.parameters(), lr=cfg.lr, betas=(0.9, 0.95),
                            weight_decay=cfg.weight_decay)
    # Per-rank streams for anything random inside a step (nothing today; restored on resume
    # all the same, so adding dropout later cannot break exact resume).
    torch.manual_seed(cfg.seed * 1_000_003 + 1 + rt.rank)
    random.seed(cfg.seed * 1_000_003 + 1 + rt.rank)
    np.random.seed((cfg.seed * 1_000_003 + 1 + rt.rank) % 2**32)

    if rt.is_main:
        print(f"ddp_train: {rt.world_size} ranks on {rt.accelerator} ({rt.backend}), "
              f"{total_params(cfg.model):,} params, {len(dataset)} windows, "
              f"{steps_per_epoch} steps/epoch, batch {cfg.batch_size}/rank", flush=True)
    if cfg.ckpt_dir is not None:
        # Imported only when used: it pulls in DTensor, seconds of start-up on a busy host.
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
        from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

    ident = _identity(cfg, rt, shards)
    prog = Progress()
    resumed_from: int | None = None
    rng_key = f"rng_rank{rt.rank}"
    if cfg.ckpt_dir is not None:
        if rt.is_main and cfg.ckpt_dir.is_dir():
            for stale in cfg.ckpt_dir.glob(".step_*.tmp"):
                shutil.rmtree(stale, ignore_errors=True)
        latest: list[str | None] = [None]
        if rt.is_main:
            found = complete_checkpoints(cfg.ckpt_dir)
            latest = [str(found[-1][1]) if found else None]
        dist.broadcast_object_list(latest, src=0)  # one decision, whatever each node's cache says
        if latest[0] is not None:
            path = Path(latest[0])
            msd, osd = get_state_dict(ddp, opt)
            state: dict[str, Any] = {
                "model": msd, "optim": osd, "progress": asdict(Progress()),
                "identity": json.loads(json.dumps(ident)), rng_key: _rng_state(rt.device),
            }
            dcp_load(state, checkpoint_id=path)
            mismatched = [k for k in ident if state["identity"].get(k) != ident[k]]
            if mismatched:
                fail([("--ckpt-dir", f"{path} was written by a run with different {k}: "
                       f"{state['identity'].get(k)!r}, this run has {ident[k]!r}; exact resume "
                       "needs the same value (or use a fresh --ckpt-dir)") for k in mismatched])
            set_state_dict(ddp, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
            _set_rng_state(state[rng_key], rt.device)
            prog = Progress(**state["progress"])
            resumed_from = prog.step
            if rt.is_main:
                print(f"resumed from {path} (step {prog.step}, epoch {prog.epoch}, "
                      f"batch {prog.batch_in_epoch})", flush=True)

    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=on_gpu)
    step_times: list[float] = []
    losses: list[torch.Tensor] = []
    saved: list[int] = []
    ckpt_s: list[float] = []
    order: list[int] = []
    order_epoch = -1
    window_t = 0.0
    window_n = 0
    while prog.step < cfg.steps:
        _crash_hook(prog.step + 1, rt.rank)
        t0 = time.perf_counter()
        if order_epoch != prog.epoch:
            sampler.set_epoch(prog.epoch)
            order = list(iter(sampler))
            order_epoch = prog.epoch
        idx = order[prog.batch_in_epoch * cfg.batch_size : (prog.batch_in_epoch + 1) * cfg.batch_size]
        xs, ys = zip(*(dataset[i] for i in idx))
        x = torch.stack(xs).to(rt.device, non_blocking=True)
        y = torch.stack(ys).to(rt.device, non_blocking=True)
        for g in opt.param_groups:
            g["lr"] = _lr_at(cfg, prog.step)
        with autocast:
            logits = ddp(x)
        loss = lm_loss(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        losses.append(mean_loss / rt.world_size)
        devmod.synchronize(rt.device)
        dt = time.perf_counter() - t0
        step_times.append(dt)
        window_t += dt
        window_n += 1

        prog.step += 1
        prog.batch_in_epoch += 1
        if prog.batch_in_epoch == steps_per_epoch:
            prog.epoch += 1
            prog.batch_in_epoch = 0
        if prog.step == 1:
            prog.loss_first = float(losses[-1])
        if prog.step % cfg.log_every == 0 or prog.step == cfg.steps:
            slowest = torch.tensor([window_t], dtype=torch.float64, device=rt.device)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            if rt.is_main:
                print(f"step {prog.step}/{cfg.steps} loss {float(losses[-1]):.4f} "
                      f"step_time {1e3 * float(slowest) / window_n:.1f} ms (slowest rank, mean "
                      f"of {window_n})", flush=True)
            window_t = 0.0
            window_n = 0
        if cfg.ckpt_dir is not None and cfg.ckpt_every and prog.step % cfg.ckpt_every == 0:
            prog.loss_last = float(losses[-1])
            t_ck = time.perf_counter()
            msd, osd = get_state_dict(ddp, opt)
            save_checkpoint(cfg.ckpt_dir, prog.step, {
                "model": msd, "optim": osd, "progress": asdict(prog), "identity": ident,
                rng_key: _rng_state(rt.device),
            }, rt, cfg.ckpt_keep)
            ckpt_s.append(time.perf_counter() - t_ck)
            saved.append(prog.step)
    if losses:
        prog.loss_last = float(losses[-1])
    return _report(cfg, rt, model, prog, step_times, resumed_from, saved, ckpt_s)


def _report(cfg: TrainConfig, rt: devmod.Runtime, model: GPT, prog: Progress,
            step_times: list[float], resumed_from: int | None, saved: list[int],
            ckpt_s: list[float]) -> dict[str, Any]:
    n = len(step_times)
    # Ranks that ran a different number of steps cannot happen (every step all-reduces);
    # the MAX over ranks per step is the step the job actually waited for.
    # Collective inputs live on the job's device: NCCL takes GPU tensors only.
    dev = rt.device
    slowest = torch.tensor(step_times or [0.0], dtype=torch.float64, device=dev)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    timed = slowest.tolist()[1:] if n > 1 else slowest.tolist()[:n]
    mine = step_times[1:] if n > 1 else step_times
    own_p50 = torch.tensor([statistics.median(mine) if mine else float("nan")],
                           dtype=torch.float64, device=dev)
    per_rank = [torch.zeros(1, dtype=torch.float64, device=dev) for _ in range(rt.world_size)]
    dist.all_gather(per_rank, own_p50)
    digest, psum = param_digest(model)
    digests: list[Any] = [None] * rt.world_size
    dist.all_gather_object(digests, digest)
    ck = torch.tensor([max(ckpt_s) if ckpt_s else 0.0], dtype=torch.float64, device=dev)
    dist.all_reduce(ck, op=dist.ReduceOp.MAX)

    p50 = statistics.median(timed) if timed else None
    tokens_per_step = cfg.batch_size * cfg.model.seq_len
    tps = tokens_per_step / p50 if p50 else None
    fpt = flops_per_token(cfg.model)
    mfu = tps * fpt / (cfg.peak_tflops * 1e12) if (tps and cfg.peak_tflops) else None
    return {
        "job": "ddp_train",
        "world_size": rt.world_size,
        "accelerator": rt.accelerator,
        "backend": rt.backend,
        "model": {**asdict(cfg.model), "params": total_params(cfg.model), "flops_per_token": fpt},
        "batch_size_per_rank": cfg.batch_size,
        "seq_len": cfg.model.seq_len,
        "steps": prog.step,
        "steps_this_run": n,
        "resumed_from_step": resumed_from,
        "epoch": prog.epoch,
        "loss_first": prog.loss_first,
        "loss_last": prog.loss_last,
        "step_time_p50_s": p50,
        "step_time_p90_s": _percentile(timed, 0.9) if timed else None,
        "step_time_p50_s_per_rank": [float(t) for t in per_rank],
        "samples_per_s_per_gpu": cfg.batch_size / p50 if p50 else None,
        "tokens_per_s_per_gpu": tps,
        "tokens_per_s_total": tps * rt.world_size if tps else None,
        "peak_tflops": cfg.peak_tflops,
        "peak_source": cfg.peak_source,
        "mfu": mfu,
        "param_sha256": digest,
        "param_sum": psum,
        "param_sha256_per_rank": digests,
        "params_identical_across_ranks": len(set(digests)) == 1,
        "checkpoints_saved": saved,
        "ckpt_save_s_max": float(ck) if ckpt_s else None,
    }


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def main(argv: list[str] | None = None) -> int:
    cfg, shards = parse_config(argv)
    rt = devmod.setup(force_cpu=True if cfg.force_cpu else None)
    try:
        result = train(cfg, shards, rt)
        if rt.is_main:
            mfu = ("n/a (no --peak-tflops/--instance-type)" if result["mfu"] is None
                   else f"{100 * result['mfu']:.1f}%")
            p50 = result["step_time_p50_s"]
            print(
                f"done: {result['steps']} steps, loss {_fmt(result['loss_first'])} -> "
                f"{_fmt(result['loss_last'])}, "
                + (f"step p50 {1e3 * p50:.1f} ms, {result['tokens_per_s_per_gpu']:.0f} tokens/s/gpu, "
                   if p50 else "")
                + f"MFU {mfu}, params {'identical' if result['params_identical_across_ranks'] else 'DIFFER'} "
                f"across ranks (sha256 {result['param_sha256'][:16]})",
                flush=True,
            )
            if cfg.json_path is not None:
                write_bytes_atomic(cfg.json_path, (json.dumps(result, indent=2) + "\n").encode())
        return 0 if result["params_identical_across_ranks"] else 1
    finally:
        devmod.teardown()


if __name__ == "__main__":
    from workloads.device import exit_process

    exit_process(main())
