"""``gpu-cluster heal``: the command.

    gpu-cluster heal STACK [--outputs FILE] [--report PATH] [--out DIR] [--apply] [--max-per-hour K] ...
    gpu-cluster heal --local [--nodes 4] [--fault local-3:slow] --out DIR [--apply] [--max-per-hour K]
    gpu-cluster heal --show DIR

Dry run unless ``--apply``. Exit codes: 0 every named node is back HEALTHY (or nothing was named;
a dry run that no limit would stop), 2 a limit or a failed step stopped it (the journal says
which; a rerun continues), 3 it could not run (bad input, no outputs, no report, an SDK or a
scheduler missing): one line with the next step.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

from gpu_cluster.components.stack_locate import stack_label

from gpu_cluster.heal import policy
from gpu_cluster.heal.engine import EXIT_COULD_NOT_RUN, EXIT_OK, Engine
from gpu_cluster.heal.evidence import Evidence, EvidenceError, read_report
from gpu_cluster.heal.journal import JOURNAL, Journal, JournalBusy, iter_lines, read
from gpu_cluster.heal.lock import LockHeld
from gpu_cluster.heal.platforms import PlatformError

PROG = "gpu-cluster heal"


class UsageError(ValueError):
    """Bad input: printed as one line, exit 3."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print(f"{PROG}: {message}", file=sys.stderr)
        raise SystemExit(EXIT_COULD_NOT_RUN)


def _when(text: str) -> float:
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO time (e.g. 2026-12-05T18:00:00Z)") from None
    if t.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone (add Z for UTC)")
    return t.timestamp()


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"{text!r}: allowed a finite number of seconds > 0")
    return v


