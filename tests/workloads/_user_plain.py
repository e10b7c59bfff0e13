"""A user's model written plainly: its blocks in an ``nn.ModuleList``, their layers named ``up`` and
``down`` (no convention a name list knows), as --model names it in tests/workloads/test_mp_user_ckpt.py.
Its tensor-parallel split is read from the Linears' shapes, and its pipeline stages keep the
ModuleList's indices."""

from __future__ import annotations

import torch
from torch import nn

VOCAB, DIM, HIDDEN, LAYERS = 64, 32, 96, 4


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.up = nn.Linear(DIM, HIDDEN)
        self.down = nn.Linear(HIDDEN, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(self.norm(x))))


class Plain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed: nn.Embedding | None = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.head: nn.Linear | None = nn.Linear(DIM, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens) if self.embed is not None else tokens
        for block in self.blocks:
            h = block(h)
        return self.head(h) if self.head is not None else h


def plain() -> nn.Module:
    return Plain()
