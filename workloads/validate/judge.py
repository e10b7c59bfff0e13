"""Judge a validation run: read what every phase left in the run directory, compare it with the
catalog's floors, name the bad nodes, and build the report.

The judge runs after the in-job phases, on one node, and reads only files: a phase that
crashed, or a node that died, leaves its files missing or marked with an error, and the
judge still reports, naming what it can.

Run directory layout (written by ``gpu_cluster.workloads.validate.run``):
    phase-<phase>.json             rank 0's results of the phase (main, fabric, pairs)
    status/<phase>-<node>-r<rank>.json   every rank's state: started, device-ready, fabric-ready, joined | finished | error
    ddp.json                       the short DDP run's metrics (gpu_cluster.workloads.train.ddp --json)
    nccl/*.log                     NCCL_DEBUG=INFO output, one file per process
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Mapping

from gpu_cluster.components.bandwidth import FLOOR_MESSAGE_BYTES
from gpu_cluster.components.catalog import CatalogError, InstanceType, load_catalog

# Per-GPU health tiers are the health check's own, so both judge a GPU alike.
from gpu_cluster.workloads.health.gpu import HealthConfig, Peaks, peaks_for
from gpu_cluster.workloads.validate import agents, certificate, isolate, stack, transport
from gpu_cluster.workloads.validate.blame import blame, hung_pairs
from gpu_cluster.workloads.validate.storage import judge_storage
from gpu_cluster.workloads.validate.report import OBSERVED, Curve, Report
from gpu_cluster.workloads.validate.verdict import Measurement, NodeVerdict, Verdict
from gpu_cluster.workloads.validate.figures import (
    basis_text,
    floor_basis,
    load,
    model_for,
    observed_curve,
    wrong_results,
    figure_at,
    human_bytes,
    expectation,
    judge_cluster_figure,
    gdr_missing,
    transport_failure,
)

# Fabrics whose NCCL/RCCL channels are held to GPUDirect RDMA: InfiniBand (Azure ND, whose
# references set NCCL_NET_GDR_LEVEL: the catalog's infiniband fabric). EFA, TCPX/TCPXO and gIB
# are not checked here: their plugins' GDR behaviour was not read (docs/validate.md).
GDR_FABRICS = ("infiniband",)


def judge(
    root: Path,
    *,
    instance_type: str | None,
    local: bool,
    expected_nodes: list[str] | None = None,
    duration_s: float = 0.0,
    strict: bool = False,
) -> Report:
    """``strict``: on a CPU run, a matmul straggler fails its node as on GPUs; without it, CPU
    matmul rates (which follow the machine's other load, not the node's health) are compared
    and a straggler is an observation in the report, not a verdict."""
    files = load(root)
    it: InstanceType | None = None
    errors: list[str] = list(files.unreadable)
    if instance_type:
        try:
            it = load_catalog().judge_type(instance_type)
        except CatalogError as exc:
            errors.append(str(exc))
    main = files.phases.get("main")
    lead: dict[str, Any] = main or files.phases.get("pairs") or files.phases.get("fabric") or {}
    backend = lead.get("backend", "gloo")
    floors = it is not None and not local and backend != "gloo"
    node_names: list[str] = (
        list(lead.get("nodes", {}).keys())
        or sorted({str(s.get("node")) for s in files.statuses})
        or list(expected_nodes or [])
    )
    for n in expected_nodes or []:
        if n not in node_names:
            node_names.append(n)
    nodes = {n: NodeVerdict(node=n) for n in node_names}
    ms: list[Measurement] = []
    curves: list[Curve] = []

    def per_node_check(
        check: str,
        values: Mapping[str, float | None],
        unit: str,
        warn: float | None,
        fail: float | None,
        basis: str,
        at: int | None = None,
        compare: bool = True,
        observe: bool = False,
        floor_basis: str = "",
    ) -> None:
        made: dict[str, Measurement] = {}
        for node, value in values.items():
            m = Measurement(
                check=check,
                scope=f"node:{node}",
                value=value,
                unit=unit,
                floor_warn=warn,
                floor_fail=fail,
                floor_basis=floor_basis,
                basis=basis,
                at_bytes=at,
            ).judge()
            ms.append(m)
            made[node] = m
            if m.verdict in (Verdict.WARN, Verdict.FAIL) and node in nodes:
                nodes[node].mark(
                    m.verdict,
                    f"{check} {value if value is None else round(value, 2)} {unit} "
                    f"under {'fail' if m.verdict == Verdict.FAIL else 'warn'} floor",
                )
        # Whatever the floors, a node far behind the others is a straggler.
        if not compare:
            return
        for node, why in isolate.stragglers(values, None).items():
            if observe:
                made[node].detail = f"{OBSERVED} (CPU rates follow the machine's load): {why}"
                continue
            if node in nodes:
                nodes[node].mark(Verdict.FAIL, f"{check}: straggler, {why}")
            made[node].verdict = Verdict.FAIL
            made[node].detail = f"straggler: {why}"

    if main is None:
        errors.append("phase 'main' left no results (it did not run, or crashed before rank 0 wrote them)")
    else:
        # Per-GPU health: the slowest GPU of a node speaks for it.
        health = main.get("health", [])
        by_node: dict[str, list[dict[str, Any]]] = {}
        for h in health:
            by_node.setdefault(str(h["node"]), []).append(h)
        unit = "TFLOP/s" if backend != "gloo" else "GFLOP/s (CPU)"
        rate = {n: min(float(h["matmul_tflops"]) for h in hs) for n, hs in by_node.items()}
        if backend == "gloo":
            rate = {n: v * 1000.0 for n, v in rate.items()}
        # The health check's own bar: the GPU model's achievable figure (the node gate's), else the peak.
        pk: Peaks | None = None
        if floors and it is not None:
            try:
                pk = peaks_for(it.name)
            except LookupError as exc:
                errors.append(f"health.matmul not judged: {exc}")
        bar = pk.matmul_bar(HealthConfig()) if pk else None
        per_node_check(
            "health.matmul",
            rate,
            unit,
            bar[1] * bar[0] if bar else None,
            bar[2] * bar[0] if bar else None,
            f"catalog {it.name} {bar[3]} {bar[0]:g} TFLOP/s (warn < {bar[1]:.0%}, fail < {bar[2]:.0%})"
            if bar and it
            else "relative to the other nodes",
            observe=backend == "gloo" and not strict,
        )
        mem = {n: min(float(h["mem_gbps"]) for h in hs) for n, hs in by_node.items()}
        # The health check's own bar: the GPU model's published achievable copy rate; with none,
        # the nodes are compared with each other (never a fraction of the vendor peak).
        mbar = pk.memory_bar(HealthConfig()) if pk else None
        per_node_check(
            "health.memory_bandwidth",
            mem,
            "GB/s",
            mbar[1] * mbar[0] if mbar else None,
            mbar[2] * mbar[0] if mbar else None,
            f"catalog {it.name}: achievable copy {mbar[0]:g} GB/s (warn < {mbar[1]:.0%}, fail < {mbar[2]:.0%}; "
            f"{mbar[3]})"
            if mbar and it
            else f"relative to the other nodes: no published achievable copy rate for {it.accelerator.model}"
            if floors and it
            else "information (CPU copies vary with the neighbours' load)",
            compare=backend != "gloo",
            floor_basis="measured (published)" if mbar else "",
        )
        if floors and it is not None:
            for n, hs in by_node.items():
                if len(hs) != it.accelerator.count:
                    nodes[n].mark(Verdict.FAIL, f"{len(hs)} GPUs answered, the catalog says {it.accelerator.count}")
                    ms.append(
                        Measurement(
                            check="health.gpu_count",
                            scope=f"node:{n}",
                            value=float(len(hs)),
                            unit="GPUs",
                            floor_fail=float(it.accelerator.count),
                            basis="catalog",
                        ).judge()
                    )
        # Single-node collectives (NVLink/xGMI inside each node).
        single = main.get("single_node", {})
        sn_values: dict[str, float | None] = {}
        sn_at: int | None = None
        for n, res in single.items():
            if "error" in res:
                sn_values[n] = None
                nodes.setdefault(n, NodeVerdict(node=n)).mark(
                    Verdict.FAIL, f"single-node collectives failed: {res['error']}"
                )
                continue
            sn_exp = expectation(it, "all_reduce", 1, "single-node") if floors else None
            sn_at, sn_values[n], _ = figure_at(res, sn_exp.message_bytes if sn_exp else 1 << 62)
            if wrong_results(res):
                nodes[n].mark(Verdict.FAIL, f"single-node {res.get('op')} returned {wrong_results(res)} wrong elements")
            curves.append(observed_curve(res, f"node {n}", None, None))
        if sn_values:
            # A sweep that ends short is held to the model's figure at its largest size.
            sn_size = sn_at if sn_at is not None and sn_at < FLOOR_MESSAGE_BYTES else None
            sn = expectation(it, "all_reduce", 1, "single-node", sn_size) if floors else None
            sw = sn.floor_warn_gbps if sn else None
            sf = sn.floor_fail_gbps if sn else None
            per_node_check(
                "single_node.busbw",
                sn_values,
                "GB/s",
                sw,
                sf,
                f"catalog {it.name}: {basis_text(sn)}"
                if sn and it
                else "information (gloo over loopback)"
                if backend == "gloo"
                else "relative to the other nodes",
                sn_at,
                compare=backend != "gloo",
                floor_basis=floor_basis(sn),
            )
            if sn is not None and not sn.valid:
                # Under the smallest size the model holds at: nothing to hold a node to, not a pass.
                for m in ms:
                    if m.check == "single_node.busbw" and m.verdict == Verdict.PASS:
                        m.verdict = Verdict.UNKNOWN
                        m.detail = f"sweep ended at {human_bytes(sn_at or 0)}: {sn.basis}"
        # Multi-node collectives over the whole fabric.
        for op, res in main.get("multi_node", {}).items():
            e = expectation(it, op, len(node_names), "multi-node") if floors else None
            m = judge_cluster_figure(
                f"multi_node.{op}",
                res,
                e,
                "none (CPU run)" if not floors else "no floor for this op",
                it if floors else None,
                len(node_names),
                "multi-node",
            )
            warn, fail = m.floor_warn, m.floor_fail
            if not floors and m.value is not None:
                m.verdict = Verdict.PASS
            if wrong_results(res):
                m.verdict = Verdict.FAIL
                m.detail = f"{wrong_results(res)} wrong elements"
            ms.append(m)
            curves.append(
                observed_curve(
                    res,
                    "all nodes",
                    warn,
                    fail,
                    m.at_bytes,
                    model_for(it if floors else None, op, len(node_names), "multi-node", res),
                )
            )
        if "multi_node_error" in main:
            errors.append(f"multi-node collectives: {main['multi_node_error']}")
    # The pairs ran inside the main phase, or in a phase of their own after the main phase hung
    # inside a collective (its watchdog ended every rank before the search could run).
    pairs = (main or {}).get("pairs") or (files.phases.get("pairs") or {}).get("pairs")
    skipped = (files.phases.get("pairs") or {}).get("skipped")
    if skipped:
        errors.append(f"pairwise search not run: {skipped}")
    if pairs:
        # The search runs at the warn floor, so a node that only drags the cluster to WARN is named
        # too: it FAILs when its pair with a known-good node is under the fail floor (or hung), else WARNs.
        fail_floor = pairs.get("floor_fail")
        with_good = {str(a): v for a, _, v in pairs.get("second", [])}
        for a_b, why in pairs.get("bad", {}).items():
            if a_b in nodes:
                v = with_good.get(a_b)
                under_fail = v is None or fail_floor is None or float(v) < float(fail_floor)
                nodes[a_b].mark(Verdict.FAIL if under_fail else Verdict.WARN, f"pairwise: {why}")
        for n, why in pairs.get("unresolved", {}).items():
            if n in nodes:
                nodes[n].mark(Verdict.WARN, f"pairwise: {why}")
        pe = expectation(it, str(pairs.get("op") or "all_reduce"), 2, "pair") if floors else None
        pair_basis = f"{pairs.get('floor_basis', '')}; {basis_text(pe)}" if pe else str(pairs.get("floor_basis", ""))
        for a, b, value in pairs.get("first", []):
            pm = Measurement(
                check=f"pair.{pairs.get('op') or 'all_reduce'}",
                scope=f"pair:{a}+{b}",
                value=value,
                unit="GB/s",
                floor_warn=pairs.get("floor") if "floor_fail" in pairs else None,
                floor_fail=pairs.get("floor_fail", pairs.get("floor")),
                basis=pair_basis,
                at_bytes=pairs.get("message_bytes"),
                floor_basis=floor_basis(pe),
            ).judge()
            if value is None:
                # A pair that hung or failed has a culprit even on CPU, where no floor applies.
                pm.verdict, pm.detail = Verdict.FAIL, "the pair's call hung or failed"
            ms.append(pm)
        for a, b, why in pairs.get("bad_links", []):
            ms.append(
                Measurement(
                    check="pair.link",
                    scope=f"pair:{a}+{b}",
                    value=None,
                    unit="",
                    basis=pair_basis,
                    verdict=Verdict.FAIL,
                    detail=why,
                )
            )
        if "rounds" in pairs:
            ms.append(
                Measurement(
                    check="pair.search_rounds",
                    scope="cluster",
                    value=float(pairs["rounds"]),
                    unit="rounds",
                    basis=f"{pairs.get('pairing', 'topology')} pairing; "
                    f"{len(pairs.get('bad', {}))} node(s) named, {len(pairs.get('bad_links', []))} link(s)",
                )
            )
    storage = (files.phases.get("storage") or {}).get("storage")
    if storage is not None:
        ms.extend(judge_storage(storage, floors=floors))
        if storage.get("short_reads"):
            errors.append(f"storage: ranks {storage['short_reads']} read fewer bytes than were written")
    fabric = files.phases.get("fabric")
    if fabric is not None:
        for op, res in fabric.get("multi_node", {}).items():
            e = expectation(it, op, len(node_names), "fabric-only") if floors else None
            fm = judge_cluster_figure(
                f"fabric_only.{op}", res, e, "none", it if floors else None, len(node_names), "fabric-only"
            )
            ms.append(fm)
            curves.append(
                observed_curve(
                    res,
                    "fabric only",
                    fm.floor_warn,
                    fm.floor_fail,
                    fm.at_bytes,
                    model_for(it if floors else None, op, len(node_names), "fabric-only", res),
                )
            )
        if "multi_node_error" in fabric:
            errors.append(f"fabric-only collectives: {fabric['multi_node_error']}")
    if files.ddp is not None:
        first, last = files.ddp.get("loss_first"), files.ddp.get("loss_last")
        loss_ok = (
            isinstance(first, (int, float)) and isinstance(last, (int, float)) and math.isfinite(last) and last < first
        )
        ms.append(
            Measurement(
                check="ddp.loss_falls",
                scope="cluster",
                value=float(last) if isinstance(last, (int, float)) else None,
                unit="loss",
                basis=f"first {first}",
                verdict=Verdict.PASS if loss_ok else Verdict.FAIL,
                detail="" if loss_ok else "loss did not fall or is not finite",
            )
        )
        tps = files.ddp.get("tokens_per_s_per_gpu")
        if isinstance(tps, (int, float)):
            ms.append(
                Measurement(
                    check="ddp.tokens_per_s_per_gpu",
                    scope="cluster",
                    value=float(tps),
                    unit="tokens/s",
                    basis="information",
                )
            )
        mfu = files.ddp.get("mfu")
        if isinstance(mfu, (int, float)):
            ms.append(
                Measurement(check="ddp.mfu", scope="cluster", value=float(mfu), unit="fraction", basis="information")
            )

    prev = certificate.previous(root)
    gate_ms, gate = certificate.judge_gate(main, nodes, gpu_run=backend != "gloo", prev=prev)
    ms.extend(gate_ms)

    # One pair's job of its own (``pairs-A+B``) is read through the search it served, whose result
    # the launcher kept in phase-pairs.json; its ranks are numbered within the pair's job.
    job_statuses = [st for st in files.statuses if not str(st.get("phase", "")).startswith("pairs-")]
    # The pairwise search outranks silence: a node it cleared went quiet only because the whole job
    # was torn down. Who never started is read from the torchrun agents' logs.
    # A node the main phase's results list ran its ranks, whatever its status lines say.
    unaccounted = [n for n in node_names if n not in (main or {}).get("nodes", {})]
    found = blame(
        job_statuses,
        unaccounted,
        cleared=(pairs or {}).get("good", []),
        agents=agents.read(root),
        # The rendezvous store's host: the job's first node (sbatch's head_node, the first of
        # scontrol show hostnames; a JobSet's pod 0), the first expected node.
        store_host=next(iter(expected_nodes or node_names), None),
    )
    blamed = found.failed
    for n, why in blamed.items():
        nodes.setdefault(n, NodeVerdict(node=n)).mark(Verdict.FAIL, why)
    for n, why in found.suspects.items():
        if nodes.get(n, NodeVerdict(node=n)).verdict != Verdict.FAIL:
            nodes.setdefault(n, NodeVerdict(node=n)).mark(Verdict.WARN, f"suspect: {why}")
    errors.extend(found.notes)
    searched = {(str(a), str(b)) for a, b, _ in [*(pairs or {}).get("first", []), *(pairs or {}).get("second", [])]}
    for (a, b), why in hung_pairs(job_statuses).items():
        if (a, b) in searched or (b, a) in searched:
            continue  # the search measured this pair and named the node (or the link) itself
        # Both nodes of a pair that hung are suspects; which one is at fault would take a second
        # pass that the ended process could not run.
        for n in (a, b):
            if n not in blamed:
                nodes.setdefault(n, NodeVerdict(node=n)).mark(Verdict.WARN, f"suspect: {why}")

    expected = it.software.expected_transport if it else ""
    tr: dict[str, Any]
    ok: bool | None
    if backend == "gloo":
        tr = {
            "expected": expected or None,
            "seen": ["gloo/tcp"],
            "ok": None,
            "message": "CPU run over gloo (TCP); the GPU fabric transport is not judged",
        }
    else:
        seen = transport.scan_files(files.nccl_logs)
        ok, msg = transport.judge(expected, seen) if expected else (None, "no instance type given")
        tr = {"expected": expected, "seen": sorted(seen.used()), "ok": ok, "message": msg, "log_files": seen.files}
        if ok is False:
            ms.append(transport_failure(expected, msg))
        if it is not None and it.network.fabric in GDR_FABRICS:
            gdr_ok, gdr_msg = transport.judge_gdr(seen)
            tr["gdr"] = {"ok": gdr_ok, "message": gdr_msg, "channels": seen.net_channels, "gdr": seen.gdr_channels}
            if gdr_ok is False:
                ms.append(gdr_missing(expected, gdr_msg, seen.gdr_channels / seen.net_channels))
    verdicts = [m.verdict for m in ms] + [n.verdict for n in nodes.values()]
    overall = Verdict.worst(verdicts)
    if main is None and not any(n.verdict == Verdict.FAIL for n in nodes.values()):
        # Nothing measured and nobody named: not proven. A node named (by the files, or by the
        # pairwise search that ran after a hang) makes it a FAIL with a culprit.
        overall = Verdict.UNKNOWN
    elif errors and overall == Verdict.PASS:
        overall = Verdict.WARN
    versions = dict((main or {}).get("versions", {}))
    if not duration_s:
        # A judge run as the job's last step was not told when the job began: the first
        # rank's first status line is when the run started.
        began = [float(st["at"]) for st in files.statuses if isinstance(st.get("at"), (int, float))]
        began += [float(st["started_at"]) for st in files.statuses if isinstance(st.get("started_at"), (int, float))]
        if began:
            duration_s = max(0.0, time.time() - min(began))
    order = ("main", "pairs", "storage", "fabric")  # the order the steps run in
    walls = {
        p: float(files.phases[p]["wall_s"])
        for p in sorted(files.phases, key=lambda p: (p not in order, order.index(p) if p in order else 0, p))
        if isinstance(files.phases[p].get("wall_s"), (int, float))
    }
    model: dict[str, float] = {}
    if floors and it is not None:
        from gpu_cluster.components.validation_time import estimate

        model = {("fabric" if p.phase == "fabric-only" else p.phase): p.seconds for p in estimate(it, len(node_names))}
    return Report(
        verdict=overall,
        local=local,
        floors_applied=floors,
        instance_type=instance_type,
        nodes=list(nodes.values()),
        measurements=ms,
        transport=tr,
        versions=versions,
        curves=curves,
        errors=errors,
        duration_s=duration_s,
        world_size=int((main or {}).get("world_size", 0)),
        gate=gate,
        stack=stack.node_stacks(main, files.nccl_logs),
        phase_seconds=walls,
        phase_model_seconds={p: s for p, s in model.items() if p in walls},
    )
