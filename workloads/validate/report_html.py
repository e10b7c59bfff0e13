"""report.html: one self-contained page a person opens after a run.

It is made from the same document as report.json (``Report.to_json``) and the same figure as
busbw.png (``report.figure``, drawn as inline SVG), so the page can never say something the JSON
does not. Nothing on it is loaded from anywhere: no script, no stylesheet, font or image from a
network or another file, so it opens the same from a laptop, a login node or an archive. heal's
incidents are a section of their own between two markers, so heal can replace them in place
(``with_incidents``) without drawing the figure again.
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gpu_cluster.workloads.validate.certificate import STACK_COLUMNS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

INCIDENTS_BEGIN = "<!-- gpu-cluster:incidents -->"
INCIDENTS_END = "<!-- /gpu-cluster:incidents -->"

# One colour per verdict, for the banner and the table cells (the text says the verdict too, so
# nothing depends on telling the colours apart).
VERDICT_COLOURS = {
    "PASS": "#1b7f3b",
    "WARN": "#b26a00",
    "FAIL": "#b00020",
    "UNKNOWN": "#5f6368",
}

_STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #202124; }
main { max-width: 1100px; margin: 0 auto; padding: 0 20px 40px; }
header.verdict { color: #fff; padding: 18px 20px; }
header.verdict h1 { margin: 0 0 4px; font-size: 26px; }
header.verdict p { margin: 0; }
section { margin-top: 26px; }
h2 { font-size: 18px; border-bottom: 1px solid #dadce0; padding-bottom: 4px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { border: 1px solid #dadce0; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f1f3f4; }
td.v { color: #fff; font-weight: 600; white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.note { background: #fef7e0; border-left: 4px solid #f9ab00; padding: 8px 12px; }
figure { margin: 0; }
figure svg { width: 100%; height: auto; }
figcaption { color: #5f6368; font-size: 12px; }
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _num(value: Any) -> str:
    if value is None:
        return "-"
    try:
        return f"{float(value):,.2f}"
    except (TypeError, ValueError):
        return _e(value)


def _size(n: Any) -> str:
    if not isinstance(n, (int, float)) or n <= 0:
        return ""
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= div:
            return f"{n / div:g} {unit}"
    return f"{int(n)} B"


def _verdict_cell(verdict: Any) -> str:
    name = str(verdict or "UNKNOWN")
    colour = VERDICT_COLOURS.get(name, VERDICT_COLOURS["UNKNOWN"])
    return f'<td class="v" style="background:{colour}">{_e(name)}</td>'


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], *, cls: str = "") -> str:
    """``rows`` hold cells already rendered as HTML (``<td>...</td>``)."""
    out = [f'<table class="{cls}">' if cls else "<table>", "<thead><tr>"]
    out += [f"<th>{_e(h)}</th>" for h in head]
    out.append("</tr></thead><tbody>")
    out += ["<tr>" + "".join(r) + "</tr>" for r in rows]
    out.append("</tbody></table>")
    return "".join(out)


def svg_of(fig: "Figure | None") -> str | None:
    """The figure as an inline ``<svg>`` element: text drawn as paths (matplotlib's default
    ``svg.fonttype``), so the page needs no font; None when there is nothing to draw."""
    if fig is None:
        return None
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    text = buf.getvalue()
    start = text.find("<svg")
    return text[start:] if start >= 0 else None


def incidents_section(incidents: Sequence[Mapping[str, Any]]) -> str:
    """What heal did about the nodes this run named (gpu_cluster.heal.record's summaries), between
    the markers heal replaces."""
    body = ""
    if incidents:
        rows = []
        for inc in incidents:
            old, new = inc.get("old_instance") or "", inc.get("new_instance") or ""
            state = str(inc.get("state") or "")
            rows.append(
                [
                    f"<td>{_e(inc.get('node'))}</td>",
                    _verdict_cell(
                        "PASS" if state == "HEALTHY" else "FAIL" if state in ("ESCALATED", "ABANDONED") else "WARN"
                    ),
                    f"<td>{_e(state)}</td>",
                    f"<td>{_e(inc.get('why') or '-')}</td>",
                    f"<td>{_e(f'{old} -> {new}' if old or new else '-')}</td>",
                    f"<td>{_e(inc.get('peer') or '-')}</td>",
                    f"<td>{_e(inc.get('detail') or '-')}</td>",
                    f"<td>{_e(inc.get('incident'))}</td>",
                ]
            )
        body = (
            '<section id="incidents"><h2>Incidents (gpu-cluster heal)</h2>'
            + _table(["node", "outcome", "state", "why", "instance", "checked with", "last word", "incident"], rows)
            + "</section>"
        )
    return INCIDENTS_BEGIN + body + INCIDENTS_END


def with_incidents(page: str, incidents: Sequence[Mapping[str, Any]]) -> str:
    """``page`` with its incidents section replaced (heal's record of this run)."""
    pattern = re.compile(re.escape(INCIDENTS_BEGIN) + ".*?" + re.escape(INCIDENTS_END), re.S)
    if not pattern.search(page):
        raise ValueError("not a gpu-cluster report page: it has no incidents markers")
    return pattern.sub(lambda _m: incidents_section(incidents), page, count=1)


def render(doc: Mapping[str, Any], *, decided_by: str, svg: str | None, title: str) -> str:
    """The page for one run's report.json document ``doc``; ``decided_by`` and ``title`` are the
    report's own words (``Report.decided_by``, ``report.title``)."""
    verdict = str(doc.get("verdict") or "UNKNOWN")
    colour = VERDICT_COLOURS.get(verdict, VERDICT_COLOURS["UNKNOWN"])
    label = f" ({doc['label']})" if doc.get("label") else ""
    nodes = list(doc.get("nodes") or [])
    where = doc.get("instance_type") or "unknown instance type"
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        # No loads from anywhere: the policy says so to the browser as well as to the reader.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        'img-src data:">',
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
        f'<header class="verdict" id="verdict" data-verdict="{_e(verdict)}" style="background:{colour}">',
        f"<h1>Cluster validation: {_e(verdict)}{_e(label)}</h1>",
        f"<p>{_e(decided_by)}.</p>",
        f"<p>{len(nodes)} node(s), {_e(doc.get('world_size'))} rank(s), {_e(where)}; "
        f"took {_num(doc.get('duration_s'))} s. Exit code {_e(doc.get('exit_code'))}.</p>",
        "</header><main>",
    ]
    if not doc.get("floors_applied"):
        parts.append(
            '<p class="note">Floors not applied: this run is on CPU processes (gloo) or on a type the catalog '
            "has no floors for. The figures show the pipeline works; they say nothing about a GPU fabric. Nodes "
            "are still compared with each other.</p>"
        )
    parts.append('<section id="nodes"><h2>Nodes</h2>')
    if nodes:
        parts.append(
            _table(
                ["node", "verdict", "why"],
                (
                    [
                        f"<td>{_e(n.get('node'))}</td>",
                        _verdict_cell(n.get("verdict")),
                        f"<td>{_e('; '.join(n.get('reasons') or []) or '-')}</td>",
                    ]
                    for n in nodes
                ),
                cls="nodes",
            )
        )
    else:
        parts.append("<p>The input names no nodes.</p>")
    if doc.get("drained"):
        parts.append(f"<p>Drained: {_e(', '.join(doc['drained']))}.</p>")
    parts.append("</section>")
    parts.append('<section id="busbw"><h2>Bus bandwidth against message size</h2>')
    if svg:
        parts.append(
            f"<figure>{svg}<figcaption>Each sweep as measured, the bandwidth model's expected curve and the "
            "warn and fail floors (fractions of it); the dashed vertical line is the size judged.</figcaption></figure>"
        )
    else:
        parts.append("<p>No sweep to draw in this run.</p>")
    parts.append("</section>")
    measurements = list(doc.get("measurements") or [])
    pairs = [m for m in measurements if str(m.get("scope", "")).startswith("pair:")]
    parts.append('<section id="measurements"><h2>Measurements</h2>')
    parts.append(_measurements(measurements))
    parts.append("</section>")
    if pairs:
        parts.append('<section id="pairs"><h2>Pair search</h2>')
        parts.append(_measurements(pairs))
        parts.append("</section>")
    t = doc.get("transport") or {}
    parts.append(
        '<section id="transport"><h2>Transport</h2>'
        f"<p>Expected {_e(t.get('expected') or '-')}; seen {_e(', '.join(t.get('seen') or []) or '-')}. "
        f"{_e(t.get('message', ''))}</p></section>"
    )
    if doc.get("errors"):
        parts.append('<section id="errors"><h2>Could not run</h2><ul>')
        parts += [f"<li>{_e(e)}</li>" for e in doc["errors"]]
        parts.append("</ul></section>")
    parts.append(_gate(doc.get("gate") or []))
    parts.append(_stack(doc.get("stack") or {}))
    parts.append(incidents_section(doc.get("incidents") or []))
    versions = doc.get("versions") or {}
    if versions:
        parts.append('<section id="versions"><h2>Versions</h2>')
        parts.append(
            _table(
                ["what", "version"], ([f"<td>{_e(k)}</td>", f"<td>{_e(v)}</td>"] for k, v in sorted(versions.items()))
            )
        )
        parts.append("</section>")
    parts.append("<p>Exit code: 0 pass, 1 warn, 2 fail, 3 could not run.</p></main></body></html>\n")
    return "\n".join(p for p in parts if p)


def _measurements(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return "<p>Nothing was measured.</p>"
    return _table(
        ["check", "scope", "value", "warn below", "fail below", "floors stand on", "at", "verdict"],
        (
            [
                f"<td>{_e(m.get('check'))}</td>",
                f"<td>{_e(m.get('scope'))}</td>",
                f'<td class="num">{_num(m.get("value"))} {_e(m.get("unit"))}</td>',
                f'<td class="num">{_num(m.get("floor_warn"))}</td>',
                f'<td class="num">{_num(m.get("floor_fail"))}</td>',
                f"<td>{_e(m.get('floor_basis') or '-')}</td>",
                f"<td>{_e(_size(m.get('at_bytes')))}</td>",
                _verdict_cell(m.get("verdict")),
            ]
            for m in rows
        ),
    )


def _gate(gate: Sequence[Mapping[str, Any]]) -> str:
    if not gate:
        return ""
    rows = []
    for g in gate:
        tf = g.get("gemm_tflops")
        rows.append(
            [
                f"<td>{_e(g.get('node'))}</td>",
                _verdict_cell(g.get("verdict")),
                f"<td>{_e(g.get('vendor'))}</td>",
                f"<td>{_e(g.get('passed'))}</td>",
                f"<td>{_e(', '.join(g.get('failed') or []) or '-')}</td>",
                f"<td>{_e(', '.join(g.get('warned') or []) or '-')}</td>",
                f'<td class="num">{"-" if tf is None else f"{tf:,.3f} TFLOP/s"}</td>',
            ]
        )
    return (
        '<section id="gate"><h2>Node gate</h2>'
        + _table(["node", "gate", "vendor", "checks passed", "failed", "warned", "slowest sustained GEMM"], rows)
        + "</section>"
    )


def _stack(stacks: Mapping[str, Mapping[str, Any]]) -> str:
    if not stacks:
        return ""
    present = {k for s in stacks.values() for k, v in s.items() if v}
    cols = [c for c in STACK_COLUMNS if c in present] + sorted(present - set(STACK_COLUMNS))
    rows = (
        [f"<td>{_e(n)}</td>"] + [f"<td>{_e(s.get(c) or '-')}</td>" for c in cols] for n, s in sorted(stacks.items())
    )
    return '<section id="stack"><h2>Software stack</h2>' + _table(["node", *cols], rows) + "</section>"
