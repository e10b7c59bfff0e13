"""Judge the printed output of NVIDIA nccl-tests or ROCm rccl-tests with the validation job's floors.

    gpu-cluster validate judge --nccl-tests FILE... --instance-type TYPE --nodes N [--out DIR]

Users who already run ``all_reduce_perf`` get the same verdict and report as the bundled job. The
parser reads what those binaries print (``src/common.cu``): the parameter line (``nThread .. nGpus ..
minBytes .. maxBytes ..``), the ``# Using devices`` block (rank, host, device), the table
(``size count type redop root | time algbw busbw #wrong`` out-of-place then in-place; nccl-tests
before 2.10 printed no ``root`` and an ``error`` column), ``# Out of bounds values``, ``# Avg bus
bandwidth`` and, with ``NCCL_DEBUG=INFO``, the lines that name the network plugin and transport.
Launcher prefixes (srun's ``0:``, Open MPI's ``[1,0]<stdout>:``), stripped ``#`` and elided rows
(``...``) are tolerated. The collective is read from the file first: nccl-tests 2.17 prints
``# Collective test starting: all_reduce_perf`` (``src/util.cu`` line 624 at NVIDIA/nccl-tests
a0b82b2, the program name from ``argv[0]``, ``src/common.cu`` main), and a command line or a
launcher line names the binary. ``--op`` overrides both. Failing those, the table: ``redop``/``root``
narrow it, ``count`` against ``size`` tells a rank's share (all_gather, alltoall, reduce_scatter) from
the whole message (all_reduce, sendrecv), and busbw / algbw, nccl-tests' factor, gives the rank
count. alltoall prints exactly what all_gather prints; a table above the busbw alltoall can reach
over the nodes' NICs is all_gather, one within its reach is reported and not judged until ``--op``
says which (:func:`_decide`).

Ops with a floor: all_reduce, all_gather, reduce_scatter (components/bandwidth.py); any other op is
reported with "not judged: no floor for OP". A type outside the catalog is judged on what the log
shows: NCCL over TCP sockets between nodes is a FAIL on any type (unless the catalog says the type
has no RDMA fabric), and the verdict says "type unknown".
"""

from __future__ import annotations

import os
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from gpu_cluster.components.bandwidth import OPS_WITH_FLOORS
from gpu_cluster.components.catalog import Catalog, CatalogError, InstanceType, load_catalog
from gpu_cluster.workloads.validate import transport
from gpu_cluster.workloads.validate.figures import (
    curve_of,
    expectation,
    judge_cluster_figure,
    model_curve,
    transport_failure,
)
from gpu_cluster.workloads.validate.report import Curve, Report, render_markdown, write
from gpu_cluster.workloads.validate.verdict import Measurement, NodeVerdict, Verdict

_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\d+:\s)")
_PARAMS = re.compile(
    r"nThread\s+(\d+)\s+nGpus\s+(\d+)\s+minBytes\s+(\d+)\s+maxBytes\s+(\d+)\s+step:\s*(\S+)"
    r"\s+warmup iters:\s*(\d+)\s+iters:\s*(\d+)(?:\s+agg iters:\s*(\d+))?\s+validation:\s*(\d+)"
)
_DEVICE = re.compile(
    r"Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s+(.+?)\s*$"
)
_AVG = re.compile(r"Avg bus bandwidth\s*:\s*([0-9.]+)")
_OOB = re.compile(r"Out of bounds values\s*:\s*(\d+)\s*(\w+)")
_PROVIDER = re.compile(r"Selected [Pp]rovider is (\w+)(?:.*?found (\d+) nics)?")
_ENV_OFF = re.compile(r"NCCL_(P2P|SHM|NVLS)_(?:DISABLE|ENABLE) set by environment to (\d)")
# nccl-tests' binaries: src/*.cu at NVIDIA/nccl-tests a0b82b2, built as <name>_perf.
_BINARY = re.compile(
    r"(?<![A-Za-z0-9])(all_reduce|all_gather|reduce_scatter|alltoallv|alltoall|sendrecv|broadcast|reduce|gather"
    r"|scatter|hypercube)_perf\b"
)
_VERSIONS = (
    ("nccl", re.compile(r"NCCL version (\S+)")),
    ("rccl", re.compile(r"RCCL version\s*:\s*(\S+)")),
    ("hip", re.compile(r"HIP version\s*:\s*(\S+)")),
    ("rocm", re.compile(r"ROCm version\s*:\s*(\S+)")),
    ("rccl-tests", re.compile(r"rccl-tests: Version (\S+)")),
    ("nccl-tests", re.compile(r"nccl-tests version (\S+)")),
)

