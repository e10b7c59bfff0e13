"""The user's own model (a Llama-style decoder from tests/workloads/_user_llama.py, outside
workloads/) under fsdp, tp and pipeline, and distributed checkpoints: a killed rank resumes from
the newest complete checkpoint, and a checkpoint resumes at another layout (FSDP 4 -> 2 ranks,
TP -> FSDP, pipeline -> FSDP). Every run is compared with the one-process run of the same model.

Tolerance: a resumed run's per-step losses (those before the checkpoint from its marker, those
after from the resumed layout) must match the uninterrupted one-process run within
``LOSS_RTOL = 1e-5``, the bound of the split modes themselves. Measured on this machine
(gloo, fp32, 6 steps): largest relative difference 8.3e-08 (FSDP 4 -> 2, TP -> FSDP),
1.7e-07 (pipeline -> FSDP); resuming with a fresh optimizer instead (what losing AdamW's state
would do) differs by far more than the bound (checked below), so the bound notices it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.workloads.torchrun_util import explain, job_env, torchrun
from gpu_cluster.workloads.parallel.run import LOSS_RTOL, batches, compare, loss_fn, parse_config, run_reference
from gpu_cluster.workloads.parallel.steps import _adamw
from gpu_cluster.workloads.parallel.materialise import init_local
from gpu_cluster.workloads.train.checkpoint import COMPLETE_MARKER

USER = [
    "--model",
    "tests.workloads._user_llama:llama",
    "--dataset",
    "tests.workloads._user_llama:tokens",
    "--lr",
    "1e-2",
    "--batch-size",
    "8",
    "--microbatches",
    "4",
    "--seed",
    "0",
]
STEPS = 6


@pytest.fixture(scope="module")
def reference() -> list[float]:
    return run_reference(parse_config(["--mode", "reference", *USER, "--steps", str(STEPS)]))


def _run(tmp: Path, name: str, mode: str, steps: int, nproc: int, *extra: str, **env: str) -> dict:  # type: ignore[type-arg]
    out = tmp / f"{name}.json"
    r = torchrun(
        "gpu_cluster.workloads.parallel.run",
        ["--mode", mode, *USER, "--steps", str(steps), "--json", str(out), *extra],
        nproc=nproc,
        max_restarts=1 if env else 0,
        env=job_env(**env),
    )
    assert r.returncode == 0, explain(r)
    doc: dict = json.loads(out.read_text())  # type: ignore[type-arg]
    doc["stdout"], doc["stderr"] = r.stdout, r.stderr
    return doc


def test_user_llama_trains_under_fsdp_tp_and_pipeline(reference: list[float], tmp_path: Path) -> None:
    m = _run(tmp_path, "modes", "fsdp,tp,pipeline", STEPS, 2, "--check-reference")
    assert m["match"] is True and [r["mode"] for r in m["runs"]] == ["fsdp", "tp", "pipeline"]
    for run in m["runs"]:
        worst, ok = compare(run["losses"], reference)
        assert ok, (run["mode"], worst, run["losses"], reference)
        assert run["losses"][-1] < 0.8 * run["losses"][0], run["mode"]  # it learns the rule
        # Split, not copied: every rank holds less than the whole model's parameters.
        assert all(row["params_materialised"] < m["full_model_param_bytes"] for row in run["per_rank"])
    assert m["full_model_param_bytes"] == 4 * sum(p.numel() for p in _llama().parameters())


def _llama() -> torch.nn.Module:
    from tests.workloads._user_llama import llama

    return llama()


def _killed_then_resumed(
    tmp_path: Path,
    first: str,
    nproc_first: int,
    then: str,
    nproc_then: int,
    reference: list[float],
    crash: str = "GPUC_CRASH_AT_STEP",
) -> tuple[dict, dict]:  # type: ignore[type-arg]
    ck = tmp_path / "ckpt"
    # Rank 1 exits hard before step 4 (or inside step 4's checkpoint write, before its marker);
    # torchrun restarts the group, which resumes after step 2, the newest complete checkpoint.
    a = _run(tmp_path, "a", first, 4, nproc_first, "--ckpt-dir", str(ck), "--ckpt-every", "2", **{crash: "4"})
    said = (
        "exiting hard before step 4"
        if crash == "GPUC_CRASH_AT_STEP"
        else "exiting hard inside the step 4 checkpoint write"
    )
    assert f"{crash}=4: {said}" in a["stderr"], a["stderr"][-3000:]
    assert f"model_parallel {first}: resuming after step 2 from {ck / 'step_2'}" in a["stdout"]
    assert len(a["runs"][0]["losses"]) == 4
    # Published atomically: only complete step directories, no temporaries; the newest two kept.
    assert sorted(p.name for p in ck.iterdir()) == ["step_2", "step_4"]
    marker = json.loads((ck / "step_4" / COMPLETE_MARKER).read_text())
    assert marker["step"] == 4 and marker["mode"] == first and marker["world_size"] == nproc_first
    # The same checkpoint at another layout, to the end of the run.
    b = _run(tmp_path, "b", then, STEPS, nproc_then, "--ckpt-dir", str(ck), "--check-reference")
    assert (
        f"model_parallel {then}: resuming after step 4 from {ck / 'step_4'} "
        f"(written by {first} on {nproc_first} ranks; now {then} on {nproc_then})"
    ) in b["stdout"]
    losses = b["runs"][0]["losses"]
    assert losses[:4] == a["runs"][0]["losses"]  # the marker's, as the first layout measured them
    worst, ok = compare(losses, reference)
    assert ok and worst <= LOSS_RTOL, (worst, losses, reference)
    assert b["match"] is True
    return a, b


def test_fsdp_4_ranks_killed_resumes_then_continues_on_2(reference: list[float], tmp_path: Path) -> None:
    # The helper holds the kill, the resume and the losses against the reference; here, the layouts.
    a, b = _killed_then_resumed(tmp_path, "fsdp", 4, "fsdp", 2, reference)
    assert len(b["runs"][0]["losses"]) == STEPS and len(a["runs"][0]["losses"]) == 4


def test_tp_killed_mid_checkpoint_resumes_then_continues_as_fsdp(reference: list[float], tmp_path: Path) -> None:
    # Killed while writing step 4: the half-written .step_4.tmp is never read, step 2 is.
    _killed_then_resumed(tmp_path, "tp", 2, "fsdp", 2, reference, crash="GPUC_CRASH_IN_CHECKPOINT")


def test_pipeline_killed_resumes_then_continues_as_fsdp(reference: list[float], tmp_path: Path) -> None:
    _, b = _killed_then_resumed(tmp_path, "pipeline", 2, "fsdp", 2, reference)
    # A checkpoint of another run is refused, naming what differs.
    r = torchrun(
        "gpu_cluster.workloads.parallel.run",
        ["--mode", "fsdp", *USER[:-1], "1", "--steps", str(STEPS + 1), "--ckpt-dir", str(tmp_path / "ckpt")],
        nproc=2,
    )
    # torchrun itself exits 1 when a worker fails; the workers' own exit is the usage error 2.
    assert r.returncode != 0 and "exitcode  : 2" in r.stderr, explain(r)
    ck6 = tmp_path / "ckpt" / "step_6"
    assert f"error: --seed: {ck6}: 1 differs from 0 of the checkpoint; resume with the same value" in r.stderr
    # No worker traceback (torchrun's own report of a failed worker is its, not ours).
    assert "[rank0]: Traceback" not in r.stderr and "[rank1]: Traceback" not in r.stderr, r.stderr


def test_the_tolerance_notices_a_lost_optimizer_state(reference: list[float]) -> None:
    # The one-process run again, but with AdamW's moments dropped after step 4: what a resume
    # that restored the weights and not the optimizer would produce.
    cfg = parse_config(["--mode", "reference", *USER, "--steps", str(STEPS)])
    model = _llama()
    init_local(model, None, cfg.seed)
    opt = _adamw(model.parameters(), cfg)
    lossf, losses = loss_fn(cfg), []
    for step, (x, y) in enumerate(batches(cfg)):
        if step == 4:
            opt = _adamw(model.parameters(), cfg)
        loss = lossf(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[:5] == reference[:5]
    worst, ok = compare(losses, reference)
    assert not ok and worst > 100 * LOSS_RTOL, worst


def test_plan_declared_derived_and_refused(capsys: pytest.CaptureFixture[str]) -> None:
    derived = parse_config(["--mode", "tp", *USER])
    assert derived.user is not None and derived.user.has_tp and derived.user.n_blocks == 2
    declared = parse_config(["--mode", "tp", *USER, "--plan", "tests.workloads._user_llama:mlp_only_plan"])
    assert declared.user is not None and declared.user.has_tp
    with pytest.raises(SystemExit) as e:
        parse_config(["--mode", "fsdp", *USER, "--plan", "tests.workloads._user_llama:bad_plan"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--plan: blocks 'blocks' is not a ModuleList/ModuleDict of the model" in err
    assert "--plan: 'embed' is not a direct child of the model" in err
    assert "--plan: tensor-parallel plan names 'layers.0.attention.wz', which the model does not have" in err
    with pytest.raises(SystemExit):
        parse_config(["--mode", "fsdp,tp", "--ckpt-dir", "/tmp/x", "--ckpt-every", "0"])
    assert "--ckpt-dir: checkpoints one split mode per run, got --mode 'fsdp,tp'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_config(["--mode", "fsdp", "--ckpt-every", "2", "--plan", "m:f"])
    err = capsys.readouterr().err
    assert "--ckpt-every: 2 needs --ckpt-dir" in err and "--plan: 'm:f' splits a --model" in err
    with pytest.raises(SystemExit):
        parse_config(["--mode", "fsdp", "--model", "tests.workloads._user_plugins:mlp"])
    # nn.Sequential has no ModuleList/ModuleDict of blocks: the plan cannot be derived.
    assert "give --plan" in capsys.readouterr().err


PLAIN = [*USER[:1], "tests.workloads._user_plain:plain", *USER[2:]]


def test_a_plain_modulelist_of_up_and_down_blocks_is_split_from_its_shapes() -> None:
    """Layers named 'up' and 'down' (no name list knows them) in a plain ModuleList: the split is
    read from the Linears' shapes (d -> h column-wise, h -> d row-wise); a stage of the pipeline
    keeps the whole model's block indices, so its checkpoint keys are the whole model's."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    from tests.workloads._user_plain import plain
    from gpu_cluster.workloads.parallel import plans

    with torch.device("meta"):
        model = plain()
    plan = plans.derive_plan(model)
    assert plan is not None and plan.blocks == "blocks" and plan.pre == ("embed",) and plan.post == ("head",)
    assert {k: type(v) for k, v in plan.tp.items()} == {
        **{f"blocks.{i}.up": ColwiseParallel for i in range(4)},
        **{f"blocks.{i}.down": RowwiseParallel for i in range(4)},
    }
    # The Llama's square attention projections: names break the tie, the SwiGLU by its shapes.
    with torch.device("meta"):
        llama = _llama()
    splits = plans.block_split(llama.layers["0"])  # type: ignore[index]
    assert splits == {
        "attention.wq": "col",
        "attention.wk": "col",
        "attention.wv": "col",
        "attention.wo": "row",
        "feed_forward.w1": "col",
        "feed_forward.w2": "row",
        "feed_forward.w3": "col",
    }
    stage = plans.pipeline_part_plan(plain(), plan, 1, 2)
    assert (
        stage.embed is None and [k for k in stage.state_dict() if k.startswith("blocks.")][0] == "blocks.2.norm.weight"
    )
    cfg = parse_config(["--mode", "tp,pipeline", *PLAIN])
    assert cfg.user is not None and cfg.user.has_tp and not cfg.user.blocks_named


