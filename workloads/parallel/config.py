"""A model-parallel run's configuration: the flags parsed into :class:`MPConfig`, with the user's
model, plan, dataset and loss built and checked before any rank starts (every problem at once).
"""

from __future__ import annotations

import argparse
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gpu_cluster.workloads.runtime.flags import Problems, output_dir_problem, output_file_problem
from gpu_cluster.workloads.train import plugins
from gpu_cluster.workloads.train.config import gpt_config
from gpu_cluster.workloads.train.data import check_shards
from gpu_cluster.workloads.train.model import GPTConfig
from gpu_cluster.workloads.parallel import plans


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
    """The user's model's loss (:func:`gpu_cluster.workloads.train.plugins.build_loss`); the GPT uses ``lm_loss``."""
    plan_spec: str | None = None
    """``MODULE:FUNCTION`` returning a :class:`~gpu_cluster.workloads.parallel.plans.ShardingPlan`; ``None``: derived."""
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
        prog="python -m gpu_cluster.workloads.parallel",
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
    if a.plan_spec is None and {m.strip() for m in a.mode.split(",")} & {"tp", "2d"}:
        if fused := plans.fused_projections(model, plan):
            path, why = fused[0]
            more = f" (and {len(fused) - 1} more like it)" if len(fused) > 1 else ""
            p.add(
                "--model",
                f"cannot derive a tensor-parallel plan: {path}: {why}{more}; declare one with --plan MODULE:FUNCTION "
                "that splits it by section, or keep q, k and v (gate and up) as separate Linears",
            )
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
