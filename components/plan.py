"""Offline plan: what a stack will create, cost and must achieve, with no cloud account.

    gpu-cluster plan STACK [--json PATH|-] [--policy]
    gpu-cluster plan --all [--policy]
    python -m gpu_cluster.components.plan STACK     # the plan alone: no policy pack, no rendered job

STACK is a bundled stack's name (``aws-h100-eks``) or a path to a stack file. The real Pulumi
program runs under Pulumi's mock engine (components/engine.py): every resource it would
register is listed, grouped by pillar, followed by a summary: nodes and GPUs, interconnect,
storage, orchestrator, estimated cost, and the bus-bandwidth figures the validation job will hold
the cluster to (expected busbw, floors and their basis per phase, from components/bandwidth.py). It is a plan of intent, not a diff against what exists in the cloud.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, TextIO

from gpu_cluster.components.stack_locate import STACK_HELP, project_stacks
from gpu_cluster.components import liveness as live
from gpu_cluster.components import metrics_cost as mc
from gpu_cluster.components import validation_time as vt
from gpu_cluster.components.bandwidth import phase_floors
from gpu_cluster.components.catalog import load_catalog
from gpu_cluster.components.cloud_sdk import MissingCloudSdk
from gpu_cluster.components.cluster import PILLARS
from gpu_cluster.components.engine import OfflineRun, Recorded, replacements, run_offline
from gpu_cluster.components.plan_program import plan_program
from gpu_cluster.components.problems import output_file_problem
from gpu_cluster.components.plan_caveats import caveats, installer as installer_caveat
from gpu_cluster.components.spec import (
    DEPLOYER_PLACEHOLDER,
    ClusterSpec,
    SpecError,
    bundled_stacks,
    default_name,
    load_stack,
    needs_deployer_placeholder,
    parse_spec,
    read_stack_file,
)

OFFLINE_NOTE = (
    "offline plan: the real Pulumi program ran under Pulumi's mock engine; no cloud was contacted, "
    "and this is not a diff against what already exists"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary:
    stack: str
    cloud: str
    region: str
    zone: str
    nodes: int
    instance_type: str
    gpus_per_node: int
    total_gpus: int
    gpu_model: str
    gpu_vendor: str
    capacity: str
    fabric: str
    fabric_interfaces_per_node: int
    mtu: int
    placement: bool
    storage_size_gib: int
    storage_throughput_mbps_per_tib: int
    storage_aggregate_mbps: int
    storage_import_path: str | None
    orchestrator: str
    api_endpoint: str
    """Who can reach the Kubernetes API (and so deploy the in-cluster layer); '' on Slurm."""
    usd_per_hour: float
    usd_per_day: float
    price_date: str
    price_source: str
    price_note: str
    busbw_op: str
    nic_gbytes_per_node: float
    nic_gbytes_per_gpu: float
    nvlink_gbytes_per_gpu: float | None
    busbw_phases: list[dict[str, Any]]
    """Per validation phase: path, op, nodes, message size, bound, expected, floors and basis."""
    busbw_sources: dict[str, str]
    resources: int
    resources_by_pillar: dict[str, int]
    validation_phases: list[dict[str, Any]]
    """The validation's expected wall time per phase (gpu_cluster.components.validation_time)."""
    validation_minutes: float
    validation_usd: float
    validation_search_minutes: float
    caveats: list[dict[str, str]]
    """What the plan cannot promise, each with its reason (components/plan_caveats.py): placement,
    flex-start, spot, a zone not checked offline."""
    metrics: dict[str, Any] | None = None
    """What the GPU metrics add a month: series, samples, priced and unpriced items, assumptions
    (gpu_cluster.components.metrics_cost.Estimate); None where the stack has no metrics path."""
    heal: dict[str, Any] | None = None
    """What ``gpu-cluster heal`` expects a node's replacement and revalidation to take here
    (gpu_cluster.components.validation_time.replace_estimate, revalidate_estimate)."""
    liveness: dict[str, Any] = field(default_factory=dict)
    """``{holds, checks: [{kind, object, check, holds, why, source, fix?}]}``: will every pod the
    cluster needs be admitted, scheduled, reach what it must, find its paths and start after its
    installers (components/liveness, over these resources and the rendered validation job)."""


