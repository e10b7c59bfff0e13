"""Post-provision validation: is this cluster healthy and as fast as it should be, and if not, which node?

    gpu-cluster validate submit STACK [--outputs FILE] [--here|--ssh CMD]   (run it on a deployed stack)
    gpu-cluster validate render STACK --out DIR [--outputs FILE]            (what submit would submit)
    gpu-cluster validate rehearse STACK [--outputs FILE]                    (run the rendered job here, to its first collective)
    gpu-cluster validate status STACK [--outputs FILE]                      (the GPU nodes and their state)
    python -m gpu_cluster.workloads.validate run   --out DIR [--phase main|fabric] [--instance-type T]   (every rank, under torchrun)
    python -m gpu_cluster.workloads.validate judge --out DIR [--instance-type T] [--nodes a,b] [--drain]  (once, after the phases)
    python -m gpu_cluster.workloads.validate pair-search --out DIR [--nodes a,b,c] -- RUN_ARGS...      (after a hang: one srun step per pair)
    gpu-cluster validate judge --nccl-tests FILE... --instance-type T --nodes N [--out DIR]  (nccl-tests output)
    gpu-cluster validate --local [--out DIR] [--nodes 2] [--procs-per-node 2]       (the whole flow on this machine)

run, judge --out and pair-search are the job's own steps: the job carries this code, not the
``gpu-cluster`` command, so they are ``python -m gpu_cluster.workloads.validate`` (the same parser).

Exit codes, as Nagios-style checks use: 0 pass, 1 warn, 2 fail, 3 could not run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Iterable
from typing import Any, NoReturn, Sequence

from gpu_cluster.components.problems import Problem, Problems, output_dir_problem
from gpu_cluster.workloads.validate import diff
from gpu_cluster.workloads.validate.heartbeat import Heartbeat
from gpu_cluster.workloads.validate.verdict import Verdict

from gpu_cluster.workloads.launch.validation_args import FABRIC_ONLY_ENV
from gpu_cluster.workloads.validate.run_flags import judge_instance_type


# A usage error exits 3, the verdict UNKNOWN: the cluster was not judged.
EXIT_USAGE = 3


def _print_problems(prog: str, problems: Iterable[tuple[str, str]]) -> None:
    """Every argument problem as ``prog: path: reason`` (components/problems.py)."""
    for p in problems:
        print(f"{prog}: {Problem(*p).render()}", file=sys.stderr)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        _print_problems(self.prog, [("", message)])
        raise SystemExit(EXIT_USAGE)


_PAIR_JOB = re.compile(r"[A-Za-z0-9._-]+\+[A-Za-z0-9._-]+")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="gpu-cluster validate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--local", action="store_true", help="run the whole flow on this machine's CPUs (gloo)")
    ap.add_argument("--out", type=Path, help="run directory (shared storage in a cluster)")
    ap.add_argument("--nodes", type=int, default=2, help="--local: simulated nodes (default 2)")
    ap.add_argument("--procs-per-node", type=int, default=2, help="--local: ranks per simulated node (default 2)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds any phase may wait for a rank")
    ap.add_argument(
        "--strict",
        action="store_true",
        help="--local: hold the CPU nodes' matmul rates to each other as a GPU run does (a straggler is FAIL); "
        "default: a straggler is an observation, since a laptop's rates follow its other load",
    )
    sub = ap.add_subparsers(dest="cmd")
    from gpu_cluster.workloads.validate.run_flags import add_run_parser

    add_run_parser(sub)
    from gpu_cluster.workloads.validate.commands import add_parsers

    add_parsers(sub)
    from gpu_cluster.workloads.validate import rehearse

    rehearse.add_parser(sub)
    from gpu_cluster.workloads.validate.run_flags import add_pair_gate_parsers, add_pair_search_parser

    add_pair_search_parser(sub)
    add_pair_gate_parsers(sub)
    judge = sub.add_parser("judge", help="read the run directory, write report.json/.md and busbw.png")
    judge.add_argument(
        "--out", type=Path, dest="judge_out", help="run directory; with --nccl-tests, where to write the report"
    )
    judge.add_argument(
        "--nccl-tests", type=Path, nargs="+", metavar="FILE", help="judge nccl-tests/rccl-tests stdout instead"
    )
    judge.add_argument("--nodes", type=int, dest="judge_nodes", help="--nccl-tests: the node count the run used")
    judge.add_argument(
        "--op",
        dest="judge_op",
        default=None,
        help="--nccl-tests: the collective (all_reduce, all_gather, alltoall, ...), when the file does not name it",
    )
    judge.add_argument("--instance-type", type=judge_instance_type)
    judge.add_argument("--expect-nodes", default="", help="comma-separated node names that should have reported")
    judge.add_argument("--drain", action="store_true", help="drain (Slurm) or taint (Kubernetes) the failed nodes")
    judge.add_argument("--cpu", action="store_true", help="the run was on CPU: compare nodes, apply no floors")
    judge.add_argument(
        "--strict", action="store_true", help="with --cpu: a matmul straggler is FAIL (default: an observation)"
    )
    judge.add_argument("--started", type=float, default=0.0, help="epoch seconds the run began (for the duration)")
    judge.add_argument(
        "--cluster", default="", help="the cluster's name, the metrics' cluster label (default: the stack's or 'local')"
    )
    judge.add_argument(
        "--metrics-dir",
        type=Path,
        default=None,
        help="also write the metrics file here: the node exporter's textfile directory on Slurm stacks",
    )
    judge.add_argument(
        "--metrics-push",
        default=None,
        metavar="URL",
        help="also push the metrics to this Pushgateway (the Kubernetes stacks' in-cluster one)",
    )
    judge.add_argument(
        "--print-archive",
        action="store_true",
        help="print the report files as an archive on stdout (how a pod's report leaves it)",
    )
    diff.add_subparser(sub)
    return ap


def _bad_timeout(value: float) -> bool:
    return not (value > 0 and math.isfinite(value))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # argparse's float() takes nan, inf and negatives; each would end a phase at once or never.
    bad = Problems()
    for flag, value in (
        ("--timeout", args.timeout),
        ("run --timeout", getattr(args, "run_timeout", 1.0)),
        ("run --pair-timeout", getattr(args, "pair_timeout", 1.0)),
    ):
        if _bad_timeout(value):
            bad.add(flag, f"{value}", allowed="a finite number of seconds > 0")
    if bad:
        _print_problems("validate", bad)
        return EXIT_USAGE
    if args.cmd in ("render", "submit", "status"):
        from gpu_cluster.workloads.validate.commands import dispatch

        return dispatch(args)
    if args.cmd == "pair-search":
        from gpu_cluster.workloads.validate import pair_jobs

        return pair_jobs.main(args, [n for n in args.search_nodes.split(",") if n] or _slurm_nodes())
    if args.cmd == "pair-gate":
        from gpu_cluster.workloads.validate import pair_jobs

        return pair_jobs.gate_main(args)
    if args.cmd == "record-pairs":
        from gpu_cluster.workloads.validate import pair_jobs

        try:
            pair_jobs.record(args.record_out, args.record_result)
        except (OSError, ValueError) as exc:
            print(f"validate record-pairs: --result: {exc}", file=sys.stderr)
            return 3
        return 0
    if args.cmd == "rehearse":
        from gpu_cluster.workloads.validate import rehearse

        return rehearse.run(args)
    if args.cmd == "run":
        from gpu_cluster.workloads.validate.run import run_phase
        from gpu_cluster.workloads.validate.run_config import RunConfig

        for name in ("iters", "warmup"):
            if getattr(args, name) < 1 and not (name == "warmup" and args.warmup == 0):
                print(f"validate: --{name} {getattr(args, name)} must be at least 1", file=sys.stderr)
                return 3
        if args.pair_job and (args.phase != "pairs" or not _PAIR_JOB.fullmatch(args.pair_job)):
            print(
                f"validate: --pair-job {args.pair_job!r}: allowed only with --phase pairs, as two node names "
                "joined by '+' (letters, digits, '.', '_', '-')",
                file=sys.stderr,
            )
            return 3
        cfg = RunConfig(
            out_dir=args.run_out,
            pair_job=args.pair_job,
            phase=args.phase,
            instance_type=args.instance_type,
            multi_max_bytes=args.multi_max,
            single_max_bytes=args.single_max,
            pair_bytes=args.pair_size,
            iters=args.iters,
            warmup=args.warmup,
            pairwise=args.pairwise,
            timeout_s=args.run_timeout,
            pair_timeout_s=args.pair_timeout,
            pairing=args.pairing,
            storage_bytes=args.storage_size,
            ckpt_bytes=args.ckpt_size,
            storage_expect_gbps=args.storage_expect_gbps,
            sweep_min_bytes=args.sweep_min,
        )
        return run_phase(cfg)
    if args.cmd == "diff":
        return diff.run(args)
    if args.cmd == "judge" and args.nccl_tests:
        from gpu_cluster.workloads.validate import nccltests

        return nccltests.main(args.nccl_tests, args.instance_type, args.judge_nodes, args.judge_out, args.judge_op)
    if args.cmd == "judge" and args.judge_out is None:
        print("validate judge: --out DIR (the run directory) is required", file=sys.stderr)
        return 3
    if args.cmd == "judge" and not args.judge_out.is_dir():
        # The run directory is read, never made: a typo must not create an empty one and judge it.
        print(
            f"validate judge: --out {args.judge_out}: no such run directory (allowed: the directory a run wrote)",
            file=sys.stderr,
        )
        return 3
    if args.cmd == "judge":
        expect = [n for n in args.expect_nodes.split(",") if n] or _slurm_nodes()
        code = judge_and_report(
            args.judge_out,
            args.instance_type,
            expect,
            args.drain,
            args.cpu,
            time.time() - args.started if args.started else 0.0,
            strict=args.strict,
            cluster=args.cluster,
            metrics_dir=args.metrics_dir,
            metrics_push=args.metrics_push,
        )
        if args.print_archive:
            from gpu_cluster.workloads.validate import archive

            archive.emit(args.judge_out, sys.stdout)
        return code
    if args.local:
        return run_local(
            args.out or Path("out/validate-local"), args.nodes, args.procs_per_node, args.timeout, strict=args.strict
        )
    build_parser().print_help(sys.stderr)
    return 3


def _slurm_nodes() -> list[str]:
    """Inside a Slurm job, the nodes it was given: each should have reported."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
    if not nodelist:
        return []
    try:
        proc = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return proc.stdout.split() if proc.returncode == 0 else []


