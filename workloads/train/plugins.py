"""The user's own model, dataset and loss, named as ``MODULE:FACTORY`` on the command line.

A spec is ``package.module:callable`` (importable from the job's ``PYTHONPATH``, for example
a file next to the job on shared storage). The factory is called with no arguments, once per
process:

* ``--model``: returns a ``torch.nn.Module`` whose ``forward`` takes a batch of inputs;
* ``--dataset``: returns a map-style ``torch.utils.data.Dataset`` (``__len__`` and
  ``__getitem__``) or a ``torch.utils.data.IterableDataset``; every item is an
  ``(input, target)`` pair that the default collate can stack;
* ``--loss``: ``cross_entropy`` (the default: outputs ``[..., classes]`` against integer targets
  ``[...]``, flattened, so a language model and a classifier both fit), ``mse``, or a
  ``MODULE:FUNCTION`` taking ``(output, target)`` and returning a scalar tensor.

Every problem (a spec without a colon, a module that does not import, a name that is not
callable, a factory that raises or returns the wrong kind of object) is reported as
``(flag, reason)`` with the spec in it, before any process group starts.
"""

from __future__ import annotations

import importlib
import traceback
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, IterableDataset

from gpu_cluster.workloads.runtime.flags import Problems

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
BUILTIN_LOSSES = ("cross_entropy", "mse")


def resolve(spec: str, flag: str, what: str, p: Problems) -> Callable[..., Any] | None:
    """The callable ``spec`` names, or ``None`` with the reason added to ``p``."""
    mod_name, sep, attr = spec.partition(":")
    if not sep or not mod_name or not attr:
        p.add(flag, f"{spec!r} is not MODULE:FACTORY (a callable returning {what}, e.g. mypkg.models:build)")
        return None
    try:
        mod = importlib.import_module(mod_name)
    except Exception as e:  # any import-time error is the user's module failing, reported as such
        p.add(flag, f"{spec!r}: cannot import {mod_name!r}: {type(e).__name__}: {e}")
        return None
    obj: Any = mod
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            break
    if obj is None or not callable(obj):
        p.add(flag, f"{spec!r}: {mod_name} has no callable {attr!r} (expected a factory returning {what})")
        return None
    return obj  # type: ignore[no-any-return]


class _Raised:
    """What :func:`_call` returns when the factory raised (its problem already added)."""


def _call(factory: Callable[..., Any], spec: str, flag: str, p: Problems) -> Any:
    try:
        return factory()
    except Exception as e:  # the user's code failing is a problem with their spec, not a crash
        where = traceback.extract_tb(e.__traceback__)[-1]
        p.add(flag, f"{spec!r}: the factory raised {type(e).__name__}: {e} (at {where.filename}:{where.lineno})")
        return _Raised()


def build_model(spec: str, p: Problems, flag: str = "--model") -> torch.nn.Module | None:
    """Call the model factory ``spec`` names and check that it gave a module with parameters."""
    factory = resolve(spec, flag, "a torch.nn.Module", p)
    if factory is None:
        return None
    model = _call(factory, spec, flag, p)
    if isinstance(model, _Raised):
        return None
    if not isinstance(model, torch.nn.Module):
        p.add(flag, f"{spec!r}: the factory returned {type(model).__name__}, expected a torch.nn.Module")
        return None
    if not any(t.requires_grad for t in model.parameters()):
        p.add(flag, f"{spec!r}: the module has no trainable parameters")
        return None
    return model


def build_dataset(spec: str, p: Problems, flag: str = "--dataset") -> Any:
    """Call the dataset factory ``spec`` names; a map-style dataset must have a length > 0."""
    what = "a map-style Dataset (__len__, __getitem__) or an IterableDataset"
    factory = resolve(spec, flag, what, p)
    if factory is None:
        return None
    ds = _call(factory, spec, flag, p)
    if isinstance(ds, _Raised):
        return None
    if is_iterable(ds):
        return ds
    if not (hasattr(ds, "__getitem__") and hasattr(ds, "__len__")):
        p.add(flag, f"{spec!r}: the factory returned {type(ds).__name__}, expected {what}")
        return None
    try:
        n = len(ds)
    except Exception as e:
        p.add(flag, f"{spec!r}: len() of the dataset raised {type(e).__name__}: {e}")
        return None
    if n < 1:
        p.add(flag, f"{spec!r}: the dataset is empty (len 0)")
        return None
    return ds


def is_iterable(ds: Any) -> bool:
    """An ``IterableDataset`` (a stream: no length, no indexing), as the DataLoader decides it."""
    return isinstance(ds, IterableDataset)


def is_map_style(ds: Any) -> bool:
    return isinstance(ds, Dataset) or (hasattr(ds, "__getitem__") and hasattr(ds, "__len__"))


def _cross_entropy(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out.float().reshape(-1, out.shape[-1]), target.reshape(-1))


def _mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(out.float(), target.float())


def build_loss(spec: str, p: Problems, flag: str = "--loss") -> LossFn | None:
    if spec == "cross_entropy":
        return _cross_entropy
    if spec == "mse":
        return _mse
    if ":" not in spec:
        p.add(
            flag,
            f"{spec!r} is not one of {', '.join(BUILTIN_LOSSES)} nor MODULE:FUNCTION "
            "(a function (output, target) -> scalar tensor)",
        )
        return None
    return resolve(spec, flag, "a scalar loss tensor from (output, target)", p)
