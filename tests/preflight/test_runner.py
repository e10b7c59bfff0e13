"""The preflight's runner and its place in the import graph."""

from __future__ import annotations

import ast
import io
from pathlib import Path

from gpu_cluster.components.preflight import (
    OK,
    PROBLEMS,
    UNCHECKED,
    Check,
    Context,
    CouldNotCheck,
    Fatal,
    Problem,
    run_checks,
)
from gpu_cluster.components.spec import load_stack

ROOT = Path(__file__).resolve().parents[2]


def ctx() -> Context:
    _, spec = load_stack("aws-h100-eks", deployer_placeholder=True)
    return Context(spec=spec, raw={}, clients=None)


def boom(_: Context) -> list[Problem]:
    raise RuntimeError("an answer nobody foresaw")


def test_each_check_runs_on_its_own_and_the_worst_outcome_decides() -> None:
    def unchecked(_: Context) -> list[Problem]:
        raise CouldNotCheck("denied")

    problem = Check("p", lambda _: [Problem("zone", "bad")])
    err = io.StringIO()
    r = run_checks(ctx(), [Check("u", unchecked), Check("x", boom), problem], progress=err)
    assert [p.path for p in r.problems] == ["zone"] and r.exit_code == PROBLEMS
    assert r.unchecked == [("u", "denied"), ("x", "unexpected RuntimeError: an answer nobody foresaw")]
    assert err.getvalue().splitlines() == [
        "preflight [1/3] u ... could not check",
        "preflight [2/3] x ... could not check",
        "preflight [3/3] p ... 1 problem(s)",
    ]
    assert run_checks(ctx(), [Check("u", unchecked)], progress=io.StringIO()).exit_code == UNCHECKED
    assert run_checks(ctx(), [Check("ok", lambda _: [])], progress=io.StringIO()).exit_code == OK


def test_a_fatal_stops_the_run_and_names_what_was_not_run() -> None:
    def fatal(_: Context) -> list[Problem]:
        raise Fatal("no AWS credentials found; details")

    r = run_checks(ctx(), [Check("a", fatal), Check("b", lambda _: [Problem("zone", "never")])], progress=io.StringIO())
    assert r.problems == [] and r.exit_code == UNCHECKED
    assert r.unchecked == [("a", "no AWS credentials found; details"), ("b", "not run: no AWS credentials found")]


def test_the_preflight_imports_no_pulumi() -> None:
    for path in sorted((ROOT / "components" / "preflight").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not {n for n in names if n.split(".")[0].startswith("pulumi") or n.split(".")[0] == "workloads"}, path


def test_the_reason_a_fatal_stopped_the_rest_is_said_once() -> None:
    """First-hour bug (issue 26): the missing-credentials reason printed once per check; and then
    twice, the rest's line repeating it (issue 47 item 5): the rest now point at the check."""
    from gpu_cluster.components.preflight import render

    def fatal(_: Context) -> list[Problem]:
        raise Fatal("no AWS credentials found; set AWS_PROFILE")

    later = [Check(n, lambda _: []) for n in ("zone", "quota", "bucket")]
    r = run_checks(ctx(), [Check("credentials", fatal), *later], progress=io.StringIO())
    out = io.StringIO()
    render(r, out)
    assert out.getvalue().splitlines() == [
        "could not check credentials: no AWS credentials found; set AWS_PROFILE",
        "not checked, for the same reason as credentials: zone, quota, bucket",
    ]
