"""The shared GPT split across ranks four ways, never whole on any rank, checked against one process.

    torchrun --nproc-per-node 8 -m workloads.parallel --mode fsdp --steps 20 --json out.json
    torchrun --nproc-per-node 8 -m workloads.parallel --mode 2d --tp 4
    torchrun --nproc-per-node 4 -m workloads.parallel --mode pipeline-1f1b --microbatches 8
    torchrun --nproc-per-node 2 -m workloads.parallel --mode fsdp,tp,pipeline --check-reference \
        --memory-budget-mib 1.3    # measured: one device peaks at 1.44 MiB, these modes at <= 1.17
    python -m workloads.parallel --mode reference      # the one-process run

``--mode`` takes one mode or a comma-separated list of the split modes, run one after the
other in the same job (one launch checks several on a cluster).

Your own model and data: ``--model MODULE:FACTORY`` (called under the meta device),
``--dataset MODULE:FACTORY`` (map-style ``(input, target)``), ``--loss`` and ``--plan
MODULE:FUNCTION`` returning a :class:`~workloads.parallel.plans.ShardingPlan`, or the plan
derived from the model's layer types (:func:`~workloads.parallel.plans.derive_plan`).
``--ckpt-dir DIR --ckpt-every K``: distributed checkpoints (:mod:`workloads.parallel.checkpoint`),
resumed from the newest complete one at whatever mode and world size the run has now.

Every split mode builds the model on the meta device, applies its parallelism, and only then
allocates and initialises this rank's shards (:mod:`workloads.parallel`), so the whole model
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
from :func:`workloads.train.data.synthetic_tokens`, or ``--data`` shards read in order), with AdamW.
The model's head is untied: a pipeline puts the embedding and the head on different ranks.

Memory: every rank measures the bytes of its parameter storage (the local shards, FSDP's
padding included) after materialisation, at the peak of materialisation (shards plus the
initialisation's scratch), and after every step, plus its gradients and optimizer state; and
the peak of everything it holds during the training steps, by kind: parameters (FSDP's
all-gathered blocks included while they live), gradients, optimizer state, activations
(:mod:`workloads.parallel.memory`: live tensor storages on CPU, the allocator's peak on GPU).
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

import argparse
import contextlib
import hashlib
import json
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from workloads.runtime import device as devmod
from workloads.runtime.atomic import write_bytes_atomic
from workloads.runtime.flags import Problems, output_dir_problem, output_file_problem
from workloads.train import plugins
from workloads.train.config import gpt_config
from workloads.train.data import TokenWindows, check_shards, synthetic_tokens
from workloads.train.model import GPT, GPTConfig, lm_loss, total_params
from workloads.parallel import checkpoint as ckpt
from workloads.parallel import memory, plans
from workloads.parallel.materialise import (
    FIGURES,
    Residency,
    init_local,
    materialise,
    meta_model,
    optimizer_state_bytes,
    storage_bytes,
)
from workloads.parallel.plans import stage_layers

__all__ = [
    "LOSS_RTOL",
    "MODES",
    "MPConfig",
    "compare",
    "main",
    "parse_config",
    "run_reference",
    "run_reference_measured",
    "stage_layers",
]

LOSS_RTOL = 1e-5
"""Largest relative difference allowed between a split run's loss and the reference's, per step (fp32)."""
SPLIT_MODES = ("fsdp", "tp", "2d", "pipeline", "pipeline-1f1b")
MODES = (*SPLIT_MODES, "reference")
PRECISIONS = ("auto", "fp32", "bf16")
MIB = 1 << 20


@dataclass(kw_only=True, frozen=True, slots=True)
class MPConfig:
    """One model-parallel run."""

    modes: tuple[str, ...]
    """Split modes in the order given, or ``reference`` alone."""
    model: GPTConfig
    """Model shape (head untied)."""
    batch_size: int
    """Global batch in sequences per step (split across data-parallel ranks or microbatches)."""
    microbatches: int
    """Pipeline microbatches per step; must divide ``batch_size``."""
    tp: int
    """Tensor-parallel degree of ``2d`` (``tp`` uses every rank)."""
    steps: int
    """Optimizer steps."""
    lr: float
    """AdamW learning rate."""
    seed: int
    """Seeds the weights and the synthetic data."""
    data: str | None
    """Optional shard glob; windows are taken in order. ``None``: synthetic tokens."""
    precision: str
    """``fp32``, ``bf16`` (FSDP2's mixed precision; ``fsdp`` and ``2d`` only) or ``auto`` (bf16 on GPU)."""
    memory_budget_bytes: int | None
    """Per-rank ceiling on everything held at the peak (materialising, training); ``None``: not enforced."""
    check_reference: bool
    """Rank 0 reruns the reference and fails the job outside :data:`LOSS_RTOL`."""
    json_path: Path | None
    """Final metrics as JSON (rank 0)."""
    force_cpu: bool
    """gloo on CPU even where GPUs are visible."""
    model_spec: str | None = None
    """``MODULE:FACTORY`` of the user's model (built on the meta device); ``None``: the bundled GPT."""
    dataset_spec: str | None = None
    """``MODULE:FACTORY`` of a map-style dataset of ``(input, target)``; ``None``: ``--data`` or synthetic."""
    loss_spec: str = "cross_entropy"
    """The user's model's loss (:func:`workloads.train.plugins.build_loss`); the GPT uses ``lm_loss``."""
    plan_spec: str | None = None
    """``MODULE:FUNCTION`` returning a :class:`~workloads.parallel.plans.ShardingPlan`; ``None``: derived."""
    user: UserModel | None = None
    """What the user's model is, read once from its meta build."""
    ckpt_dir: Path | None = None
    """Distributed checkpoints go here, and a run resumes from the newest complete one."""
    ckpt_every: int = 0
    """Save every this many steps (and after the last); 0: after the last only."""


@dataclass(kw_only=True, frozen=True, slots=True)
class UserModel:
    """Facts about the user's model, from its meta build (no storage)."""

    n_blocks: int
    """Blocks in the plan's block container."""
    blocks_named: bool
    """The container is a ``ModuleDict`` (else a ``ModuleList``, whose stage keeps the whole model's
    indices: its ``forward`` must walk the blocks, not index them)."""
    has_tp: bool
    """The plan has a tensor-parallel split."""
    n_params: int
    """Parameters of the whole model."""
    state_id: str
    """Hash of the state's names and shapes: what a checkpoint must have been written by."""


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m workloads.parallel",
        description="FSDP2, tensor-parallel, 2-D or pipeline training of a meta-built "
        "model, checked against one process.",
    )
    ap.add_argument(
        "--mode", required=True, help=f"one of {', '.join(MODES)}, or a comma-separated list of the split modes"
    )
    ap.add_argument("--vocab-size", default="256")
    ap.add_argument("--seq-len", default="16")
    ap.add_argument("--d-model", default="32")
    ap.add_argument("--n-layers", default="2", help="decoder blocks; at least the number of pipeline ranks")
    ap.add_argument("--n-heads", default="2", help="attention heads; divisible by the tensor-parallel degree")
    ap.add_argument("--batch-size", default="8", help="global sequences per step (default 8)")
    ap.add_argument("--microbatches", default="4", help="pipeline microbatches per step (default 4)")
    ap.add_argument("--tp", default="2", help="tensor-parallel degree of --mode 2d (default 2)")
    ap.add_argument("--steps", default="5")
    ap.add_argument("--lr", default="3e-3")
    ap.add_argument("--seed", default="0")
    ap.add_argument("--data", default=None, help="token shard glob (default: synthetic tokens)")
    ap.add_argument(
        "--precision", default="auto", help="fp32, bf16 or auto (bf16 for fsdp and 2d on GPU, fp32 otherwise)"
    )
    ap.add_argument(
        "--memory-budget-mib",
        "--param-budget-mib",
        dest="memory_budget_mib",
        default=None,
        help="fail if any rank's peak (parameters, gradients, optimizer state, activations) exceeds this many "
        "MiB; --param-budget-mib is its older name",
    )
    ap.add_argument(
        "--check-reference",
        action="store_true",
        help=f"rank 0 also runs the reference; exit 1 if a loss differs by more than rtol {LOSS_RTOL}",
    )
    ap.add_argument("--model", dest="model_spec", default=None, help="MODULE:FACTORY of your model (default: the GPT)")
    ap.add_argument(
        "--dataset", dest="dataset_spec", default=None, help="MODULE:FACTORY of a map-style (input, target) dataset"
    )
    ap.add_argument("--loss", default="cross_entropy", help="your model's loss: cross_entropy, mse or MODULE:FUNCTION")
    ap.add_argument(
        "--plan", dest="plan_spec", default=None, help="MODULE:FUNCTION(model) -> ShardingPlan (default: derived)"
    )
    ap.add_argument("--ckpt-dir", default=None, help="distributed checkpoints here; resume from the newest")
    ap.add_argument("--ckpt-every", default="0", help="save every K steps and after the last (0: after the last)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--cpu", action="store_true")
    return ap


