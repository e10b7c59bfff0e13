"""Offline batch inference: your model over your dataset as a self-balancing fleet, or the
shared GPT as a callable for :mod:`gpu_cluster.workloads.tasks.shard`.

    torchrun --nnodes 4 --nproc-per-node 8 ... -m gpu_cluster.workloads.tasks.infer run \\
        --model mypkg.models:build --weights /fsx/ckpt/run2 --dataset mypkg.data:eval_set \\
        --output-dir s3://my-bucket/preds/run2 --state-dir /fsx/fleet/preds-run2 --rows-per-task 4096

``run`` splits the dataset (map-style: ``__len__`` and ``__getitem__``, as ``ddp_train
--dataset`` takes; an item may be an ``(input, target)`` pair, of which the input is used) into
tasks of ``--rows-per-task`` consecutive rows; every rank claims tasks through the fleet of
:mod:`gpu_cluster.workloads.tasks.fleet` (dynamic leases by default), runs the model in batches of
``--batch-size`` (bf16 autocast on GPUs) and publishes ``part-<k>.pt`` per task, exactly once,
to a path or an ``s3://`` / ``gs://`` URI: ``{"index": int64 [rows], "output": [rows, ...]}``
for your model, and the scores below for the bundled GPT (the default model, with ``--data``
token shards as the default dataset). ``--weights`` is a ``ddp_train`` checkpoint directory
(its newest complete ``step_<N>``, or one step directory: DCP, loaded without a process group)
or a file holding a state dict. A rerun skips the parts that exist.

    torchrun --nproc-per-node 8 -m gpu_cluster.workloads.tasks --glob '/fsx/batches/*.pt' \\
        --output-dir /fsx/scores --output-ext .scores.pt --callable gpu_cluster.workloads.tasks.gpt_scores:run

Each input is a tensor file (``torch.save``) holding token ids, ``int64 [rows, seq]`` with
``seq <= seq_len``. :func:`run` scores it in batches and saves, to the path it is given::

    {"next_token": int64 [rows],   # most likely token after each row
     "next_logprob": float32 [rows],  # its log-probability
     "nll": float32 [rows]}        # mean next-token negative log-likelihood of the row

The model is loaded once per process and kept: on GPU nodes on ``cuda:LOCAL_RANK`` (the
device shard_tasks bound), else on the CPU. Weights: ``GPUC_INFER_WEIGHTS`` names a file
written by :func:`save_weights` (config and state dict); without it the model is initialised
from ``GPUC_INFER_SEED`` (default 0), which exercises the same code and gives the same
scores on every rank and every rerun. ``GPUC_INFER_BATCH`` sets rows per forward pass
(default 64).

``python -m gpu_cluster.workloads.tasks.infer make-inputs --out DIR --files N --rows R --seq T --vocab V``
writes example input files.
"""

from __future__ import annotations

import functools
import os
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

from gpu_cluster.workloads.runtime.atomic import publish, temp_path_for
from gpu_cluster.workloads.train.model import GPT, GPTConfig

DEFAULT_CONFIG = GPTConfig(vocab_size=256, seq_len=16, d_model=32, n_layers=2, n_heads=2)


def _device() -> torch.device:
    if torch.cuda.is_available() and os.environ.get("GPUC_FORCE_CPU", "") != "1":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


@functools.lru_cache(maxsize=1)
def load_model() -> GPT:
    """The model every call of this process shares (built once: loading is the slow part)."""
    weights = os.environ.get("GPUC_INFER_WEIGHTS")
    if weights:
        blob = torch.load(weights, map_location="cpu", weights_only=True)
        model = GPT(GPTConfig(**blob["config"]))
        model.load_state_dict(blob["state_dict"])
    else:
        torch.manual_seed(int(os.environ.get("GPUC_INFER_SEED", "0")))
        model = GPT(DEFAULT_CONFIG)
    return model.to(_device()).eval()


def save_weights(path: Path, model: GPT) -> None:
    """Write ``model`` in the form ``GPUC_INFER_WEIGHTS`` reads."""
    tmp = temp_path_for(path)
    torch.save({"config": asdict(model.cfg), "state_dict": model.state_dict()}, tmp)
    publish(tmp, path)


@torch.inference_mode()
def score(model: GPT, tokens: torch.Tensor, batch: int) -> dict[str, torch.Tensor]:
    """Score ``tokens`` (int64 ``[rows, seq]``) in batches of ``batch`` rows."""
    dev = next(model.parameters()).device
    outs: dict[str, list[torch.Tensor]] = {"next_token": [], "next_logprob": [], "nll": []}
    for lo in range(0, tokens.shape[0], batch):
        x = tokens[lo : lo + batch].to(dev)
        logp = F.log_softmax(model(x).float(), dim=-1)
        last = logp[:, -1, :]
        best = last.argmax(dim=-1)
        outs["next_token"].append(best.cpu())
        outs["next_logprob"].append(last.gather(1, best[:, None])[:, 0].cpu())
        if x.shape[1] > 1:
            nll = -logp[:, :-1, :].gather(2, x[:, 1:, None])[..., 0].mean(dim=1)
        else:
            nll = torch.zeros(x.shape[0], device=dev)
        outs["nll"].append(nll.cpu())
    return {k: torch.cat(v) if v else torch.empty(0) for k, v in outs.items()}


def run(input_path: str, output_tmp_path: str) -> None:
    """shard_tasks callable: score the token tensor in ``input_path`` into ``output_tmp_path``."""
    tokens = torch.load(input_path, map_location="cpu", weights_only=True)
    if isinstance(tokens, dict):
        tokens = tokens.get("tokens")
    model = load_model()
    cfg = model.cfg
    if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.int64 or tokens.dim() != 2:
        what = f"{tokens.dtype} {tuple(tokens.shape)}" if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(f"{input_path}: expected an int64 tensor [rows, seq], got {what}")
    if not 1 <= tokens.shape[1] <= cfg.seq_len:
        raise ValueError(f"{input_path}: rows of {tokens.shape[1]} tokens; the model takes 1..{cfg.seq_len}")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= cfg.vocab_size):
        raise ValueError(f"{input_path}: token ids outside 0..{cfg.vocab_size - 1}")
    batch = int(os.environ.get("GPUC_INFER_BATCH", "64"))
    torch.save(score(model, tokens, batch), output_tmp_path)


def make_inputs(out: Path, files: int, rows: int, seq: int, vocab: int, seed: int) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(files):
        g = torch.Generator().manual_seed(seed * 100_003 + k)
        path = out / f"batch-{k:05d}.pt"
        tmp = temp_path_for(path)
        torch.save(torch.randint(0, vocab, (rows, seq), generator=g), tmp)
        publish(tmp, path)
        paths.append(path)
    return paths
