"""The one problem type: every reader reports (path, reason), all at once, in one spelling."""

from __future__ import annotations

import pytest

from gpu_cluster.components.contract import OutputsError
from gpu_cluster.components.problems import Problem, Problems, ProblemsError
from gpu_cluster.components.spec import SpecError


def test_a_problem_is_a_pair_and_renders_path_then_reason() -> None:
    p = Problem("compute.nodes", "0 is out of range (allowed: 1..2048)")
    assert p == ("compute.nodes", "0 is out of range (allowed: 1..2048)")
    path, reason = p
    assert p.render() == f"{path}: {reason}"
    assert Problem("", "unrecognized arguments: --x").render() == "unrecognized arguments: --x"


def test_the_collector_writes_the_allowed_tail_and_keeps_order() -> None:
    probs = Problems()
    assert not probs
    probs.add("a", "1 is too small", allowed="2..9")
    probs.extend([("b", "missing")])
    probs.replace_last("b", "required")
    assert list(probs) == [("a", "1 is too small (allowed: 2..9)"), ("b", "required")] and len(probs) == 2


def test_every_error_kind_is_one_problems_error_with_its_heading() -> None:
    spec = SpecError([("zone", "bad")])
    outs = OutputsError("stack x", [("mount", "missing"), ("bucket", "missing")])
    assert isinstance(spec, ProblemsError) and isinstance(outs, ProblemsError)
    assert str(spec) == "1 problem(s) in the cluster description:\n  zone: bad"
    assert str(outs) == "stack x: 2 problem(s) in the stack outputs:\n  mount: missing\n  bucket: missing"
    assert outs.fields() == ["mount", "bucket"]


def test_validate_reports_every_bad_timeout_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_cluster.workloads.validate.__main__ import main

    assert main(["--timeout", "nan", "run", "--out", "/tmp/x", "--timeout", "-1"]) == 3
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "validate: --timeout: nan (allowed: a finite number of seconds > 0)",
        "validate: run --timeout: -1.0 (allowed: a finite number of seconds > 0)",
    ]
