"""FSDP2, tensor, 2-D and pipeline parallelism launched with torchrun on gloo, against the
one-process run, with every rank's peak of everything (parameters, gradients, optimizer state,
activations) under a budget below the one-device peak."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.workloads.torchrun_util import REPO, TIMEOUT_S, TINY_GPT, explain, job_env, torchrun
from gpu_cluster.workloads.train.model import GPT, GPTConfig, total_params
from gpu_cluster.workloads.parallel.run import (
    LOSS_RTOL,
    compare,
    parse_config,
    run_reference,
    run_reference_measured,
    stage_layers,
    world_problems,
)
from gpu_cluster.workloads.parallel.materialise import (
    fill_box,
    init_local,
    materialise,
    meta_model,
    normal_at,
    storage_bytes,
)

ARGS = [
    *TINY_GPT,
    "--batch-size",
    "8",
    "--microbatches",
    "4",
    "--steps",
    "6",
    "--lr",
    "1e-2",
    "--seed",
    "5",
]


@pytest.fixture(scope="module")
def reference() -> list[float]:
    return run_reference(parse_config(["--mode", "reference", *ARGS]))


def test_fsdp_and_pipeline_match_reference(reference: list[float], tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    # Both modes in one launch, one after the other on the same ranks.
    r = torchrun(
        "gpu_cluster.workloads.parallel.run",
        ["--mode", "fsdp,pipeline", *ARGS, "--check-reference", "--json", str(out)],
        nproc=2,
    )
    assert r.returncode == 0, explain(r)
    m = json.loads(out.read_text())
    assert m["world_size"] == 2 and m["match"] is True
    assert [run["mode"] for run in m["runs"]] == ["fsdp", "pipeline"]
    for run in m["runs"]:
        assert len(run["losses"]) == 6
        # Independent of the job's own check: this process computed the reference itself.
        worst, ok = compare(run["losses"], reference)
        assert ok, (run["mode"], worst, run["losses"], reference)
        assert run["match"] is True and run["max_rel_diff"] <= LOSS_RTOL
        assert run["losses"][-1] < run["losses"][0]  # it trains, not merely agrees
    assert "model_parallel pipeline: 2 ranks" in r.stdout


def test_reference_is_sensitive_to_what_it_checks() -> None:
    # A different seed must fail the comparison: the tolerance is tight enough to notice.
    a = run_reference(parse_config(["--mode", "reference", *ARGS]))
    b = run_reference(parse_config(["--mode", "reference", *ARGS[:-1], "6"]))
    assert compare(a, a) == (0.0, True)
    assert compare(b, a)[1] is False


def test_stages_split_layers_contiguously() -> None:
    for layers, stages in [(2, 2), (5, 2), (7, 3), (3, 3)]:
        parts = [list(stage_layers(layers, stages, s)) for s in range(stages)]
        assert sum(parts, []) == list(range(layers))
        assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_pipeline_flags_checked(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        parse_config(["--mode", "tensor", "--batch-size", "6", "--microbatches", "4"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--mode: 'tensor' (allowed: fsdp, tp, 2d, pipeline, pipeline-1f1b, reference)" in err
    with pytest.raises(SystemExit):
        parse_config(["--mode", "fsdp,reference"])
    assert "reference runs alone" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_config(["--mode", "pipeline", "--batch-size", "6", "--microbatches", "4"])
    assert "--microbatches: 4 does not divide --batch-size 6" in capsys.readouterr().err


def test_modes_and_sizes_checked(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_config(["--mode", "2d", "--tp", "4", "--n-heads", "2", "--d-model", "32"])
    assert "--tp: 4-way tensor parallel needs --n-heads divisible by it, got 2" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_config(["--mode", "fsdp", "--precision", "fp8", "--param-budget-mib", "0"])
    err = capsys.readouterr().err
    assert "--precision: 'fp8' (allowed: auto, fp32, bf16)" in err and "--memory-budget-mib: " in err
    cfg = parse_config(["--mode", "fsdp,tp,2d,pipeline-1f1b", "--param-budget-mib", "1.5"])
    assert cfg.modes == ("fsdp", "tp", "2d", "pipeline-1f1b") and cfg.memory_budget_bytes == 3 << 19
    # The clearer name and the old one are one flag.
    assert parse_config(["--mode", "tp", "--memory-budget-mib", "1.5"]).memory_budget_bytes == 3 << 19


def test_world_size_problems_reported_together_before_any_mode_runs() -> None:
    cfg = parse_config(
        [
            "--mode",
            "fsdp,tp,2d,pipeline-1f1b",
            "--n-heads",
            "2",
            "--n-layers",
            "2",
            "--batch-size",
            "8",
            "--microbatches",
            "2",
            "--tp",
            "2",
        ]
    )
    assert world_problems(cfg, 2) == []
    assert world_problems(cfg, 3) == [
        ("--batch-size", "8 is not divisible by the 3 data-parallel groups of fsdp"),
        ("--n-heads", "3-way tensor parallel needs --n-heads divisible by it, got 2"),
        ("--tp", "2 does not divide the 3 ranks"),
        ("--n-layers", "2 blocks cannot fill 3 pipeline stages"),
        ("--microbatches", "2: 1F1B needs at least one per stage (3)"),
    ]


# --- the index-addressed initialisation, in one process ---------------------------------------

SMALL = GPTConfig(vocab_size=40, seq_len=8, d_model=24, n_layers=3, n_heads=3, tie_weights=False)


def test_meta_build_holds_nothing_and_materialise_allocates_the_model() -> None:
    model = meta_model(SMALL)
    assert storage_bytes(model.parameters()) == 0
    assert all(p.device.type == "meta" for p in model.parameters())
    res = materialise(model, SMALL, 0, torch.device("cpu"))
    assert res.materialised == total_params(SMALL) * 4  # one process: its "shard" is everything
    assert res.peak_materialise >= res.materialised
    with pytest.raises(RuntimeError, match="expects a meta-built model"):
        materialise(model, SMALL, 0, torch.device("cpu"))


def test_init_is_a_function_of_seed_name_and_position() -> None:
    a, b, c = GPT(SMALL), GPT(SMALL), GPT(SMALL)
    init_local(a, SMALL, 4)
    init_local(b, SMALL, 4)
    init_local(c, SMALL, 5)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters(), strict=True):
        assert torch.equal(pa, pb), name
        if pa.dim() > 1:
            assert not torch.equal(pa, pc), name
    # GPT-2's scheme: N(0, 0.02), residual projections scaled by 1/sqrt(2 * n_layers), LN 1/0.
    qkv, proj = a.blocks["0"].attn.qkv.weight.detach(), a.blocks["0"].attn.proj.weight.detach()
    assert abs(float(qkv.std()) - 0.02) < 0.002
    assert abs(float(proj.std()) - 0.02 / np.sqrt(6)) < 0.002
    assert torch.equal(a.blocks["0"].ln1.weight, torch.ones(24)) and not a.blocks["0"].ln1.bias.any()
    # Different parameters of the same shape do not repeat each other.
    assert not torch.equal(a.blocks["0"].mlp.fc.weight, a.blocks["1"].mlp.fc.weight)


def test_normal_values_are_standard_normal() -> None:
    z = normal_at(0, "w", np.arange(200_000, dtype=np.uint64))
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1.0) < 0.01
    assert abs(float(np.mean(z > 1.96)) - 0.025) < 0.002  # the tail is a normal's, not a uniform's
    assert np.isfinite(z).all()


def test_any_box_gets_the_full_tensors_values() -> None:
    # What every shard does: the box at an offset equals that slice of the whole parameter.
    whole = torch.empty(37, 19)
    fill_box(whole, 2, "blocks.0.mlp.fc.weight", (37, 19), (0, 0), 0.02)
    for (r0, r1), (c0, c1) in [((0, 37), (5, 12)), ((9, 10), (0, 19)), ((30, 37), (18, 19))]:
        box = torch.empty(r1 - r0, c1 - c0)
        fill_box(box, 2, "blocks.0.mlp.fc.weight", (37, 19), (r0, c0), 0.02)
        assert torch.equal(box, whole[r0:r1, c0:c1])


def test_every_parallelism_materialises_the_one_process_values(tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=4",
            "-m",
            "tests.workloads._materialise_worker",
            str(out),
        ],
        cwd=REPO,
        env=job_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert r.returncode == 0, explain(r)
    doc = json.loads(out.read_text())
    assert set(doc) == {"fsdp", "tp", "2d", "pipeline"}
    for mode, m in doc.items():
        assert m["mismatched"] == [], mode
        assert m["local_bytes"] < m["full_bytes"] / 2, (mode, m)
    # The layouts really are shards: FSDP's Shard(0), TP's row/column splits, 2-D's strided shard.
    assert "(Shard(dim=0),)" in doc["fsdp"]["placements"]
    assert {"(Shard(dim=0),)", "(Shard(dim=1),)", "(Replicate(),)"} <= set(doc["tp"]["placements"])
    assert "(_StridedShard(dim=0, sf=2), Shard(dim=0))" in doc["2d"]["placements"]


# --- the memory budget: training proceeds with every rank's whole peak under it ------------------

BUDGET_ARGS = [
    "--vocab-size",
    "256",
    "--seq-len",
    "16",
    "--d-model",
    "128",
    "--n-layers",
    "4",
    "--n-heads",
    "4",
    "--batch-size",
    "8",
    "--microbatches",
    "4",
    "--steps",
    "5",
    "--lr",
    "3e-3",
    "--seed",
    "3",
]
BUDGET_CFG = parse_config(["--mode", "reference", *BUDGET_ARGS])
FULL_BYTES = total_params(BUDGET_CFG.model) * 4
PARAM_FIGURES = ("params_materialised", "params_peak_materialise", "params_peak_between_steps")


@pytest.fixture(scope="module")
def one_device() -> tuple[list[float], Any]:
    """The reference's losses and its one-device peak, measured in this process."""
    losses, peak = run_reference_measured(BUDGET_CFG)
    assert peak is not None and peak.problems() == []
    return losses, peak