# nccl-tests' busbw factors (doc/PERFORMANCE.md), by the redop/root a table row carries.
FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
}
JUDGED_OPS = OPS_WITH_FLOORS
# Bytes per element of the types nccl-tests prints (src/common.cu test_typenames; "char"/"int" are
# the names of builds before NCCL 2.x's full type list).
WORD_BYTES = {
    "int8": 1,
    "uint8": 1,
    "char": 1,
    "f8e4m3": 1,
    "f8e5m2": 1,
    "half": 2,
    "bfloat16": 2,
    "int32": 4,
    "uint32": 4,
    "int": 4,
    "float": 4,
    "float32": 4,
    "int64": 8,
    "uint64": 8,
    "double": 8,
}
OPS = tuple(FACTORS) + ("alltoallv", "hypercube")


class ParseError(ValueError):
    pass


@dataclass(slots=True)
class NcclTestsRun:
    file: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    """Rows shaped like gpu_cluster.workloads.collectives' JSON rows, one per size and placement."""
    params: dict[str, int | str] = field(default_factory=dict)
    devices: list[tuple[int, str, int, str]] = field(default_factory=list)
    """(rank, host, device, GPU name) from '# Using devices'."""
    avg_busbw: float | None = None
    out_of_bounds: tuple[int, str] | None = None
    versions: dict[str, str] = field(default_factory=dict)
    seen: transport.TransportSeen = field(default_factory=transport.TransportSeen)
    provider: str | None = None
    nics: int | None = None
    disabled: set[str] = field(default_factory=set)
    """Of P2P, SHM, NVLS: what NCCL reported the environment turned off."""
    elided: bool = False
    redop: str = ""
    root: int = -1
    named_op: str | None = None
    """The op the file names (nccl-tests' header or the binary's name), None when it names none."""

    @property
    def hosts(self) -> list[str]:
        return sorted({h for _, h, _, _ in self.devices})

    def ratio(self) -> float | None:
        """busbw / algbw over the rows precise enough to say (algbw >= 1 GB/s, out-of-place)."""
        pairs = [(r["busbw_gbps"], r["algbw_gbps"]) for r in self.rows if not r["in_place"] and r["algbw_gbps"] >= 1.0]
        return statistics.median(b / a for b, a in pairs) if pairs else None

    def split(self) -> int | None:
        """size / (count x element size) at the largest out-of-place row: 1 where ``count`` is the
        whole message (all_reduce, sendrecv, broadcast, reduce), the rank count where it is one
        rank's share (all_gather, alltoall, reduce_scatter, gather, scatter, hypercube). nccl-tests
        prints ``paramcount`` as the count (src/common.cu TimeTest, ``args->nbytes / wordSize``), and
        each test's GetCollByteCount sets it (src/*.cu at NVIDIA/nccl-tests a0b82b2). None when the
        element type is not one nccl-tests prints."""
        rows = [r for r in self.rows if not r["in_place"] and r["count"] > 0]
        if not rows:
            return None
        top = max(rows, key=lambda r: r["size_bytes"])
        word = WORD_BYTES.get(str(top["dtype"]))
        if word is None:
            return None
        return max(1, round(int(top["size_bytes"]) / (int(top["count"]) * word)))

    def read_op(self, ranks: int | None) -> OpReading:
        """The op and the rank count, from what the file shows: the op it names (nccl-tests' header,
        the binary's name); else the table's redop and root, its count against its size
        (:meth:`split`) and busbw / algbw, nccl-tests' factor for the rank count. Where those
        leave two ops (all_gather and alltoall print the same columns, count and factor), the
        reading names both and the judge decides with the fabric's bound, or does not judge."""
        r = self.ratio()
        if self.named_op is not None:
            implied = ranks
            if implied is None and r is not None and self.named_op in FACTORS and r < 0.999:
                implied = round(1 / max(1 - (r / 2 if self.named_op == "all_reduce" else r), 1e-3))
            return OpReading(self.named_op, implied, (), "named in the file")
        split = self.split()
        shared = split is not None and split > 1
        if shared and ranks is None:
            ranks = split
        how = "read from the table (redop, root" + (", count" if split is not None else "") + ", busbw/algbw)"
        if self.root >= 0:
            if self.redop not in ("none", ""):
                return OpReading("reduce", ranks, (), how)
            if shared:
                return OpReading("gather", ranks, ("gather", "scatter"), how)
            return OpReading("broadcast", ranks, (), how)
        if self.redop in ("none", ""):
            # all_gather and alltoall (and hypercube, redop "") print the same columns.
            return OpReading("all_gather", ranks, ("all_gather", "alltoall"), how)
        if shared:
            return OpReading("reduce_scatter", ranks, (), how)
        if split is None:
            # An element type nccl-tests does not print: busbw / algbw alone tells the two apart.
            if ranks and r is not None:
                best = min(("all_reduce", "reduce_scatter"), key=lambda op: abs(FACTORS[op](ranks) - r))
                return OpReading(best, ranks, (), how)
            if r is not None and r < 0.999:
                return OpReading("reduce_scatter", round(1 / max(1 - r, 1e-3)), (), how)
        # The count is the whole message: all_reduce, or sendrecv (factor 1, the same redop and root).
        if ranks is None:
            if r is not None and r > 1.001:
                return OpReading("all_reduce", max(2, round(2 / max(2 - r, 1e-3))), (), how)
            return OpReading("all_reduce", 2 if r is not None else None, ("all_reduce", "sendrecv"), how)
        flat = r is not None and abs(r - 1.0) < abs(r - FACTORS["all_reduce"](max(ranks, 3)))
        if flat and len(self.devices) > 2:
            # The file's own ranks say more than 2, and busbw = algbw: sendrecv's factor.
            return OpReading("sendrecv", ranks, (), how)
        return OpReading("all_reduce", ranks, ("all_reduce", "sendrecv") if flat or ranks == 2 else (), how)

    def infer_op(self, ranks: int | None) -> tuple[str, int | None]:
        """(op, ranks) of :meth:`read_op`."""
        reading = self.read_op(ranks)
        return reading.op, reading.ranks