def pillar_of(run: OfflineRun, res: Recorded) -> str:
    """The pillar a resource belongs to: the nearest ancestor (or itself) typed gpu-cluster:<cloud>:<Pillar>."""
    for node in [res, *run.ancestors(res)]:
        parts = node.type.split(":")
        if len(parts) == 3 and parts[0] == "gpu-cluster" and parts[2] in PILLARS:
            return parts[2]
    return "Cluster"


def _is_listed(res: Recorded) -> bool:
    # Our own grouping components are headers, not things the cloud creates.
    return not res.type.startswith("gpu-cluster:")


def _endpoint(spec: ClusterSpec, placeholder: bool) -> str:
    o = spec.orchestration
    if o.kind == "slurm":
        return ""
    if o.endpoint == "private":
        return (
            "private (VPC only): the in-cluster layer is not deployed by this stack; "
            "run it from inside the VPC (docs/stacks.md, A private cluster)"
        )
    if placeholder:
        return (
            f"public, limited to the placeholder {DEPLOYER_PLACEHOLDER}: the stack sets no "
            "orchestration.deployer_cidrs, which `pulumi up` requires (your address as a /32)"
        )
    return f"public, limited to {', '.join(o.deployer_cidrs)} (the deployers) and the VPC"


# What renders a stack's validation job for the liveness model: the launcher lives above the
# components (workloads/), so the command passes it in (gpu_cluster/plan.py), as it does the policy
# pack. None: the plan's own workloads are checked, the job is not.
JobRenderer = Callable[[OfflineRun, ClusterSpec], "live.Job | None"]


def liveness_plan(run: OfflineRun, spec: ClusterSpec) -> live.Plan:
    """The plan as the liveness model reads it: every resource as plain data, the outputs, and
    what ``pulumi up`` adds that the offline plan leaves out."""
    deferred = {}
    cav = installer_caveat(spec)
    if cav is not None:
        deferred["installer"] = cav.text
    return live.Plan(
        resources=tuple(live.Resource(type=r.type, name=r.name, id=r.id, inputs=r.inputs) for r in run.resources),
        outputs=run.outputs,
        deferred=deferred,
    )


def check_liveness(run: OfflineRun, spec: ClusterSpec, job: JobRenderer | None = None) -> live.Liveness:
    plan = liveness_plan(run, spec)
    try:
        rendered = job(run, spec) if job is not None else None
    except Exception as exc:  # a job that cannot be rendered is a finding of the plan, not a crash
        found = live.evaluate(plan, None)
        failed = live.Check(
            kind="admission",
            object="the validation job",
            check="renders from this plan's outputs",
            holds=False,
            why=f"{type(exc).__name__}: {exc}",
            source="workloads/validate/commands.py render_run",
            fix="make the stack's outputs render (gpu-cluster validate render STACK shows the same error)",
        )
        return live.Liveness((failed, *found.checks))
    return live.evaluate(plan, rendered)


