"""What the last validation report says, read for heal: the nodes it FAILed for a reason of their
own, the nodes it cleared, and how many nodes look unhealthy at all.

Only a node's own findings start an incident (issue 34 item 1): its node gate, its GPUs' health
figures, its single-node collectives (NVLink/xGMI inside the node), the pairwise search's second
pass with a known-good node, its own fabric or device missing at start-up, and a rank that started
and died on it (only ever replaced if the second look, paired with a cleared node, fails it again:
its node may be the victim of another). A cluster figure under its floor, a collective that hung
with both nodes of a pair suspect, a rank that never arrived, a transport fall-back: those name no
node by themselves, and heal does not act on them.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from gpu_cluster.heal.adapters import CheckResult

# The judge's reason texts (workloads/validate/judge.py, certificate.py, blame.py), by what they
# say about the node. Matched from the start of a reason.
NODE_SCOPED: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("node gate", re.compile(r"gate \S")),
    ("GPU health", re.compile(r"health\.")),
    ("GPU count", re.compile(r"\d+ GPUs answered")),
    ("single-node collectives", re.compile(r"single[-_]node")),
    ("pairwise search", re.compile(r"pairwise: pair with known-good ")),
    ("fabric at start-up", re.compile(r"[\w-]+: rank \d+ lacks its fabric")),
    ("device at start-up", re.compile(r"[\w-]+: rank \d+ failed: device setup")),
    # A rank that started and died (judge.py's "(process or node died)"): its node may be the
    # victim of another, so the incident's second look decides, pairing it with a cleared node; a
    # node whose rank dies there again (the check cannot reach it) is confirmed, one that passes is
    # returned to service and nothing is replaced (issue 41 item 3).
    ("process or node died", re.compile(r".*\(process or node died\)")),
)


SINGLE_NODE = frozenset({"node gate", "GPU health", "GPU count", "single-node collectives"})
"""Findings measured on the node alone: a check that FAILs a node for one of these blames it without a
second peer; anything else (the pair's figure, a rank that died) needs a second, different cleared
peer to fail it too (I8)."""


class EvidenceError(ValueError):
    """The report cannot be read, or is not a validation report; one line, with the next step."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    node: str
    verdict: str
    scoped: tuple[str, ...]
    """Reasons that are the node's own (what an incident acts on)."""
    other: tuple[str, ...]
    """Reasons that name the node but are not its own alone."""

    @property
    def actionable(self) -> bool:
        return self.verdict == "FAIL" and bool(self.scoped)

    @property
    def why(self) -> str:
        return "; ".join(self.scoped or self.other)[:400]


@dataclass(frozen=True, slots=True, kw_only=True)
class Evidence:
    path: Path
    report_id: str
    """A digest of what the judge wrote (heal's own ``incidents`` left out): an incident is opened
    once per node per report."""
    verdict: str
    nodes: tuple[str, ...]
    cleared: tuple[str, ...]
    """Nodes the report PASSed, in its order: the peers a second look and a revalidation pair with."""
    findings: tuple[Finding, ...]
    instance_type: str | None
    local: bool
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def named(self) -> list[Finding]:
        return [f for f in self.findings if f.actionable]

    @property
    def not_acted_on(self) -> list[Finding]:
        return [f for f in self.findings if not f.actionable]

    @property
    def failed(self) -> list[str]:
        return [f.node for f in self.findings if f.verdict == "FAIL"]


def scope_of(reason: str) -> str | None:
    """The kind of node-scoped finding ``reason`` is, or None when it is not the node's own."""
    for kind, rx in NODE_SCOPED:
        if rx.match(reason):
            return kind
    return None


def read_report(path: Path) -> Evidence:
    p = path / "report.json" if path.is_dir() else path
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise EvidenceError(
            f"no validation report at {p}: run `gpu-cluster validate submit STACK` first "
            "(or pass --report with the report.json of the run that named the nodes)"
        ) from None
    except OSError as exc:
        raise EvidenceError(f"{p}: cannot be read ({exc.strerror})") from None
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise EvidenceError(f"{p}: not JSON ({exc}): pass the report.json a validation run wrote") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list) or "verdict" not in doc:
        raise EvidenceError(f"{p}: not a validation report.json (no verdict and nodes): pass the one a run wrote")
    findings = []
    order: list[str] = []
    cleared: list[str] = []
    for n in doc["nodes"]:
        if not isinstance(n, dict) or not isinstance(n.get("node"), str):
            raise EvidenceError(f"{p}: a node entry without a name ({n!r}): pass the report.json a run wrote")
        node, verdict = n["node"], str(n.get("verdict", "UNKNOWN"))
        reasons = [str(r) for r in n.get("reasons") or []]
        order.append(node)
        if verdict == "PASS":
            cleared.append(node)
            continue
        scoped = tuple(r for r in reasons if scope_of(r))
        findings.append(
            Finding(node=node, verdict=verdict, scoped=scoped, other=tuple(r for r in reasons if not scope_of(r)))
        )
    # heal records its incidents in the same file; the report's identity is what the judge wrote.
    canon = json.dumps({k: v for k, v in doc.items() if k != "incidents"}, sort_keys=True).encode()
    return Evidence(
        path=p,
        report_id=hashlib.sha256(canon).hexdigest()[:12],
        verdict=str(doc["verdict"]),
        nodes=tuple(order),
        cleared=tuple(cleared),
        findings=tuple(findings),
        instance_type=doc.get("instance_type"),
        local=bool(doc.get("local")),
    )