@dataclass(frozen=True, slots=True)
class OpReading:
    op: str
    ranks: int | None
    alternatives: tuple[str, ...]
    """Ops the file cannot tell apart (the op read first among them); empty when it can."""
    how: str


def _num(tok: str) -> float | None:
    try:
        return float(tok)
    except ValueError:
        return None


def parse(text: str, file: str = "") -> list[NcclTestsRun]:
    """Every table in the text, each with the header lines before it. ParseError when there is none."""
    runs: list[NcclTestsRun] = []
    cur = NcclTestsRun(file=file)
    columns: list[str] | None = None
    pending_op: str | None = None
    lines = text.splitlines()
    transport.scan(lines, cur.seen)
    for raw in lines:
        line = _PREFIX.sub("", raw)
        if (m := _BINARY.search(line)) is not None:
            # Before the table's rows the name is this table's; after them, the next one's.
            if cur.rows:
                pending_op = m.group(1)
            else:
                cur.named_op = m.group(1)
        if "NCCL INFO" in line:
            if (m := _PROVIDER.search(line)) is not None:
                cur.provider = m.group(1).lower()
                cur.nics = int(m.group(2)) if m.group(2) else cur.nics
            if (m := _ENV_OFF.search(line)) is not None:
                kind, value = m.group(1), m.group(2)
                if (kind == "NVLS") == (value == "0"):
                    cur.disabled.add(kind)
            continue
        for key, rx in _VERSIONS:
            if key not in cur.versions and (m := rx.search(line)) is not None:
                cur.versions[key] = m.group(1)
        if (m := _PARAMS.search(line)) is not None:
            keys = ("nThread", "nGpus", "minBytes", "maxBytes", "step", "warmup", "iters", "agg_iters", "validation")
            cur.params = {k: (v if k == "step" else int(v)) for k, v in zip(keys, m.groups()) if v is not None}
            continue
        if (m := _DEVICE.search(line)) is not None:
            cur.devices.append((int(m.group(1)), m.group(2), int(m.group(3)), m.group(4)))
            continue
        if (m := _AVG.search(line)) is not None:
            cur.avg_busbw = float(m.group(1))
            continue
        if (m := _OOB.search(line)) is not None:
            cur.out_of_bounds = (int(m.group(1)), m.group(2))
            continue
        body = line.lstrip("#").split()
        if "size" in body and "count" in body and "busbw" in body:
            if columns is not None and cur.rows:
                runs.append(cur)
                cur = NcclTestsRun(
                    file=file,
                    params=dict(cur.params),
                    devices=list(cur.devices),
                    versions=dict(cur.versions),
                    seen=cur.seen,
                    named_op=pending_op or cur.named_op,
                )
                pending_op = None
            columns = [c.lstrip("#") for c in body]
            continue
        if line.strip() in ("...", "…"):
            cur.elided = True
            continue
        toks = line.split()
        if columns is None or len(toks) != len(columns) or not toks[0].isdigit():
            continue
        row = dict(zip(columns, toks))
        size = int(row["size"])
        if size == 0:
            continue
        cur.redop, cur.root = row.get("redop", ""), int(row.get("root", -1))
        idx = [i for i, c in enumerate(columns) if c == "time"]
        for placement, start in zip((False, True), idx):
            vals = toks[start : start + 4]
            algbw, busbw = _num(vals[1]), _num(vals[2])
            if algbw is None or busbw is None:
                continue
            # '#wrong' counts wrong elements; the old 'error' column is a relative error, not a count.
            wrong = int(vals[3]) if columns[start + 3] in ("wrong", "#wrong") and vals[3].isdigit() else None
            cur.rows.append(
                {
                    "size_bytes": size,
                    "count": int(row["count"]),
                    "dtype": row.get("type", ""),
                    "in_place": placement,
                    "time_us": _num(vals[0]),
                    "algbw_gbps": algbw,
                    "busbw_gbps": busbw,
                    "wrong": wrong,
                }
            )
    if cur.rows:
        runs.append(cur)
    if not runs:
        raise ParseError(
            f"{file or 'input'}: no nccl-tests table found (a line with size, count and busbw columns, "
            "then numeric rows)"
        )
    return runs