def judge_and_report(
    out: Path,
    instance_type: str | None,
    expect_nodes: list[str],
    drain: bool,
    cpu: bool,
    duration_s: float,
    strict: bool = False,
    *,
    cluster: str = "",
    metrics_dir: Path | None = None,
    metrics_push: str | None = None,
) -> int:
    from gpu_cluster.workloads.validate import metrics_export, report
    from gpu_cluster.workloads.validate.drain import drain as drain_nodes
    from gpu_cluster.workloads.validate.judge import judge

    # The report must be writable before anything is judged (or drained): a read-only --out is one
    # line and exit 3, not a traceback after the nodes were drained.
    if why := unwritable(out):
        print(f"validate judge: --out {out}: {why}", file=sys.stderr)
        return 3
    try:
        rep = judge(
            out,
            instance_type=instance_type,
            local=cpu,
            expected_nodes=expect_nodes,
            duration_s=duration_s,
            strict=strict,
        )
    except (ValueError, TypeError, AttributeError, KeyError, IndexError) as exc:
        # A run file that parses but is not what a phase writes (a field of the wrong type, a list
        # where a mapping belongs): name the directory and what is allowed.
        print(
            f"validate judge: --out {out}: a run file is malformed ({type(exc).__name__}: {exc}) "
            "(allowed: the phase-*.json and status/*.json files a run writes)",
            file=sys.stderr,
        )
        return 3
    failed = [n.node for n in rep.nodes if n.verdict == Verdict.FAIL]
    if drain and failed:
        for res in drain_nodes(
            failed,
            f"gpu-cluster validate {out.name}: "
            + "; ".join(next(n.reasons for n in rep.nodes if n.node == f)[0] for f in failed),
        ):
            if res.ok:
                rep.drained.append(res.node)
            else:
                rep.errors.append(f"could not drain {res.node}: {res.message}")
    try:
        written = report.write(rep, out)
    except OSError as exc:
        print(f"validate judge: --out {out}: cannot write the report: {exc}", file=sys.stderr)
        return 3
    print(report.render_markdown(rep))
    print(f"report: {', '.join(str(p) for p in written.values())}")
    # The figures as metrics (gpu_cluster.workloads.validate.metrics_export): beside the report, and
    # where the node exporter serves them on a Slurm stack. A textfile directory this node lacks (a
    # cluster built before it was added) costs the publication, never the verdict.
    label = cluster or ("local" if cpu else "unnamed")
    prom = metrics_export.render_report(rep, cluster=label, run=out.name, judged_at=time.time())
    print(f"metrics: {metrics_export.write_textfile(prom, out)}")
    if metrics_dir is not None:
        try:
            print(f"metrics published: {metrics_export.write_textfile(prom, metrics_dir)}")
        except OSError as exc:
            print(f"metrics not published to {metrics_dir}: {exc.strerror or exc}", file=sys.stderr)
    if metrics_push:
        # One group per run: a later run's push never replaces this one's series.
        try:
            metrics_export.push(prom, metrics_push, metrics_export.VALIDATION_JOB, {"cluster": label, "run": out.name})
            print(f"metrics published: {metrics_push}")
        except (OSError, ValueError) as exc:
            print(f"metrics not published to {metrics_push}: {exc}", file=sys.stderr)
    return int(rep.verdict)


