"""DDP training launched with torchrun on gloo: it learns, ranks agree, and a killed run resumes exactly."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.workloads.torchrun_util import TINY_GPT, explain, job_env, torchrun
from gpu_cluster.workloads.train.data import write_synthetic
from gpu_cluster.workloads.train.model import GPT, GPTConfig, flops_per_token, matmul_params, total_params

STEPS = 12
# 2 shards x 600 tokens -> 74 windows of 16; 2 ranks x 4 rows -> 9 steps per epoch, so the
# run crosses an epoch boundary (a reshuffle) after the crash point.
COMMON = [
    *TINY_GPT,
    "--batch-size",
    "4",
    "--steps",
    str(STEPS),
    "--lr",
    "1e-2",
    "--log-every",
    "4",
    "--seed",
    "3",
]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tokens")
    write_synthetic(out=out, shards=2, tokens_per_shard=600, vocab=64, seed=11)
    return out


@pytest.fixture(scope="module")
def baseline(data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An uninterrupted 2-rank run, without checkpoints: the resumed run must match it even
    though writing and reading checkpoints touches the optimizer."""
    d = tmp_path_factory.mktemp("baseline")
    r = torchrun(
        "gpu_cluster.workloads.train.ddp",
        ["--data", str(data / "train-*.bin"), *COMMON, "--peak-tflops", "2", "--json", str(d / "m.json")],
    )
    assert r.returncode == 0, explain(r)
    return json.loads((d / "m.json").read_text())  # type: ignore[no-any-return]


def test_loss_falls_and_metrics_are_reported(baseline: dict[str, Any]) -> None:
    m = baseline
    assert m["world_size"] == 2 and m["steps"] == STEPS and m["steps_this_run"] == STEPS
    assert m["resumed_from_step"] is None and m["epoch"] == 1
    assert m["loss_first"] > 3.5  # about ln(64) = 4.16 from random weights
    assert m["loss_last"] < 0.8 * m["loss_first"], m
    assert m["step_time_p50_s"] > 0 and len(m["step_time_p50_s_per_rank"]) == 2
    # The slowest rank decides: the job's p50 is no faster than any rank's own.
    assert m["step_time_p50_s"] >= min(m["step_time_p50_s_per_rank"])
    assert m["tokens_per_s_per_gpu"] == pytest.approx(4 * 16 / m["step_time_p50_s"])
    assert m["tokens_per_s_total"] == pytest.approx(2 * m["tokens_per_s_per_gpu"])
    fpt = m["model"]["flops_per_token"]
    assert m["mfu"] == pytest.approx(m["tokens_per_s_per_gpu"] * fpt / 2e12)
    assert m["peak_source"] == "--peak-tflops"


def _crashed_run(data: Path, ckpt: Path, out: Path, **crash: str) -> subprocess.CompletedProcess[str]:
    """The run checkpointing to ``ckpt`` every 4 steps, ``crash`` injected, one restart allowed."""
    args = ["--data", str(data / "train-*.bin"), *COMMON, "--ckpt-dir", str(ckpt), "--ckpt-every", "4"]
    return torchrun(
        "gpu_cluster.workloads.train.ddp", [*args, "--json", str(out)], max_restarts=1, env=job_env(**crash)
    )


def test_ranks_hold_identical_parameters(baseline: dict[str, Any]) -> None:
    m = baseline
    assert m["params_identical_across_ranks"] is True
    assert m["param_sha256_per_rank"] == [m["param_sha256"]] * 2


def test_killed_run_resumes_to_bitwise_identical_parameters(
    data: Path, baseline: dict[str, Any], tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    # Leftovers of an earlier crash that must never be loaded: a checkpoint directory
    # without its completion marker, newer than any real one, and a temporary directory.
    (ckpt / "step_11").mkdir(parents=True)
    (ckpt / "step_11" / ".metadata").write_bytes(b"half-written")
    (ckpt / ".step_10.tmp").mkdir()
    r = _crashed_run(data, ckpt, tmp_path / "m.json", GPUC_CRASH_AT_STEP="7")
    assert r.returncode == 0, explain(r)
    assert "GPUC_CRASH_AT_STEP=7: exiting hard before step 7" in r.stderr, explain(r)
    assert "resumed from" in r.stdout and "step_4 (step 4, epoch 0, batch 4)" in r.stdout, explain(r)
    m = json.loads((tmp_path / "m.json").read_text())
    assert m["resumed_from_step"] == 4 and m["steps"] == STEPS and m["steps_this_run"] == STEPS - 4
    assert m["mfu"] is None
    assert m["param_sha256"] == baseline["param_sha256"]
    assert m["params_identical_across_ranks"] is True
    # Losses reported for the whole run, the first one carried through the checkpoint.
    assert m["loss_first"] == baseline["loss_first"] and m["loss_last"] == baseline["loss_last"]
    # The restarted attempt saved 8 and 12 and kept two complete checkpoints; the stale
    # temporary directory is gone and the unmarked one was never taken for a checkpoint.
    assert m["checkpoints_saved"] == [8, 12]
    assert sorted(p.name for p in ckpt.iterdir()) == ["step_11", "step_12", "step_8"]
    for name in ("step_8", "step_12"):
        assert (ckpt / name / "COMPLETE").is_file() and (ckpt / name / ".metadata").is_file()


@pytest.mark.parametrize("tied", [True, False])
def test_flops_formula_counts_the_real_model(tied: bool) -> None:
    cfg = GPTConfig(vocab_size=50, seq_len=12, d_model=24, n_layers=3, n_heads=4, tie_weights=tied)
    model = GPT(cfg)
    real = sum(p.numel() for p in model.parameters())
    assert total_params(cfg) == real
    untied_table = 0 if tied else cfg.vocab_size * cfg.d_model
    assert matmul_params(cfg) == real - cfg.seq_len * cfg.d_model - untied_table
    assert flops_per_token(cfg) == 6 * matmul_params(cfg) + 12 * 3 * 4 * 6 * 12


def test_crash_inside_a_checkpoint_write_never_loads_it(data: Path, baseline: dict[str, Any], tmp_path: Path) -> None:
    """Rank 0 (the DCP coordinator, so .metadata is written too) dies after its step 8 files
    are on disk and before the marker: the directory looks loadable to DCP but must be
    ignored; the restart resumes from step 4 and ends bitwise where the uninterrupted run did."""
    ckpt = tmp_path / "ckpt"
    r = _crashed_run(data, ckpt, tmp_path / "m.json", GPUC_CRASH_IN_CHECKPOINT="8", GPUC_CRASH_RANK="0")
    assert r.returncode == 0, explain(r)
    crash = [ln for ln in r.stderr.splitlines() if "GPUC_CRASH_IN_CHECKPOINT=8" in ln]
    assert crash, explain(r)
    # The half-written checkpoint really held DCP's files (and no marker) when the rank died.
    assert ".step_8.tmp holds" in crash[0] and ".metadata" in crash[0] and ".distcp" in crash[0], crash[0]
    assert "COMPLETE" not in crash[0]
    assert "step_4 (step 4, epoch 0, batch 4)" in r.stdout, explain(r)
    m = json.loads((tmp_path / "m.json").read_text())
    assert m["resumed_from_step"] == 4 and m["checkpoints_saved"] == [8, 12]
    assert m["param_sha256"] == baseline["param_sha256"]
    assert m["loss_last"] == baseline["loss_last"]
    assert sorted(p.name for p in ckpt.iterdir()) == ["step_12", "step_8"]