def _size_label(n: int) -> str:
    return f"{n / 2**30:g}G" if n >= 2**30 else f"{n / 2**20:g}M"


def out_problem(out: Path) -> str:
    """Why ``--out`` cannot take the report ('' when it can): it must be a directory, or be creatable
    in a directory that exists (a typo such as /typo is refused, not created at the root)."""
    if out.exists():
        return "" if out.is_dir() else "exists and is not a directory (allowed: a directory)"
    parent = out.parent
    if not parent.is_dir():
        return f"its parent {parent} does not exist (allowed: an existing directory, or a new one in an existing directory)"
    if not os.access(parent, os.W_OK):
        return f"cannot create it: {parent} is not writable"
    return ""


def _path(run: NcclTestsRun, nodes: int) -> str:
    if nodes <= 1:
        return "single-node"
    return "fabric-only" if {"P2P", "SHM"} <= run.disabled else "multi-node"


def judge_runs(
    runs: Sequence[NcclTestsRun],
    instance_type: str | None,
    nodes: int,
    op_override: str | None = None,
    catalog: Catalog | None = None,
) -> Report:
    """One report over every table, with the floors and transport rules of the validation job.

    A type the catalog lacks (or none) is judged on what the log shows: sockets between nodes FAIL,
    the rest is reported unjudged (UNKNOWN), and the verdict is labelled "type unknown". ``catalog``:
    another than the bundled one (the leave-one-out benchmark judges with a catalog without the run)."""
    errors: list[str] = []
    it: InstanceType | None = None
    if instance_type:
        try:
            it = (catalog or load_catalog()).judge_type(instance_type)
        except CatalogError as exc:
            errors.append(f"cannot judge against floors (type unknown): {exc}")
    else:
        errors.append("no --instance-type (type unknown): figures are reported, not judged against floors")
    ms: list[Measurement] = []
    curves: list[Curve] = []
    hosts: set[str] = set()
    versions: dict[str, str] = {}
    seen = transport.TransportSeen()
    for run in runs:
        hosts.update(run.hosts)
        versions.update(run.versions)
        seen.networks |= run.seen.networks
        seen.inter_node_paths |= run.seen.inter_node_paths
        seen.files += 1
        log_nodes = len(run.hosts) or None
        if log_nodes is not None and log_nodes != nodes:
            errors.append(
                f"{run.file}: the log names {log_nodes} host(s) ({', '.join(run.hosts)}); --nodes says {nodes}"
            )
        ranks = len(run.devices) or (nodes * it.accelerator.count if it else None)
        notes: list[str] = []
        undecided = ""
        if op_override:
            op = op_override
            notes.append(f"op {op} from --op")
        elif run.named_op:
            op = run.named_op
            notes.append(f"op {op} named in the file")
        else:
            reading = run.read_op(ranks)
            op, said, undecided = _decide(reading, run, it, nodes)
            notes.append(said)
        r = run.ratio()
        if ranks and r is not None and op in FACTORS and abs(FACTORS[op](ranks) - r) > 0.01 * FACTORS[op](ranks):
            errors.append(
                f"{run.file}: busbw/algbw = {r:.4f} does not match {op} on {ranks} ranks "
                f"({FACTORS[op](ranks):.4f}); check --nodes, --instance-type and --op"
            )
        path = _path(run, nodes)
        check = f"{path.replace('-', '_')}.{op}"
        res = {"op": op, "rows": run.rows}
        e = expectation(it, op, nodes, path) if it and op in JUDGED_OPS else None
        no_floor = (
            f"not judged: no floor for {op} (floors exist for {', '.join(JUDGED_OPS)})"
            if op not in JUDGED_OPS
            else "not judged: type unknown, no floor"
        )
        m = judge_cluster_figure(check, res, e, no_floor, it, nodes, path)
        m.scope = f"cluster:{Path(run.file).name}" if run.file else "cluster"
        if e is None:
            m.verdict = Verdict.UNKNOWN
            notes.append(no_floor)
        elif undecided:
            # Held to one op's floor it might not be: neither passed nor failed.
            m.verdict = Verdict.UNKNOWN
        if run.elided:
            notes.append("table elided ('...'), judged on the rows printed")
        m.detail = "; ".join(filter(None, [m.detail, *notes]))
        wrong = sum(int(x["wrong"] or 0) for x in run.rows)
        if wrong:
            m.verdict, m.detail = Verdict.FAIL, f"{wrong} wrong elements"
        if run.out_of_bounds and run.out_of_bounds[1].upper() != "OK":
            m.verdict, m.detail = Verdict.FAIL, f"out of bounds values: {run.out_of_bounds[0]} {run.out_of_bounds[1]}"
        ms.append(m)
        if run.avg_busbw is not None:
            ms.append(
                Measurement(
                    check=f"{path.replace('-', '_')}.{op}.avg_bus_bandwidth",
                    scope=m.scope,
                    value=run.avg_busbw,
                    unit="GB/s",
                    basis="information: nccl-tests' mean over every row, small sizes included; not judged",
                )
            )
        pts = sorted((int(x["size_bytes"]), float(x["busbw_gbps"])) for x in run.rows if not x["in_place"])
        model = model_curve(it, op, nodes, path, (s for s, _ in pts)) if e is not None else []
        curves.append(
            curve_of(op, Path(run.file).name or "nccl-tests", pts, m.floor_warn, m.floor_fail, m.at_bytes, model)
        )
    tr = _transport(it, seen, nodes, runs, ms)
    node_verdicts = [NodeVerdict(node=h) for h in sorted(hosts)]
    verdict = Verdict.worst([m.verdict for m in ms])
    if any(m.verdict == Verdict.FAIL for m in ms):
        # What the log shows (sockets between nodes, wrong elements, a figure under its floor) fails
        # a run whatever else could not be judged.
        verdict = Verdict.FAIL
    elif it is None:
        # Without floors it cannot pass.
        verdict = Verdict.UNKNOWN
    elif errors and verdict == Verdict.PASS:
        verdict = Verdict.WARN
    return Report(
        verdict=verdict,
        local=False,
        floors_applied=it is not None,
        instance_type=instance_type,
        nodes=node_verdicts,
        measurements=ms,
        transport=tr,
        versions=versions,
        curves=curves,
        errors=errors,
        world_size=max((len(r.devices) for r in runs), default=0) or (nodes * it.accelerator.count if it else 0),
        label="" if it is not None else "type unknown",
    )