EPILOG = """\
How each platform's node is replaced, and what heal cannot do there: docs/heal.md. On Azure Slurm
(azure-h100-slurm): the node's VM is deleted from the GPU scale set (virtualMachineScaleSets
deleteInstances), its dynamic node deleted from Slurm, the scale set's capacity put back; the new
VM's slurmd registers itself under its own name and heal drains it until it passes revalidation.
It cannot keep that node from taking a job in the moments between its registration and heal's
drain, tell Azure the host was faulty (no Guest Health Report is filed), or replace a node that is
not a VM of the stack's scale set."""


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(
        prog=PROG,
        description=(__doc__ or "").split("\n\n")[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("stack", nargs="?", help="the stack whose nodes to heal (its outputs, as validate reads them)")
    ap.add_argument("--outputs", type=Path, help="JSON from `pulumi stack output --json --show-secrets`")
    ap.add_argument(
        "--report",
        type=Path,
        help="the validation report.json (or its run directory) that named the nodes "
        "(default: the newest under out/validate/STACK/)",
    )
    ap.add_argument(
        "--out",
        type=Path,
        help="heal's run directory, where heal-journal.jsonl is kept (default out/heal/STACK; with --local, required)",
    )
    ap.add_argument("--apply", action="store_true", help="act (default: a dry run that says what it would do)")
    ap.add_argument(
        "--max-per-hour",
        type=int,
        default=policy.DEFAULT_MAX_PER_HOUR,
        help=f"replacements in any rolling hour (default {policy.DEFAULT_MAX_PER_HOUR}; 0 replaces nothing)",
    )
    ap.add_argument(
        "--max-unhealthy",
        type=float,
        default=policy.DEFAULT_MAX_UNHEALTHY,
        help="stop everything when more than max(1, this fraction x nodes) FAIL "
        f"(default {policy.DEFAULT_MAX_UNHEALTHY:g})",
    )
    ap.add_argument(
        "--max-out-of-service",
        type=int,
        default=policy.DEFAULT_MAX_OUT,
        help=f"nodes heal holds out of service at once, across reports and runs (default {policy.DEFAULT_MAX_OUT})",
    )
    ap.add_argument("--window-end", type=_when, help="when the capacity ends, where the cloud does not say (ISO, UTC)")
    ap.add_argument("--join-timeout", type=_seconds, default=1800.0, help="seconds a new instance may take (1800)")
    ap.add_argument(
        "--evict-timeout",
        type=_seconds,
        default=3600.0,
        help="seconds a quarantined node may still run work (Slurm jobs, pods a PDB keeps) before the "
        "incident waits for a rerun (3600)",
    )
    ap.add_argument(
        "--replace-busy",
        action="store_true",
        help="past --evict-timeout, replace a node even though work still runs on it (default: never)",
    )
    ap.add_argument("--node", action="append", default=[], help="heal only this named node (repeatable)")
    ap.add_argument("--python", help="Slurm: the interpreter of the check's job (as validate submit --python)")
    ap.add_argument("--image", help="Kubernetes: the check's image (default: the stack's, as validate render)")
    ap.add_argument("--cpu", action="store_true", help="the nodes have no GPU (a test cluster): CPU ranks, no floors")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--here", action="store_true", help="Slurm: run scontrol/sbatch on this machine (the login node)")
    g.add_argument("--ssh", help="Slurm: remote shell to the login node (default: the stack's access.ssh_command)")
    ap.add_argument("--show", type=Path, metavar="DIR", help="print the journal of a heal run directory and exit")
    loc = ap.add_argument_group("the rehearsal on this machine")
    loc.add_argument("--local", action="store_true", help="heal local torchrun nodes (as validate --local runs them)")
    loc.add_argument("--nodes", type=int, default=4, help="--local: nodes (default 4)")
    loc.add_argument("--procs-per-node", type=int, default=1, help="--local: ranks per node (default 1)")
    loc.add_argument(
        "--fault", action="append", default=[], metavar="NODE:KIND", help="--local: e.g. local-3:slow (or :dead)"
    )
    loc.add_argument("--timeout", type=_seconds, default=120.0, help="--local: seconds a phase may wait for a rank")
    loc.add_argument(
        "--validate", action="store_true", help="--local: run a new validation round even if DIR holds a report"
    )
    return ap


def limits_of(args: argparse.Namespace) -> policy.Limits:
    lim = policy.Limits(
        apply=bool(args.apply),
        max_per_hour=args.max_per_hour,
        max_unhealthy=args.max_unhealthy,
        join_timeout_s=args.join_timeout,
        evict_timeout_s=args.evict_timeout,
        replace_busy=bool(args.replace_busy),
        max_out=args.max_out_of_service,
        window_end=args.window_end,
    )
    bad = policy.problems(lim)
    if bad:
        raise UsageError("; ".join(f"{flag} {why}" for flag, why in bad))
    return lim


def restrict(ev: Evidence, only: list[str]) -> Evidence:
    if not only:
        return ev
    named = [f.node for f in ev.named]
    unknown = [n for n in only if n not in named]
    if unknown:
        raise UsageError(
            f"--node {', '.join(unknown)}: not named by the report {ev.path} "
            f"(named for a finding of its own: {', '.join(named) or 'none'})"
        )
    from dataclasses import replace

    keep = tuple(f for f in ev.findings if f.node in only or not f.actionable)
    return replace(ev, findings=keep)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.show:
            path = args.show / JOURNAL if args.show.is_dir() else args.show
            if not path.is_file():
                raise UsageError(f"--show {args.show}: no {JOURNAL} there (allowed: a heal run directory)")
            for line in iter_lines(path):
                print(line)
            return EXIT_OK
        if args.local:
            if args.stack:
                raise UsageError(f"--local heals local nodes; drop the stack name {args.stack!r}")
            return run_local(args)
        if not args.stack:
            raise UsageError("name a stack (gpu-cluster heal STACK), or --local for the rehearsal, or --show DIR")
        return run_stack(args)
    except (UsageError, EvidenceError, JournalBusy, LockHeld, PlatformError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_COULD_NOT_RUN


def _finish(engine: Engine, ev: Evidence, run_dir: Path, apply: bool, publisher: Any = None) -> int:
    out = engine.run(ev)
    if apply:
        from gpu_cluster.heal.publish import publish
        from gpu_cluster.heal.record import record

        written = record(engine.j, ev, run_dir)
        if written:
            print(f"heal: incidents recorded in {', '.join(str(p) for p in written)}")
        # As metrics, for the dashboard's annotation; a failure is a line, never the exit status.
        print(publish(publisher, engine.j, engine.cluster, run_dir))
    for why in out.stopped:
        print(f"heal: stopped: {why}")
    if out.healed:
        print(f"heal: back in service: {', '.join(out.healed)}")
    if not apply:
        print("heal: dry run: nothing was changed; --apply acts (read the lines above first)")
    print(f"heal: journal {run_dir / JOURNAL}; exit {out.code}")
    return out.code


def run_local(args: argparse.Namespace) -> int:
    from gpu_cluster.heal import local

    if args.out is None:
        raise UsageError("--local needs --out DIR (the run directory: its report, journal and local cluster)")
    bad = []
    if not 2 <= args.nodes <= 8:
        bad.append(f"--nodes {args.nodes} (allowed: 2..8; a pair test needs a cleared peer)")
    if not 1 <= args.procs_per_node <= 8:
        bad.append(f"--procs-per-node {args.procs_per_node} (allowed: 1..8)")
    if bad:
        raise UsageError("; ".join(bad))
    limits = limits_of(args)
    try:
        faults = local.parse_faults(args.fault, args.nodes)
        args.out.mkdir(parents=True, exist_ok=True)
        world = local.LocalCluster.open(args.out, args.nodes, faults)
    except local.LocalError as exc:
        raise UsageError(str(exc)) from None
    report = args.out / "report.json"
    if args.validate or not report.is_file():
        from gpu_cluster.workloads.validate.__main__ import run_local as validate_local

        print(
            f"heal --local: validating {args.nodes} local nodes first (faults: "
            f"{', '.join(f'{n}:{k}' for n, ks in faults.items() for k in ks) or 'none'}) ...",
            flush=True,
        )
        with local.environment(world.env_for(world.names)):
            validate_local(args.out, args.nodes, args.procs_per_node, args.timeout, strict=True)
    else:
        print(f"heal --local: the report already in {args.out} is the evidence (--validate runs a new round)")
    ev = restrict(read_report(report), args.node)
    print(f"heal --local: report {ev.path} ({ev.verdict}); {'applying' if limits.apply else 'dry run'}", flush=True)
    with Journal(args.out, echo=print) as j:
        engine = Engine(
            cluster="local",
            journal=j,
            scheduler=local.LocalScheduler(world),
            cloud=local.LocalCloud(world),
            checker=local.LocalChecker(world, args.out, args.procs_per_node, args.timeout),
            limits=limits,
            poll_s=0.5,
        )
        return _finish(engine, ev, args.out, limits.apply)


def newest_report(stack: str) -> Path:
    root = Path("out/validate") / stack_label(stack)
    found = sorted(root.glob("*/report.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise EvidenceError(
            f"no validation report for {stack} under {root}/: run `gpu-cluster validate submit {stack}` first, "
            "or pass --report FILE"
        )
    return found[-1]


def run_stack(args: argparse.Namespace) -> int:
    from gpu_cluster.heal import platforms

    limits = limits_of(args)
    built = platforms.build(args)
    ev = restrict(read_report(args.report or newest_report(args.stack)), args.node)
    run_dir = args.out or Path("out/heal") / stack_label(args.stack)
    print(
        f"heal {args.stack}: {built.describe}; report {ev.path} ({ev.verdict}); "
        f"{'applying' if limits.apply else 'dry run'}",
        flush=True,
    )
    # A node this run's journal already holds an incident for may be gone because heal replaced it
    # (EKS and AKS give the new instance a new name): its incident is continued, never refused.
    journalled = {name for e in read(run_dir / JOURNAL)[0] for name in (e.node, e.slot)}
    unknown = [f.node for f in ev.named if f.node not in journalled and not built.scheduler.node(f.node).present]
    if unknown:
        raise UsageError(
            f"the report names {', '.join(unknown)}, which the {built.scheduler.kind} scheduler of {args.stack} does "
            "not know: the report is of another cluster or stale; validate again (gpu-cluster validate submit "
            f"{args.stack}) or pass the right --report"
        )
    with Journal(run_dir, echo=print) as j, cluster_lock(built.lock, limits.apply) as lost:
        engine = Engine(
            cluster=built.cluster,
            journal=j,
            scheduler=built.scheduler,
            cloud=built.cloud,
            checker=built.checker,
            limits=limits,
            guard=lost,
        )
        return _finish(engine, ev, run_dir, limits.apply, built.publisher)


@contextmanager
def cluster_lock(lock: Any, apply: bool) -> Iterator[Callable[[], str]]:
    """I9: while heal acts, the cluster's own lock is held and renewed (gpu_cluster/heal/lock.py);
    a dry run changes nothing and takes none. Yields what the engine asks before each step."""
    if not apply or lock is None:
        yield lambda: ""
        return
    from gpu_cluster.heal.adapters import AdapterError
    from gpu_cluster.heal.lock import hold
    from gpu_cluster.workloads.validate.slurm import SchedulerError

    try:
        held = hold(lock)
        renewer = held.__enter__()
    except (AdapterError, SchedulerError) as exc:
        raise PlatformError(f"could not take the cluster's lock ({lock.where}): {exc}") from None
    try:
        yield renewer.lost
    finally:
        held.__exit__(None, None, None)


if __name__ == "__main__":
    raise SystemExit(main())
