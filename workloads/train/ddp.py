"""Data-parallel training, of the bundled GPT on token shards or of your own model and data.

    torchrun --nproc-per-node 8 -m gpu_cluster.workloads.train --data '/fsx/data/train-*.bin' \\
        --steps 200 --ckpt-dir /fsx/ckpt/run1 --ckpt-every 50 --instance-type p5.48xlarge \\
        --json /fsx/out/ddp.json

    torchrun --nnodes 2:4 --nproc-per-node 8 ... -m gpu_cluster.workloads.train \\
        --model mypkg.models:build --dataset mypkg.data:train_set --loss cross_entropy \\
        --batch-size 16 --grad-accum 4 --steps 10000 --warmup-steps 200 --ckpt-dir /fsx/ckpt/run2 --ckpt-every 500

What it shows about a cluster: the gradient all-reduce works across every rank, shared storage
serves the data and holds checkpoints, and a job killed part-way resumes where it stopped, at
the same or at another number of ranks.

* Model and data (:mod:`gpu_cluster.workloads.train.plugins`): ``--model MODULE:FACTORY`` (a callable
  returning a ``torch.nn.Module``) and ``--dataset MODULE:FACTORY`` (a map-style or iterable
  dataset of ``(input, target)`` pairs), with ``--loss``; by default the bundled GPT
  (:mod:`gpu_cluster.workloads.train.model`) on token shards (:mod:`gpu_cluster.workloads.train.data`) matched by ``--data``.
* Batches (:mod:`gpu_cluster.workloads.train.sampling`): a map-style dataset is split by a
  ``DistributedSampler`` (shuffled per epoch with ``set_epoch``, tail dropped) that can start
  part-way through an epoch at any world size; an iterable one is split item by item over
  ranks and DataLoader workers. ``--num-workers`` loader processes per rank, pinned memory on
  CUDA. An optimizer step takes ``--grad-accum`` micro-batches of ``--batch-size`` per rank
  (only the last one all-reduces: ``no_sync`` for the others).
* Optimisation: DDP with ``gradient_as_bucket_view=True`` (gradients live in the all-reduce
  buckets: one copy fewer), AdamW, global-norm clipping (``--clip-grad-norm``), linear warm-up
  then cosine decay to ``--min-lr-ratio`` of the peak (or ``--lr-schedule constant``), bf16
  autocast on GPUs; fp32 with deterministic kernels on CPU.
* Checkpoints (:mod:`gpu_cluster.workloads.train.checkpoint`): ``torch.distributed.checkpoint`` every
  ``--ckpt-every`` steps into ``<ckpt-dir>/.step_<N>.tmp/``; when every rank has written, rank 0
  adds a ``COMPLETE`` marker and renames it to ``step_<N>/``; only marked checkpoints are loaded.
  They hold the model, the optimizer, the step, the data position (epoch and samples consumed)
  and every rank's RNG states. At the same world size a resumed run takes exactly the steps the
  uninterrupted run would have: on CPU the final parameters are bitwise identical (checked by
  the tests with 2 ranks; with 3+ ranks the all-reduce's summation order may differ after a
  restart, because DDP rebuilds its buckets). At another world size DCP reshards the state and
  the data goes on with the samples not yet seen; keeping ``batch-size x grad-accum x ranks``
  constant keeps the optimisation the same up to the order of floating-point sums (tested 2 ->
  1 -> 3 ranks). ``torchrun --nnodes MIN:MAX`` relaunches at whatever size is there.
* Measurement: every rank times every step (including the batch fetch, excluding checkpoint
  writes); the slowest rank decides each step (all-reduce MAX); the median over steps,
  without the first step of the run (warm-up), gives step time, samples/s and (for the GPT on
  token shards) tokens/s per GPU and model FLOPs utilisation against ``--peak-tflops`` or the
  catalog's figure for ``--instance-type`` (FLOPs per token: :func:`gpu_cluster.workloads.train.model.flops_per_token`).

Test hook: ``GPUC_CRASH_AT_STEP=N`` makes rank ``GPUC_CRASH_RANK`` (default 1) exit hard
(``os._exit(1)``) just before step N (1-based) in the first attempt only (torchrun's
``TORCHELASTIC_RESTART_COUNT`` unset or 0), so ``--max-restarts 1`` resumes instead of
crashing again. ``GPUC_CRASH_IN_CHECKPOINT=N`` makes the same rank exit hard inside the step N
checkpoint, after its DCP files are written and before the completion marker and rename.
"""

from __future__ import annotations

import json

from gpu_cluster.workloads.runtime import device as devmod
from gpu_cluster.workloads.runtime.atomic import write_bytes_atomic
from gpu_cluster.workloads.train.checkpoint import COMPLETE_MARKER, Progress, complete_checkpoints
from gpu_cluster.workloads.train.config import Parts, TrainConfig, build_parser, parse_config
from gpu_cluster.workloads.train.loop import lr_at, param_digest, train

__all__ = [
    "COMPLETE_MARKER",
    "Parts",
    "Progress",
    "TrainConfig",
    "build_parser",
    "complete_checkpoints",
    "lr_at",
    "main",
    "param_digest",
    "parse_config",
    "train",
]


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def main(argv: list[str] | None = None) -> int:
    cfg, parts = parse_config(argv)
    rt = devmod.setup(force_cpu=True if cfg.force_cpu else None)
    try:
        result = train(cfg, parts, rt)
        if rt.is_main:
            why = (
                "FLOPs are known for the bundled GPT on token shards only"
                if cfg.model_spec or cfg.dataset_spec
                else "no --peak-tflops/--instance-type"
            )
            mfu = f"n/a ({why})" if result["mfu"] is None else f"{100 * result['mfu']:.1f}%"
            p50 = result["step_time_p50_s"]
            rate = (
                f"{result['tokens_per_s_per_gpu']:.0f} tokens/s/gpu"
                if result["tokens_per_s_per_gpu"]
                else f"{result['samples_per_s_per_gpu']:.1f} samples/s/gpu"
                if p50
                else ""
            )
            print(
                f"done: {result['steps']} steps, loss {_fmt(result['loss_first'])} -> "
                f"{_fmt(result['loss_last'])}, "
                + (f"step p50 {1e3 * p50:.1f} ms, {rate}, " if p50 else "")
                + f"MFU {mfu}, params {'identical' if result['params_identical_across_ranks'] else 'DIFFER'} "
                f"across ranks (sha256 {result['param_sha256'][:16]})",
                flush=True,
            )
            if cfg.json_path is not None:
                write_bytes_atomic(cfg.json_path, (json.dumps(result, indent=2) + "\n").encode())
        return 0 if result["params_identical_across_ranks"] else 1
    finally:
        devmod.teardown()


if __name__ == "__main__":
    from gpu_cluster.workloads.runtime.device import exit_process

    exit_process(main())
