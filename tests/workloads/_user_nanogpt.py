"""A nanoGPT-style model (github.com/karpathy/nanoGPT ``model.py``'s layout, written anew): each
block's attention fuses q, k and v in one ``c_attn`` Linear(d, 3d) whose output ``forward`` cuts
into three sections of d (``split(n_embd, dim=2)``), as tests/workloads/test_mp_user_ckpt.py names
it with --model. A contiguous column split of ``c_attn`` would hand rank 0 of two all of q and
half of k, so its tensor-parallel plan cannot be derived from the shapes."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, SEQ, DIM, HEADS, LAYERS = 64, 16, 32, 2, 2


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c_attn = nn.Linear(DIM, 3 * DIM)
        self.c_proj = nn.Linear(DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.c_attn(x).split(DIM, dim=2)
        q, k, v = (z.view(b, t, HEADS, DIM // HEADS).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, DIM))


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c_fc = nn.Linear(DIM, 4 * DIM)
        self.c_proj = nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(DIM)
        self.attn = Attention()
        self.ln_2 = nn.LayerNorm(DIM)
        self.mlp = Mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGpt(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte: nn.Embedding | None = nn.Embedding(VOCAB, DIM)
        self.h = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f: nn.LayerNorm | None = nn.LayerNorm(DIM)
        self.lm_head: nn.Linear | None = nn.Linear(DIM, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.wte(tokens) if self.wte is not None else tokens
        for block in self.h:
            x = block(x)
        if self.ln_f is not None:
            x = self.ln_f(x)
        return self.lm_head(x) if self.lm_head is not None else x


def nanogpt() -> nn.Module:
    return NanoGpt()
