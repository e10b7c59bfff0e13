"""The parallelisms, each applied to a meta-built GPT before any storage exists.

* FSDP2: ``fully_shard`` on every block, then on the whole model (torchtitan's
  ``apply_fsdp``), with a :class:`MixedPrecisionPolicy`: bf16 parameters for compute and fp32
  gradient reduction on GPU (torchtitan's defaults, ``mixed_precision_param = "bfloat16"``,
  ``mixed_precision_reduce = "float32"`` in its training config, ``torchtitan/config/``);
  plain fp32 where a run is compared with one process.
* Tensor parallel (Megatron-LM's split, through DTensor's ``parallelize_module``): in every
  block the fused QKV projection and the MLP's up projection are column-wise (each rank computes
  its heads and its slice of the hidden layer), the attention output and the MLP's down
  projection row-wise (partial sums all-reduced); the head column-wise with its logits gathered.
  The two embeddings are column-wise (every row's slice of the width, gathered after the
  lookup), not row-wise as in torchtitan: with a row-wise (vocabulary-split) table, torch 2.13's
  DTensor hands the gradient back ``Replicate``, a full-size table on every rank, which a
  per-rank memory budget cannot afford (measured here; column-wise gives ``Shard(1)``).
  LayerNorms are replicated. Each rank holds ~1/tp of every matrix.
* 2-D: a ``(dp, tp)`` device mesh; tensor parallel on ``mesh["tp"]``, then FSDP2 on
  ``mesh["dp"]`` over the DTensor shards (torchtitan's ``parallelize_llama`` order).
* Pipeline: rank ``r`` builds only its contiguous run of blocks (rank 0 also the embeddings,
  the last rank the final LayerNorm and the head), wrapped in a ``PipelineStage``, driven by
  ``ScheduleGPipe`` or ``Schedule1F1B`` (one forward, one backward in steady state, so at most
  ``stages`` microbatches' activations are alive instead of all of them).

Mixed precision with tensor parallel or the pipeline alone is left off, as torchtitan does
(``maybe_enable_amp`` in ``torchtitan/distributed/utils.py``: "only supported when FSDP/HSDP/CP
is enabled"); those modes run in fp32.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from gpu_cluster.workloads.train.model import GPT, GPTConfig


def stage_layers(n_layers: int, n_stages: int, stage: int) -> range:
    """Blocks of ``stage``: contiguous, the first ``n_layers % n_stages`` stages one extra."""
    base, extra = divmod(n_layers, n_stages)
    lo = stage * base + min(stage, extra)
    return range(lo, lo + base + (1 if stage < extra else 0))


def mesh_2d(device_type: str, world: int, tp: int) -> DeviceMesh:
    """``(dp, tp)`` mesh: consecutive ranks form a tensor-parallel group (on one node, NVLink)."""
    return init_device_mesh(device_type, (world // tp, tp), mesh_dim_names=("dp", "tp"))


def mixed_precision(bf16: bool) -> Any:
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if bf16:
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()  # parameters, compute and reduction in the parameters' fp32


def apply_fsdp(model: GPT, mesh: DeviceMesh, bf16: bool) -> None:
    from torch.distributed.fsdp import fully_shard

    mp = mixed_precision(bf16)
    for block in model.blocks.values():
        fully_shard(block, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)


def tp_plan(model: GPT) -> dict[str, Any]:
    """``parallelize_module`` plan for the parts this (possibly partial) model has."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan: dict[str, Any] = {}
    if model.tok_emb is not None:
        plan["tok_emb"] = ColwiseParallel(output_layouts=Replicate())
        plan["pos_emb"] = ColwiseParallel(output_layouts=Replicate())
    for i in model.blocks:
        plan[f"blocks.{i}.attn.qkv"] = ColwiseParallel()  # output Shard(-1): whole heads per rank
        plan[f"blocks.{i}.attn.proj"] = RowwiseParallel()  # input Shard(-1), output all-reduced
        plan[f"blocks.{i}.mlp.fc"] = ColwiseParallel()
        plan[f"blocks.{i}.mlp.proj"] = RowwiseParallel()
    if model.head is not None:
        plan["head"] = ColwiseParallel(output_layouts=Replicate())  # logits gathered for the loss
    return plan


