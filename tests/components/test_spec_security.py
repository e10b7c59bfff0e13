"""The spec's security: block: defaults, bounds, and switching flow logs off only with a reason."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpu_cluster.components.spec import SpecError, parse_spec, read_stack_file
from gpu_cluster.components.spec_security import SecuritySpec


def _parse(security: Any) -> Any:
    _, raw = read_stack_file("aws-h200-slurm")
    raw = copy.deepcopy(raw)
    raw["security"] = security
    return parse_spec(raw)


def _problems(security: Any) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        _parse(security)
    return info.value.problems


def test_defaults_give_the_whole_trail() -> None:
    _, raw = read_stack_file("aws-h200-slurm")
    assert parse_spec(raw).security == SecuritySpec(
        flow_logs=True, log_retention_days=365, checkpoint_noncurrent_days=30, exceptions={}
    )
    assert _parse(None).security == SecuritySpec()


def test_values_and_exceptions_are_read() -> None:
    sec = _parse(
        {
            "flow_logs": False,
            "log_retention_days": 90,
            "checkpoint_noncurrent_days": 7,
            "exceptions": {"flow-logs": "  benchmark cluster, gone in two days  "},
        }
    ).security
    assert sec == SecuritySpec(
        flow_logs=False,
        log_retention_days=90,
        checkpoint_noncurrent_days=7,
        exceptions={"flow-logs": "benchmark cluster, gone in two days"},
    )


def test_bad_values_are_named_with_their_path() -> None:
    problems = dict(
        _problems(
            {
                "flow_logs": "no",
                "log_retention_days": 0,
                "checkpoint_noncurrent_days": 9999,
                "exceptions": {"Not A Rule": "some reason here", "imdsv2-required": "why"},
                "retention": 3,
            }
        )
    )
    assert "expected true or false, got 'no'" in problems["security.flow_logs"]
    assert "0 is out of range (allowed: 1..3653)" in problems["security.log_retention_days"]
    assert "9999 is out of range" in problems["security.checkpoint_noncurrent_days"]
    assert "not a policy rule name" in problems["security.exceptions.Not A Rule"]
    assert "needs the reason as a sentence" in problems["security.exceptions.imdsv2-required"]
    assert "unknown key" in problems["security.retention"]


def test_flow_logs_off_needs_the_reason() -> None:
    problems = _problems({"flow_logs": False})
    assert [p for p, _ in problems] == ["security.flow_logs"]
    assert "security.exceptions.flow-logs" in problems[0][1]
    assert "mapping of rule name" in dict(_problems({"exceptions": ["flow-logs"]}))["security.exceptions"]