ALLTOALL_MARGIN = 1.05
"""A none/-1 table whose busbw is this far above what alltoall can reach over the nodes' NICs is
all_gather: the bound is at line rate, the margin is for the timer and rounding."""


def _decide(reading: OpReading, run: NcclTestsRun, it: InstanceType | None, nodes: int) -> tuple[str, str, str]:
    """(op, the note saying how it was read, why it stays undecided or ''). all_gather and alltoall
    print the same columns, count and factor; across nodes alltoall sends every rank's share to the
    other nodes, so its busbw has a bound of its own (gpu_cluster.components.bandwidth), far under all_gather's:
    a table above it is all_gather. Under it, or without a type, the table cannot say which, and
    the figure is not judged (it is either op's, and one op's floor would misjudge the other)."""
    op = reading.op
    if not reading.alternatives:
        return op, f"op {op} {reading.how}", ""
    others = " or ".join(reading.alternatives)
    if set(reading.alternatives) == {"all_gather", "alltoall"}:
        top = max((float(r["busbw_gbps"]) for r in run.rows), default=0.0)
        if it is None or nodes < 2 or _path(run, nodes) != "multi-node":
            why = (
                f"op {others}: the table cannot tell them apart (same redop, root, count and factor); not judged: "
                "--op all_gather or --op alltoall to say which"
            )
            return op, why, why
        bound, _ = it.bandwidth.bound("alltoall", nodes, "multi-node")
        assert bound is not None
        if top > ALLTOALL_MARGIN * bound:
            return (
                "all_gather",
                f"op all_gather {reading.how}: {top:g} GB/s is above the {bound:.1f} GB/s alltoall can reach over "
                f"{nodes} x {it.name}'s NICs, so not alltoall",
                "",
            )
        why = (
            f"op {others}: the table cannot tell them apart (same redop, root, count and factor), and its "
            f"{top:g} GB/s is within reach of alltoall (at most {bound:.1f} GB/s on {nodes} x {it.name}'s NICs); "
            "not judged: --op all_gather or --op alltoall to say which"
        )
        return op, why, why
    if set(reading.alternatives) == {"all_reduce", "sendrecv"}:
        return (
            op,
            f"op {op} {reading.how}; on 2 ranks sendrecv prints the same columns and moves the same bytes, "
            "so either is held to this floor",
            "",
        )
    return op, f"op {op} {reading.how} (or {others}: the table cannot tell)", ""


