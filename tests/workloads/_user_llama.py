"""A user's model outside workloads/: a small Llama-style decoder (RMSNorm, SwiGLU, rotary
positions, untied head), its token dataset and a declared sharding plan, as ``--model``,
``--dataset`` and ``--plan`` name them in tests/workloads/test_mp_user_ckpt.py.

Written as a model-parallel user writes one (torchtitan's conventions): the blocks in an
``nn.ModuleDict`` (a pipeline stage keeps their names), parts that a pipeline stage lacks are
``None`` and skipped in ``forward``, heads counted from the local width (``view(..., -1, hd)``)
so a column-wise split of the projections gives each rank whole heads, and no buffers (the
rotary angles are computed in ``forward``), so a meta build leaves nothing uninitialised.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from gpu_cluster.workloads.parallel.plans import ShardingPlan

VOCAB, SEQ, DIM, HEADS, LAYERS, HIDDEN = 64, 16, 32, 2, 2, 48
HEAD_DIM = DIM // HEADS


def _rotate(x: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of ``x`` ``[batch, heads, seq, head_dim]`` (RoFormer, half split)."""
    t, d = x.shape[-2], x.shape[-1]
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    ang = torch.arange(t, device=x.device, dtype=torch.float32)[:, None] * inv[None, :]
    cos, sin = ang.cos(), ang.sin()
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wq = nn.Linear(DIM, DIM, bias=False)
        self.wk = nn.Linear(DIM, DIM, bias=False)
        self.wv = nn.Linear(DIM, DIM, bias=False)
        self.wo = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (w(x).view(b, t, -1, HEAD_DIM).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        y = F.scaled_dot_product_attention(_rotate(q), _rotate(k), v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


class SwiGLU(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w1 = nn.Linear(DIM, HIDDEN, bias=False)  # gate
        self.w2 = nn.Linear(HIDDEN, DIM, bias=False)  # down
        self.w3 = nn.Linear(DIM, HIDDEN, bias=False)  # up

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(DIM, eps=1e-5)
        self.attention = Attention()
        self.ffn_norm = nn.RMSNorm(DIM, eps=1e-5)
        self.feed_forward = SwiGLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok_embeddings: nn.Embedding | None = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleDict({str(i): Block() for i in range(LAYERS)})
        self.norm: nn.RMSNorm | None = nn.RMSNorm(DIM, eps=1e-5)
        self.output: nn.Linear | None = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        for layer in self.layers.values():
            h = layer(h)
        h = self.norm(h) if self.norm is not None else h
        return self.output(h) if self.output is not None else h


class Tokens(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Sequences that follow ``next = (3 * token + 1) mod VOCAB`` with a random start: learnable."""

    def __len__(self) -> int:
        return 256

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = int(torch.randint(VOCAB, (1,), generator=torch.Generator().manual_seed(7 + i)))
        w = [start]
        for _ in range(SEQ):
            w.append((3 * w[-1] + 1) % VOCAB)
        t = torch.tensor(w)
        return t[:-1], t[1:]


def llama() -> nn.Module:
    return Llama()


def tokens() -> Tokens:
    return Tokens()


def mlp_only_plan(model: nn.Module) -> ShardingPlan:
    """A declared plan: tensor parallel on the SwiGLU only (attention replicated)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    tp = {}
    for i in range(LAYERS):
        tp[f"layers.{i}.feed_forward.w1"] = ColwiseParallel()
        tp[f"layers.{i}.feed_forward.w3"] = ColwiseParallel()
        tp[f"layers.{i}.feed_forward.w2"] = RowwiseParallel()
    return ShardingPlan(blocks="layers", tp=tp, pre=("tok_embeddings",), post=("norm", "output"))


def bad_plan(model: nn.Module) -> ShardingPlan:
    return ShardingPlan(blocks="blocks", tp={"layers.0.attention.wz": None}, pre=("embed",))