@pytest.fixture(scope="module")
def budget_reference(one_device: tuple[list[float], Any]) -> list[float]:
    return one_device[0]


def test_one_device_peak_counts_parameters_gradients_optimizer_and_activations(
    one_device: tuple[list[float], Any],
) -> None:
    _, peak = one_device
    # fp32 AdamW (foreach=False): two moments per parameter, and a 4-byte step count for each
    # of the model's parameter tensors.
    n_tensors = len(list(GPT(BUDGET_CFG.model).parameters()))
    assert peak.params == FULL_BYTES and peak.optimizer == 2 * FULL_BYTES + 4 * n_tensors
    assert 0 < peak.grads <= FULL_BYTES
    # Activations: at least the logits [batch, seq, vocab] fp32 and their log-softmax.
    assert peak.activations >= 2 * 8 * 16 * 256 * 4
    assert peak.total > 4 * FULL_BYTES  # what a parameter-only count misses, several times over


def _check_budget_run(m: dict[str, Any], budget: int, world: int, reference: list[float], one: Any) -> None:
    assert m["full_model_param_bytes"] == FULL_BYTES
    assert m["memory_budget_bytes"] == budget and m["match"] is True
    # The job's own one-device peak (rank 0 ran the reference) agrees with this process's.
    assert m["one_device_peak"]["total"] == one.total
    assert budget < one.total  # the model does not fit the budget on one device
    for run in m["runs"]:
        mode = run["mode"]
        assert run["within_budget"] is True, mode
        worst, ok = compare(run["losses"], reference)
        assert ok, (mode, worst, run["losses"], reference)
        assert run["losses"][-1] < run["losses"][0], mode
        rows = run["per_rank"]
        assert len(rows) == world
        for rank, row in enumerate(rows):
            for k in PARAM_FIGURES:
                assert 0 < row[k] <= budget, (mode, rank, k, row[k], budget)
            assert row["params_peak_materialise"] >= row["params_materialised"]
            assert row["grads"] > 0 and row["optimizer_state"] >= row["grads"]  # AdamW: two moments
            # The training peak holds at least the resident state, and activations on top.
            parts = ("peak_params", "peak_grads", "peak_optimizer", "peak_activations", "peak_other")
            assert row["peak_total"] == sum(row[k] for k in parts), (mode, rank, row)
            assert row["peak_params"] >= row["params_materialised"] and row["peak_activations"] > 0
            # The whole optimizer state, plus the 4-byte step counts optimizer_state leaves out.
            assert 0 <= row["peak_optimizer"] - row["optimizer_state"] < 1024, (mode, rank, row)
            assert row["params_materialised"] + row["optimizer_state"] < row["peak_total"] <= budget
        assert run["peak_fraction"] == max(r["peak_total"] for r in rows) / one.total
        # Shards, not copies: together the ranks hold at least the whole model (plus replicas
        # of the LayerNorms under TP and FSDP's padding), no rank more than ~its share.
        held = sum(row["params_materialised"] for row in rows)
        assert FULL_BYTES <= held < 1.1 * FULL_BYTES, (mode, held)


