"""The node gate's results and each node's software stack in the validation report.

The main phase leaves ``gate`` (one document per rank, from gpu_cluster.workloads.health.node_gate) and ``stack``
(node -> versions) in phase-main.json; this turns them into node verdicts, measurement rows
and the report's "Node gate" and "Software stack" sections. Kept apart from judge.py and
report.py, which call it in one line each.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_cluster.workloads.validate.verdict import Measurement, NodeVerdict, Verdict

_STATUS = {"fail": Verdict.FAIL, "warn": Verdict.WARN}
STACK_COLUMNS = (
    "kernel",
    "driver",
    "cuda_driver",
    "cuda_runtime",
    "rocm",
    "nccl",
    "rccl",
    "net_plugin",
    "net_plugin_version",
    "efa_installer",
    "tcpxo_rxdm",
    "image_digest",
    "torch",
)


def gpu_scope(node: str, scope: str) -> str:
    """A gate check's report scope: ``gpu:<node>/<index>`` for a GPU's (``gpu3``), else ``node:<node>``."""
    return f"gpu:{node}/{scope[3:]}" if scope.startswith("gpu") and scope[3:].isdigit() else f"node:{node}"


_scope = gpu_scope


@dataclass(frozen=True, slots=True)
class Previous:
    """The certificate a run is compared with: the newest earlier report of the same cluster."""

    run: str
    """Its run directory's name."""
    ecc_aggregate: Mapping[str, Mapping[str, int]]
    """node -> GPU scope -> lifetime uncorrectable ECC count it recorded."""