def unwritable(out: Path) -> str:
    """Why the report cannot be written into ``out`` ('' when it can): tried, not guessed from the
    mode bits (root passes every access check, and a read-only mount fails them all)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".gpuc-write-probe-", dir=out)
    except OSError as exc:
        return f"cannot write the report there ({exc.strerror or exc}; allowed: a directory this user can write)"
    os.close(fd)
    os.unlink(probe)
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_agents(
    names: Sequence[str], procs: int, module_args: list[str], env_extra: dict[str, str], log_dir: Path, label: str
) -> list[tuple[subprocess.Popen[bytes], Any]]:
    """Start one torchrun agent per simulated node (named ``names``), as srun does on a cluster."""
    port = _free_port()
    procs_list = []
    log_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        env = dict(os.environ, GPUC_NODE_NAME=name, GPUC_FORCE_CPU="1", **env_extra)
        # One thread a simulated node unless the caller says otherwise: torchrun sets this only for
        # more than one process a node, and N nodes of a core-count's threads each on a small host
        # wait on each other's spinning threads, which reads as a straggler that is not there.
        env.setdefault("OMP_NUM_THREADS", "1")
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nnodes={len(names)}",
            f"--nproc-per-node={procs}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}",
            f"--rdzv-id={label}-{port}",
            "--max-restarts=0",
            *module_args,
        ]
        log = open(log_dir / f"{label}-{name}.log", "w", encoding="utf-8")
        # Its own session, so a kill past the deadline reaches the agent's workers too.
        procs_list.append(
            (subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True), log)
        )
    return procs_list


def _wait_agents(
    procs_list: list[tuple[subprocess.Popen[bytes], Any]],
    timeout: float,
    label: str,
    heartbeat: Heartbeat | None = None,
) -> list[int]:
    deadline = time.monotonic() + timeout
    codes = []
    beat = heartbeat or Heartbeat(label)
    for p, log in procs_list:
        while True:
            left = deadline - time.monotonic()
            try:
                # Waits of at most one beat, so the heartbeat speaks while the phase works.
                codes.append(p.wait(timeout=max(0.1, min(left, beat.every_s))))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() < deadline:
                    beat.tick()
                    continue
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                codes.append(p.wait())
                break
        log.close()
    return codes


def _torchrun_nodes(
    nodes: int,
    procs: int,
    module_args: list[str],
    env_extra: dict[str, str],
    timeout: float,
    log_dir: Path,
    label: str,
    heartbeat: Heartbeat | None = None,
) -> list[int]:
    """Start one torchrun agent per simulated node, as srun does on a cluster; return their exit codes."""
    names = [f"local-{i + 1}" for i in range(nodes)]
    return _wait_agents(_start_agents(names, procs, module_args, env_extra, log_dir, label), timeout, label, heartbeat)


def _phase_deadline(timeout: float) -> float:
    """How long the local harness lets one phase's agents run: the phase's own bounds (arrival,
    watchdog, group timeout: each a multiple of ``timeout``) plus torchrun's start-up, so a
    phase that hangs ends by its own watchdog, which names what hung, not by this kill."""
    return 3 * timeout + 30.0


def run_local(out: Path, nodes: int, procs: int, timeout: float, strict: bool = False) -> int:
    """The pipeline a cluster runs, on this machine: two torchrun agents stand for two nodes."""
    problems = []
    if not 1 <= nodes <= 8:
        problems.append(f"--nodes {nodes}: allowed 1..8")
    if not 1 <= procs <= 8:
        problems.append(f"--procs-per-node {procs}: allowed 1..8")
    # Before the phases, not after their minutes: the run directory must be one this user can write.
    if why := output_dir_problem(out):
        problems.append(f"--out: {why}")
    if problems:
        print("validate: " + "; ".join(problems), file=sys.stderr)
        return 3
    started = time.time()
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob("phase-*.json"), *out.glob("status/*.json"), *out.glob("agents/*.log"), out / "ddp.json"]:
        stale.unlink(missing_ok=True)
    # One file per step and simulated node, <step>-<node>.log: where a cluster keeps its agents' logs too.
    logs = out / "agents"
    steps = 6
    print(
        f"validate --local: {nodes} simulated node(s) x {procs} CPU rank(s), gloo; floors are not applied on CPU"
        + (
            "; matmul stragglers fail (--strict)" if strict else "; matmul stragglers are observations (--strict: FAIL)"
        ),
        flush=True,
    )

    def phase(name: str, *extra: str, env: dict[str, str] | None = None) -> None:
        run = [
            "-m",
            "gpu_cluster.workloads.validate",
            "run",
            "--out",
            str(out),
            "--phase",
            name,
            "--timeout",
            str(timeout),
        ]
        beat = Heartbeat(f"phase {name}", status_dir=out / "status", phase=name)
        codes = _torchrun_nodes(nodes, procs, [*run, *extra], env or {}, _phase_deadline(timeout), logs, name, beat)
        print(f"      exit codes per node: {codes}", flush=True)

    short = ("--iters", "5", "--warmup", "2")
    print(f"[1/{steps}] health, single-node and multi-node collectives ...", flush=True)
    phase("main", *short)
    from gpu_cluster.workloads.validate import pair_jobs, pairs

    why_not = pairs.not_started(out, nodes * procs, [f"local-{i + 1}" for i in range(nodes)])
    if (out / "phase-main.json").exists():
        print(f"[2/{steps}] pairwise search: not needed (the main phase finished)", flush=True)
    elif why_not:
        # A node that never started is the finding; pairing it would only wait for it again.
        print(f"[2/{steps}] pairwise search: not run: {why_not}", flush=True)
        (out / "phase-pairs.json").write_text(json.dumps({"phase": "pairs", "skipped": why_not}), encoding="utf-8")
    else:
        print(
            f"[2/{steps}] pairwise search: the main phase left no results (a collective hung); "
            "one job per pair, each suspect then with a known-good node ...",
            flush=True,
        )

        def run_round(rnd: list[tuple[str, str]]) -> None:
            started = []
            for a, b in rnd:
                run = ["-m", "gpu_cluster.workloads.validate", "run", "--out", str(out), "--phase", "pairs"]
                run += [*short, "--timeout", str(timeout), "--pair-timeout", str(timeout), "--pair-job", f"{a}+{b}"]
                started.append((a, b, _start_agents([a, b], procs, run, {}, logs, f"pairs-{a}+{b}")))
            for a, b, agents in started:
                codes = _wait_agents(agents, _phase_deadline(timeout), f"pair {a}+{b}")
                print(f"      pair {a}+{b}: exit codes {codes}", flush=True)

        found = pair_jobs.search(
            out,
            [f"local-{i + 1}" for i in range(nodes)],
            run_round,
            backend="gloo",
            floor=None,
            floor_fail=None,
            op="all_reduce",
            size=4 << 20,
        )
        named = ", ".join(found["bad"]) or "no node"
        links = ", ".join(f"{a}+{b}" for a, b, _ in found["bad_links"])
        print(f"      named: {named}" + (f"; link(s): {links}" if links else ""), flush=True)
    print(
        f"[3/{steps}] storage: every rank writes and reads the run directory at once, then a DCP checkpoint ...",
        flush=True,
    )
    phase("storage")
    print(f"[4/{steps}] fabric-only pass (NCCL P2P and SHM off; on gloo the same path) ...", flush=True)
    phase("fabric", *short, env=dict(FABRIC_ONLY_ENV))
    print(f"[5/{steps}] short DDP run ...", flush=True)
    ddp_code = _local_ddp(out, nodes, procs, timeout)
    print(f"      exit code: {ddp_code}", flush=True)
    print(f"[6/{steps}] judging ...", flush=True)
    return judge_and_report(
        out, None, [f"local-{i + 1}" for i in range(nodes)], False, True, time.time() - started, strict=strict
    )


def _local_ddp(out: Path, nodes: int, procs: int, timeout: float) -> int:
    from gpu_cluster.workloads.launch.validation_args import ddp_args, synthetic_data_args

    data = out / "data"
    prep = subprocess.run(
        [sys.executable, "-m", "gpu_cluster.workloads.train.data", *synthetic_data_args(data)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if prep.returncode != 0:
        print(f"      could not write synthetic shards: {prep.stderr.strip()[-300:]}", flush=True)
        return prep.returncode
    codes = _torchrun_nodes(
        nodes,
        procs,
        ["-m", "gpu_cluster.workloads.train", *ddp_args(data, out)],
        {},
        _phase_deadline(timeout),
        out / "agents",
        "ddp",
    )
    return max(codes)


if __name__ == "__main__":
    from gpu_cluster.workloads.runtime.device import exit_process

    exit_process(main())