def tp_inference_plan(model: GPT) -> dict[str, Any]:
    """:func:`tp_plan` for a whole GPT that may tie its head to the token embedding (inference).

    A tied table cannot be split two ways at once, so when the head is tied the token embedding
    is split row-wise (by vocabulary: each rank looks up the ids it holds, the others contribute
    zeros, the partial rows are all-reduced), which is the same ``Shard(0)`` the column-wise head
    gives the shared weight (torchtitan splits ``tok_embeddings`` row-wise the same way,
    ``torchtitan/models/llama3/infra/parallelize.py``). No gradient flows in inference, so the
    replicated-gradient cost that keeps training column-wise (see this module) does not arise.
    """
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import RowwiseParallel

    plan = tp_plan(model)
    if model.cfg.tie_weights:
        plan["tok_emb"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())
    return plan


def apply_tp_inference(model: GPT, mesh: DeviceMesh) -> None:
    """Split a whole (already initialised) GPT for inference; a tied head stays tied, one shard."""
    from torch.distributed.tensor.parallel import parallelize_module

    parallelize_module(model, mesh, tp_inference_plan(model))
    if model.cfg.tie_weights and model.head is not None and model.tok_emb is not None:
        model.head.weight = model.tok_emb.weight  # both Shard(0): the same local rows


def apply_tp(model: GPT, mesh: DeviceMesh) -> None:
    from torch.distributed.tensor.parallel import parallelize_module

    parallelize_module(model, mesh, tp_plan(model))


def tp_problems(cfg: GPTConfig, tp: int, flag: str) -> list[tuple[str, str]]:
    """Shapes a ``tp``-way split cannot take: heads must not straddle ranks."""
    out = []
    if cfg.n_heads % tp:
        out.append((flag, f"{tp}-way tensor parallel needs --n-heads divisible by it, got {cfg.n_heads}"))
    return out


def pipeline_part(model: GPT, rank: int, n_stages: int) -> GPT:
    """Drop what stage ``rank`` does not own (on a meta model: nothing was ever allocated)."""
    keep = stage_layers(model.cfg.n_layers, n_stages, rank)
    for i in range(model.cfg.n_layers):
        if i not in keep:
            del model.blocks[str(i)]
    if rank != 0:
        model.tok_emb = None
        model.pos_emb = None
    if rank != n_stages - 1:
        model.ln_f = None
        model.head = None
    return model


def pipeline_schedule(
    stage_module: nn.Module,
    rank: int,
    n_stages: int,
    device: torch.device,
    schedule: str,
    microbatches: int,
    loss_fn: Any,
) -> Any:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    stage = PipelineStage(stage_module, rank, n_stages, device)
    match_greeting_dtypes(stage)
    cls = Schedule1F1B if schedule == "1f1b" else ScheduleGPipe
    return cls(stage, n_microbatches=microbatches, loss_fn=loss_fn)


def match_greeting_dtypes(stage: Any) -> None:
    """Before its first step a schedule has each stage greet its neighbours with one send and one
    receive of a single element (``PipelineStage._get_init_p2p_neighbors_ops``). torch 2.9.1, the
    torch of AMD's ROCm image (catalog runtime_images.rocm), sends ``torch.tensor(stage_index)``,
    an int64 (8 bytes), into ``torch.zeros(1)``, a float32 (4 bytes): gloo aborts the receiving
    rank ("Received data size doesn't match expected size. 8 vs 4"; seen here with torch 2.9.1 on
    CPU), and a byte count that differs between send and receive is a mismatch on NCCL and RCCL
    too. torch 2.13 sends a float32 (its stage.py). So a greeting's sends are cast to the dtype of
    its receives; where they already agree (2.13), nothing changes."""
    greet = getattr(stage, "_get_init_p2p_neighbors_ops", None)
    if greet is None:
        return

    def matched() -> list[Any]:
        ops: list[Any] = list(greet())
        recv = {op.tensor.dtype for op in ops if op.op is dist.irecv}
        want = recv.pop() if len(recv) == 1 else torch.float32
        for op in ops:
            if op.op is dist.isend and op.tensor.dtype != want:
                op.tensor = op.tensor.to(want).reshape(1)
        return ops

    stage._get_init_p2p_neighbors_ops = matched


