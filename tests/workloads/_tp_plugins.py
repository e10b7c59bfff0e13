"""A user's model that declares its own tensor-parallel plan, for ``batch_infer --tp``."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tests.workloads._user_plugins import N_CLASSES, N_FEATURES

HIDDEN = 32


class SplitMLP(nn.Module):
    """Two linear layers: the first split by output columns, the second by input rows."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(N_FEATURES, HIDDEN)
        self.down = nn.Linear(HIDDEN, N_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down(torch.relu(self.up(x)))
        return out

    def tp_plan(self) -> dict[str, Any]:
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

        # Megatron's MLP split: each rank its slice of the hidden layer; partial sums all-reduced.
        return {"up": ColwiseParallel(), "down": RowwiseParallel()}


def split_mlp() -> nn.Module:
    torch.manual_seed(7)  # the same weights in every process that builds it
    return SplitMLP()