def test_two_ranks_train_a_model_over_the_budget(
    one_device: tuple[list[float], Any], budget_reference: list[float], tmp_path: Path
) -> None:
    # Measured: each mode's largest rank peaks at 0.45-0.58 of the one-device peak on 2 ranks.
    out = tmp_path / "m.json"
    _, one = one_device
    budget_mib = 0.7 * one.total / (1 << 20)
    r = torchrun(
        "gpu_cluster.workloads.parallel.run",
        [
            "--mode",
            "fsdp,tp,pipeline,pipeline-1f1b",
            *BUDGET_ARGS,
            "--memory-budget-mib",
            f"{budget_mib:.6f}",
            "--check-reference",
            "--json",
            str(out),
        ],
        nproc=2,
    )
    assert r.returncode == 0, explain(r)
    m = json.loads(out.read_text())
    _check_budget_run(m, m["memory_budget_bytes"], 2, budget_reference, one)
    assert abs(m["memory_budget_bytes"] - 0.7 * one.total) < 2
    assert [run["mode"] for run in m["runs"]] == ["fsdp", "tp", "pipeline", "pipeline-1f1b"]
    assert "every rank within" in r.stdout and "rank 1: params" in r.stdout
    assert "largest rank's peak / one-device peak" in r.stdout


def test_four_ranks_2d_under_half_the_one_device_peak(
    one_device: tuple[list[float], Any], budget_reference: list[float], tmp_path: Path
) -> None:
    # Measured: 2-D (dp 2 x tp 2) peaks at 0.30 of one device, FSDP on 4 ranks at 0.39.
    out = tmp_path / "m.json"
    _, one = one_device
    budget_mib = 0.5 * one.total / (1 << 20)
    r = torchrun(
        "gpu_cluster.workloads.parallel.run",
        [
            "--mode",
            "2d,fsdp",
            "--tp",
            "2",
            *BUDGET_ARGS,
            "--param-budget-mib",  # the flag's older name still works
            f"{budget_mib:.6f}",
            "--check-reference",
            "--json",
            str(out),
        ],
        nproc=4,
    )
    assert r.returncode == 0, explain(r)
    m = json.loads(out.read_text())
    _check_budget_run(m, m["memory_budget_bytes"], 4, budget_reference, one)