def summarize(
    stack: str, spec: ClusterSpec, run: OfflineRun, placeholder: bool = False, liveness: live.Liveness | None = None
) -> Summary:
    it = load_catalog().get(spec.compute.instance_type)
    bw = it.bandwidth
    assert it.price is not None  # the spec offers only priced (provisionable) types
    per_hour = spec.compute.nodes * it.price.usd_per_hour
    note = "GPU nodes at the on-demand price; storage, control plane, data transfer and metrics (the line below) not included"
    if spec.compute.capacity.type == "spot":
        note = "spot capacity is billed at the spot price; the on-demand price is shown as the ceiling"
    elif spec.compute.capacity.type == "flex-start":
        note = (
            "flex-start is billed at Dynamic Workload Scheduler prices, below on-demand: on-demand shown as the ceiling"
        )
    elif spec.compute.capacity.type in ("reservation", "capacity-block"):
        note = f"{spec.compute.capacity.type} is billed at its own rate (often prepaid); on-demand shown for scale"
    interfaces = it.network.efa_interfaces if it.network.fabric == "efa" else it.network.gpu_nics
    phases = vt.estimate(it, spec.compute.nodes)
    listed = [r for r in run.resources if _is_listed(r)]
    by_pillar: dict[str, int] = {}
    for r in listed:
        p = pillar_of(run, r)
        by_pillar[p] = by_pillar.get(p, 0) + 1
    lustre = spec.storage.lustre
    return Summary(
        stack=stack,
        cloud=spec.cloud,
        region=spec.region,
        zone=spec.zone,
        nodes=spec.compute.nodes,
        instance_type=it.name,
        gpus_per_node=it.accelerator.count,
        total_gpus=spec.compute.nodes * it.accelerator.count,
        gpu_model=it.accelerator.model,
        gpu_vendor=it.accelerator.vendor,
        capacity=spec.compute.capacity.type,
        fabric=it.network.fabric,
        fabric_interfaces_per_node=interfaces,
        mtu=it.network.mtu,
        # What the program created, not what the spec asked: a managed scheduler (Cluster
        # Director) places its nodes itself and gets no policy.
        placement=bool((run.outputs.get("fabric") or {}).get("placement")),
        storage_size_gib=lustre.size_gib,
        storage_throughput_mbps_per_tib=lustre.throughput_mbps_per_tib,
        storage_aggregate_mbps=int(lustre.size_gib / 1024 * lustre.throughput_mbps_per_tib),
        storage_import_path=lustre.import_path,
        orchestrator=spec.orchestration.kind,
        api_endpoint=_endpoint(spec, placeholder),
        usd_per_hour=round(per_hour, 2),
        usd_per_day=round(per_hour * 24, 2),
        price_date=it.price.date,
        price_source=load_catalog().source(it.price.source).url,
        price_note=note,
        busbw_op=bw.op,
        nic_gbytes_per_node=bw.nic_gbytes_per_node,
        nic_gbytes_per_gpu=bw.nic_gbytes_per_gpu,
        nvlink_gbytes_per_gpu=bw.nvlink_gbytes_per_gpu,
        busbw_phases=[asdict(e) for e in phase_floors(bw, spec.compute.nodes)],
        busbw_sources={r.source: load_catalog().source(r.source).url for r in bw.references},
        resources=len(listed),
        resources_by_pillar=by_pillar,
        validation_phases=[asdict(p) for p in phases],
        validation_minutes=round(vt.total_s(phases) / 60, 1),
        validation_usd=round(vt.cost_usd(vt.total_s(phases), it, spec.compute.nodes), 2),
        validation_search_minutes=round(vt.search_estimate(it, spec.compute.nodes).seconds / 60, 1),
        caveats=[{"topic": c.topic, "text": c.text} for c in caveats(spec, run.outputs)],
        metrics=_metrics(spec, it, listed),
        heal=_heal(spec, it),
        liveness=liveness.as_dict() if liveness is not None else {},
    )


def _metrics(spec: ClusterSpec, it: Any, listed: list[Recorded]) -> dict[str, Any] | None:
    e = mc.estimate(
        cloud=spec.cloud,
        orchestrator=spec.orchestration.kind,
        nodes=spec.compute.nodes,
        gpus_per_node=it.accelerator.count,
        gpu_vendor=it.accelerator.vendor,
        resources=[(r.type, r.name) for r in listed],
    )
    return asdict(e) if e is not None else None


def _heal(spec: ClusterSpec, it: Any) -> dict[str, Any]:
    path = vt.replace_path(spec.cloud, spec.orchestration.kind, spec.compute.capacity.type, it.name)
    rep, rev = vt.replace_estimate(path), vt.revalidate_estimate(it)
    return {
        "path": path,
        "replace_minutes": round(rep.seconds / 60, 1),
        "replace_basis": rep.basis,
        "revalidate_minutes": round(rev.seconds / 60, 1),
        "revalidate_basis": rev.basis,
    }