# --- a user's model: the plan declared (--plan) or derived from its layer types ----------------

ROWWISE_NAMES = frozenset({"o_proj", "out_proj", "wo", "proj", "c_proj", "down_proj", "w2", "fc2"})
"""Linear layers whose input is the sharded hidden/head dimension and whose output returns to the
residual stream: row-wise. The names of torchtitan's Llama (``wo``, ``w2``), Hugging Face's Llama
(``o_proj``, ``down_proj``), GPT-2 (``c_proj``) and this repository's GPT (``proj``)."""
COLWISE_NAMES = frozenset(
    {"q_proj", "k_proj", "v_proj", "qkv", "wq", "wk", "wv", "wqkv", "gate_proj", "up_proj", "w1", "w3", "fc", "fc1"}
)
"""Linear layers that read the replicated residual stream and split heads or the hidden layer: column-wise."""


@dataclass(kw_only=True, frozen=True, slots=True)
class ShardingPlan:
    """How a user's model is split; what ``--plan MODULE:FUNCTION`` returns (the function is given
    the model, built on the meta device), or what :func:`derive_plan` finds."""

    blocks: str
    """Attribute of the model holding its repeated blocks (``nn.ModuleDict`` or ``nn.ModuleList``):
    FSDP2's units, and the pipeline's split. A stage keeps the blocks' names, so its checkpoint keys
    are the whole model's: a ``ModuleDict``'s keys (torchtitan's models), or a ``ModuleList``'s
    indices in the whole model (its ``forward`` must then walk the blocks, ``for b in self.blocks``,
    not index them)."""
    tp: dict[str, Any] = field(default_factory=dict)
    """``parallelize_module`` plan: module path (relative to the model) -> ``ColwiseParallel`` /
    ``RowwiseParallel`` / any ``ParallelStyle``. Empty: the model has no tensor-parallel plan."""
    pre: tuple[str, ...] = ()
    """Attributes run before the blocks (the embeddings): kept on the first pipeline stage only."""
    post: tuple[str, ...] = ()
    """Attributes run after the blocks (final norm, head): kept on the last pipeline stage only.
    On other stages they are set to ``None``, and the model's ``forward`` must skip a part that is
    ``None`` (torchtitan's convention, ``torchtitan/models/llama3/model.py``)."""


def _blocks_of(model: nn.Module, name: str) -> nn.Module | None:
    m = getattr(model, name, None)
    return m if isinstance(m, (nn.ModuleList, nn.ModuleDict)) else None


def block_items(model: nn.Module, plan: ShardingPlan) -> list[tuple[str, nn.Module]]:
    """The blocks under their names in the model (a pipeline stage's ModuleList keeps the whole
    model's indices, so its names are those, not 0..k)."""
    blocks = _blocks_of(model, plan.blocks)
    assert blocks is not None
    return list(blocks.named_children())


Split = Literal["col", "row"]


def _residual_width(linears: list[tuple[str, nn.Linear]]) -> int | None:
    """The width a block reads from and writes back to the residual stream: what its first Linear
    reads and its last writes, or failing that the width most Linears both read and write."""
    if not linears:
        return None
    first, last = linears[0][1], linears[-1][1]
    if first.in_features == last.out_features:
        return int(first.in_features)
    both = [m.in_features for _, m in linears if m.in_features in {o.out_features for _, o in linears}]
    return int(max(set(both), key=both.count)) if both else None


