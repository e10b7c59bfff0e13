"""FSDP2 and pipeline parallelism launched with torchrun on gloo, against the one-process run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.workloads.torchrun_util import explain, torchrun
from workloads.model_parallel import LOSS_RTOL, compare, parse_config, run_reference, stage_layers

ARGS = ["--vocab-size", "64", "--seq-len", "16", "--d-model", "32", "--n-layers", "2",
        "--n-heads", "2", "--batch-size", "8", "--microbatches", "4", "--steps", "6",
        "--lr", "1e-2", "--seed", "5"]


@pytest.fixture(scope="module")
def reference() -> list[float]:
    return run_reference(parse_config(["--mode", "reference", *ARGS]))


def test_fsdp_and_pipeline_match_reference(reference: list[float], tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    # Both modes in one launch, one after the other on the same ranks.
    r = torchrun("workloads.model_parallel", ["--mode", "fsdp,pipeline", *ARGS, "--check-reference",
                                              "--json", str(out)], nproc=2)
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
    assert "--mode: 'tensor' (allowed: fsdp, pipeline, reference)" in err
    with pytest.raises(SystemExit):
        parse_config(["--mode", "fsdp,reference"])
    assert "reference runs alone" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_config(["--mode", "pipeline", "--batch-size", "6", "--microbatches", "4"])
    assert "--microbatches: 4 does not divide --batch-size 6" in capsys.readouterr().err
