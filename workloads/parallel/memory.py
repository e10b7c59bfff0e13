"""Everything a rank holds at its peak: parameters, gradients, optimizer state and activations.

How it is measured, per device:

* CPU: torch's CPU allocator keeps no statistics (``torch.cuda.max_memory_allocated`` has no
  CPU twin) and its memory is invisible to ``tracemalloc``, which sees only Python's and numpy's
  allocators. ``torch.profiler(profile_memory=True)`` sees it, but as a stream of unlabelled
  allocation events, recording every op on the way. torch's own ``MemTracker``
  (``torch/distributed/_tools/mem_tracker.py``, a private module) labels storages, but its
  module tracker installs backward hooks that the pipeline's ``autograd.grad`` backward rejects
  ("A leaf node was passed to _will_engine_execute_node", measured with torch 2.13). So
  :class:`Tracker` is a ``TorchDispatchMode`` of the same idea, written here: it follows the
  storage of every tensor an op returns, through a weak reference, until it dies; it lets
  DTensor desugar first, so a shard counts as its local bytes; it watches
  ``UntypedStorage.resize_``, which is how FSDP2 frees and refills all-gathered parameters. It
  counts tensors, not the allocator's rounding or a kernel's internal scratch: a lower bound on
  what the allocator held, exact for what the model, the gradients and the optimizer keep.
* GPU: ``torch.cuda.max_memory_allocated`` (the caching allocator's peak, everything), with the
  parameters, gradients and optimizer state counted from their storages; activations are then
  the rest at the peak (an upper bound: scratch and rounding fall into it).

Either way a rank's figures are a :class:`Peak`, and ``total`` is the one that a budget over
everything compares with.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

MEASURED_BY = ("dispatch", "cuda")
FIELDS = ("total", "params", "grads", "optimizer", "activations", "other")
"""The byte figures of a :class:`Peak`, in the order :meth:`Peak.figures` gives them."""


@dataclass(kw_only=True, slots=True)
class Peak:
    """One rank's memory at the moment it was largest, in bytes."""

    total: int
    """Everything alive at the peak."""
    params: int
    """Parameters (and buffers) at the peak."""
    grads: int
    """Gradients at the peak."""
    optimizer: int
    """Optimizer state at the peak."""
    activations: int
    """Activations saved for backward and backward's temporaries at the peak (GPU: the rest)."""
    other: int
    """Tensors alive at the peak that are none of the above: the optimizer step's temporaries."""
    measured_by: str
    """``dispatch`` (live tensor storages, CPU) or ``cuda`` (the allocator's peak)."""

    def figures(self) -> list[int]:
        return [getattr(self, f) for f in FIELDS]

    def problems(self) -> list[str]:
        """Why these figures cannot be a breakdown of one moment (empty when they are)."""
        out = []
        parts = sum(getattr(self, f) for f in FIELDS[1:])
        if any(getattr(self, f) < 0 for f in FIELDS):
            out.append(f"negative figure in {dict(zip(FIELDS, self.figures(), strict=True))}")
        if parts != self.total:
            out.append(f"parts sum to {parts} bytes, not the total {self.total}")
        if self.measured_by not in MEASURED_BY:
            out.append(f"measured_by {self.measured_by!r} (allowed: {', '.join(MEASURED_BY)})")
        return out


def from_cuda(allocator_peak: int, params: int, grads: int, optimizer: int) -> Peak:
    """A :class:`Peak` from the CUDA allocator's peak and the counted resident storages.

    The allocator knows no categories, so activations are what the peak holds beyond the
    parameters, gradients and optimizer state (all alive at a training step's peak, in backward).
    """
    rest = max(0, allocator_peak - params - grads - optimizer)
    total = params + grads + optimizer + rest
    return Peak(
        total=total,
        params=params,
        grads=grads,
        optimizer=optimizer,
        activations=rest,
        other=0,
        measured_by="cuda",
    )


