"""A user's own model and datasets, as `--model` / `--dataset` name them in the tests."""

from __future__ import annotations

from typing import Any, Iterator

import torch
from torch import nn
from torch.utils.data import Dataset, IterableDataset

N_FEATURES, N_CLASSES = 8, 4


def _sample(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + i)
    x = torch.randn(N_FEATURES, generator=g)
    return x, torch.tensor(int(x[:N_CLASSES].argmax()))  # a rule a small MLP learns quickly


class Blobs(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Map-style: 96 feature vectors labelled by their largest of the first four features."""

    def __len__(self) -> int:
        return 96

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return _sample(i)


class BlobStream(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    """The same samples as a stream, in an order that depends on the epoch."""

    def __init__(self) -> None:
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order = torch.randperm(96, generator=torch.Generator().manual_seed(self.epoch)).tolist()
        for i in order:
            yield _sample(i)


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(N_FEATURES, 32), nn.ReLU(), nn.Linear(32, N_CLASSES))


def blobs() -> Blobs:
    return Blobs()


def blob_stream() -> BlobStream:
    return BlobStream()


def not_a_module() -> Any:
    return {"weights": 1}


def broken() -> nn.Module:
    raise RuntimeError("weights file missing")


def empty() -> list[int]:
    return []