def test_a_budget_no_rank_can_meet_fails_the_job(one_device: tuple[list[float], Any], tmp_path: Path) -> None:
    # The budget check can fail: a 2-stage pipeline's ranks each peak at ~1/2 of one device,
    # although their parameters alone (~0.5 of the model's 4 bytes a parameter) would fit.
    out = tmp_path / "m.json"
    _, one = one_device
    budget = 0.3 * one.total
    assert budget > FULL_BYTES / 2  # a parameter-only budget would have passed this
    r = torchrun(
        "gpu_cluster.workloads.parallel.run",
        [
            "--mode",
            "pipeline",
            *BUDGET_ARGS,
            "--steps",
            "1",
            "--memory-budget-mib",
            f"{budget / (1 << 20):.6f}",
            "--json",
            str(out),
        ],
        nproc=2,
    )
    assert r.returncode != 0, explain(r)
    m = json.loads(out.read_text())
    assert m["runs"][0]["within_budget"] is False and m["one_device_peak"] is None
    assert "OVER: rank 0: peak_total" in r.stdout and "rank 1: peak_total" in r.stdout
    assert "params_peak_materialise" not in r.stdout.split("OVER:")[1]  # the parameters did fit


def test_bf16_mixed_precision_runs_on_gloo_and_only_tracks_the_reference(
    budget_reference: list[float], tmp_path: Path
) -> None:
    # FSDP2's MixedPrecisionPolicy(bf16 params, fp32 reduce), what --precision auto picks on GPU.
    out = tmp_path / "m.json"
    r = torchrun(
        "gpu_cluster.workloads.parallel.run",
        ["--mode", "fsdp,tp", *BUDGET_ARGS, "--precision", "bf16", "--check-reference", "--json", str(out)],
        nproc=2,
    )
    assert r.returncode == 0, explain(r)
    m = json.loads(out.read_text())
    fsdp, tp = m["runs"]
    assert fsdp["bf16"] is True and fsdp["match"] is None  # no verdict in bf16, a trend
    assert 1e-6 < fsdp["max_rel_diff"] < 1e-2  # really computed in bf16, and still close
    assert fsdp["losses"][-1] < fsdp["losses"][0]
    assert "bf16: trend only, no verdict" in r.stdout
    # Tensor parallel alone stays fp32 (as torchtitan) and keeps its verdict.
    assert tp["bf16"] is False and tp["match"] is True and m["match"] is True