def block_split(block: nn.Module) -> dict[str, Split]:
    """The tensor-parallel split of one block's Linears from its structure (Megatron-LM's pairing):
    a Linear that reads the residual width ``d`` and widens (d -> h: up, gate, fused qkv) is split
    column-wise, one that narrows back to ``d`` (h -> d: down) row-wise. A square d -> d Linear
    (q, k, v, the attention's output) takes the name as a hint (:data:`COLWISE_NAMES`,
    :data:`ROWWISE_NAMES`), else its place: in a module of several, the last registered writes
    back (row-wise), the others read (column-wise); one alone stays replicated. Every module's
    column-wise layers need a row-wise partner there (and the reverse), or none of its layers is
    split: a split without its partner changes what the block computes."""
    linears = [(sub, m) for sub, m in block.named_modules() if sub and isinstance(m, nn.Linear)]
    d = _residual_width(linears)
    if d is None:
        return {}
    out: dict[str, Split] = {}
    by_parent: dict[str, list[str]] = {}
    for sub, m in linears:
        by_parent.setdefault(sub.rsplit(".", 1)[0] if "." in sub else "", []).append(sub)
    for parent, subs in by_parent.items():
        mods = {sub: dict(linears)[sub] for sub in subs}
        squares = [sub for sub in subs if mods[sub].in_features == d and mods[sub].out_features == d]
        for sub in subs:
            m, leaf = mods[sub], sub.rsplit(".", 1)[-1]
            if m.in_features == d and m.out_features != d:
                out[sub] = "col"
            elif m.out_features == d and m.in_features != d:
                out[sub] = "row"
            elif sub in squares:
                if leaf in ROWWISE_NAMES:
                    out[sub] = "row"
                elif leaf in COLWISE_NAMES:
                    out[sub] = "col"
                elif len(squares) > 1:
                    out[sub] = "row" if sub == squares[-1] else "col"
        kinds = {out[sub] for sub in subs if sub in out}
        if kinds != {"col", "row"}:
            for sub in subs:
                out.pop(sub, None)
    return out