def previous(run_dir: Path) -> Previous | None:
    """The newest report.json among ``run_dir``'s siblings (every run of a cluster has a directory
    beside the others: ``<mount>/validation/<cluster>/<run-id>``, and ``submit`` brings them back
    the same way), written before this run began; None when there is none."""
    parent = run_dir.parent
    try:
        began = min((p.stat().st_mtime for p in run_dir.iterdir()), default=None)
    except OSError:
        began = None
    found: list[tuple[float, Path]] = []
    for rep in parent.glob("*/report.json"):
        if rep.parent == run_dir:
            continue
        try:
            at = rep.stat().st_mtime
        except OSError:
            continue
        if began is None or at <= began:
            found.append((at, rep))
    for _, rep in sorted(found, reverse=True):
        try:
            doc = json.loads(rep.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        counts = {
            str(g.get("node")): {str(k): int(v) for k, v in (g.get("ecc_aggregate") or {}).items()}
            for g in doc.get("gate") or []
            if isinstance(g, dict)
        }
        return Previous(run=rep.parent.name, ecc_aggregate=counts)
    return None


def _ecc_aggregate(c: dict[str, Any], node: str, scope: str, prev: Previous | None) -> tuple[str, str]:
    """(status, detail) of a GPU's lifetime uncorrectable ECC count, by its change since the
    previous certificate: more than it recorded is a new error (warn); the same, or a first
    record, is not (the count never goes back to 0)."""
    value = c.get("value")
    if not isinstance(value, int):
        return str(c["status"]), str(c.get("detail", ""))
    if prev is None:
        return "pass", f"{value} lifetime uncorrectable ECC errors, recorded as the baseline (no earlier certificate)"
    before = prev.ecc_aggregate.get(node, {}).get(scope)
    if before is None:
        return "pass", f"{value} lifetime uncorrectable ECC errors, recorded as the baseline (run {prev.run} had none)"
    if value > before:
        return (
            "warn",
            f"{value - before} new uncorrectable ECC error(s) since run {prev.run} (lifetime {before} -> {value})",
        )
    return "pass", f"{value} lifetime uncorrectable ECC errors, as in run {prev.run}"


def judge_gate(
    main: dict[str, Any] | None, nodes: dict[str, NodeVerdict], gpu_run: bool, prev: Previous | None = None
) -> tuple[list[Measurement], list[dict[str, Any]]]:
    """(measurement rows, per-node summary). A failed check fails its node, a warning warns it;
    a check that could not run marks nothing, but on a GPU run a node whose GPU counters could
    not be read at all is a warning: the gate did not see it. A GPU's lifetime ECC count (NVIDIA's
    aggregate counter) is judged by its change since ``prev``, the previous certificate, and each
    node's counts are kept in its summary for the next."""
    docs = (main or {}).get("gate") or []
    by_node: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
    vendor: dict[str, str] = {}
    gemm: dict[str, list[float]] = {}
    for doc in docs:
        n = str(doc.get("node"))
        vendor[n] = str(doc.get("vendor"))
        for c in doc.get("checks", []):
            by_node.setdefault(n, {})[(str(c["name"]), str(c["scope"]))] = c
        gemm.setdefault(n, []).extend(float(g["sustained_tflops"]) for g in doc.get("gemm", []))
    ms: list[Measurement] = []
    summary: list[dict[str, Any]] = []
    for n, checks in by_node.items():
        nv = nodes.setdefault(n, NodeVerdict(node=n))
        failed: list[str] = []
        warned: list[str] = []
        not_run: list[str] = []
        passed = 0
        ecc: dict[str, int] = {}
        for (name, scope), c in sorted(checks.items()):
            status = str(c["status"])
            if name == "ecc.aggregate" and isinstance(c.get("value"), int):
                ecc[scope] = int(c["value"])
                status, detail = _ecc_aggregate(c, n, scope, prev)
                c = {**c, "status": status, "detail": detail}
            if status in _STATUS:
                v = _STATUS[status]
                nv.mark(v, f"gate {name} ({scope}): {c.get('detail', '')}"[:300])
                (failed if v == Verdict.FAIL else warned).append(f"{name} ({scope})")
                value = c.get("value")
                ms.append(
                    Measurement(
                        check=f"gate.{name}",
                        scope=_scope(n, scope),
                        value=float(value) if isinstance(value, (int, float)) else None,
                        unit="",
                        basis="node gate",
                        verdict=v,
                        detail=str(c.get("detail", ""))[:300],
                    )
                )
            elif status == "not run":
                not_run.append(f"{name}: {c.get('detail', '')}")
            elif status == "pass":
                passed += 1
        if gpu_run and vendor.get(n) == "none":
            nv.mark(Verdict.WARN, "gate: no GPU management library answered, the GPU counters were not read")
        worst_gemm = min(gemm.get(n) or [0.0]) if gemm.get(n) else None
        if worst_gemm is not None:
            statuses = [str(c["status"]) for (name, _), c in checks.items() if name == "gemm.sustained"]
            v = Verdict.FAIL if "fail" in statuses else Verdict.WARN if "warn" in statuses else Verdict.PASS
            ms.append(
                Measurement(
                    check="gate.gemm_sustained",
                    scope=f"node:{n}",
                    value=worst_gemm * (1.0 if gpu_run else 1000.0),
                    unit="TFLOP/s" if gpu_run else "GFLOP/s (CPU)",
                    basis="catalog gpu_models achievable" if gpu_run else "information (CPU)",
                    verdict=v,
                )
            )
        summary.append(
            {
                "node": n,
                "vendor": vendor.get(n),
                "verdict": nv.verdict.name if failed or warned else ("PASS" if passed else "NOT RUN"),
                "passed": passed,
                "failed": failed,
                "warned": warned,
                "not_run": sorted(set(not_run)),
                "gemm_tflops": worst_gemm,
                "ecc_aggregate": ecc,
            }
        )
    return ms, summary


def render_gate(gate: list[dict[str, Any]]) -> list[str]:
    if not gate:
        return []
    lines = [
        "",
        "## Node gate",
        "",
        "| node | gate | vendor | checks passed | failed | warned | slowest sustained GEMM |",
        "|---|---|---|---|---|---|---|",
    ]
    for g in gate:
        tf = g.get("gemm_tflops")
        lines.append(
            f"| {g['node']} | {g['verdict']} | {g.get('vendor')} | {g['passed']} | "
            f"{', '.join(g['failed']) or '-'} | {', '.join(g['warned']) or '-'} | "
            f"{'-' if tf is None else f'{tf:,.3f} TFLOP/s'} |"
        )
    # The same reason on every node is said once, with the nodes it applies to.
    why: dict[str, list[str]] = {}
    for g in gate:
        for item in g["not_run"]:
            why.setdefault(item, []).append(g["node"])
    if why:
        lines += ["", "Could not run on this host (not counted as a pass):", ""]
        lines += [
            f"- {item} [{', '.join(ns) if len(ns) < len(gate) else 'all nodes'}]" for item, ns in sorted(why.items())
        ]
    return lines


def render_stack(stacks: dict[str, dict[str, Any]]) -> list[str]:
    if not stacks:
        return []
    cols = [c for c in STACK_COLUMNS if any(s.get(c) for s in stacks.values())]
    extra = sorted({k for s in stacks.values() for k, v in s.items() if v and k not in STACK_COLUMNS})
    cols += extra
    lines = ["", "## Software stack", "", "| node | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for n, s in sorted(stacks.items()):
        lines.append(f"| {n} | " + " | ".join(str(s.get(c) or "-") for c in cols) + " |")
    missing = [c for c in STACK_COLUMNS if c not in cols]
    if missing:
        lines += ["", f"Not detected on any node: {', '.join(missing)}."]
    return lines


INCIDENTS = "## Incidents (gpu-cluster heal)"


def render_incidents(incidents: list[dict[str, Any]]) -> list[str]:
    """The report's record of what heal did about the nodes this run named: each incident's node,
    why, what became of it, what replaced it, and the revalidation's figures."""
    if not incidents:
        return []
    lines = [
        "",
        INCIDENTS,
        "",
        "| incident | node | why | outcome | replaced | revalidated with | figures |",
        "|---|---|---|---|---|---|---|",
    ]
    for i in incidents:
        figs = "; ".join(
            f"{k} {v['value']:g} {v.get('unit', '')}".rstrip() for k, v in sorted((i.get("figures") or {}).items())
        )
        replaced = f"{i['old_instance']} -> {i['new_instance']}" if i.get("new_instance") else "-"
        lines.append(
            f"| {i['incident']} | {i['node']} | {str(i.get('why', ''))[:160]} | {i['state']}"
            f"{': ' + str(i['detail'])[:160] if i['state'] != 'HEALTHY' else ''} | {replaced} | "
            f"{i.get('peer') or '-'} | {figs or '-'} |"
        )
    return lines