def _gib(n: int) -> str:
    return f"{n / 2**30:g} GiB"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:g}"


def render(summary: Summary, run: OfflineRun, out: TextIO) -> None:
    w = out.write
    w(
        f"== {summary.stack}: {summary.nodes} x {summary.instance_type} on {summary.cloud} "
        f"({summary.region}/{summary.zone}), {summary.orchestrator}\n"
    )
    w(f"   ({OFFLINE_NOTE})\n\n")
    groups: dict[str, list[Recorded]] = {p: [] for p in (*PILLARS, "Cluster")}
    for r in run.resources:
        if _is_listed(r):
            groups[pillar_of(run, r)].append(r)
    width = max((len(r.type) for r in run.resources), default=20)
    for pillar, items in groups.items():
        if not items:
            continue
        w(f"{pillar} ({len(items)})\n")
        for r in items:
            flags = " [protected]" if r.protect else " [retained on delete]" if r.retain_on_delete else ""
            w(f"  + {r.type:<{width}}  {r.name}{flags}\n")
        w("\n")
    s = summary
    interfaces = (
        f"{s.fabric_interfaces_per_node} EFA interfaces per node"
        if s.fabric == "efa"
        else f"{s.fabric_interfaces_per_node} GPU NICs per node, MTU {s.mtu}"
    )
    placement = next(c["text"] for c in s.caveats if c["topic"] == "placement").split(":")[0]
    rows = [
        (
            "nodes",
            f"{s.nodes} x {s.instance_type} = {s.total_gpus} x {s.gpu_vendor.upper()} {s.gpu_model} ({s.capacity})",
        ),
        ("interconnect", f"{s.fabric.upper()}, {interfaces}, {placement}"),
        (
            "storage",
            f"Lustre {s.storage_size_gib} GiB at {s.storage_throughput_mbps_per_tib} MB/s/TiB "
            f"(~{s.storage_aggregate_mbps} MB/s aggregate)"
            + (f", imports {s.storage_import_path}" if s.storage_import_path else ""),
        ),
        ("orchestrator", s.orchestrator + (f"; API endpoint {s.api_endpoint}" if s.api_endpoint else "")),
        ("cost", f"${s.usd_per_hour:,.2f}/hour, ${s.usd_per_day:,.2f}/day ({s.price_note}; prices of {s.price_date})"),
        ("  metrics", mc.line(s.metrics) if s.metrics else "no metrics path in this stack"),
        (
            "validation",
            f"~{s.validation_minutes:g} min of cluster time, ${s.validation_usd:,.2f} at that price ("
            + ", ".join(f"{p['phase']} {p['seconds']:.0f} s" for p in s.validation_phases)
            + f"); the pairwise search adds ~{s.validation_search_minutes:g} min when it runs; "
            "image pulls and queueing not included (components/validation_time.py)",
        ),
        (
            "heal",
            f"a node's replacement ~{s.heal['replace_minutes']:g} min ({s.heal['replace_basis']}), its revalidation "
            f"~{s.heal['revalidate_minutes']:g} min (node gate and one pair test); gpu-cluster heal starts none that "
            "would end after the reservation or capacity block"
            if s.heal
            else "-",
        ),
        (
            "busbw model",
            f"GPU-fabric NICs {s.nic_gbytes_per_node:g} GB/s per node, {s.nic_gbytes_per_gpu:g} per GPU; "
            + (
                f"NVLink/xGMI {s.nvlink_gbytes_per_gpu:g} GB/s per GPU (both directions)"
                if s.nvlink_gbytes_per_gpu
                else "no NVLink figure"
            ),
        ),
        (
            "resources",
            f"{s.resources} ("
            + ", ".join(f"{k} {s.resources_by_pillar[k]}" for k in (*PILLARS, "Cluster") if k in s.resources_by_pillar)
            + ")",
        ),
    ]
    w("Summary\n")
    for key, value in rows:
        w(f"  {key:<13} {value}\n")
    w(f"  {'caveats':<13} what this plan cannot promise, and why\n")
    for c in s.caveats:
        w(f"    {c['topic']:<11} {c['text']}\n")
    w(
        f"  {'busbw floors':<13} nccl-tests busbw in GB/s at {_gib(s.busbw_phases[0]['message_bytes'])}; "
        "warn < 0.90 x expected, fail < 0.75 x expected\n"
    )
    w(f"    {'phase':<12} {'op':<11} {'nodes':>5} {'bound':>7} {'expected':>8} {'warn<':>7} {'fail<':>7}  basis\n")
    for e in s.busbw_phases:
        w(
            f"    {e['path']:<12} {e['op']:<11} {e['nodes']:>5} {_num(e['bound_gbps']):>7} {_num(e['expected_gbps']):>8} "
            f"{_num(e['floor_warn_gbps']):>7} {_num(e['floor_fail_gbps']):>7}  {e['algorithm']}; {e['basis']}\n"
        )
    render_liveness(s.liveness, out)