def test_the_plain_model_trains_under_tp_and_pipeline_like_one_process(tmp_path: Path) -> None:
    ref = run_reference(parse_config(["--mode", "reference", *PLAIN, "--steps", "4"]))
    out = tmp_path / "plain.json"
    r = torchrun(
        "gpu_cluster.workloads.parallel.run",
        ["--mode", "tp,pipeline", *PLAIN, "--steps", "4", "--json", str(out), "--check-reference"],
        nproc=2,
        env=job_env(),
    )
    assert r.returncode == 0, explain(r)
    doc = json.loads(out.read_text())
    assert doc["match"] is True and [run["mode"] for run in doc["runs"]] == ["tp", "pipeline"]
    for run in doc["runs"]:
        assert compare(run["losses"], ref)[1], (run["mode"], run["losses"], ref)


NANOGPT = [*USER[:1], "tests.workloads._user_nanogpt:nanogpt", *USER[2:]]


def test_a_fused_qkv_is_refused_for_tensor_parallel_and_named(capsys: pytest.CaptureFixture[str]) -> None:
    """nanoGPT's c_attn (d -> 3d, cut into q, k and v by forward): a derived column split would
    hand a rank sections that are not its heads, so tp (and 2d) refuse it in one line naming the
    layer; the MLP's c_fc (d -> 4d read whole by c_proj) is not fused. FSDP and the pipeline do not
    split inside a block, so they take the same model."""
    from tests.workloads._user_nanogpt import nanogpt
    from gpu_cluster.workloads.parallel import plans

    with torch.device("meta"):
        model = nanogpt()
    plan = plans.derive_plan(model)
    assert plan is not None
    fused = plans.fused_projections(model, plan)
    assert [path for path, _ in fused] == ["h.0.attn.c_attn", "h.1.attn.c_attn"]
    assert "3 fused sections of 32" in fused[0][1]
    for mode in ("tp", "2d"):
        with pytest.raises(SystemExit) as e:
            parse_config(["--mode", mode, *NANOGPT])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "--model: cannot derive a tensor-parallel plan: h.0.attn.c_attn: Linear(32 -> 96)" in err, err
        assert "(and 1 more like it)" in err and "--plan MODULE:FUNCTION" in err
    for mode in ("fsdp", "pipeline"):
        cfg = parse_config(["--mode", mode, *NANOGPT])
        assert cfg.user is not None
    # The unfused Llama (wq, wk, wv beside wo; w1, w3 beside w2) has nothing fused.
    with torch.device("meta"):
        llama = _llama()
    llama_plan = plans.derive_plan(llama)
    assert llama_plan is not None and plans.fused_projections(llama, llama_plan) == []