def meta_user_model(spec: str, p: Problems) -> torch.nn.Module | None:
    """The user's model built under the meta device: shapes only, whatever its size."""
    with torch.device("meta"):
        return plugins.build_model(spec, p)


def user_plan(cfg_plan: str | None, model: torch.nn.Module, p: Problems) -> plans.ShardingPlan | None:
    """The declared (``--plan``) or derived plan of ``model``, problems added to ``p``."""
    flag = "--plan" if cfg_plan else "--model"
    if cfg_plan is None:
        plan: Any = plans.derive_plan(model)
        if plan is None:
            kinds = ", ".join(f"{n} ({type(m).__name__})" for n, m in model.named_children())
            p.add("--model", f"no ModuleList/ModuleDict of blocks among the model's children ({kinds}); give --plan")
            return None
    else:
        fn = plugins.resolve(cfg_plan, "--plan", "a ShardingPlan", p)
        if fn is None:
            return None
        try:
            plan = fn(model)
        except Exception as e:  # the user's plan failing is their spec's problem, not a crash
            p.add("--plan", f"{cfg_plan!r}: raised {type(e).__name__}: {e}")
            return None
    if problems := plans.plan_problems(model, plan, flag):
        p.extend(problems)
        return None
    assert isinstance(plan, plans.ShardingPlan)
    return plan


