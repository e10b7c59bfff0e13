"""The trainer's flags: parsed, converted and checked together before any process group starts."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gpu_cluster.workloads.runtime.flags import Problems, output_dir_problem, output_file_problem
from gpu_cluster.workloads.train.data import Shard, TokenWindows, check_shards
from gpu_cluster.workloads.train.model import GPTConfig
from gpu_cluster.workloads.train import plugins

LR_SCHEDULES = ("cosine", "constant")


@dataclass(kw_only=True, frozen=True, slots=True)
class TrainConfig:
    """Everything a run depends on, parsed and checked from the flags."""

    data: str | None
    """Glob of token shards on shared storage, e.g. ``/fsx/data/train-*.bin``; ``None`` with ``--dataset``."""
    model: GPTConfig
    """Shape of the bundled GPT (unused when ``model_spec`` is given)."""
    model_spec: str | None
    """``MODULE:FACTORY`` of the user's model; ``None`` for the bundled GPT."""
    dataset_spec: str | None
    """``MODULE:FACTORY`` of the user's dataset; ``None`` for the token shards of ``data``."""
    loss_spec: str
    """``cross_entropy``, ``mse`` or ``MODULE:FUNCTION``."""
    batch_size: int
    """Samples per rank per micro-batch."""
    grad_accum: int
    """Micro-batches per optimizer step: the global batch is ``batch_size * grad_accum * world_size``."""
    steps: int
    """Optimizer steps in total; a resumed run stops at the same step as an uninterrupted one."""
    lr: float
    """Peak AdamW learning rate."""
    warmup_steps: int
    """Linear learning-rate warm-up from ``lr / warmup_steps`` to ``lr``; 0 for none."""
    lr_schedule: str
    """After warm-up: ``cosine`` decay to ``min_lr_ratio * lr`` at the last step, or ``constant``."""
    min_lr_ratio: float
    """Where the cosine ends, as a fraction of ``lr``."""
    clip_grad_norm: float
    """Clip the global gradient norm to this before each optimizer step; 0 for no clipping."""
    weight_decay: float
    """AdamW decoupled weight decay."""
    seed: int
    """Seeds initial weights, the sampler's shuffle and every rank's RNG streams."""
    num_workers: int
    """DataLoader worker processes per rank (0: load in the training process)."""
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


@dataclass(kw_only=True, slots=True)
class Parts:
    """What the flags name, built once per process: the data, the user's model, the loss."""

    shards: list[Shard]
    """The checked token shards (empty with ``--dataset``)."""
    dataset: Any
    """Map-style or iterable dataset of ``(input, target)`` pairs."""
    user_model: torch.nn.Module | None
    """The ``--model`` factory's module, built on the CPU; ``None``: the bundled GPT, built in the loop."""
    loss_fn: plugins.LossFn
    """``(output, target) -> scalar``."""


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m gpu_cluster.workloads.train",
        description="DDP training of a small GPT on token shards (or your own model and data), with exact resume.",
    )
    ap.add_argument(
        "--data", default=None, help="glob of token shards (quote it), e.g. '/fsx/data/train-*.bin'; not with --dataset"
    )
    u = ap.add_argument_group("your own model and data")
    u.add_argument(
        "--model",
        dest="model_spec",
        default=None,
        metavar="MODULE:FACTORY",
        help="callable returning a torch.nn.Module (default: the bundled GPT and its flags below)",
    )
    u.add_argument(
        "--dataset",
        dest="dataset_spec",
        default=None,
        metavar="MODULE:FACTORY",
        help="callable returning a map-style or iterable dataset of (input, target) pairs "
        "(default: the token shards of --data)",
    )
    u.add_argument(
        "--loss",
        default="cross_entropy",
        help="cross_entropy (default), mse, or MODULE:FUNCTION taking (output, target)",
    )
    m = ap.add_argument_group("bundled GPT")
    m.add_argument("--vocab-size", default="256", help="token ids the model covers (default 256)")
    m.add_argument("--seq-len", default="16", help="tokens per training window (default 16)")
    m.add_argument("--d-model", default="32", help="residual width (default 32)")
    m.add_argument("--n-layers", default="2", help="decoder blocks (default 2)")
    m.add_argument("--n-heads", default="2", help="attention heads, dividing --d-model (default 2)")
    m.add_argument("--untied", action="store_true", help="separate output head instead of the tied embedding")
    t = ap.add_argument_group("training")
    t.add_argument("--batch-size", default="8", help="samples per rank per micro-batch (default 8)")
    t.add_argument("--grad-accum", default="1", help="micro-batches per optimizer step (default 1)")
    t.add_argument("--steps", default="20", help="optimizer steps in total (default 20)")
    t.add_argument("--lr", default="3e-3", help="peak AdamW learning rate (default 3e-3)")
    t.add_argument("--warmup-steps", default="0", help="linear LR warm-up steps (default 0)")
    t.add_argument("--lr-schedule", default="cosine", help="after warm-up: cosine (default) or constant")
    t.add_argument("--min-lr-ratio", default="0.1", help="cosine ends at this fraction of --lr (default 0.1)")
    t.add_argument("--clip-grad-norm", default="1.0", help="max global gradient norm, 0 = no clipping (default 1.0)")
    t.add_argument("--weight-decay", default="0.1", help="AdamW weight decay (default 0.1)")
    t.add_argument("--seed", default="0", help="seed for weights, shuffle and RNG streams (default 0)")
    t.add_argument("--num-workers", default="2", help="DataLoader workers per rank (default 2)")
    t.add_argument("--cpu", action="store_true", help="run on CPU/gloo even if GPUs are visible")
    c = ap.add_argument_group("checkpoints")
    c.add_argument(
        "--ckpt-dir",
        default=None,
        help="checkpoint directory on shared storage; resumes from its newest complete step_<N>, "
        "at this run's world size",
    )
    c.add_argument("--ckpt-every", default="0", help="checkpoint every K steps (needs --ckpt-dir; default 0 = never)")
    c.add_argument("--ckpt-keep", default="2", help="complete checkpoints to keep, 0 = all (default 2)")
    o = ap.add_argument_group("reporting")
    o.add_argument("--log-every", default="10", help="print every N steps (default 10)")
    o.add_argument("--peak-tflops", default=None, help="peak dense bf16 TFLOP/s per accelerator, for MFU")
    o.add_argument(
        "--instance-type", default=None, help="take the MFU peak from the hardware catalog entry of this instance type"
    )
    o.add_argument("--json", default=None, help="write the final metrics to this JSON file")
    return ap


