"""The validation report: report.json for machines, report.md for a person's minute, busbw.png for the eye."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workloads.validate import certificate
from workloads.validate.verdict import Measurement, NodeVerdict, Verdict


# How a finding that is reported but does not decide the verdict begins (a CPU run's stragglers).
OBSERVED = "straggler, observed, not judged"


@dataclass(slots=True, kw_only=True)
class Curve:
    """One busbw-against-size sweep to draw."""

    op: str
    scope: str
    points: list[tuple[int, float]]
    floor_warn: float | None = None
    floor_fail: float | None = None
    floor_at: int | None = None
    """The message size the floors apply to (None: drawn across the sweep)."""
    expected: list[tuple[int, float]] = field(default_factory=list)
    """The bandwidth model's expected busbw at each size of the sweep (the floors are fractions of it)."""
    warn_of_expected: float = 0.90
    fail_of_expected: float = 0.75


@dataclass(slots=True, kw_only=True)
class Report:
    verdict: Verdict
    local: bool
    floors_applied: bool
    instance_type: str | None
    nodes: list[NodeVerdict]
    measurements: list[Measurement]
    transport: dict[str, Any]
    versions: dict[str, str]
    curves: list[Curve] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    drained: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    world_size: int = 0
    gate: list[dict[str, Any]] = field(default_factory=list)
    """Per-node summary of the GPU node gate (workloads.validate.certificate)."""
    stack: dict[str, dict[str, Any]] = field(default_factory=dict)
    """node -> software stack it ran with: the cluster certificate."""
    phase_seconds: dict[str, float] = field(default_factory=dict)
    """Each phase's measured wall time (rank 0, from before its device was touched)."""
    phase_model_seconds: dict[str, float] = field(default_factory=dict)
    """What components.validation_time expects of each phase on this cluster (GPU runs with a type)."""
    label: str = ""
    """Said beside the verdict, e.g. 'type unknown' when no catalog type judged the run."""

    def deciding(self) -> Measurement | None:
        """The measurement that set the verdict (the first with the worst verdict)."""
        worst = [m for m in self.measurements if m.verdict == self.verdict]
        return worst[0] if worst else None

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.name,
            "label": self.label,
            "exit_code": int(self.verdict),
            "local": self.local,
            "floors_applied": self.floors_applied,
            "instance_type": self.instance_type,
            "world_size": self.world_size,
            "nodes": [n.to_json() for n in self.nodes],
            "measurements": [m.to_json() for m in self.measurements],
            "transport": self.transport,
            "versions": self.versions,
            "curves": [
                {
                    "op": c.op,
                    "scope": c.scope,
                    "points": c.points,
                    "floor_warn": c.floor_warn,
                    "floor_fail": c.floor_fail,
                    "floor_at": c.floor_at,
                    "expected": c.expected,
                }
                for c in self.curves
            ],
            "errors": self.errors,
            "drained": self.drained,
            "duration_s": round(self.duration_s, 1),
            "gate": self.gate,
            "stack": self.stack,
            "phase_seconds": self.phase_seconds,
            "phase_model_seconds": self.phase_model_seconds,
        }


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:,.2f}"


def _size(n: int | None) -> str:
    if n is None:
        return ""
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= div:
            return f"{n / div:g} {unit}"
    return f"{n} B"


