"""The validation's figures and heal's incidents as Prometheus metrics (issue 46 item 3).

A run's report becomes a file in the Prometheus text exposition format (prometheus.io/docs/
instrumenting/exposition_formats/, read 2026-12-07: ``# HELP`` and ``# TYPE`` lines, then one
``name{label="value",...} value`` line a series, label values escaped ``\\\\``, ``\\"`` and ``\\n``).
It carries no timestamps: the node exporter's textfile collector, which serves it on Slurm stacks,
skips a whole file that has them (prometheus/node_exporter README.md line 335 at v1.12.1, "Timestamps
are not supported"; collector/textfile.go lines 302-303).

Names follow the Prometheus naming practice (prometheus.io/docs/practices/naming/, read 2026-12-07):
the application prefix ``gpu_cluster_``, base units in the name (bytes per second, seconds: busbw is
nccl-tests' GB/s times 1e9), one quantity per metric (the measured, expected and floor figures are
separate metrics, not a label), and labels for what tells series of one quantity apart. Every series
carries ``cluster`` and ``run``; per-node series carry ``node``, the label the dashboard groups the
DCGM series by (components/dashboard.py NODE_LABEL), so a node's verdicts line up with its counters.
A verdict is a state set: one series per verdict, 1 for the node's and 0 for the others (the
OpenMetrics StateSet, which the text format writes as a gauge), and a ``_code`` gauge with the
Nagios code of verdict.py for charts.

Where the file goes: ``write_textfile`` writes it atomically (a temp file in the same directory,
then a rename: the README's own recipe, lines 339-340) into the run directory and, on Slurm stacks,
into the node exporter's textfile directory (components/contract.py METRICS_TEXTFILE_DIR), which the
stack's scrape already sends to the cloud's Prometheus store.
"""

from __future__ import annotations

import base64
import os
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from gpu_cluster.workloads.validate.report import Report
from gpu_cluster.workloads.validate.verdict import Verdict

VALIDATION_FILE = "gpu-cluster-validation.prom"
HEAL_FILE = "gpu-cluster-heal.prom"
PREFIX = "gpu_cluster_"
# nccl-tests' GB/s is 1e9 bytes a second (its algbw divides the bytes by 1.0E9 and the time).
GBPS = 1e9

NODE_VERDICT = PREFIX + "validation_node_verdict"
NODE_VERDICT_CODE = PREFIX + "validation_node_verdict_code"
RUN_VERDICT_CODE = PREFIX + "validation_run_verdict_code"
RUN_END = PREFIX + "validation_run_end_timestamp_seconds"
BUSBW = PREFIX + "validation_busbw_bytes_per_second"
BUSBW_EXPECTED = PREFIX + "validation_busbw_expected_bytes_per_second"
BUSBW_FLOOR_WARN = PREFIX + "validation_busbw_floor_warn_bytes_per_second"
BUSBW_FLOOR_FAIL = PREFIX + "validation_busbw_floor_fail_bytes_per_second"
PAIR_VERDICT_CODE = PREFIX + "validation_pair_verdict_code"
PAIR_BUSBW = PREFIX + "validation_pair_busbw_bytes_per_second"
HEAL_INCIDENT = PREFIX + "heal_incident"
# The Pushgateway's ``job`` of each publisher's group (its grouping key's first label).
VALIDATION_JOB = "gpu-cluster-validation"
HEAL_JOB = "gpu-cluster-heal"

_HELP = {
    NODE_VERDICT: "The node's verdict in a validation run: 1 for its verdict, 0 for the others.",
    NODE_VERDICT_CODE: "The node's verdict in a validation run: 0 pass, 1 warn, 2 fail, 3 could not run.",
    RUN_VERDICT_CODE: "The validation run's verdict: 0 pass, 1 warn, 2 fail, 3 could not run.",
    RUN_END: "When the validation run was judged, seconds since the epoch.",
    BUSBW: "Bus bandwidth measured at a message size (nccl-tests' busbw).",
    BUSBW_EXPECTED: "The bandwidth model's expected bus bandwidth at a message size.",
    BUSBW_FLOOR_WARN: "The bus bandwidth below which the run warns, at a message size.",
    BUSBW_FLOOR_FAIL: "The bus bandwidth below which the run fails, at a message size.",
    PAIR_VERDICT_CODE: "A pair-search pair's verdict: 0 pass, 1 warn, 2 fail, 3 could not run.",
    PAIR_BUSBW: "Bus bandwidth of a pair-search pair.",
    HEAL_INCIDENT: "A heal incident's state: 1 for its current state, 0 for the others.",
}


def _escape(value: str) -> str:
    # The exposition format's label value escapes: backslash, double quote, line feed.
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(v: float) -> str:
    return repr(float(v)) if v != int(v) or abs(v) >= 1e15 else str(int(v))


class _Families:
    """Series grouped by metric, written family by family (the format wants one block a name)."""

    def __init__(self) -> None:
        self._rows: dict[str, list[str]] = {}

    def add(self, name: str, labels: dict[str, str], value: float) -> None:
        text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        self._rows.setdefault(name, []).append(f"{name}{{{text}}} {_number(value)}")

    def text(self) -> str:
        out: list[str] = []
        for name, rows in self._rows.items():
            out += [f"# HELP {name} {_HELP[name]}", f"# TYPE {name} gauge", *dict.fromkeys(rows)]
        return "\n".join(out) + "\n" if out else ""