def _read_user_model(a: argparse.Namespace, p: Problems) -> UserModel | None:
    model = meta_user_model(a.model_spec, p)
    if model is None:
        return None
    if bufs := [n for n, _ in model.named_buffers()]:
        # to_empty leaves a meta-built buffer uninitialised: compute such values in forward.
        p.add("--model", f"{a.model_spec!r} has buffers {bufs[:4]}, which a meta build cannot initialise")
    plan = user_plan(a.plan_spec, model, p)
    if plan is None:
        return None
    shapes = "\n".join(f"{n}:{tuple(t.shape)}" for n, t in model.state_dict().items())
    return UserModel(
        n_blocks=len(getattr(model, plan.blocks)),
        blocks_named=isinstance(getattr(model, plan.blocks), torch.nn.ModuleDict),
        has_tp=bool(plan.tp),
        n_params=sum(t.numel() for t in model.parameters()),
        state_id=hashlib.sha256(shapes.encode()).hexdigest()[:16],
    )


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
    model = gpt_config(p, a, tie_weights=False)
    if not p:
        p.extend([(f"--{k.replace('_', '-')}", r) for k, r in model.problems()])
    batch = p.integer("--batch-size", a.batch_size, lo=1)
    micro = p.integer("--microbatches", a.microbatches, lo=1)
    if any(m.startswith("pipeline") for m in modes) and micro >= 1 and batch % micro:
        p.add("--microbatches", f"{micro} does not divide --batch-size {batch}")
    tp = p.integer("--tp", a.tp, lo=1)
    if "2d" in modes and not p:
        p.extend(plans.tp_problems(model, tp, "--tp"))
    steps = p.integer("--steps", a.steps, lo=1)
    lr = p.number("--lr", a.lr, gt=0.0)
    seed = p.integer("--seed", a.seed, lo=0)
    if a.precision not in PRECISIONS:
        p.add("--precision", f"{a.precision!r} (allowed: {', '.join(PRECISIONS)})")
    budget = None if a.memory_budget_mib is None else p.number("--memory-budget-mib", a.memory_budget_mib, gt=0.0)
    if a.data is not None and not p:
        _, problems = check_shards(a.data, seq_len=model.seq_len, vocab_size=model.vocab_size)
        p.extend(problems)
    json_path = Path(a.json) if a.json else None
    if json_path is not None and (why := output_file_problem(json_path)):
        p.add("--json", why)
    user = None
    if a.plan_spec is not None and a.model_spec is None:
        p.add("--plan", f"{a.plan_spec!r} splits a --model; the bundled GPT has its own plans")
    if a.model_spec is not None:
        user = _read_user_model(a, p)
        plugins.build_loss(a.loss, p)
    if a.dataset_spec is not None:
        if a.data is not None:
            p.add("--data", f"{a.data!r} and --dataset {a.dataset_spec!r} both name the training data: give one")
        ds = plugins.build_dataset(a.dataset_spec, p)
        if ds is not None and plugins.is_iterable(ds):
            p.add("--dataset", f"{a.dataset_spec!r} is an IterableDataset; model parallelism reads a map-style one")
    ckpt_every = p.integer("--ckpt-every", a.ckpt_every, lo=0)
    if a.ckpt_dir is None and ckpt_every:
        p.add("--ckpt-every", f"{ckpt_every} needs --ckpt-dir")
    if a.ckpt_dir is not None and (len(modes) != 1 or modes == ("reference",)):
        p.add("--ckpt-dir", f"checkpoints one split mode per run, got --mode {a.mode!r}")
    if a.ckpt_dir is not None and (why := output_dir_problem(Path(a.ckpt_dir))):
        # Found now, not at the first checkpoint after the training steps.
        p.add("--ckpt-dir", why)
    p.exit_if_any()
    return MPConfig(
        modes=modes,
        model=model,
        batch_size=batch,
        microbatches=micro,
        tp=tp,
        steps=steps,
        lr=lr,
        seed=seed,
        data=a.data,
        precision=a.precision,
        memory_budget_bytes=None if budget is None else int(budget * MIB),
        check_reference=bool(a.check_reference),
        json_path=json_path,
        force_cpu=bool(a.cpu),
        model_spec=a.model_spec,
        dataset_spec=a.dataset_spec,
        loss_spec=a.loss,
        plan_spec=a.plan_spec,
        user=user,
        ckpt_dir=Path(a.ckpt_dir) if a.ckpt_dir else None,
        ckpt_every=ckpt_every,
    )


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
    from workloads.runtime.device import exit_process

    exit_process(main())
