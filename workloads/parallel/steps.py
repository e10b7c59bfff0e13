"""The training steps: the same batches and AdamW in the one-process reference and in every split
mode (FSDP2, tensor parallel, 2-D, pipeline), with each rank's memory measured as it goes.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from gpu_cluster.workloads.runtime import device as devmod
from gpu_cluster.workloads.runtime.flags import Problems
from gpu_cluster.workloads.train import plugins
from gpu_cluster.workloads.train.data import TokenWindows, check_shards, synthetic_tokens
from gpu_cluster.workloads.train.model import GPT, lm_loss, total_params
from gpu_cluster.workloads.parallel import checkpoint as ckpt
from gpu_cluster.workloads.parallel import memory, plans
from gpu_cluster.workloads.parallel.materialise import (
    Residency,
    init_local,
    materialise,
    meta_model,
    optimizer_state_bytes,
    storage_bytes,
)
from gpu_cluster.workloads.parallel.config import MPConfig, meta_user_model, user_plan


def loss_fn(cfg: MPConfig) -> plugins.LossFn:
    if cfg.model_spec is None:
        return lm_loss
    fn = plugins.build_loss(cfg.loss_spec, Problems())
    assert fn is not None  # checked by parse_config
    return fn


def build_meta(cfg: MPConfig) -> torch.nn.Module:
    """The model on the meta device: the GPT, or the user's factory called under it."""
    if cfg.model_spec is None:
        return meta_model(cfg.model)
    p = Problems()
    model = meta_user_model(cfg.model_spec, p)
    p.exit_if_any()
    assert model is not None
    return model


def param_count(cfg: MPConfig) -> int:
    return cfg.user.n_params if cfg.user is not None else total_params(cfg.model)


def identity(cfg: MPConfig) -> dict[str, Any]:
    """What a checkpoint must have been written by to be resumed here (the layout may differ)."""
    if cfg.user is None:
        model: Any = asdict(cfg.model)
    else:
        model = f"{cfg.model_spec} (state {cfg.user.state_id})"
    data = cfg.data or (f"{cfg.dataset_spec}" if cfg.dataset_spec else "synthetic")
    return {"seed": cfg.seed, "model": model, "data": data, "batch_size": cfg.batch_size, "lr": cfg.lr}


def batches(cfg: MPConfig) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The ``steps`` global batches ``(inputs, targets)``, identical in every process."""
    t, b = cfg.model.seq_len, cfg.batch_size
    if cfg.dataset_spec is not None:
        ds = plugins.build_dataset(cfg.dataset_spec, Problems())
        out = []
        for s in range(cfg.steps):
            xs, ys = zip(*(ds[(s * b + j) % len(ds)] for j in range(b)))
            out.append((torch.stack(xs), torch.stack(ys)))
        return out
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


def _adamw(params: Any, cfg: MPConfig) -> torch.optim.Optimizer:
    # foreach=False: the same per-parameter kernels whether a parameter is whole, a DTensor
    # shard or on a pipeline stage, so only the gradients' summation order differs.
    return torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.1, foreach=False)


def run_reference(cfg: MPConfig, device: torch.device | None = None) -> list[float]:
    """Loss per step of the unsplit model on the whole batch, in this process."""
    return run_reference_measured(cfg, device, measure=False)[0]


def run_reference_measured(
    cfg: MPConfig, device: torch.device | None = None, *, measure: bool = True
) -> tuple[list[float], memory.Peak | None]:
    """:func:`run_reference`, and the one-device peak of everything it held (``measure``)."""
    device = device or torch.device("cpu")
    data = batches(cfg)
    model: torch.nn.Module
    if cfg.model_spec is None:
        model = GPT(cfg.model).to(device)
    else:
        p = Problems()
        built = plugins.build_model(cfg.model_spec, p)
        p.exit_if_any()
        assert built is not None
        model = built.to(device)
    init_local(model, cfg.model if cfg.user is None else None, cfg.seed)  # what every split run's shards get
    opt = _adamw(model.parameters(), cfg)
    lossf = loss_fn(cfg)
    losses = []
    with memory.tracked(device, model, opt) if measure else contextlib.nullcontext() as tr:
        for x, y in data:
            loss = lossf(model(x.to(device)), y.to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            losses.append(float(loss.detach()))
            if tr is not None:
                tr.step()
    peak = None
    if tr is not None:
        peak = tr.peak or _cuda_peak(device, model, opt)
    return losses, peak


def _cuda_peak(device: torch.device, model: torch.nn.Module, opt: torch.optim.Optimizer) -> memory.Peak:
    """The allocator's peak with the resident parameters, gradients and optimizer state counted."""
    return memory.from_cuda(
        int(torch.cuda.max_memory_allocated(device)),
        storage_bytes(model.parameters()),
        storage_bytes(p.grad for p in model.parameters() if p.grad is not None),
        optimizer_state_bytes(opt),
    )