def _verdict_set(fam: _Families, name: str, labels: dict[str, str], verdict: Verdict) -> None:
    for v in Verdict:
        fam.add(name, {**labels, "verdict": v.name}, 1 if v == verdict else 0)


def render_report(rep: Report, *, cluster: str, run: str, judged_at: float) -> str:
    """The run's figures in the text format: per-node verdicts, busbw per size with its expected and
    floor figures, the pair search's pairs, the run's verdict and when it was judged."""
    fam = _Families()
    base = {"cluster": cluster, "run": run}
    fam.add(RUN_VERDICT_CODE, base, int(rep.verdict))
    fam.add(RUN_END, base, round(judged_at))
    for n in rep.nodes:
        _verdict_set(fam, NODE_VERDICT, {**base, "node": n.node}, n.verdict)
    for n in rep.nodes:
        fam.add(NODE_VERDICT_CODE, {**base, "node": n.node}, int(n.verdict))
    for c in rep.curves:
        curve = {**base, "collective": c.op, "scope": c.scope}
        for size, gbps in c.points:
            fam.add(BUSBW, {**curve, "size_bytes": str(size)}, gbps * GBPS)
        for size, gbps in c.expected:
            fam.add(BUSBW_EXPECTED, {**curve, "size_bytes": str(size)}, gbps * GBPS)
        floors: list[tuple[int, float | None, float | None]] = list(c.model_floors)
        if not floors and c.floor_at is not None:
            floors = [(c.floor_at, c.floor_warn, c.floor_fail)]
        for size, warn, fail in floors:
            if warn is not None:
                fam.add(BUSBW_FLOOR_WARN, {**curve, "size_bytes": str(size)}, warn * GBPS)
            if fail is not None:
                fam.add(BUSBW_FLOOR_FAIL, {**curve, "size_bytes": str(size)}, fail * GBPS)
    for m in rep.measurements:
        if not m.scope.startswith("pair:"):
            continue
        a, _, b = m.scope.removeprefix("pair:").partition("+")
        pair = {**base, "check": m.check, "node": a, "peer": b}
        fam.add(PAIR_VERDICT_CODE, pair, int(m.verdict))
        if m.value is not None and m.unit == "GB/s":
            fam.add(PAIR_BUSBW, pair, m.value * GBPS)
    return fam.text()


def render_incidents(incidents: Iterable[tuple[str, str, str, str]], states: Sequence[str]) -> str:
    """Heal's incidents, each ``(cluster, node, incident, state)``, as a state set over ``states``
    (gpu_cluster.heal.states.State): the Grafana annotations read it."""
    fam = _Families()
    for cluster, node, incident, state in incidents:
        for s in states:
            fam.add(
                HEAL_INCIDENT, {"cluster": cluster, "node": node, "incident": incident, "state": s}, int(s == state)
            )
    return fam.text()


def write_textfile(text: str, directory: Path, name: str = VALIDATION_FILE) -> Path:
    """``text`` into ``directory/name`` atomically: a reader (the textfile collector, at any scrape)
    sees the old file or the new one, never half of one. The temp name does not end in ``.prom``,
    so the collector never reads it (README: ``*.prom``)."""
    path = directory / name
    tmp = directory / f".{name}.{os.getpid()}"
    tmp.write_text(text, encoding="utf-8")
    # Readable by the node exporter whatever this job's umask.
    tmp.chmod(0o644)
    os.replace(tmp, path)
    return path


def push_path(job: str, grouping: Mapping[str, str]) -> str:
    """The Pushgateway path of a group: ``/metrics/job/<job>{/<label>/<value>}`` (prometheus/
    pushgateway README.md lines 262-273 at v1.11.3, e803ebd), every value base64url-encoded behind an
    ``@base64`` suffix (lines 275-284: the one way to carry a ``/`` or an empty value; a run directory
    or node name cannot break the path)."""

    def enc(v: str) -> str:
        # A single '=' is required for an empty value (line 278); padding is optional otherwise.
        return base64.urlsafe_b64encode(v.encode()).decode().rstrip("=") or "="

    parts = [f"job@base64/{enc(job)}", *(f"{k}@base64/{enc(v)}" for k, v in grouping.items())]
    return "/metrics/" + "/".join(parts)


def push(text: str, base_url: str, job: str, grouping: Mapping[str, str], timeout_s: float = 30.0) -> int:
    """PUT ``text`` as the group ``job`` + ``grouping`` (README.md lines 366-370: the group's metrics
    are replaced by these; the text format's content type, lines 372-379). Returns the HTTP status
    (200 pushed, 202 queued); raises OSError (urllib's URLError and HTTPError among them) otherwise.
    The labels of the grouping key overwrite the same labels in the body (lines 268-273), so the key
    holds only labels every series of the file carries with the same value."""
    req = urllib.request.Request(
        base_url.rstrip("/") + push_path(job, grouping),
        data=text.encode("utf-8"),
        method="PUT",
        headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
    )
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return int(resp.status)