def liveness_line(doc: dict[str, Any]) -> str:
    """``holds: 61 checks (admission 9, scheduling 30, ...)`` or the count that fails."""
    checks = doc.get("checks") or []
    per = {k: [c for c in checks if c["kind"] == k] for k in live.KINDS}
    counts = ", ".join(f"{k} {sum(c['holds'] for c in v)}/{len(v)}" for k, v in per.items() if v)
    bad = [c for c in checks if not c["holds"]]
    head = f"holds: {len(checks)} checks" if not bad else f"DOES NOT HOLD: {len(bad)} of {len(checks)} checks fail"
    unverified = sum(1 for c in checks if c["holds"] and c.get("unverified"))
    tail = live.unverified_tail(unverified)
    return f"{head} ({counts}){tail}"


def render_liveness(doc: dict[str, Any], out: TextIO) -> None:
    """The liveness section: a line per check (kind, object, what it needs, why, source)."""
    if not doc:
        return
    w = out.write
    w(f"  {'liveness':<13} {liveness_line(doc)}; a model, not the cloud (docs/plan.md, Liveness)\n")
    for c in doc["checks"]:
        mark = ("ok? " if c.get("unverified") else "ok  ") if c["holds"] else "FAIL"
        line = f"    {mark} {c['kind']:<12} {c['object']}: {c['check']} -- {c['why']} [{c['source']}]"
        if not c["holds"] and c.get("fix"):
            line += f" -> fix: {c['fix']}"
        w(line + "\n")


def plan_stack(stack: str, job: JobRenderer | None = None) -> tuple[Summary, OfflineRun]:
    """Parse the stack (SpecError on a bad one), run the program offline, check liveness (with the
    validation job ``job`` renders), summarize."""
    name, raw = read_stack_file(stack)
    spec = parse_spec(raw, default_name=default_name(name), deployer_placeholder=True)
    run = run_offline(name, raw)
    liveness = check_liveness(run, spec, job)
    return summarize(name, spec, run, needs_deployer_placeholder(raw), liveness), run


def plan_spec(label: str, spec: ClusterSpec, run: OfflineRun, job: JobRenderer | None = None) -> Summary:
    """The summary of a cluster a user's own program built (components/plan_program.py)."""
    return summarize(label, spec, run, False, check_liveness(run, spec, job))


def to_json(summary: Summary, run: OfflineRun) -> dict[str, Any]:
    names = {r.urn: r.name for r in run.resources}
    return {
        "stack": summary.stack,
        "offline": True,
        "note": OFFLINE_NOTE,
        "resources": [
            {
                "type": r.type,
                "name": r.name,
                "id": r.id,
                "parent": names.get(r.parent, ""),
                "pillar": pillar_of(run, r),
                "protect": r.protect,
                "inputs": r.inputs,
            }
            for r in run.resources
            if _is_listed(r)
        ],
        "outputs": run.outputs,
        "summary": asdict(summary),
    }