def pair_figures(doc: dict[str, Any], node: str, peer: str) -> dict[str, Any]:
    """What a revalidation report measured on the pair: the multi-node figures and each node's
    health and gate figures (the certificate's record of the replacement)."""
    out: dict[str, Any] = {}
    for m in doc.get("measurements", []):
        scope = str(m.get("scope", ""))
        if (
            scope == "cluster"
            and str(m.get("check", "")).startswith("multi_node.")
            or scope
            in (
                f"node:{node}",
                f"node:{peer}",
            )
        ):
            if m.get("value") is not None:
                key = f"{m['check']} {scope}"
                out[key] = {
                    "value": round(float(m["value"]), 4),
                    "unit": m.get("unit", ""),
                    "verdict": m.get("verdict"),
                }
    return out


def judge_pair(doc: Mapping[str, Any], node: str, peer: str, where: str, note: str = "") -> CheckResult:
    """Read a two-node check's report: passed when ``node`` has no finding of its own, the peer
    does not FAIL, and the pair's multi-node figure was measured (and did not FAIL)."""
    verdicts = {str(n["node"]): n for n in doc.get("nodes", [])}
    mine = verdicts.get(node, {"verdict": "UNKNOWN", "reasons": ["it never reported"]})
    theirs = verdicts.get(peer, {"verdict": "UNKNOWN", "reasons": ["it never reported"]})
    multi = [m for m in doc.get("measurements", []) if str(m.get("check", "")).startswith("multi_node.")]
    measured = [m for m in multi if m.get("value") is not None]
    figures = pair_figures(dict(doc), node, peer)
    pair = ", ".join(f"{m['check']} {float(m['value']):.3g} {m.get('unit', '')}".rstrip() for m in measured)
    if mine["verdict"] == "UNKNOWN" and theirs["verdict"] == "UNKNOWN" and not measured:
        return CheckResult(
            ran=False, passed=False, detail=f"the check left no results ({note}); see {where}", report=where
        )
    if theirs["verdict"] == "FAIL" and mine["verdict"] != "FAIL":
        return CheckResult(
            ran=False,
            passed=False,
            detail=f"the peer {peer} failed it: {'; '.join(theirs.get('reasons', []))[:300]}",
            figures=figures,
            report=where,
        )
    ok = mine["verdict"] in ("PASS", "WARN") and not mine.get("reasons") and bool(measured)
    ok = ok and not any(m.get("verdict") == "FAIL" for m in measured)
    if ok:
        return CheckResult(ran=True, passed=True, detail=f"{node} PASS; pair {pair}", figures=figures, report=where)
    why = "; ".join(mine.get("reasons", [])) or ("the pair's figure was not measured" if not measured else pair)
    own = any(scope_of(str(r)) in SINGLE_NODE for r in mine.get("reasons", []))
    return CheckResult(
        ran=True, passed=False, detail=f"{node} {mine['verdict']}: {why}"[:400], figures=figures, report=where, own=own
    )
