"""The arguments of the validation run's short DDP step, shared by the local mode and the
rendered Slurm and JobSet launches so every path trains the same small model."""

from __future__ import annotations

from pathlib import Path

# The fabric-only pass: NCCL reads these once per process, so the pass is its own launch.
FABRIC_ONLY_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NVLS_ENABLE": "0"}

# Small enough to finish in under a minute on two CPU ranks, large enough that the loss
# visibly falls; on GPUs the same model measures the DDP path, not the chips' peak.
VOCAB = 256
SHARDS = 4
TOKENS_PER_SHARD = 16384


def synthetic_data_args(data_dir: Path) -> list[str]:
    return [
        "write-synthetic",
        "--out",
        str(data_dir),
        "--shards",
        str(SHARDS),
        "--tokens-per-shard",
        str(TOKENS_PER_SHARD),
        "--vocab",
        str(VOCAB),
        "--seed",
        "7",
    ]


def ddp_args(data_dir: Path, out_dir: Path, *, steps: int = 30, instance_type: str | None = None) -> list[str]:
    args = [
        "--data",
        str(data_dir / "*.bin"),
        "--vocab-size",
        str(VOCAB),
        "--seq-len",
        "32",
        "--d-model",
        "64",
        "--n-layers",
        "2",
        "--n-heads",
        "2",
        "--batch-size",
        "8",
        "--steps",
        str(steps),
        "--lr",
        "3e-3",
        "--log-every",
        "10",
        "--json",
        str(out_dir / "ddp.json"),
    ]
    if instance_type:
        args += ["--instance-type", instance_type]
    return args