def _transport(
    it: InstanceType | None,
    seen: transport.TransportSeen,
    nodes: int,
    runs: Sequence[NcclTestsRun],
    ms: list[Measurement],
) -> dict[str, Any]:
    expected = it.software.expected_transport if it else None
    provider = next((r.provider for r in runs if r.provider), None)
    nics = next((r.nics for r in runs if r.nics), None)
    extra = {"provider": provider, "nics": nics, "disabled": sorted(set().union(*(r.disabled for r in runs)))}
    if nodes <= 1:
        return {
            "expected": expected,
            "seen": sorted(seen.used()),
            "ok": None,
            "message": "single node: no network transport to judge",
            **extra,
        }
    sockets = "socket" in seen.used() and not (seen.used() - {"socket"})
    if it is not None and not it.network.rdma:
        msg = f"{it.name} has no RDMA fabric in the catalog: TCP sockets between nodes are what it has"
        return {"expected": expected, "seen": sorted(seen.used()), "ok": None, "message": msg, **extra}
    if expected is None:
        ok: bool | None = None
        msg = "type unknown: transport not judged (no NCCL INFO lines name one)"
        if sockets:
            ok = False
            msg = (
                f"type unknown: NCCL ran over TCP sockets between {nodes} nodes (NET/Socket), the fallback "
                "when no RDMA fabric plugin loads; a GPU cluster's collectives run at a few percent of their "
                "speed there"
            )
            ms.append(transport_failure("type unknown: judged on the log (NCCL INFO 'Using network Socket')", msg))
        return {"expected": None, "seen": sorted(seen.used()), "ok": ok, "message": msg, **extra}
    ok, msg = transport.judge(expected, seen)
    if ok is None:
        msg = "no NCCL INFO lines in the output (run with NCCL_DEBUG=INFO to have the transport judged)"
    if ok and it is not None and it.network.fabric == "efa" and provider not in (None, "efa"):
        ok, msg = False, f"libfabric selected provider {provider!r}, not efa"
    if ok is False:
        ms.append(transport_failure(expected, msg))
    return {"expected": expected, "seen": sorted(seen.used()), "ok": ok, "message": msg, **extra}


