"""A small GPT-style decoder shared by every training job, and its FLOPs count for MFU.

The layout follows the usual pre-LayerNorm decoder (GPT-2 / nanoGPT): token and position
embeddings, ``n_layers`` blocks of causal self-attention and an MLP, a final LayerNorm and a
linear head. The blocks live in an ``nn.ModuleDict`` keyed ``"0"``, ``"1"``, ... and every
top-level part may be ``None``: a pipeline stage deletes the parts it does not own and keeps
the same parameter names (and so the same checkpoint keys) as the whole model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(kw_only=True, frozen=True, slots=True)
class GPTConfig:
    """Shape of the decoder."""

    vocab_size: int = 256
    """Number of token ids; every token in the data must be below it."""
    seq_len: int = 16
    """Context length: the longest input the position embedding covers."""
    d_model: int = 32
    """Width of the residual stream."""
    n_layers: int = 2
    """Number of decoder blocks."""
    n_heads: int = 2
    """Attention heads per block; must divide ``d_model``."""
    mlp_ratio: int = 4
    """Hidden width of the MLP as a multiple of ``d_model``."""
    tie_weights: bool = True
    """Share the token embedding with the output head (GPT-2 does). A pipeline split puts the
    embedding and the head on different ranks, so the pipeline job uses an untied head."""

    def problems(self) -> list[tuple[str, str]]:
        """Every problem with this shape as ``(flag, reason)``; empty when it is usable."""
        out: list[tuple[str, str]] = []
        for name in ("vocab_size", "seq_len", "d_model", "n_layers", "n_heads", "mlp_ratio"):
            value = getattr(self, name)
            if value < 1:
                out.append((name, f"{value} must be a positive integer"))
        if self.n_heads >= 1 and self.d_model >= 1 and self.d_model % self.n_heads:
            out.append(("n_heads", f"{self.n_heads} does not divide d_model={self.d_model}"))
        return out

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The fused projection's output is laid out head by head, [head][q|k|v][head_dim]
        # (Megatron-LM's fused QKV layout, ``ParallelAttention`` in megatron/model/transformer.py:
        # "[sq, b, (np * 3 * hn)] --> [sq, b, np, 3 * hn]"), so a column-wise tensor-parallel split of
        # ``qkv`` hands each rank whole heads. The head count is read from the shape (-1),
        # as torchtitan's attention does: under tensor parallelism a rank sees only its heads.
        b, t, c = x.shape
        hd = c // self.n_heads
        qkv = self.qkv(x).view(b, t, -1, 3, hd)
        q, k, v = (qkv[:, :, :, i].transpose(1, 2) for i in range(3))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out: torch.Tensor = self.proj(y.transpose(1, 2).reshape(b, t, -1))
        return out


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model)
        self.proj = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.proj(F.gelu(self.fc(x)))
        return out


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        out: torch.Tensor = x + self.mlp(self.ln2(x))
        return out


class GPT(nn.Module):
    """Decoder mapping token ids ``[batch, seq]`` to logits ``[batch, seq, vocab]``.

    A part set to ``None`` is skipped: without the embeddings the input is taken to be the
    residual stream ``[batch, seq, d_model]`` from the previous pipeline stage; without the
    head the residual stream is returned.
    """

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb: nn.Embedding | None = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb: nn.Embedding | None = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleDict({str(i): Block(cfg) for i in range(cfg.n_layers)})
        self.ln_f: nn.LayerNorm | None = nn.LayerNorm(cfg.d_model)
        self.head: nn.Linear | None = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self._init_weights()
        if cfg.tie_weights:
            self.head.weight = self.tok_emb.weight

    def _init_weights(self) -> None:
        # GPT-2's scheme: N(0, 0.02) everywhere, residual projections scaled down by
        # sqrt(2 * n_layers) so the residual stream's variance does not grow with depth.
        resid_std = 0.02 / math.sqrt(2 * self.cfg.n_layers)
        for name, p in self.named_parameters():
            if p.dim() == 1:
                if name.endswith("weight"):
                    nn.init.ones_(p)
                else:
                    nn.init.zeros_(p)
            elif name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=resid_std)
            else:
                nn.init.normal_(p, mean=0.0, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor
        if self.tok_emb is not None:
            assert self.pos_emb is not None
            pos = torch.arange(x.shape[1], device=x.device)
            h = self.tok_emb(x) + self.pos_emb(pos)
        else:
            h = x
        for block in self.blocks.values():
            h = block(h)
        if self.ln_f is not None:
            h = self.ln_f(h)
        if self.head is not None:
            h = self.head(h)
        return h


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy over every position of the batch (computed in fp32)."""
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def matmul_params(cfg: GPTConfig) -> int:
    """Parameters that take part in a matrix multiply per token: the ``N`` of ``6N``.

    Counted from the shape rather than a module, so it holds for a sharded or split model.
    Embedding tables that are only looked up cost no FLOPs: the position embedding never
    counts, the token embedding counts once when it is also the head (tied) and not at all
    when the head is separate (the head then counts). LayerNorm and bias parameters are
    included; they are a rounding error at any real size.
    """
    d, f, v = cfg.d_model, cfg.mlp_ratio * cfg.d_model, cfg.vocab_size
    per_block = (
        2 * 2 * d  # two LayerNorms
        + d * 3 * d
        + 3 * d  # qkv
        + d * d
        + d  # attention output projection
        + d * f
        + f  # MLP up
        + f * d
        + d  # MLP down
    )
    return cfg.n_layers * per_block + 2 * d + v * d  # + final LayerNorm + head


def total_params(cfg: GPTConfig) -> int:
    """Every parameter of the whole model (tied weights counted once)."""
    untied_table = 0 if cfg.tie_weights else cfg.vocab_size * cfg.d_model
    return matmul_params(cfg) + cfg.seq_len * cfg.d_model + untied_table


def flops_per_token(cfg: GPTConfig) -> float:
    """Model FLOPs for one token of training (forward + backward), the numerator of MFU.

    ``6 * N + 12 * L * H * Q * T`` with ``N`` = :func:`matmul_params`, ``L`` layers, ``H``
    heads, ``Q`` head dimension and ``T`` the sequence length: Chowdhery et al., "PaLM:
    Scaling Language Modeling with Pathways" (2022), appendix B, the formula nanoGPT's
    ``GPT.estimate_mfu`` uses. ``6N`` is 2 FLOPs per multiply-add times 3 (forward, and the
    backward's two matmuls); ``12 L H Q T`` is the ``QK^T`` and ``AV`` matmuls, likewise x6,
    counted at full (not causal-halved) length as the paper does. Model FLOPs leave out
    recomputation, so MFU does not reward activation checkpointing.
    """
    return 6.0 * matmul_params(cfg) + 12.0 * cfg.n_layers * cfg.n_heads * cfg.head_dim * cfg.seq_len
