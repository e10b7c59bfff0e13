"""The validation report: report.json for machines, report.md for a person's minute, busbw.png for the eye,
report.html (gpu_cluster.workloads.validate.report_html) for a person who would rather open one page."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpu_cluster.components.bandwidth import FAIL_OF_EXPECTED, WARN_OF_EXPECTED
from gpu_cluster.workloads.validate import certificate, report_html
from gpu_cluster.workloads.validate.verdict import Measurement, NodeVerdict, Verdict

if TYPE_CHECKING:
    from matplotlib.figure import Figure


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
    """The bandwidth model's expected busbw at each size of the sweep."""
    model_floors: list[tuple[int, float, float]] = field(default_factory=list)
    """(size, warn floor, fail floor) at each size of ``expected``: fractions of it, widened where the
    model's basis is far from the case and where the latency's share of the time is large."""
    warn_of_expected: float = WARN_OF_EXPECTED
    fail_of_expected: float = FAIL_OF_EXPECTED


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
    """Per-node summary of the GPU node gate (gpu_cluster.workloads.validate.certificate)."""
    stack: dict[str, dict[str, Any]] = field(default_factory=dict)
    """node -> software stack it ran with: the cluster certificate."""
    phase_seconds: dict[str, float] = field(default_factory=dict)
    """Each phase's measured wall time (rank 0, from before its device was touched)."""
    phase_model_seconds: dict[str, float] = field(default_factory=dict)
    """What gpu_cluster.components.validation_time expects of each phase on this cluster (GPU runs with a type)."""
    label: str = ""
    """Said beside the verdict, e.g. 'type unknown' when no catalog type judged the run."""

    def deciding(self) -> Measurement | None:
        """The measurement that set the verdict (the first with the worst verdict)."""
        worst = [m for m in self.measurements if m.verdict == self.verdict]
        return worst[0] if worst else None

    def decided_by(self) -> str:
        """What set the verdict, in a few words: the check (its value, size and the floor it missed)
        with the count of others as bad, else the node, else what could not run; for a PASS, how
        many checks with a floor passed. The judge's own order decides (judge.judge): measurements,
        then nodes, then "nothing measured" (UNKNOWN) or errors (a PASS with errors is a WARN)."""
        if self.verdict == Verdict.PASS:
            floored = [m for m in self.measurements if m.floor_fail is not None or m.floor_warn is not None]
            if not floored:
                return "no check had a floor"
            return f"all {len(floored)} checks with a floor passed"
        worst = [m for m in self.measurements if m.verdict == self.verdict]
        if worst:
            m = worst[0]
            text = f"decided by {m.check} ({m.scope})"
            if m.value is not None:
                text += f": {m.value:g} {m.unit}".rstrip()
                if m.at_bytes:
                    text += f" at {_size(m.at_bytes)}"
                floor = m.floor_fail if self.verdict == Verdict.FAIL else m.floor_warn
                if floor is not None:
                    text += f", {'fail' if self.verdict == Verdict.FAIL else 'warn'} floor {floor:g}"
            elif m.detail:
                text += f": {m.detail}"
            if len(worst) > 1:
                text += f" (and {len(worst) - 1} more check(s) {self.verdict.name})"
            return text
        nodes = [n for n in self.nodes if n.verdict == self.verdict]
        if nodes:
            n = nodes[0]
            text = f"decided by node {n.node}" + (f": {n.reasons[0]}" if n.reasons else "")
            return text + (f" (and {len(nodes) - 1} more node(s))" if len(nodes) > 1 else "")
        if self.errors:
            return f"decided by what could not run: {self.errors[0]}"
        return "decided by nothing measured"

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
                    "model_floors": c.model_floors,
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
    lines += [f"Verdict {r.verdict.name}: {r.decided_by()}.", ""]
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
        "| check | scope | value | warn below | fail below | floors stand on | at | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in r.measurements:
        lines.append(
            f"| {m.check} | {m.scope} | {_fmt(m.value)} {m.unit} | {_fmt(m.floor_warn)} | {_fmt(m.floor_fail)} "
            f"| {m.floor_basis or '-'} | {_size(m.at_bytes)} | {m.verdict.name} |"
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
    lines += [
        "",
        "Exit code: 0 pass, 1 warn, 2 fail, 3 could not run. busbw.png draws each sweep with the expected curve and its floors.",
        "",
    ]
    return "\n".join(lines)


def figure(r: Report) -> "Figure | None":
    """busbw against message size, one sweep per curve: the measured points, the bandwidth model's
    expected curve and the warn and fail floors (fractions of it) across the sizes the model covers,
    a vertical line at the size the floors were judged at, and a title that names the verdict and
    what decided it (``Report.decided_by``). A curve without a model (no catalog type) keeps its
    floors as the single points they are, at the size judged. None when there is nothing to draw.
    The caller owns the figure (``plot`` saves and closes it)."""
    curves = [c for c in r.curves if c.points]
    if not curves:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    # A Figure of its own, not pyplot's: nothing global to close, and a test can read it.
    fig = Figure(figsize=(8, 4.8), dpi=110)
    ax = fig.subplots()
    judged_at: set[int] = set()
    for c in curves:
        xs = [p[0] for p in c.points]
        ys = [p[1] for p in c.points]
        (line,) = ax.plot(xs, ys, marker="o", markersize=3, label=f"{c.op} measured ({c.scope})")
        colour = line.get_color()
        if c.expected:
            ex = [p[0] for p in c.expected]
            ey = [p[1] for p in c.expected]
            ax.plot(ex, ey, color=colour, linewidth=1.2, alpha=0.6, label=f"{c.op} expected, model ({c.scope})")
            for i, fraction, style, what in (
                (1, c.warn_of_expected, ":", "warn"),
                (2, c.fail_of_expected, "--", "fail"),
            ):
                widened = c.model_floors and any(abs(f[i] - y * fraction) > 0.05 for f, y in zip(c.model_floors, ey))
                ax.plot(
                    ex,
                    [f[i] for f in c.model_floors] if c.model_floors else [y * fraction for y in ey],
                    color="tab:orange" if what == "warn" else "tab:red",
                    linestyle=style,
                    linewidth=1,
                    label=f"{c.op} {what} floor, {fraction:.0%} of expected"
                    + (", widened for the basis and size" if widened else "")
                    + f" ({c.scope})",
                )
            if c.floor_at is not None:
                judged_at.add(c.floor_at)
            continue
        for floor, style, what in ((c.floor_fail, "v", "fail"), (c.floor_warn, "^", "warn")):
            if floor is None:
                continue
            if c.floor_at is not None:  # no model: the floors hold at the size judged only
                ax.plot(
                    [c.floor_at],
                    [floor],
                    marker=style,
                    linestyle="none",
                    color="tab:red" if what == "fail" else "tab:orange",
                    label=f"{c.op} {what} floor {floor:g} at {_size(c.floor_at)} ({c.scope})",
                )
            else:
                ax.axhline(
                    floor,
                    color=colour,
                    linestyle="--" if what == "fail" else ":",
                    linewidth=1,
                    label=f"{c.op} {what} floor {floor:g} ({c.scope})",
                )
    for at in sorted(judged_at):
        ax.axvline(at, color="0.5", linestyle="-.", linewidth=0.8, label=f"judged at {_size(at)}")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: _size(int(x)) if x >= 1 else ""))
    ax.set_xlabel("message size")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(title(r), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6, loc="best")
    fig.tight_layout()
    return fig