def main(
    files: Sequence[Path], instance_type: str | None, nodes: int | None, out: Path | None, op: str | None = None
) -> int:
    """The CLI branch: parse, judge, write the report when --out is given, print it, return the exit code."""
    if not nodes or nodes < 1:
        print("validate judge --nccl-tests: --nodes N (the node count the run used) is required", file=sys.stderr)
        return 3
    runs: list[NcclTestsRun] = []
    for f in files:
        try:
            runs.extend(parse(Path(f).read_text(encoding="utf-8", errors="replace"), str(f)))
        except (OSError, ParseError) as exc:
            print(f"validate judge --nccl-tests: {exc}", file=sys.stderr)
            return 3
    if op is not None and op not in OPS:
        print(
            f"validate judge --nccl-tests: --op {op!r} is not an nccl-tests op (allowed: {', '.join(OPS)})",
            file=sys.stderr,
        )
        return 3
    if out is not None and (why := out_problem(out)):
        print(f"validate judge --nccl-tests: --out {out}: {why}", file=sys.stderr)
        return 3
    rep = judge_runs(runs, instance_type, nodes, op)
    written = {}
    if out is not None:
        try:
            written = write(rep, out)
        except OSError as exc:
            print(f"validate judge --nccl-tests: --out {out}: cannot write the report: {exc}", file=sys.stderr)
            return 3
    print(render_markdown(rep))
    if written:
        print(f"report: {', '.join(str(p) for p in written.values())}")
    return int(rep.verdict)
