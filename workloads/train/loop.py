"""The training loop: DDP over the user's (or the bundled) model and data, measured per step."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import statistics
import time
from dataclasses import asdict
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

from gpu_cluster.workloads.runtime import device as devmod
from gpu_cluster.workloads.runtime.flags import fail
from gpu_cluster.workloads.train.model import GPT, flops_per_token, total_params
from gpu_cluster.workloads.train import plugins
from gpu_cluster.workloads.train.checkpoint import (
    Progress,
    identity,
    latest_checkpoint,
    layout,
    rng_state,
    save_checkpoint,
    seed_rank_streams,
    set_rng_state,
    step_crash_hook,
)
from gpu_cluster.workloads.train.config import Parts, TrainConfig
from gpu_cluster.workloads.train.sampling import RankShardedStream, ResumableSampler


def lr_at(cfg: TrainConfig, step: int) -> float:
    """Learning rate of the (0-based) step: linear warm-up, then cosine decay to
    ``min_lr_ratio * lr`` at the last step (nanoGPT's ``get_lr``), or constant."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.lr_schedule == "constant":
        return cfg.lr
    span = max(1, cfg.steps - 1 - cfg.warmup_steps)
    ratio = min(1.0, (step - cfg.warmup_steps) / span)
    low = cfg.lr * cfg.min_lr_ratio
    return low + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg.lr - low)


def param_digest(model: torch.nn.Module) -> tuple[str, float]:
    """SHA-256 of every parameter's bytes in name order (bitwise equality), and their sum."""
    h = hashlib.sha256()
    total = 0.0
    for name, p in model.named_parameters():
        t = p.detach().to("cpu", copy=True).contiguous()
        h.update(name.encode())
        h.update(t.float().numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes())
        total += float(t.double().sum())
    return h.hexdigest(), total


def _percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def _to(obj: Any, dev: torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(dev, non_blocking=True)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(o, dev) for o in obj)
    if isinstance(obj, dict):
        return {k: _to(v, dev) for k, v in obj.items()}
    return obj