def uses_bf16(cfg: MPConfig, mode: str, device: torch.device) -> bool:
    """Whether ``mode`` computes in bf16: FSDP2's policy only, as torchtitan (see plans)."""
    if mode not in ("fsdp", "2d"):
        return False
    return cfg.precision == "bf16" or (cfg.precision == "auto" and device.type == "cuda")


def _data_parallel(mode: str, cfg: MPConfig, world: int, rank: int) -> tuple[int, int]:
    """Data-parallel groups and this rank's group (consecutive ranks share a 2-D tp group)."""
    return {"fsdp": (world, rank), "2d": (world // cfg.tp, rank // cfg.tp)}.get(mode, (1, 0))


def world_problems(cfg: MPConfig, world: int) -> list[tuple[str, str]]:
    """What the modes cannot do at this world size, all of them, before any runs."""
    out: list[tuple[str, str]] = []
    for mode in cfg.modes:
        if mode == "2d" and world % cfg.tp:
            out.append(("--tp", f"{cfg.tp} does not divide the {world} ranks"))
            continue
        if mode in ("tp", "2d") and cfg.user is not None and not cfg.user.has_tp:
            out.append(
                ("--plan", f"the model has no tensor-parallel plan for {mode} (no column-/row-wise Linear pair found)")
            )
        elif mode == "tp" and cfg.user is None:
            out.extend(plans.tp_problems(cfg.model, world, "--n-heads"))
        dp, _ = _data_parallel(mode, cfg, world, 0)
        if cfg.batch_size % dp:
            out.append(
                ("--batch-size", f"{cfg.batch_size} is not divisible by the {dp} data-parallel groups of {mode}")
            )
        if mode.startswith("pipeline") and cfg.user is not None:
            if cfg.user.n_blocks < world:
                out.append(("--model", f"{cfg.user.n_blocks} blocks cannot fill {world} pipeline stages"))
        elif mode.startswith("pipeline") and cfg.model.n_layers < world:
            out.append(("--n-layers", f"{cfg.model.n_layers} blocks cannot fill {world} pipeline stages"))
        if mode == "pipeline-1f1b" and cfg.microbatches < world:
            out.append(("--microbatches", f"{cfg.microbatches}: 1F1B needs at least one per stage ({world})"))
    return list(dict.fromkeys(out))


def run_split(mode: str, cfg: MPConfig, rt: devmod.Runtime) -> tuple[list[float], Residency]:
    """Build ``mode``'s shards of the model on this rank, train (resuming from ``--ckpt-dir``'s
    newest checkpoint, at whatever layout wrote it), and measure what it held."""
    from torch.distributed.device_mesh import init_device_mesh

    n, dev = rt.world_size, rt.device
    dp, dp_rank = _data_parallel(mode, cfg, n, rt.rank)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    bf16 = uses_bf16(cfg, mode, dev)
    model = build_meta(cfg)
    plan = None
    if cfg.model_spec is not None:
        p = Problems()
        plan = user_plan(cfg.plan_spec, model, p)
        p.exit_if_any()
    # Explicit meshes on the job's device type: left alone, FSDP picks CUDA whenever it is
    # visible, even for a --cpu run.
    if mode == "fsdp":
        _fsdp(model, plan, init_device_mesh(dev.type, (n,)), bf16)
    elif mode == "tp":
        _tp(model, plan, init_device_mesh(dev.type, (n,)))
    elif mode == "2d":
        mesh = plans.mesh_2d(dev.type, n, cfg.tp)
        _tp(model, plan, mesh["tp"])
        _fsdp(model, plan, mesh["dp"], bf16)
    elif plan is not None:
        plans.pipeline_part_plan(model, plan, rt.rank, n)
    else:
        assert isinstance(model, GPT)
        plans.pipeline_part(model, rt.rank, n)
    res = materialise(model, cfg.model if plan is None else None, cfg.seed, dev)
    opt = _adamw(model.parameters(), cfg)
    start, losses = 0, list[float]()
    if cfg.ckpt_dir is not None:
        start, losses = _resume(mode, cfg, model, opt, rt)
    per = cfg.batch_size // dp
    lo, hi = dp_rank * per, (dp_rank + 1) * per
    lossf = loss_fn(cfg)
    schedule = None
    if mode.startswith("pipeline"):
        schedule = plans.pipeline_schedule(
            model, rt.rank, n, dev, "1f1b" if mode.endswith("1f1b") else "gpipe", cfg.microbatches, lossf
        )
    data = batches(cfg)
    # On CUDA the allocator's peak runs from the reset above, materialisation included.
    with contextlib.nullcontext() if dev.type == "cuda" else memory.tracked(dev, model, opt) as tr:
        for step, (x, y) in enumerate(data):
            if step < start:
                continue  # taken before the checkpoint: the batches are a function of the step
            ckpt.crash_hook(step + 1, rt.rank)
            opt.zero_grad(set_to_none=True)
            if schedule is None:
                loss = lossf(model(x[lo:hi].to(dev)), y[lo:hi].to(dev))
                loss.backward()  # type: ignore[no-untyped-call]
                mean = loss.detach().clone()
            else:
                mean = _pipeline_step(schedule, x.to(dev), y.to(dev), rt)
            opt.step()
            losses.append(_global_mean(mean, mode, rt))
            res.samples.append(storage_bytes(model.parameters()))
            if tr is not None:
                tr.step()
            done = step + 1
            if cfg.ckpt_dir is not None and (done == cfg.steps or (cfg.ckpt_every and done % cfg.ckpt_every == 0)):
                marker = {"mode": mode, "world_size": n, "losses": losses, "identity": identity(cfg)}
                ckpt.save(cfg.ckpt_dir, done, model, opt, rt, marker)
    res.peak_between_steps = max(res.samples, default=res.materialised)
    res.grads = storage_bytes(p.grad for p in model.parameters() if p.grad is not None)
    res.optimizer = optimizer_state_bytes(opt)
    if dev.type == "cuda":
        res.device_peak = int(torch.cuda.max_memory_allocated(dev))
        res.peak = _cuda_peak(dev, model, opt)
    else:
        res.peak = tr.peak if tr is not None else None
    return losses, res


def _fsdp(model: torch.nn.Module, plan: plans.ShardingPlan | None, mesh: Any, bf16: bool) -> None:
    if plan is not None:
        plans.apply_fsdp_plan(model, plan, mesh, bf16)
    else:
        assert isinstance(model, GPT)
        plans.apply_fsdp(model, mesh, bf16)


def _tp(model: torch.nn.Module, plan: plans.ShardingPlan | None, mesh: Any) -> None:
    if plan is not None:
        plans.apply_tp_plan(model, plan, mesh)
    else:
        assert isinstance(model, GPT)
        plans.apply_tp(model, mesh)


def _resume(
    mode: str, cfg: MPConfig, model: torch.nn.Module, opt: torch.optim.Optimizer, rt: devmod.Runtime
) -> tuple[int, list[float]]:
    """Load the newest complete checkpoint into this layout: the step it ends at and its losses."""
    assert cfg.ckpt_dir is not None
    found = ckpt.peek(cfg.ckpt_dir, rt)
    if found is None:
        return 0, []
    path, marker = found
    if problems := ckpt.mismatches(marker, identity(cfg)):
        devmod.fail_together([(flag, f"{path}: {why}") for flag, why in problems])  # every rank read the same marker
    loaded = ckpt.load_latest(cfg.ckpt_dir, model, opt, rt)
    assert loaded is not None and loaded[0] == path
    step = int(marker["step"])
    if rt.is_main:
        print(
            f"model_parallel {mode}: resuming after step {step} from {path} "
            f"(written by {marker.get('mode')} on {marker.get('world_size')} ranks; now {mode} on {rt.world_size})",
            flush=True,
        )
    return step, [float(v) for v in marker["losses"]]


def _pipeline_step(schedule: Any, x: torch.Tensor, y: torch.Tensor, rt: devmod.Runtime) -> torch.Tensor:
    n = rt.world_size
    mb_losses: list[torch.Tensor] = []
    if rt.rank == 0 and n > 1:
        schedule.step(x)
    elif rt.rank == n - 1:
        schedule.step(*((x,) if n == 1 else ()), target=y, losses=mb_losses)
    else:
        schedule.step()
    # Equal microbatches: the batch's mean loss is the mean of the microbatch means.
    return torch.stack(mb_losses).mean().detach() if mb_losses else torch.zeros((), device=rt.device)


def _global_mean(local: torch.Tensor, mode: str, rt: devmod.Runtime) -> float:
    """The global batch's mean loss from each rank's own."""
    if mode.startswith("pipeline"):
        dist.broadcast(local, src=rt.world_size - 1)  # only the last stage scored the targets
        return float(local)
    # fsdp: each rank a slice; 2d: each dp group a slice, its tp ranks the same value; tp: all equal.
    dist.all_reduce(local)
    return float(local) / rt.world_size