def _write_atomically(path: str, text: str) -> None:
    """A reader never sees half a plan: write beside the target, then rename over it."""
    import os

    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


# What ``--policy`` runs: the policy pack over one planned stack, printed to ``out``; it answers
# the JSON to record and whether a mandatory rule was violated. The pack sits above the
# components it checks, so the command passes it in (gpu_cluster/plan.py) rather than this
# module reaching up for it.
PolicyCheck = Callable[[OfflineRun, ClusterSpec, TextIO], tuple[Any, bool]]


def main(
    argv: Sequence[str] | None = None, *, policy: PolicyCheck | None = None, job: JobRenderer | None = None
) -> int:
    ap = argparse.ArgumentParser(
        prog="gpu-cluster plan",
        description=__doc__.split("\n\n")[0],
        epilog="exit 0 planned; 2 a stack has errors, or its liveness does not hold (a pod it needs would not "
        "run); 3 a stack could not be planned here (its cloud's extra is not installed, e.g. pip install "
        "'gpu-cluster[azure]') or violates a mandatory policy",
    )
    ap.add_argument("stack", nargs="?", help=STACK_HELP)
    ap.add_argument(
        "--all",
        action="store_true",
        help="plan every stack of the Pulumi project here (its stack files with a gpu-cluster:cluster object); "
        "outside a project, every bundled example",
    )
    ap.add_argument("--json", metavar="PATH", help="write the plan as JSON to PATH ('-' for stdout)")
    ap.add_argument(
        "--outputs",
        metavar="PATH",
        help="write the stack outputs as `pulumi stack output --json --show-secrets` would ('-' for "
        "stdout; one stack only): what `gpu_cluster.workloads.validate render` reads offline",
    )
    ap.add_argument(
        "--policy",
        action="store_true",
        help="check the security policy pack's rules too (exit 3 when a mandatory rule is violated)",
    )
    ap.add_argument(
        "--program",
        metavar="PATH",
        help="plan your own Pulumi program (its __main__.py, GpuCluster used as a library) on STACK's config, "
        "instead of the bundled one",
    )
    ap.add_argument(
        "--from",
        dest="before",
        metavar="STACK",
        help="the stack as it is deployed now (a stack name or file): list what planning STACK over it "
        "would replace (inputs the providers declare replace-on-change)",
    )
    args = ap.parse_args(argv)
    if bool(args.stack) == bool(args.all):
        ap.error(f"give one STACK or --all (bundled stacks: {', '.join(bundled_stacks())})")
    if args.before and args.all:
        ap.error("--from takes one STACK, not --all")
    if args.outputs and args.all:
        ap.error("--outputs takes one STACK, not --all")
    if args.program and (args.all or args.before):
        ap.error("--program takes one STACK, without --all or --from")
    # Where the results go is checked before a minute of planning, not after it.
    for flag, target in (("--json", args.json), ("--outputs", args.outputs)):
        if target and target != "-" and (unwritable := output_file_problem(Path(target))):
            print(f"gpu-cluster: {flag}: {unwritable}", file=sys.stderr)
            return 3
    stacks, where = project_stacks() if args.all else ([args.stack], "")
    if args.all and not stacks:
        print(f"gpu-cluster: --all: no stack file with a gpu-cluster:cluster object in {where}", file=sys.stderr)
        return 3
    failed: list[str] = []
    dead: list[str] = []
    blocked: list[str] = []
    unplanned: list[str] = []
    documents = []
    for i, stack in enumerate(stacks, 1):
        if args.all:
            print(f"[{i}/{len(stacks)}] planning {stack} ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        planned: list[tuple[Summary, OfflineRun, ClusterSpec | None]]
        try:
            if args.program:
                planned = plan_program(stack, Path(args.program), functools.partial(plan_spec, job=job))
            else:
                planned = [(*plan_stack(stack, job), None)]
        except SpecError as err:
            print(f"gpu-cluster: {stack}: {err.render()}", file=sys.stderr)
            failed.append(stack)
            continue
        except MissingCloudSdk as err:
            # Not a mistake in the stack: this install lacks the cloud's extra (pyproject.toml).
            print(f"gpu-cluster: {stack}: {err}", file=sys.stderr)
            unplanned.append(stack)
            continue
        for summary, run, spec in planned:
            label = summary.stack
            out = sys.stderr if "-" in (args.json, args.outputs) else sys.stdout
            render(summary, run, out)
            if args.before:
                try:
                    replaced = replacements(plan_stack(args.before)[1], run)
                except SpecError as err:
                    print(f"gpu-cluster: --from {args.before}: {err.render()}", file=sys.stderr)
                    return 2
                except MissingCloudSdk as err:
                    print(f"gpu-cluster: --from {args.before}: {err}", file=sys.stderr)
                    return 3
                out.write(
                    f"  {'replaces':<13} " + ("nothing" if not replaced else f"{len(replaced)} resource(s)") + "\n"
                )
                for res, why in sorted(replaced.items()):
                    out.write(f"    {res}: {', '.join(why)}\n")
            out.write(f"  {'planned in':<13} {time.perf_counter() - started:.2f} s\n\n")
            documents.append(to_json(summary, run))
            if summary.liveness and not summary.liveness["holds"]:
                dead.append(label)
                for c in summary.liveness["checks"]:
                    if not c["holds"]:
                        print(
                            f"gpu-cluster: {label}: liveness: {c['object']}: {c['check']}: {c['why']}"
                            + (f" (fix: {c['fix']})" if c.get("fix") else ""),
                            file=sys.stderr,
                        )
            if args.policy:
                if policy is None:
                    print(
                        "gpu-cluster: --policy needs the policy pack: run `gpu-cluster plan --policy`", file=sys.stderr
                    )
                    return 3
                checked = spec or load_stack(stack, deployer_placeholder=True)[1]
                documents[-1]["policy"], mandatory_violated = policy(run, checked, out)
                if mandatory_violated:
                    blocked.append(label)
    if args.outputs and documents:
        text = json.dumps(documents[0]["outputs"], indent=2, default=str)
        if args.outputs == "-":
            print(text)
        else:
            _write_atomically(args.outputs, text + "\n")
    if args.json and documents:
        payload: Any = documents[0] if len(documents) == 1 else documents
        text = json.dumps(payload, indent=2, sort_keys=False, default=str)
        if args.json == "-":
            print(text)
        else:
            _write_atomically(args.json, text + "\n")
    if args.all and documents:
        w = sys.stderr if "-" in (args.json, args.outputs) else sys.stdout
        w.write("liveness\n")
        for doc in documents:
            w.write(
                f"  {doc['stack']:<26} {liveness_line(doc['summary']['liveness']) if doc['summary']['liveness'] else 'not checked'}\n"
            )
    if failed:
        print(f"gpu-cluster: {len(failed)} stack(s) have errors: {', '.join(failed)}", file=sys.stderr)
        return 2
    if dead:
        print(
            f"gpu-cluster: {len(dead)} stack(s) would not run the validation job (liveness does not hold): "
            f"{', '.join(dead)}",
            file=sys.stderr,
        )
        return 2
    if blocked or unplanned:
        if unplanned:
            print(
                f"gpu-cluster: {len(unplanned)} stack(s) could not be planned here: {', '.join(unplanned)}",
                file=sys.stderr,
            )
        if blocked:
            print(
                f"gpu-cluster: {len(blocked)} stack(s) violate mandatory policies: {', '.join(blocked)}",
                file=sys.stderr,
            )
        return 3
    return 0


if __name__ == "__main__":
    # The plan alone: the policy pack and the rendered job sit above the components and come with
    # the command (`gpu-cluster plan`, gpu_cluster/plan.py), which hands them in; `--policy` here
    # says so.
    raise SystemExit(main())