class Batches:
    """Micro-batches of this rank, epoch by epoch, from a position saved as a global sample count."""

    def __init__(self, cfg: TrainConfig, parts: Parts, rt: devmod.Runtime) -> None:
        self.cfg, self.rt = cfg, rt
        self.iterable = plugins.is_iterable(parts.dataset)
        self.per_step = cfg.batch_size * cfg.grad_accum
        self.sampler: ResumableSampler | None = None
        source: Any = parts.dataset
        if self.iterable:
            source = RankShardedStream(parts.dataset, rank=rt.rank, world_size=rt.world_size)
        else:
            self.sampler = ResumableSampler(parts.dataset, num_replicas=rt.world_size, rank=rt.rank, seed=cfg.seed)
            if len(self.sampler) // self.per_step < 1:
                fail(
                    [
                        (
                            "--batch-size",
                            f"{cfg.batch_size} samples per rank x {cfg.grad_accum} micro-batches x "
                            f"{rt.world_size} ranks exceeds the {len(parts.dataset)} samples of "
                            f"{cfg.dataset_spec or cfg.data}: lower --batch-size or --grad-accum, or add data",
                        )
                    ]
                )
        self.source = source
        # Persistent workers keep their processes across epochs; the sampler runs in this
        # process, so its epoch and start still apply. A stream's epoch lives in the workers'
        # copy of it, so they are started afresh each epoch.
        self.loader = DataLoader(
            source,
            batch_size=cfg.batch_size,
            sampler=self.sampler,
            drop_last=True,
            num_workers=cfg.num_workers,
            pin_memory=rt.device.type == "cuda",
            persistent_workers=cfg.num_workers > 0 and not self.iterable,
        )
        self.it: Iterator[Any] | None = None
        self.steps_left = 0

    def steps_per_full_epoch(self) -> int | None:
        if self.sampler is None:
            return None
        return len(self.sampler.dataset) // self.rt.world_size // self.per_step  # type: ignore[arg-type]

    def _start(self, prog: Progress) -> None:
        if self.sampler is not None:
            self.sampler.set_epoch(prog.epoch)
            self.sampler.set_start(prog.samples_in_epoch)
            self.steps_left = len(self.sampler) // self.per_step
            self.it = iter(self.loader)
        else:
            self.source.set_epoch(prog.epoch)
            self.it = iter(self.loader)
            # A stream cannot seek: skip the micro-batches this rank has had this epoch.
            for _ in range(prog.samples_in_epoch // (self.rt.world_size * self.cfg.batch_size)):
                next(self.it, None)

    def next_step(self, prog: Progress) -> list[Any]:
        """The micro-batches of the next optimizer step, moving to the next epoch when this
        one has too few left (on every rank at once: every step all-reduces)."""
        for attempt in range(2):
            if self.it is None:
                self._start(prog)
            if self.sampler is not None and self.steps_left < 1:
                self._next_epoch(prog)
                continue
            assert self.it is not None
            micro = [b for _, b in zip(range(self.cfg.grad_accum), self.it)]
            if self.iterable:
                full = torch.tensor([1 if len(micro) == self.cfg.grad_accum else 0], device=self.rt.device)
                dist.all_reduce(full, op=dist.ReduceOp.MIN)
                if not int(full):
                    self._next_epoch(prog)
                    continue
            self.steps_left -= 1
            return micro
        devmod.fail_together(
            [
                (
                    "--dataset",
                    f"{self.cfg.dataset_spec}: an epoch of the stream gave some rank fewer than "
                    f"--batch-size x --grad-accum = {self.per_step} items (split over {self.rt.world_size} ranks "
                    f"x {max(1, self.cfg.num_workers)} readers)",
                )
            ]
        )

    def after_step(self, prog: Progress) -> None:
        """A map-style epoch ends with its last full step, so a checkpoint taken then (and the
        report) names the epoch the next batch comes from."""
        if self.sampler is not None and self.steps_left < 1:
            self._next_epoch(prog)

    def _next_epoch(self, prog: Progress) -> None:
        prog.epoch += 1
        prog.batch_in_epoch = 0
        prog.samples_in_epoch = 0
        self.it = None


def train(cfg: TrainConfig, parts: Parts, rt: devmod.Runtime) -> dict[str, Any]:
    on_gpu = rt.device.type == "cuda"
    if not on_gpu:
        # CPU runs are the reference: the same flags give the same bits, resumed or not.
        torch.use_deterministic_algorithms(True)
    batches = Batches(cfg, parts, rt)
    if parts.user_model is None:
        torch.manual_seed(cfg.seed)  # identical initial weights on every rank
        model: torch.nn.Module = GPT(cfg.model)
    else:
        model = parts.user_model  # built by parse_config under the same seed
    model = model.to(rt.device)
    ddp = DDP(model, device_ids=[rt.device.index] if on_gpu else None, gradient_as_bucket_view=True)
    opt = torch.optim.AdamW(ddp.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    seed_rank_streams(cfg.seed, rt.rank)
    n_params = sum(p.numel() for p in model.parameters())
    if rt.is_main:
        what = cfg.model_spec or "GPT"
        data = (
            f"{len(parts.dataset)} samples, {batches.steps_per_full_epoch()} steps/epoch"
            if batches.sampler is not None
            else f"stream {cfg.dataset_spec}"
        )
        print(
            f"ddp_train: {rt.world_size} ranks on {rt.accelerator} ({rt.backend}), {what} "
            f"{n_params:,} params, {data}, batch {cfg.batch_size}/rank x {cfg.grad_accum} accum "
            f"= {cfg.batch_size * cfg.grad_accum * rt.world_size} global",
            flush=True,
        )

    ident = identity(cfg, parts, model)
    lay = layout(cfg, rt)
    prog = Progress()
    resumed_from: int | None = None
    resharded_from: dict[str, Any] | None = None
    rng_key = f"rng_rank{rt.rank}"
    if cfg.ckpt_dir is not None:
        # Imported only when used: it pulls in DTensor, seconds of start-up on a busy host.
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
        from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

        found = latest_checkpoint(cfg.ckpt_dir, rt)
        if found is not None:
            path, marker = found
            same_world = marker.get("world_size") == rt.world_size
            msd, osd = get_state_dict(ddp, opt)
            state: dict[str, Any] = {
                "model": msd,
                "optim": osd,
                "progress": json.dumps(asdict(Progress())),
                "identity": json.dumps(ident),
            }
            if same_world:
                state[rng_key] = rng_state(rt.device)
            dcp_load(state, checkpoint_id=path)
            saved = json.loads(state["identity"])
            mismatched = [k for k in ident if saved.get(k) != ident[k]]
            if mismatched:
                devmod.fail_together(
                    [
                        (
                            "--ckpt-dir",
                            f"{path} was written by a run with different {k}: "
                            f"{saved.get(k)!r}, this run has {ident[k]!r}; resuming needs the same value "
                            "(or use a fresh --ckpt-dir)",
                        )
                        for k in mismatched
                    ]
                )
            set_state_dict(ddp, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
            prog = Progress(**json.loads(state["progress"]))
            resumed_from = prog.step
            if same_world:
                set_rng_state(state[rng_key], rt.device)
            else:
                seed_rank_streams(cfg.seed, rt.rank, prog.step)
                resharded_from = {k: marker.get(k) for k in lay}
            if rt.is_main:
                print(
                    f"resumed from {path} (step {prog.step}, epoch {prog.epoch}, batch {prog.batch_in_epoch})",
                    flush=True,
                )
                if resharded_from is not None:
                    print(
                        f"resharded: written by {resharded_from}, loaded by {lay} (DCP); the data goes on "
                        f"at sample {prog.samples_in_epoch} of epoch {prog.epoch}",
                        flush=True,
                    )

    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=on_gpu)
    step_times: list[float] = []
    losses: list[torch.Tensor] = []
    lrs: list[float] = []
    saved_steps: list[int] = []
    ckpt_s: list[float] = []
    window_t = 0.0
    window_n = 0
    k_last = cfg.grad_accum - 1
    while prog.step < cfg.steps:
        step_crash_hook(prog.step + 1, rt.rank)
        t0 = time.perf_counter()
        micro = batches.next_step(prog)
        lr = lr_at(cfg, prog.step)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        total = torch.zeros((), device=rt.device)
        for k, batch in enumerate(micro):
            if not (isinstance(batch, (list, tuple)) and len(batch) == 2):
                fail(
                    [
                        (
                            "--dataset",
                            f"{cfg.dataset_spec}: items must be (input, target) pairs; a collated "
                            f"batch came out as {type(batch).__name__}"
                            + (f" of {len(batch)}" if isinstance(batch, (list, tuple)) else ""),
                        )
                    ]
                )
            x, y = _to(batch[0], rt.device), _to(batch[1], rt.device)
            # Only the last micro-batch all-reduces: the others add into the local gradients.
            with contextlib.nullcontext() if k == k_last else ddp.no_sync():
                with autocast:
                    out = ddp(x)
                loss = parts.loss_fn(out, y)
                (loss / cfg.grad_accum if cfg.grad_accum > 1 else loss).backward()  # type: ignore[no-untyped-call]
            total = total + loss.detach()
        if cfg.clip_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(ddp.parameters(), cfg.clip_grad_norm)
        opt.step()
        mean_loss = total / cfg.grad_accum if cfg.grad_accum > 1 else total
        dist.all_reduce(mean_loss)
        losses.append(mean_loss / rt.world_size)
        lrs.append(lr)
        devmod.synchronize(rt.device)
        dt = time.perf_counter() - t0
        step_times.append(dt)
        window_t += dt
        window_n += 1

        prog.step += 1
        prog.batch_in_epoch += 1
        prog.samples_in_epoch += cfg.batch_size * cfg.grad_accum * rt.world_size
        batches.after_step(prog)
        if prog.step == 1:
            prog.loss_first = float(losses[-1])
        if prog.step % cfg.log_every == 0 or prog.step == cfg.steps:
            slowest = torch.tensor([window_t], dtype=torch.float64, device=rt.device)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            if rt.is_main:
                print(
                    f"step {prog.step}/{cfg.steps} loss {float(losses[-1]):.4f} lr {lr:.3e} "
                    f"step_time {1e3 * float(slowest) / window_n:.1f} ms (slowest rank, mean "
                    f"of {window_n})",
                    flush=True,
                )
            window_t = 0.0
            window_n = 0
        if cfg.ckpt_dir is not None and cfg.ckpt_every and prog.step % cfg.ckpt_every == 0:
            prog.loss_last = float(losses[-1])
            t_ck = time.perf_counter()
            msd, osd = get_state_dict(ddp, opt)
            save_checkpoint(
                cfg.ckpt_dir,
                prog.step,
                {
                    "model": msd,
                    "optim": osd,
                    "progress": json.dumps(asdict(prog)),
                    "identity": json.dumps(ident),
                    rng_key: rng_state(rt.device),
                },
                rt,
                cfg.ckpt_keep,
                lay,
            )
            ckpt_s.append(time.perf_counter() - t_ck)
            saved_steps.append(prog.step)
    if losses:
        prog.loss_last = float(losses[-1])
    curve = [[prog.step - len(losses) + 1 + i, float(v)] for i, v in enumerate(losses)]
    result = _report(cfg, rt, model, n_params, prog, step_times, resumed_from, saved_steps, ckpt_s)
    result.update(loss_curve=curve, lr_curve=lrs, resharded_from=resharded_from, layout=lay)
    return result


def _report(
    cfg: TrainConfig,
    rt: devmod.Runtime,
    model: torch.nn.Module,
    n_params: int,
    prog: Progress,
    step_times: list[float],
    resumed_from: int | None,
    saved: list[int],
    ckpt_s: list[float],
) -> dict[str, Any]:
    n = len(step_times)
    # Ranks that ran a different number of steps cannot happen (every step all-reduces);
    # the MAX over ranks per step is the step the job actually waited for.
    # Collective inputs live on the job's device: NCCL takes GPU tensors only.
    dev = rt.device
    slowest = torch.tensor(step_times or [0.0], dtype=torch.float64, device=dev)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    timed = slowest.tolist()[1:] if n > 1 else slowest.tolist()[:n]
    mine = step_times[1:] if n > 1 else step_times
    own_p50 = torch.tensor([statistics.median(mine) if mine else float("nan")], dtype=torch.float64, device=dev)
    per_rank = [torch.zeros(1, dtype=torch.float64, device=dev) for _ in range(rt.world_size)]
    dist.all_gather(per_rank, own_p50)
    digest, psum = param_digest(model)
    digests: list[Any] = [None] * rt.world_size
    dist.all_gather_object(digests, digest)
    ck = torch.tensor([max(ckpt_s) if ckpt_s else 0.0], dtype=torch.float64, device=dev)
    dist.all_reduce(ck, op=dist.ReduceOp.MAX)

    p50 = statistics.median(timed) if timed else None
    samples_per_step = cfg.batch_size * cfg.grad_accum
    gpt = cfg.model_spec is None and cfg.dataset_spec is None
    tps = samples_per_step * cfg.model.seq_len / p50 if (p50 and gpt) else None
    fpt = flops_per_token(cfg.model) if cfg.model_spec is None else None
    mfu = tps * fpt / (cfg.peak_tflops * 1e12) if (tps and fpt and cfg.peak_tflops) else None
    model_info: dict[str, Any] = (
        {**asdict(cfg.model), "params": total_params(cfg.model), "flops_per_token": fpt}
        if cfg.model_spec is None
        else {"spec": cfg.model_spec, "params": n_params, "flops_per_token": None}
    )
    return {
        "job": "ddp_train",
        "world_size": rt.world_size,
        "accelerator": rt.accelerator,
        "backend": rt.backend,
        "model": model_info,
        "dataset": cfg.dataset_spec or cfg.data,
        "batch_size_per_rank": cfg.batch_size,
        "grad_accum": cfg.grad_accum,
        "global_batch": samples_per_step * rt.world_size,
        "seq_len": cfg.model.seq_len if gpt else None,
        "lr_schedule": cfg.lr_schedule,
        "clip_grad_norm": cfg.clip_grad_norm,
        "steps": prog.step,
        "steps_this_run": n,
        "resumed_from_step": resumed_from,
        "epoch": prog.epoch,
        "loss_first": prog.loss_first,
        "loss_last": prog.loss_last,
        "step_time_p50_s": p50,
        "step_time_p90_s": _percentile(timed, 0.9) if timed else None,
        "step_time_p50_s_per_rank": [float(t) for t in per_rank],
        "samples_per_s_per_gpu": samples_per_step / p50 if p50 else None,
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