def test_a_pipeline_greeting_of_mixed_dtypes_is_sent_as_its_receives(tmp_path: Path) -> None:
    """torch 2.9.1 (the ROCm image's) greets a neighbour stage by sending an int64 scalar into a
    float32 receive, which gloo aborts on (8 vs 4 bytes). The stage's greeting is made to send
    what it receives; a greeting that already agrees (torch 2.13's) is left as it is. Real
    P2POps, in a one-process gloo group; the 2.9.1 run itself is in the closing note."""
    import torch.distributed as dist

    from gpu_cluster.workloads.parallel.plans import match_greeting_dtypes

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:

        class Stage:
            def __init__(self, send: torch.Tensor) -> None:
                self.send = send

            def _get_init_p2p_neighbors_ops(self) -> list[dist.P2POp]:
                return [dist.P2POp(dist.irecv, torch.zeros(1), 0), dist.P2POp(dist.isend, self.send, 0)]

        old = Stage(torch.tensor(1))  # torch 2.9.1: int64, 0-d
        match_greeting_dtypes(old)
        ops = old._get_init_p2p_neighbors_ops()
        assert [(o.op, o.tensor.dtype, o.tensor.nbytes) for o in ops] == [
            (dist.irecv, torch.float32, 4),
            (dist.isend, torch.float32, 4),
        ]
        assert float(ops[1].tensor) == 1.0
        agreed = torch.tensor(1, dtype=torch.float32)  # torch 2.13
        new = Stage(agreed)
        match_greeting_dtypes(new)
        assert new._get_init_p2p_neighbors_ops()[1].tensor is agreed
    finally:
        dist.destroy_process_group()
