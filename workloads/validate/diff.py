"""What changed between two validation runs of a cluster: the software stack, the figures, the nodes.

    gpu-cluster validate diff OLD/report.json NEW/report.json [--threshold 0.10] [--update]

A rebuild that got slower (a new driver, a new NCCL plugin) shows as a figure whose ratio
new/old fell, next to the version that changed. Exit codes, as the judge's: 0 nothing regressed
past the threshold, 2 something did, 3 a report could not be read. ``--update`` writes
NEW/diff.json and adds a "Changes since the previous run" section to NEW/report.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_REGRESSION, EXIT_UNREADABLE = 0, 2, 3
DEFAULT_THRESHOLD = 0.10
# Units of figures where more is better; anything else (losses, error counts) is listed, not judged.
HIGHER_IS_BETTER = ("GB/s", "TFLOP/s", "GFLOP/s", "tokens/s", "fraction")
SECTION = "## Changes since the previous run"


@dataclass(frozen=True, slots=True, kw_only=True)
class VersionChange:
    scope: str
    """``cluster`` or ``node:<name>``."""
    key: str
    old: Any
    new: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class FigureChange:
    check: str
    scope: str
    unit: str
    old: float
    new: float
    ratio: float | None
    old_verdict: str
    new_verdict: str
    regressed: bool


@dataclass(slots=True, kw_only=True)
class Diff:
    old_path: str
    new_path: str
    threshold: float
    old_verdict: str
    new_verdict: str
    versions: list[VersionChange] = field(default_factory=list)
    figures: list[FigureChange] = field(default_factory=list)
    nodes_added: list[str] = field(default_factory=list)
    nodes_removed: list[str] = field(default_factory=list)
    drained: list[str] = field(default_factory=list)
    only_old: list[str] = field(default_factory=list)
    only_new: list[str] = field(default_factory=list)
    local: bool = False
    """Either run was a CPU (--local) run: its figures measure a shared host, not a cluster."""
    incidents: list[str] = field(default_factory=list)
    """What gpu-cluster heal did about the nodes the new run named (its report's ``incidents``)."""

    @property
    def regressions(self) -> list[FigureChange]:
        return [f for f in self.figures if f.regressed]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["regressions"] = len(self.regressions)
        return d


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _stacks(rep: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {"cluster": dict(rep.get("versions") or {})}
    out.update({f"node:{n}": dict(s) for n, s in (rep.get("stack") or {}).items()})
    return out


def _figures(rep: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (str(m["check"]), str(m["scope"])): m for m in rep.get("measurements", []) if _num(m.get("value")) is not None
    }


def diff_reports(
    old: dict[str, Any],
    new: dict[str, Any],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    old_path: str = "old",
    new_path: str = "new",
) -> Diff:
    d = Diff(
        old_path=old_path,
        new_path=new_path,
        threshold=threshold,
        old_verdict=str(old.get("verdict")),
        new_verdict=str(new.get("verdict")),
        local=bool(old.get("local") or new.get("local")),
    )
    so, sn = _stacks(old), _stacks(new)
    for scope in sorted(set(so) & set(sn)):
        for key in sorted(set(so[scope]) | set(sn[scope])):
            a, b = so[scope].get(key), sn[scope].get(key)
            if a != b:
                d.versions.append(VersionChange(scope=scope, key=key, old=a, new=b))
    names_old = {str(n["node"]) for n in old.get("nodes", [])}
    names_new = {str(n["node"]) for n in new.get("nodes", [])}
    d.nodes_added, d.nodes_removed = sorted(names_new - names_old), sorted(names_old - names_new)
    d.drained = sorted(set(new.get("drained") or []))
    fo, fn = _figures(old), _figures(new)
    for fkey in sorted(set(fo) & set(fn)):
        a, b = fo[fkey], fn[fkey]
        va, vb = _num(a["value"]), _num(b["value"])
        assert va is not None and vb is not None
        ratio = vb / va if va else None
        unit = str(b.get("unit", ""))
        better_up = unit.startswith(HIGHER_IS_BETTER)
        regressed = better_up and ratio is not None and ratio < 1.0 - threshold
        if regressed or va != vb or a.get("verdict") != b.get("verdict"):
            d.figures.append(
                FigureChange(
                    check=fkey[0],
                    scope=fkey[1],
                    unit=unit,
                    old=va,
                    new=vb,
                    ratio=None if ratio is None else round(ratio, 4),
                    old_verdict=str(a.get("verdict")),
                    new_verdict=str(b.get("verdict")),
                    regressed=regressed,
                )
            )
    d.only_old = [f"{c} {s}" for c, s in sorted(set(fo) - set(fn))]
    d.only_new = [f"{c} {s}" for c, s in sorted(set(fn) - set(fo))]
    d.incidents = [incident_line(i) for i in new.get("incidents") or [] if isinstance(i, dict)]
    return d


def incident_line(i: dict[str, Any]) -> str:
    """One incident as the diff says it: node, outcome, what replaced it, the revalidation's figure."""
    text = f"{i.get('first_node') or i.get('node')} {i.get('state')}"
    if i.get("new_instance"):
        text += f", replaced {i.get('old_instance')} -> {i['new_instance']} (now {i.get('node')})"
    elif i.get("state") == "HEALTHY":
        text += ", cleared by the second look, nothing replaced"
    figs = i.get("figures") or {}
    multi = [
        f"{k.split()[0]} {v['value']:g} {v.get('unit', '')}".rstrip()
        for k, v in figs.items()
        if k.startswith("multi_node.")
    ]
    if multi:
        text += f"; revalidated with {i.get('peer')}: {', '.join(multi)}"
    return f"{text} (incident {i.get('incident')}: {str(i.get('why', ''))[:120]})"


def _fmt(v: Any) -> str:
    return "-" if v is None else f"{v:,.2f}" if isinstance(v, float) else str(v)


def render_markdown(d: Diff) -> list[str]:
    lines = [
        "",
        SECTION,
        "",
        f"Against {d.old_path} (verdict {d.old_verdict}, now {d.new_verdict}); a figure regresses when it "
        f"falls under {1 - d.threshold:.0%} of the previous run. {len(d.regressions)} regression(s).",
    ]
    if d.local:
        lines += [
            "",
            "A CPU (--local) run is compared: its figures vary with the host's other load, so a "
            "regression here says the pipeline works, nothing about a GPU fabric.",
        ]
    if d.nodes_added or d.nodes_removed or d.drained:
        lines += [
            "",
            f"Nodes added: {', '.join(d.nodes_added) or '-'}; removed: {', '.join(d.nodes_removed) or '-'}; "
            f"drained in this run: {', '.join(d.drained) or '-'}.",
        ]
    if d.incidents:
        lines += ["", "Incidents (gpu-cluster heal) of the nodes this run named:", ""]
        lines += [f"- {text}" for text in d.incidents]
    if d.versions:
        lines += ["", "| where | what | before | now |", "|---|---|---|---|"]
        lines += [f"| {v.scope} | {v.key} | {_fmt(v.old)} | {_fmt(v.new)} |" for v in d.versions]
    else:
        lines += ["", "No version changed."]
    if d.figures:
        lines += ["", "| check | scope | before | now | ratio | verdict | regressed |", "|---|---|---|---|---|---|---|"]
        for f in sorted(d.figures, key=lambda f: (not f.regressed, f.ratio if f.ratio is not None else 9.0)):
            ratio = "-" if f.ratio is None else f"{f.ratio:.3f}"
            verdict = f.new_verdict if f.old_verdict == f.new_verdict else f"{f.old_verdict} -> {f.new_verdict}"
            lines.append(
                f"| {f.check} | {f.scope} | {_fmt(f.old)} {f.unit} | {_fmt(f.new)} {f.unit} | {ratio} | "
                f"{verdict} | {'**yes**' if f.regressed else '-'} |"
            )
    if d.only_old or d.only_new:
        lines += [
            "",
            f"Figures only in the previous run: {', '.join(d.only_old) or '-'}; "
            f"only in this one: {', '.join(d.only_new) or '-'}.",
        ]
    return lines


def _load(path: Path) -> dict[str, Any]:
    p = path / "report.json" if path.is_dir() else path
    doc = json.loads(p.read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or "measurements" not in doc:
        raise ValueError(f"{p}: not a validation report.json")
    return doc


def update_report(new_path: Path, d: Diff) -> list[Path]:
    """NEW/diff.json, and the diff section in NEW/report.md (replacing an earlier one)."""
    root = new_path if new_path.is_dir() else new_path.parent
    written = []
    for name, text in (("diff.json", json.dumps(d.to_json(), indent=2) + "\n"),):
        tmp = root / f".{name}.tmp-{os.getpid()}"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, root / name)
        written.append(root / name)
    md = root / "report.md"
    if md.exists():
        body = md.read_text(encoding="utf-8").split("\n" + SECTION)[0].rstrip("\n")
        tmp = root / f".report.md.tmp-{os.getpid()}"
        tmp.write_text(body + "\n" + "\n".join(render_markdown(d)) + "\n", encoding="utf-8")
        os.replace(tmp, md)
        written.append(md)
    return written


def add_subparser(sub: Any) -> None:
    p = sub.add_parser("diff", help="what changed between two runs' report.json; non-zero on a regression")
    p.add_argument("old", type=Path, help="previous run's report.json (or its directory)")
    p.add_argument("new", type=Path, help="this run's report.json (or its directory)")
    p.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help=f"a figure regresses under (1 - threshold) x its previous value (default {DEFAULT_THRESHOLD})",
    )
    p.add_argument("--update", action="store_true", help="write NEW/diff.json and add the diff to NEW/report.md")


def run(args: argparse.Namespace) -> int:
    if not 0.0 < args.threshold < 1.0:
        print(f"validate diff: --threshold {args.threshold}: allowed a fraction in (0, 1)")
        return EXIT_UNREADABLE
    try:
        old, new = _load(args.old), _load(args.new)
    except (OSError, ValueError) as exc:
        print(f"validate diff: {exc}")
        return EXIT_UNREADABLE
    d = diff_reports(old, new, threshold=args.threshold, old_path=str(args.old), new_path=str(args.new))
    print("\n".join(render_markdown(d)).lstrip("\n"))
    if args.update:
        print(f"written: {', '.join(str(p) for p in update_report(args.new, d))}")
    return EXIT_REGRESSION if d.regressions else EXIT_OK
