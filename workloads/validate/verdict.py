"""Verdicts and exit codes of the validation job, in the Nagios convention health checks use
(Meta GCM check-nccl, cluster-health-scanner): 0 pass, 1 warn, 2 fail, 3 could not run."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any


class Verdict(IntEnum):
    PASS = 0
    WARN = 1
    FAIL = 2
    UNKNOWN = 3
    """The check could not run (a phase crashed before measuring, no floor to compare with)."""

    @staticmethod
    def worst(verdicts: list["Verdict"]) -> "Verdict":
        # Could-not-run outranks everything: a cluster whose check did not run is not proven.
        return max(verdicts, default=Verdict.PASS)


@dataclass(slots=True, kw_only=True)
class Measurement:
    """One figure compared with its floor."""

    check: str
    """What was measured, e.g. 'multi_node.all_reduce', 'single_node.all_reduce', 'health.matmul'."""
    scope: str
    """'cluster', 'node:<name>', 'pair:<a>+<b>' or 'gpu:<node>/<index>'."""
    value: float | None
    """None when the measurement could not be taken."""
    unit: str
    floor_warn: float | None = None
    floor_fail: float | None = None
    basis: str = ""
    """Where the floors came from: 'catalog <type> (measured|derived)', 'relative to the median node', or 'none'."""
    at_bytes: int | None = None
    verdict: Verdict = Verdict.PASS
    detail: str = ""
    floor_basis: str = ""
    """Beside the floors, what they stand on: 'measured', 'fabric, widened x1.85', ... (the basis
    kind of the expected figure and how far its floors were widened for it)."""

    def judge(self) -> "Measurement":
        if self.value is None:
            self.verdict = Verdict.UNKNOWN if self.floor_fail is None else Verdict.FAIL
        elif self.floor_fail is not None and self.value < self.floor_fail:
            self.verdict = Verdict.FAIL
        elif self.floor_warn is not None and self.value < self.floor_warn:
            self.verdict = Verdict.WARN
        else:
            self.verdict = Verdict.PASS
        return self

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "scope": self.scope,
            "value": self.value,
            "unit": self.unit,
            "floor_warn": self.floor_warn,
            "floor_fail": self.floor_fail,
            "basis": self.basis,
            "at_bytes": self.at_bytes,
            "verdict": self.verdict.name,
            "detail": self.detail,
            "floor_basis": self.floor_basis,
        }


@dataclass(slots=True, kw_only=True)
class NodeVerdict:
    node: str
    verdict: Verdict = Verdict.PASS
    reasons: list[str] = field(default_factory=list)

    def mark(self, verdict: Verdict, reason: str) -> None:
        self.verdict = max(self.verdict, verdict)
        self.reasons.append(reason)

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "verdict": self.verdict.name, "reasons": self.reasons}
