"""How a training job splits any dataset over ranks and resumes part-way through an epoch:
:class:`ResumableSampler` for a map-style dataset, :class:`RankShardedStream` for an iterable one."""

from __future__ import annotations

from typing import Any, Iterator

import torch
import torch.utils.data as tud


class ResumableSampler(tud.distributed.DistributedSampler):  # type: ignore[type-arg]
    """``DistributedSampler`` (shuffled per ``set_epoch``, tail dropped) that can start part-way
    through an epoch, at any world size.

    DistributedSampler gives rank ``r`` the elements ``r, r + W, r + 2W, ...`` of one shuffled
    permutation of the dataset (seeded by ``seed + epoch``, the same at every world size), so a
    step that takes ``b`` samples from each of ``W`` ranks takes a contiguous block of ``b * W``
    elements of that permutation. ``set_start(n)`` skips the first ``n`` elements (the samples
    the job has consumed this epoch, at whatever world size) and splits the rest the same way:
    at the world size that wrote ``n`` this is exactly the tail of the uninterrupted order; at
    another it goes on with the samples not yet seen, none repeated, none skipped.
    """

    def __init__(self, dataset: Any, *, num_replicas: int, rank: int, seed: int) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed, drop_last=True)
        self.start = 0

    def set_start(self, consumed: int) -> None:
        """Skip the first ``consumed`` samples of the epoch's permutation (over all ranks)."""
        self.start = consumed

    def __len__(self) -> int:
        return max(0, len(self.dataset) - self.start) // self.num_replicas  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[int]:
        if self.start == 0:
            return super().__iter__()  # exactly DistributedSampler's order
        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)  # as DistributedSampler.__iter__ seeds it
        order = torch.randperm(len(self.dataset), generator=g).tolist()[self.start :]  # type: ignore[arg-type]
        usable = len(order) // self.num_replicas * self.num_replicas
        return iter(order[self.rank : usable : self.num_replicas])


class RankShardedStream(tud.IterableDataset):  # type: ignore[type-arg]
    """An iterable dataset split over ranks and DataLoader workers: item ``i`` of the stream goes
    to the reader ``i mod (world * workers)``, so every item is read by exactly one
    (rank, worker) reader and the same stream always splits the same way. Every reader walks the
    whole stream to find its items; a dataset that shards itself by file is cheaper as a
    map-style dataset of files. ``set_epoch`` is passed on to the stream.
    """

    def __init__(self, stream: Any, *, rank: int, world_size: int) -> None:
        self.stream = stream
        self.rank = rank
        self.world_size = world_size

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.stream, "set_epoch"):
            self.stream.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        info = tud.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
        reader, readers = self.rank * nw + wid, self.world_size * nw
        for i, item in enumerate(self.stream):
            if i % readers == reader:
                yield item
