"""The per-rank memory measurement of model_parallel, in one process: what the tracker counts."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gpu_cluster.workloads.parallel import memory


def test_tracker_counts_each_kind_at_the_peak() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    x = torch.randn(512, 64)  # activations outweigh the optimizer step's temporaries
    param_bytes = sum(p.numel() for p in model.parameters()) * 4
    with memory.tracked(torch.device("cpu"), model, opt) as tr:
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            model(x).square().mean().backward()  # type: ignore[no-untyped-call]
            opt.step()
            tr.step()
    peak = tr.peak
    assert peak is not None and peak.problems() == [] and peak.measured_by == "dispatch"
    assert peak.params == param_bytes
    assert peak.optimizer == 2 * param_bytes + 4 * 4  # two moments, a float32 step count per tensor
    # The hidden layer's output [512, 256] fp32 is saved for backward (ReLU's output on top).
    assert peak.activations >= 512 * 256 * 4
    assert peak.total == peak.params + peak.grads + peak.optimizer + peak.activations + peak.other


def test_the_peak_is_the_largest_moment_not_the_end() -> None:
    with memory.tracked(torch.device("cpu")) as tr:
        big = torch.ones(1 << 18)  # 1 MiB, then freed
        del big
        small = torch.ones(1 << 10)
    assert tr.peak is not None
    assert tr.peak.total >= 1 << 20 and tr.peak.activations >= 1 << 20
    assert small.numel() == 1 << 10


def test_storage_resize_is_followed() -> None:
    # FSDP2 frees an all-gathered parameter by resizing its storage to 0, without an op.
    with memory.tracked(torch.device("cpu")) as tr:
        assert isinstance(tr, memory.Tracker)
        t = torch.empty(1 << 16)  # 256 KiB
        t.untyped_storage().resize_(0)
        assert sum(tr.current.values()) == 0
        t.untyped_storage().resize_(4 << 18)  # 1 MiB
        assert sum(tr.current.values()) == 1 << 20
        t.untyped_storage().resize_(0)
    assert tr.peak is not None and tr.peak.total == 1 << 20
    assert torch.UntypedStorage.resize_ is not None and t.numel() == 1 << 16


def test_cuda_peak_puts_the_rest_in_activations() -> None:
    p = memory.from_cuda(allocator_peak=1000, params=100, grads=100, optimizer=200)
    assert (p.total, p.activations, p.measured_by, p.problems()) == (1000, 600, "cuda", [])
    # An allocator peak below the counted state (never on a real device): nothing is negative.
    q = memory.from_cuda(allocator_peak=10, params=100, grads=0, optimizer=0)
    assert q.total == 100 and q.activations == 0 and q.problems() == []


def test_a_breakdown_that_does_not_add_up_is_reported() -> None:
    bad = memory.Peak(total=10, params=5, grads=1, optimizer=1, activations=1, other=1, measured_by="guess")
    assert bad.problems() == [
        "parts sum to 9 bytes, not the total 10",
        "measured_by 'guess' (allowed: dispatch, cuda)",
    ]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tracking_resets_and_reads_the_allocator() -> None:
    dev = torch.device("cuda")
    with memory.tracked(dev) as tr:
        x = torch.empty(1 << 20, device=dev)
        del x
    assert tr.peak is None  # the caller builds it from the allocator and the counted state
    assert torch.cuda.max_memory_allocated(dev) >= 4 << 20


def test_a_storage_relabelled_after_the_peak_moves_in_the_peaks_breakdown() -> None:
    # FSDP2 hands over a sharded gradient after the reduce-scatter, AdamW names its moments at
    # the step's end: what a storage alive at the peak turned out to be is what the peak shows.
    with memory.tracked(torch.device("cpu")) as tr:
        assert isinstance(tr, memory.Tracker)
        g = torch.zeros(1 << 16)  # 256 KiB, an "activation" when made
        peak_moment = torch.zeros(1 << 16)
        del peak_moment  # the peak (512 KiB) is behind us
        late = torch.zeros(1 << 10)  # made after the peak: not part of it
        tr.track(memory.GRAD, g)
        tr.track(memory.GRAD, late)
    p = tr.peak
    assert p is not None and p.problems() == []
    assert (p.total, p.grads, p.activations) == (1 << 19, 1 << 18, 1 << 18)