def render_markdown(r: Report) -> str:
    lines = [f"# Cluster validation: {r.verdict.name}" + (f" ({r.label})" if r.label else ""), ""]
    where = r.instance_type or "unknown instance type"
    lines.append(f"{len(r.nodes)} node(s), {r.world_size} rank(s), {where}; took {r.duration_s:.0f} s.")
    if r.phase_seconds:
        lines.append("")
        lines.append(
            "Phase wall times (each from its ranks' start, after torch's import): "
            + ", ".join(
                f"{p} {s:.0f} s" + (f" (model {r.phase_model_seconds[p]:.0f} s)" if p in r.phase_model_seconds else "")
                for p, s in r.phase_seconds.items()
            )
            + "."
        )
    if not r.floors_applied:
        lines.append("")
        lines.append(
            "**Floors not applied**: this run is on CPU processes (gloo) or on a type the catalog has no "
            "floors for. The figures show the pipeline works; they say nothing about a GPU fabric. "
            "Nodes are still compared with each other."
        )
    bad = [n for n in r.nodes if n.verdict != Verdict.PASS]
    lines += ["", "## Nodes", ""]
    if not r.nodes:
        lines.append("The input names no nodes (nccl-tests prints host names only in its '# Using devices' block).")
    elif not bad:
        lines.append(f"All {len(r.nodes)} nodes passed.")
    lines += ["| node | verdict | why |", "|---|---|---|"]
    for n in r.nodes:
        lines.append(f"| {n.node} | {n.verdict.name} | {'; '.join(n.reasons) or '-'} |")
    if r.drained:
        lines += ["", f"Drained: {', '.join(r.drained)}."]
    observed = [m for m in r.measurements if m.detail.startswith(OBSERVED)]
    if observed:
        lines += ["", "## Observations (not judged)", ""]
        lines += [f"- {m.check} ({m.scope}): {m.detail}" for m in observed]
    lines += [
        "",
        "## Measurements",
        "",
        "| check | scope | value | warn below | fail below | at | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in r.measurements:
        lines.append(
            f"| {m.check} | {m.scope} | {_fmt(m.value)} {m.unit} | {_fmt(m.floor_warn)} | {_fmt(m.floor_fail)} "
            f"| {_size(m.at_bytes)} | {m.verdict.name} |"
        )
    based = [m for m in r.measurements if m.basis and m.floor_fail is not None or "expected" in m.basis]
    if based:
        lines += ["", "## Expected figures, floors and their basis", ""]
        lines += [f"- {m.check} ({m.scope}){': ' + m.detail if m.detail else ''}: {m.basis}" for m in based]
    t = r.transport
    lines += [
        "",
        "## Transport",
        "",
        f"Expected {t.get('expected') or '-'}; seen {', '.join(t.get('seen') or []) or '-'}. {t.get('message', '')}",
    ]
    if r.errors:
        lines += ["", "## Could not run", ""] + [f"- {e}" for e in r.errors]
    lines += certificate.render_gate(r.gate) + certificate.render_stack(r.stack)
    lines += ["", "## Versions", ""] + [f"- {k}: {v}" for k, v in sorted(r.versions.items())]
    lines += ["", "Exit code: 0 pass, 1 warn, 2 fail, 3 could not run. busbw.png draws each sweep with its floor.", ""]
    return "\n".join(lines)


def plot(r: Report, path: Path) -> bool:
    """Draw busbw against message size per sweep, the model's expected curve and the warn and fail
    floors across the sizes it covers; the title names the verdict and the check that decided it.
    False when there is nothing to draw."""
    curves = [c for c in r.curves if c.points]
    if not curves:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=110)
    for c in curves:
        xs = [p[0] for p in c.points]
        ys = [p[1] for p in c.points]
        (line,) = ax.plot(xs, ys, marker="o", markersize=3, label=f"{c.op} measured ({c.scope})")
        colour = line.get_color()
        if c.expected:
            ex = [p[0] for p in c.expected]
            ey = [p[1] for p in c.expected]
            ax.plot(ex, ey, color=colour, linestyle="-", linewidth=1, alpha=0.5, label=f"{c.op} expected (model)")
            ax.plot(
                ex,
                [y * c.warn_of_expected for y in ey],
                color="tab:orange",
                linestyle=":",
                linewidth=1,
                label=f"warn floor ({c.warn_of_expected:.0%} of expected)",
            )
            ax.plot(
                ex,
                [y * c.fail_of_expected for y in ey],
                color="tab:red",
                linestyle="--",
                linewidth=1,
                label=f"fail floor ({c.fail_of_expected:.0%} of expected)",
            )
        for floor, style, what in ((c.floor_fail, "v", "fail"), (c.floor_warn, "^", "warn")):
            if floor is None:
                continue
            if c.floor_at is not None:  # the size judged: mark the floors there
                ax.plot(
                    [c.floor_at],
                    [floor],
                    marker=style,
                    linestyle="none",
                    color="tab:red" if what == "fail" else "tab:orange",
                    label=f"{c.op} {what} floor {floor:g} at {_size(c.floor_at)} (judged)",
                )
            elif not c.expected:
                ax.axhline(
                    floor,
                    color=colour,
                    linestyle="--" if what == "fail" else ":",
                    linewidth=1,
                    label=f"{c.op} {what} floor {floor:g}",
                )
    ax.set_xscale("log", base=2)
    from matplotlib.ticker import FuncFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: _size(int(x)) if x >= 1 else ""))
    ax.set_xlabel("message size")
    ax.set_ylabel("busbw (GB/s)")
    title = f"{r.verdict.name}" + (f" ({r.label})" if r.label else "")
    decided = r.deciding()
    if decided is not None:
        title += f", decided by {decided.check}"
        if decided.value is not None and decided.at_bytes:
            title += f": {decided.value:g} GB/s at {_size(decided.at_bytes)}"
    if not r.floors_applied:
        title += " (floors not applied)"
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6, loc="best")
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, path)
    return True


def write(r: Report, out_dir: Path) -> dict[str, Path]:
    """Write the three files atomically; returns what was written."""
    # Only the last level is made: callers check that the parent exists (a typo is refused there).
    out_dir.mkdir(exist_ok=True)
    written: dict[str, Path] = {}
    for name, text in (("report.json", json.dumps(r.to_json(), indent=2) + "\n"), ("report.md", render_markdown(r))):
        path = out_dir / name
        tmp = path.with_name(f".{name}.tmp-{os.getpid()}")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
        written[name] = path
    png = out_dir / "busbw.png"
    if plot(r, png):
        written["busbw.png"] = png
    return written