def derive_plan(model: nn.Module) -> ShardingPlan | None:
    """The plan for a model of the common shape: one ``ModuleList``/``ModuleDict`` of blocks among
    its direct children (the one with the most parameters), what is registered before it run
    before (embeddings), what after run after (norm, head); in every block each ``nn.Linear``
    split as :func:`block_split` reads the block's structure (names only break a tie), the
    embeddings and the norms replicated."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    children = list(model.named_children())
    lists = [(n, m) for n, m in children if isinstance(m, (nn.ModuleList, nn.ModuleDict)) and len(m) > 0]
    if not lists:
        return None
    blocks_name = max(lists, key=lambda nm: sum(p.numel() for p in nm[1].parameters()))[0]
    names = [n for n, _ in children]
    at = names.index(blocks_name)
    plan = ShardingPlan(blocks=blocks_name, pre=tuple(names[:at]), post=tuple(names[at + 1 :]))
    for key, block in block_items(model, plan):
        for sub, split in block_split(block).items():
            plan.tp[f"{blocks_name}.{key}.{sub}"] = ColwiseParallel() if split == "col" else RowwiseParallel()
    return plan


def fused_projections(model: nn.Module, plan: ShardingPlan) -> list[tuple[str, str]]:
    """``(path, why)`` for each column-wise Linear of ``plan`` whose output its module cuts into
    sections before the row-wise partner reads it: a fused q/k/v (d -> 3d beside an output
    projection that reads d) or a fused gate/up (d -> 2h beside a down projection that reads h).
    Its output is a whole multiple (2 or more) of what every partner reads and equals none of it.
    A contiguous column split gives each rank a run of whole sections (rank 0 of two: q and half of
    k), so the block either fails to unpack its sections or computes silently wrong; whether the
    fused weight is laid out head by head (the bundled GPT's ``qkv``) or section by section
    (nanoGPT's ``c_attn``) cannot be read from its shape, so a derived plan refuses it and a
    declared plan (``--plan``) decides."""
    modules = dict(model.named_modules())
    by_parent: dict[str, dict[str, list[nn.Linear]]] = {}
    for path, style in plan.tp.items():
        m = modules.get(path)
        if not isinstance(m, nn.Linear):
            continue
        kind = "row" if type(style).__name__ == "RowwiseParallel" else "col"
        by_parent.setdefault(path.rsplit(".", 1)[0], {}).setdefault(kind, []).append(m)
    out = []
    for path, style in plan.tp.items():
        m = modules.get(path)
        if not isinstance(m, nn.Linear) or type(style).__name__ != "ColwiseParallel":
            continue
        reads = {r.in_features for r in by_parent[path.rsplit(".", 1)[0]].get("row", [])}
        if (
            reads
            and m.out_features not in reads
            and any(m.out_features % r == 0 and m.out_features // r >= 2 for r in reads)
        ):
            width = min(r for r in reads if m.out_features % r == 0)
            out.append(
                (
                    path,
                    f"Linear({m.in_features} -> {m.out_features}) is {m.out_features // width} fused sections of "
                    f"{width} that its module splits before the row-wise layer reads them",
                )
            )
    return out


def plan_problems(model: nn.Module, plan: Any, flag: str) -> list[tuple[str, str]]:
    """What is wrong with a declared or derived plan for ``model``, all at once."""
    if not isinstance(plan, ShardingPlan):
        return [(flag, f"returned {type(plan).__name__}, expected a gpu_cluster.workloads.parallel.plans.ShardingPlan")]
    out = []
    children = dict(model.named_children())
    if _blocks_of(model, plan.blocks) is None:
        kinds = ", ".join(f"{n} ({type(m).__name__})" for n, m in children.items())
        out.append((flag, f"blocks {plan.blocks!r} is not a ModuleList/ModuleDict of the model (children: {kinds})"))
    for part in (*plan.pre, *plan.post):
        if part not in children:
            out.append((flag, f"{part!r} is not a direct child of the model (children: {', '.join(children)})"))
    modules = dict(model.named_modules())
    for path in plan.tp:
        if path not in modules:
            out.append((flag, f"tensor-parallel plan names {path!r}, which the model does not have"))
    return out


def apply_fsdp_plan(model: nn.Module, plan: ShardingPlan, mesh: DeviceMesh, bf16: bool) -> None:
    from torch.distributed.fsdp import fully_shard

    mp = mixed_precision(bf16)
    for _, block in block_items(model, plan):
        fully_shard(block, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)


def apply_tp_plan(model: nn.Module, plan: ShardingPlan, mesh: DeviceMesh) -> None:
    from torch.distributed.tensor.parallel import parallelize_module

    parallelize_module(model, mesh, dict(plan.tp))


def pipeline_part_plan(model: nn.Module, plan: ShardingPlan, rank: int, n_stages: int) -> nn.Module:
    """Stage ``rank`` of a user's model: its contiguous blocks, the ``pre`` parts on the first stage,
    the ``post`` parts on the last, every other part ``None``."""
    blocks = getattr(model, plan.blocks)
    keys = [k for k, _ in blocks.named_children()]
    keep = {keys[i] for i in stage_layers(len(keys), n_stages, rank)}
    if isinstance(blocks, nn.ModuleDict):
        for k in keys:
            if k not in keep:
                del blocks[k]
    else:
        # A ModuleList renumbers on deletion; the stage's blocks keep the whole model's indices
        # (its checkpoint keys are the whole model's), and ``for block in self.blocks`` walks them.
        kept = [(k, m) for k, m in blocks.named_children() if k in keep]
        blocks._modules.clear()  # noqa: SLF001 - nn.Module keeps its children in _modules
        for k, m in kept:
            blocks.add_module(k, m)
    for part in plan.pre if rank != 0 else ():
        setattr(model, part, None)
    for part in plan.post if rank != n_stages - 1 else ():
        setattr(model, part, None)
    return model