def title(r: Report) -> str:
    """The verdict, its label, and what decided it: ``FAIL: decided by multi_node.all_reduce ...``."""
    text = r.verdict.name + (f" ({r.label})" if r.label else "")
    text += f": {r.decided_by()}"
    if not r.floors_applied:
        text += " (floors not applied)"
    return text


def plot(r: Report, path: Path) -> bool:
    """Write ``figure(r)`` to ``path`` atomically; False when there is nothing to draw."""
    fig = figure(r)
    if fig is None:
        return False
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp)
    os.replace(tmp, path)
    return True


def write(r: Report, out_dir: Path) -> dict[str, Path]:
    """Write report.json, report.md, report.html and busbw.png atomically; returns what was written."""
    # Only the last level is made: callers check that the parent exists (a typo is refused there).
    out_dir.mkdir(exist_ok=True)
    written: dict[str, Path] = {}
    doc = r.to_json()
    fig = figure(r)
    page = report_html.render(doc, decided_by=r.decided_by(), svg=report_html.svg_of(fig), title=title(r))
    for name, text in (
        ("report.json", json.dumps(doc, indent=2) + "\n"),
        ("report.md", render_markdown(r)),
        ("report.html", page),
    ):
        path = out_dir / name
        tmp = path.with_name(f".{name}.tmp-{os.getpid()}")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
        written[name] = path
    if fig is not None:
        png = out_dir / "busbw.png"
        tmp = png.with_suffix(".tmp.png")
        fig.savefig(tmp)
        os.replace(tmp, png)
        written["busbw.png"] = png
    return written