def _peak_from_catalog(instance_type: str, p: Problems) -> tuple[float | None, str | None]:
    try:
        # Imported here: a run given --peak-tflops must not need the catalog at all.
        from gpu_cluster.components.catalog import load_catalog
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
        p.add(
            "--instance-type",
            f"the catalog has no peak dense bf16 TFLOP/s for {instance_type}; give --peak-tflops instead",
        )
        return None, None
    return float(peak), f"catalog {instance_type} ({it.accelerator.model})"


def gpt_config(p: Problems, a: argparse.Namespace, *, tie_weights: bool = True) -> GPTConfig:
    """The GPT's shape from ``--vocab-size``, ``--seq-len``, ``--d-model``, ``--n-layers`` and
    ``--n-heads``; each flag that is no integer or under its minimum is added to ``p``."""
    return GPTConfig(
        vocab_size=p.integer("--vocab-size", a.vocab_size, lo=2),
        seq_len=p.integer("--seq-len", a.seq_len, lo=1),
        d_model=p.integer("--d-model", a.d_model, lo=1),
        n_layers=p.integer("--n-layers", a.n_layers, lo=1),
        n_heads=p.integer("--n-heads", a.n_heads, lo=1),
        tie_weights=tie_weights,
    )


def parse_config(argv: list[str] | None = None) -> tuple[TrainConfig, Parts]:
    """Convert and check every flag, shard and factory; all problems reported at once, exit 2."""
    a = build_parser().parse_args(argv)
    p = Problems()
    model = gpt_config(p, a, tie_weights=not a.untied)
    if not p:
        p.extend([(f"--{k.replace('_', '-')}", r) for k, r in model.problems()])
    batch_size = p.integer("--batch-size", a.batch_size, lo=1)
    grad_accum = p.integer("--grad-accum", a.grad_accum, lo=1)
    steps = p.integer("--steps", a.steps, lo=1)
    lr = p.number("--lr", a.lr, gt=0.0)
    warmup = p.integer("--warmup-steps", a.warmup_steps, lo=0)
    if a.lr_schedule not in LR_SCHEDULES:
        p.add("--lr-schedule", f"{a.lr_schedule!r} is not one of {', '.join(LR_SCHEDULES)}")
    min_lr_ratio = p.number("--min-lr-ratio", a.min_lr_ratio, ge=0.0)
    if min_lr_ratio > 1.0:
        p.add("--min-lr-ratio", f"{min_lr_ratio} must be at most 1 (a fraction of --lr)")
    clip = p.number("--clip-grad-norm", a.clip_grad_norm, ge=0.0)
    wd = p.number("--weight-decay", a.weight_decay, ge=0.0)
    seed = p.integer("--seed", a.seed, lo=0)
    workers = p.integer("--num-workers", a.num_workers, lo=0)
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
    if json_path is not None and (why := output_file_problem(json_path)):
        p.add("--json", why)

    loss_fn = plugins.build_loss(a.loss, p)
    # The user's factories run here, seeded as the bundled GPT is, so a bad spec or a factory
    # that raises is reported with the flags, and every rank builds the same initial weights.
    user_model = None
    if a.model_spec is not None:
        torch.manual_seed(seed)
        user_model = plugins.build_model(a.model_spec, p)
    shards: list[Shard] = []
    dataset: Any = None
    if a.dataset_spec is not None:
        if a.data is not None:
            p.add("--data", f"{a.data!r} and --dataset {a.dataset_spec!r} both name the training data: give one")
        dataset = plugins.build_dataset(a.dataset_spec, p)
    elif a.data is None:
        p.add("--data", "missing: give a glob of token shards, or --dataset MODULE:FACTORY for your own dataset")
    elif not any(w == "--seq-len" or w == "--vocab-size" for w, _ in p.items):
        shards, shard_problems = check_shards(a.data, seq_len=model.seq_len, vocab_size=model.vocab_size)
        p.extend(shard_problems)
        dataset = TokenWindows(shards, model.seq_len)
    p.exit_if_any()
    assert loss_fn is not None
    cfg = TrainConfig(
        data=a.data,
        model=model,
        model_spec=a.model_spec,
        dataset_spec=a.dataset_spec,
        loss_spec=a.loss,
        batch_size=batch_size,
        grad_accum=grad_accum,
        steps=steps,
        lr=lr,
        warmup_steps=warmup,
        lr_schedule=a.lr_schedule,
        min_lr_ratio=min_lr_ratio,
        clip_grad_norm=clip,
        weight_decay=wd,
        seed=seed,
        num_workers=workers,
        ckpt_dir=ckpt_dir,
        ckpt_every=ckpt_every,
        ckpt_keep=ckpt_keep,
        log_every=log_every,
        peak_tflops=peak,
        peak_source=source,
        json_path=json_path,
        force_cpu=bool(a.cpu),
    )
    return cfg, Parts(shards=shards, dataset=dataset, user_model=user_model, loss_fn=loss_fn)