PARAM, GRAD, OPT, ACT, OTHER = "params", "grads", "optimizer", "activations", "other"


@dataclass(slots=True)
class _Entry:
    """One live storage."""

    nbytes: int
    kind: str
    seq: int
    """Order in which the tracker first saw it."""
    resized: bool = False
    ref: Any = None


def _storages(t: torch.Tensor) -> list[torch.UntypedStorage]:
    """The storages holding ``t``'s data: its own, or its inner tensors' for a wrapper subclass."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if is_traceable_wrapper_subclass(t):
        attrs, _ = t.__tensor_flatten__()
        inner = (getattr(t, a) for a in attrs)
        return [st for x in inner if isinstance(x, torch.Tensor) for st in _storages(x)]
    if t.device.type == "meta":
        return []
    return [t.untyped_storage()]


class Tracker(TorchDispatchMode):
    """Live tensor storages, by kind, and the breakdown at the moment their total was largest.

    Every storage an op returns is followed through a weak reference until it dies, and
    ``UntypedStorage.resize_`` is watched while the tracker is on (FSDP2 frees an all-gathered
    parameter that way, without an op). A storage's kind is set when it is first seen ("other"
    inside ``optimizer.step``, activations otherwise, or what :meth:`track` was told) and
    changed when it shows up as something else: a module's parameter as the module is called
    (so FSDP2's all-gathered blocks count as parameters while they live), a gradient when it
    is accumulated into a parameter or when the optimizer takes it, optimizer state when the
    step ends. The breakdown at the peak is by what each storage alive then turned out to be: a
    storage relabelled after the peak moves in the peak's breakdown too, if it was alive at the
    peak (created before it, alive still, never resized since) - FSDP2's sharded gradients, which
    it assigns after the reduce-scatter, and AdamW's moments, created inside the step that may
    hold the peak. The total does not depend on the labels. No module backward hooks are used:
    the pipeline's stages run backward through ``autograd.grad``, which they break.
    """

    def __init__(self, device: torch.device) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.device = device
        self.current: dict[str, int] = dict.fromkeys((PARAM, GRAD, OPT, ACT, OTHER), 0)
        self.best: dict[str, int] = dict(self.current)
        self._info: WeakIdKeyDictionary = WeakIdKeyDictionary()  # storage -> _Entry
        self._seq = 0  # storages seen so far
        self._peak_seq = 0  # ... when the peak was taken
        self._in_opt = False
        self._handles: list[Any] = []
        self._orig_resize = torch.UntypedStorage.resize_
        self.peak: Peak | None = None

    # --- bookkeeping ------------------------------------------------------------------------
    def _gone(self, entry: _Entry, _ref: Any) -> None:
        self.current[entry.kind] -= entry.nbytes

    def _see(self, st: torch.UntypedStorage, kind: str, relabel: bool) -> None:
        entry = self._info.get(st)  # type: ignore[no-untyped-call]
        if entry is None:
            self._seq += 1
            entry = _Entry(nbytes=st.nbytes(), kind=kind, seq=self._seq)
            entry.ref = weakref.ref(st, functools.partial(self._gone, entry))
            self._info[st] = entry
            self.current[kind] += entry.nbytes
            self._note_peak()
        elif relabel and entry.kind != kind:
            self.current[entry.kind] -= entry.nbytes
            self.current[kind] += entry.nbytes
            if entry.seq <= self._peak_seq and not entry.resized:  # alive at the peak, as it is now
                self.best[entry.kind] -= entry.nbytes
                self.best[kind] += entry.nbytes
            entry.kind = kind

    def _note_peak(self) -> None:
        if sum(self.current.values()) > sum(self.best.values()):
            self.best = dict(self.current)
            self._peak_seq = self._seq

    def track(self, kind: str, tensors: Any, relabel: bool = True) -> None:
        """Count ``tensors`` (any nesting of tensors) as ``kind`` from now on."""
        for t in tree_flatten(tensors)[0]:
            if isinstance(t, torch.Tensor) and t.device.type == self.device.type:
                for st in _storages(t):
                    self._see(st, kind, relabel)

    def _resized(self, st: torch.UntypedStorage, size: int) -> None:
        self._orig_resize(st, size)
        entry = self._info.get(st)  # type: ignore[no-untyped-call]
        if entry is not None and entry.nbytes != st.nbytes():
            self.current[entry.kind] += st.nbytes() - entry.nbytes
            entry.nbytes = st.nbytes()
            entry.resized = True
            self._note_peak()

    def step(self) -> None:
        """Nothing to reset between training steps (kept for callers that mark steps)."""

    # --- hooks ------------------------------------------------------------------------------
    def _module_pre(self, module: nn.Module, args: Any) -> None:
        self.track(PARAM, list(module.parameters(recurse=False)))
        self.track(PARAM, list(module.buffers(recurse=False)))

    def _opt_pre(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._in_opt = True
        self.track(GRAD, [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None])

    def _opt_post(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._in_opt = False
        self.track(OPT, [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)])

    def watch(self, *external: nn.Module | torch.optim.Optimizer) -> None:
        """Count what ``external`` already holds: parameters (and their gradients), optimizer state."""
        for obj in external:
            if isinstance(obj, nn.Module):
                for p in obj.parameters():
                    self.track(PARAM, p)
                    if p.grad is not None:
                        self.track(GRAD, p.grad)
                    self._handles.append(
                        p.register_post_accumulate_grad_hook(  # type: ignore[no-untyped-call]
                            lambda q: self.track(GRAD, q.grad)
                        )
                    )
                self.track(PARAM, list(obj.buffers()))
            else:
                self._opt_post(obj, (), {})

    def __enter__(self) -> Tracker:
        from torch.nn.modules.module import register_module_forward_pre_hook
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._handles += [
            register_module_forward_pre_hook(self._module_pre),
            register_optimizer_step_pre_hook(self._opt_pre),
            register_optimizer_step_post_hook(self._opt_post),
        ]
        tracker = self

        def resize_(st: torch.UntypedStorage, size: int) -> None:
            tracker._resized(st, size)

        torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign, assignment]
        super().__enter__()  # type: ignore[no-untyped-call]
        return self

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)  # type: ignore[no-untyped-call]
        torch.UntypedStorage.resize_ = self._orig_resize  # type: ignore[method-assign]
        for h in self._handles:
            h.remove()
        self._handles.clear()
        b = self.best
        self.peak = Peak(
            total=sum(b.values()),
            params=b[PARAM],
            grads=b[GRAD],
            optimizer=b[OPT],
            activations=b[ACT],
            other=b[OTHER],
            measured_by="dispatch",
        )

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        from torch.distributed.tensor import DTensor

        if any(t is DTensor for t in types):
            return NotImplemented  # let DTensor run its local ops, which come back here
        out = func(*args, **(kwargs or {}))
        # Inside optimizer.step: temporaries ("other") until the step's end names its state.
        self.track(OTHER if self._in_opt else ACT, out, relabel=False)
        return out


class _CudaPeak:
    """On CUDA the allocator keeps the peak; this only gives :func:`tracked` one interface."""

    peak: Peak | None = None

    def step(self) -> None:
        pass


@contextlib.contextmanager
def tracked(device: torch.device, *external: nn.Module | torch.optim.Optimizer) -> Iterator[Tracker | _CudaPeak]:
    """Measure the peak of everything alive on ``device`` during the block.

    ``external``: modules and optimizers built before the block, so that their parameters and
    state are counted (and labelled) from the start. On CUDA the allocator's peak is reset on
    entry; :func:`from_cuda` needs the resident figures, so the caller builds that :class:`Peak`
    (see :func:`gpu_cluster.workloads.parallel.steps.run_split`) and the yielded ``peak`` stays ``None``.
    """
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        yield _CudaPeak()
        return
    t = Tracker(device)
    t.watch(*external)
    with t:
        yield t
