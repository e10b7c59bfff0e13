"""The pairwise search after a hang, one job per pair.

A collective that hung ends every process of its job (our watchdog, or the backend's teardown at
the group's timeout), so the search cannot go on inside that job: the launcher runs each pair as
a job of its own, as Google's cluster-health-scanner does (GoogleCloudPlatform/cluster-health-scanner
at 81c525d8, 2025-10-31: ``deploy/slurm/cluster-validation.sh`` submits ``sbatch -N 2 -w a,b`` per
pair; ``src/health_runner/nccl_runner.py``'s ``health_check_with_node_pairs`` creates one job per
pair, and its second pass pairs each suspect with a node that passed). A pair that hangs again
ends only its own job. The search's logic is :mod:`gpu_cluster.workloads.validate.isolate`'s; this module runs the rounds and
reads each pair's result back from the run directory (``phase-pairs-A+B.json``, written by the
pair's job, none when it hung or failed).

Who runs a round: the local harness (two torchrun agents per pair); on Slurm :func:`main`, the
``validate pair-search`` step of the batch script, on the batch host, one ``srun`` step per pair
(:func:`slurm_round`); on Kubernetes one JobSet per pair
(:func:`gpu_cluster.workloads.launch.validation.pair_jobset`), which ``submit`` creates from the user's
kubeconfig (:mod:`gpu_cluster.workloads.validate.kube_pairs`) rather than a driver pod (the job's pods carry
no API token, ``automountServiceAccountToken: false``; a driver pod would need a ServiceAccount
allowed to create JobSets, as cluster-health-scanner's health runner has: its ClusterRole may
create and delete jobs, pods, secrets and cluster roles, ``deploy/helm/health_runner/templates/
health_runner.yaml`` at 81c525d8). The JobSet's own ``pairs`` step is a gate (:func:`gate`) that
ends it after a hang, so the pairs can have its nodes.
"""

from __future__ import annotations

import base64
import json
import math
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from gpu_cluster.workloads.health import hang
from gpu_cluster.workloads.launch import common
from gpu_cluster.workloads.validate import isolate, pairs
from gpu_cluster.workloads.validate.run_config import RunConfig

RunRound = Callable[[list[isolate.Pair]], "Mapping[isolate.Pair, float | None] | None"]
"""Run every pair of a round as its own job, at once, and return when all have ended: with each
pair's figure where the runner read them itself (Kubernetes: from the pair's pod log), or None
when the pairs' own result files in the run directory hold them (Slurm, the local harness)."""


def tag(a: str, b: str) -> str:
    return f"{a}+{b}"


def pair_value(out: Path, a: str, b: str) -> float | None:
    """The pair's figure from its own job's result; None when the job left none (it hung or failed)."""
    try:
        doc = json.loads((out / f"phase-pairs-{tag(a, b)}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for row in (doc.get("pairs") or {}).get("first", []) if isinstance(doc, dict) else []:
        if len(row) == 3 and {row[0], row[1]} == {a, b}:
            return None if row[2] is None else float(row[2])
    return None


def _clear(out: Path, a: str, b: str) -> None:
    """A rerun in the same directory must not read an earlier run's result for the pair."""
    (out / f"phase-pairs-{tag(a, b)}.json").unlink(missing_ok=True)
    for p in (out / "status").glob(f"pairs-{tag(a, b)}-*.json"):
        p.unlink(missing_ok=True)


def search(
    out: Path,
    nodes: Sequence[str],
    run_round: RunRound,
    *,
    backend: str,
    floor: float | None,
    floor_fail: float | None,
    op: str,
    size: int,
    pairing: str = "topology",
) -> dict[str, Any]:
    """Run the search with one job per pair and keep its result where the judge reads it
    (``phase-pairs.json``, the shape the in-job search writes, with ``jobs: per-pair``)."""

    def measure(rnd: list[isolate.Pair]) -> dict[isolate.Pair, float | None]:
        for a, b in rnd:
            _clear(out, a, b)
        got = run_round(rnd)
        if got is not None:
            return {p: got.get(p) for p in rnd}
        return {(a, b): pair_value(out, a, b) for a, b in rnd}

    iso = isolate.isolate(isolate.order(list(nodes), pairing, seed=len(nodes)), measure, floor)
    result = pairs.result_json(iso, size=size, op=op, pairing=pairing, floor_fail=floor_fail)
    result["jobs"] = "per-pair"
    doc = {"phase": "pairs", "backend": backend, "nodes": {n: {"ranks": []} for n in nodes}, "pairs": result}
    tmp = out / f".phase-pairs.json.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    os.replace(tmp, out / "phase-pairs.json")
    return result


# ---------------------------------------------------------------------------------------------
# On Slurm: the search's driver, run once on the batch host inside the validation job, each pair
# one job step on its two nodes (``srun -N2 -w A,B``), the pairs of a round at once.

# srun's --time "applies to job and step allocations", takes "minutes" and rounds seconds up to
# the next minute (srun(1) of slurm-client 22.05.8, the Debian package the tests run: -t, --time).
# --whole: a step gets every CPU of its nodes, as the job's other steps do (workloads/launch/sbatch.py).
# --kill-on-bad-exit=0: the survivor of a pair records that its peer was lost, as in the main step.


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmPairs:
    """How the driver starts each pair's step."""

    out: Path
    python: str
    ranks_per_node: int
    rdzv_port: int
    """The job's rendezvous port; pair i of a round meets on ``rdzv_port + 1 + i`` on its first node."""
    run_args: tuple[str, ...]
    """The arguments every ``validate run`` phase of the job takes (instance type, sizes, timeouts)."""
    time_limit_min: int
    """Each pair's step time limit (srun ``--time``): past it Slurm ends the step, whatever hung."""
    job_id: str = "pairs"
    addr: Callable[[str], str] = field(default=lambda node: node)
    """A node's address (its NodeAddr: a Slurm name need not resolve)."""
    srun: str = "srun"


def step_time_limit_min(cfg: RunConfig, join_timeout_s: float) -> int:
    """A pair step's limit: the rendezvous, the group's setup, then every call of the pair under
    the pair's own limit (warm-up, timed loop, check: the pairs phase's side-group bound), and a
    minute to start; srun counts whole minutes."""
    calls = cfg.pair_timeout_s * (cfg.iters + cfg.warmup + 4) + hang.grace_s(cfg.pair_timeout_s)
    total = join_timeout_s + hang.group_timeout_s(cfg.timeout_s) + calls + 60.0
    return max(1, math.ceil(total / 60.0))


def srun_argv(p: SlurmPairs, a: str, b: str, index: int) -> list[str]:
    """One pair's step: two nodes, one torchrun each, meeting on ``a``'s address."""
    port = p.rdzv_port + 1 + index
    words = common.torchrun_argv(
        python=p.python,
        nnodes="2",
        nproc_per_node=p.ranks_per_node,
        endpoint=shlex.quote(f"{p.addr(a)}:{port}"),
        rdzv_id=shlex.quote(f"{p.job_id}-pair-{a}-{b}"),
        # Both nodes are up (they ran the main phase): a pair that cannot meet within the run's
        # timeout is a finding, not a slow start.
        join_timeout_s=max(1, math.ceil(_run_cfg(p).timeout_s)),
        module="gpu_cluster.workloads.validate",
        module_args=("run", "--out", str(p.out), *p.run_args, "--phase", "pairs", "--pair-job", tag(a, b)),
    )
    return [
        p.srun,
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        f"--nodelist={a},{b}",
        f"--job-name=pairs-{tag(a, b)}",
        f"--time={p.time_limit_min}",
        "--whole",
        "--kill-on-bad-exit=0",
        *shlex.split(" ".join(words)),
    ]


def _run_cfg(p: SlurmPairs) -> RunConfig:
    return run_config(p.out, p.run_args)


def run_config(out: Path, run_args: Sequence[str]) -> RunConfig:
    """The pairs phase's configuration as each pair's ranks will parse it from ``run_args``."""
    import argparse

    from gpu_cluster.workloads.validate.run_flags import add_run_parser

    parser = argparse.ArgumentParser(prog="validate pair-search")
    add_run_parser(parser.add_subparsers(dest="cmd"))
    ns = parser.parse_args(["run", "--out", str(out), *run_args, "--phase", "pairs"])
    return RunConfig(
        out_dir=out,
        phase="pairs",
        instance_type=ns.instance_type,
        pair_bytes=ns.pair_size,
        iters=ns.iters,
        warmup=ns.warmup,
        timeout_s=ns.run_timeout,
        pair_timeout_s=ns.pair_timeout,
        pairing=ns.pairing,
    )


def slurm_round(p: SlurmPairs, say: Callable[[str], None] = print) -> RunRound:
    """Every pair of a round as its own step, started at once (the pairs are disjoint), waited for
    together; each step's output goes to ``logs/pairs-A+B.log`` in the run directory."""

    def run_round(rnd: list[isolate.Pair]) -> None:
        logs = p.out / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        started = []
        for i, (a, b) in enumerate(rnd):
            argv = srun_argv(p, a, b, i)
            log = open(logs / f"pairs-{tag(a, b)}.log", "w", encoding="utf-8")  # noqa: SIM115 - closed below
            say(f"pair {tag(a, b)}: {shlex.join(argv[:9])} ...")
            started.append((a, b, log, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)))
        # Slurm ends a step at its limit (SIGTERM, then SIGKILL after KillWait); this wait is
        # the driver's own bound past that, should srun itself never return.
        backstop = p.time_limit_min * 60.0 + 120.0
        for a, b, log, proc in started:
            try:
                code = proc.wait(timeout=backstop)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            log.close()
            got = pair_value(p.out, a, b)
            say(f"pair {tag(a, b)}: step exit {code}; " + ("no result (hung or failed)" if got is None else f"{got:g}"))

    return run_round


def drive(
    out: Path,
    nodes: Sequence[str],
    run_args: Sequence[str],
    run_round: RunRound,
    *,
    ranks_per_node: int,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """The pairs step of a scheduler job, on the batch host: nothing when the main phase
    finished (it ran the search itself when it was wanted), a recorded skip after a node that
    never started, else the search one job per pair. Returns what it wrote to phase-pairs.json."""

    if (out / "phase-main.json").exists():
        say("validate[pairs]: not needed: the main phase finished")
        return {}
    why = pairs.not_started(out, len(nodes) * ranks_per_node, nodes)
    if why:
        say(f"validate[pairs]: not run: {why}")
        doc = {"phase": "pairs", "skipped": why}
        (out / "phase-pairs.json").write_text(json.dumps(doc), encoding="utf-8")
        return doc
    if len(nodes) < 2:
        say("validate[pairs]: not run: one node, nothing to pair")
        return {}
    return search_with(out, nodes, run_args, run_round, say=say)


def search_with(
    out: Path,
    nodes: Sequence[str],
    run_args: Sequence[str],
    run_round: RunRound,
    *,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """The search at the floors, op and size the run's own arguments give (the pair jobs parse the
    same), its result kept in ``out/phase-pairs.json``."""
    from gpu_cluster.components.bandwidth import FLOOR_MESSAGE_BYTES

    cfg = run_config(out, run_args)
    backend = "nccl" if cfg.instance_type else "gloo"
    size = cfg.pair_bytes or (FLOOR_MESSAGE_BYTES if cfg.instance_type else 4 << 20)
    say(
        f"validate[pairs]: the main phase left no results (a collective hung): {len(nodes)} node(s), "
        "one job per pair, each suspect then with a known-good node"
    )
    found = search(
        out,
        nodes,
        run_round,
        backend=backend,
        floor=pairs.pair_floor(cfg, backend),
        floor_fail=pairs.pair_floors(cfg, backend)[1],
        op=pairs.pair_op(cfg),
        size=size,
        pairing=cfg.pairing,
    )
    named = ", ".join(found["bad"]) or "no node"
    links = ", ".join(f"{a}+{b}" for a, b, _ in found["bad_links"])
    say(f"validate[pairs]: named: {named}" + (f"; link(s): {links}" if links else ""))
    return found


# ---------------------------------------------------------------------------------------------
# On Kubernetes: the JobSet's pairs gate, on every pod, after the main phase. A JobSet holds every
# node's GPUs while it runs and its pods cannot create jobs (no API token): after a hang, every pod
# ends the JobSet here and ``submit`` runs one JobSet per pair (gpu_cluster.workloads.validate.kube_pairs).

GATE_FILE = "pairs-gate.json"
NEEDED = "gpuc-pairs-needed:"
"""Pod 0's log line, then the decision as JSON, that tells ``submit`` to run the pairs."""
RESULT = "gpuc-pair-result:"
"""A pair job's log line, then {"pair": "A+B", "value": busbw or null}: how the figure leaves the pod."""


def _write(path: Path, doc: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    os.replace(tmp, path)


def gate(
    out: Path,
    nodes: Sequence[str],
    ranks_per_node: int,
    index: int,
    *,
    wait_s: float,
    say: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Pod 0 decides whether the pairs are needed and writes the decision to GATE_FILE; the other
    pods wait for it (at most ``wait_s``), so every pod ends the JobSet at the same step or none
    does. The pairs exit status ends the pod's script with 0 (the JobSet completes)."""
    from gpu_cluster.workloads.launch.validation import PAIRS_NEEDED_EXIT

    path = out / GATE_FILE
    if index == 0:
        if (out / "phase-main.json").exists():
            decision: dict[str, Any] = {"needed": False, "why": "the main phase finished"}
        elif why := pairs.not_started(out, len(nodes) * ranks_per_node, nodes):
            _write(out / "phase-pairs.json", {"phase": "pairs", "skipped": why})
            decision = {"needed": False, "why": why}
        elif len(nodes) < 2:
            decision = {"needed": False, "why": "one node, nothing to pair"}
        else:
            decision = {
                "needed": True,
                "why": "the main phase left no results (a collective hung)",
                "nodes": list(nodes),
            }
        _write(path, decision)
    else:
        deadline = clock() + wait_s
        while not path.is_file():
            if clock() >= deadline:
                say(f"validate[pairs]: pod 0 wrote no decision ({path}) within {wait_s:g} s; going on")
                return 0
            sleep(2.0)
        decision = json.loads(path.read_text(encoding="utf-8"))
    if decision.get("needed"):
        if index == 0:
            say(NEEDED + json.dumps(decision))
        say(
            "validate[pairs]: the main phase left no results (a collective hung): this JobSet ends here and "
            "gives its nodes back; `validate submit` runs one JobSet per pair, then the judge"
        )
        return PAIRS_NEEDED_EXIT
    say(f"validate[pairs]: not needed: {decision.get('why')}")
    return 0


def gate_main(args: Any) -> int:
    """``validate pair-gate``: 0 go on, PAIRS_NEEDED_EXIT end the JobSet here, 3 bad arguments."""
    nodes = [n for n in str(args.gate_nodes).split(",") if n]
    index_text = os.environ.get("JOB_COMPLETION_INDEX", "0").strip()
    problems = []
    if not Path(args.gate_out).is_dir():
        problems.append(f"--out {args.gate_out}: no such run directory (allowed: the directory the main phase wrote)")
    if not nodes:
        problems.append("--nodes: none given (allowed: the JobSet's pod host names, comma-separated)")
    if args.ranks_per_node < 1:
        problems.append(f"--ranks-per-node {args.ranks_per_node}: allowed 1 or more")
    if not index_text.isdigit():
        problems.append(f"JOB_COMPLETION_INDEX={index_text!r}: allowed a pod index (the pod of an Indexed Job)")
    for p in problems:
        print(f"validate pair-gate: {p}", file=sys.stderr)
    if problems:
        return 3
    return gate(Path(args.gate_out), nodes, args.ranks_per_node, int(index_text), wait_s=args.gate_wait)


def record(out: Path, encoded: str) -> dict[str, Any]:
    """``validate record-pairs``: the search ``submit`` ran, written where the judge reads it."""
    doc = json.loads(base64.b64decode(encoded.encode("ascii")).decode("utf-8"))
    if not isinstance(doc, dict) or doc.get("phase") != "pairs" or not isinstance(doc.get("pairs"), dict):
        raise ValueError("not a pairs phase result (allowed: what pair_jobs.search writes)")
    _write(out / "phase-pairs.json", doc)
    return doc


def main(args: Any, nodes: Sequence[str]) -> int:
    """``validate pair-search``: exit 0 once the search has run or was not needed (the judge
    decides), 3 when it could not run (arguments, no nodes)."""
    from gpu_cluster.workloads.launch import slurm_nodes

    out: Path = args.search_out
    run_args = [a for a in args.run_args if a != "--"]
    problems = []
    if not out.is_dir():
        problems.append(f"--out {out}: no such run directory (allowed: the directory the job's main phase wrote)")
    if args.ranks_per_node < 1:
        problems.append(f"--ranks-per-node {args.ranks_per_node}: allowed 1 or more")
    # Pair i of a round meets on rdzv_port + 1 + i; a round holds at most len(nodes) // 2 pairs.
    top = 65535 - max(1, len(nodes) // 2)
    if not 1 <= args.rdzv_port <= top:
        problems.append(f"--rdzv-port {args.rdzv_port}: allowed 1..{top} (the pairs of a round use the ports after it)")
    if args.pair_time_limit is not None and args.pair_time_limit < 1:
        problems.append(f"--pair-time-limit {args.pair_time_limit}: allowed 1 or more minutes")
    if not nodes:
        problems.append("--nodes: none given and SLURM_JOB_NODELIST names none (allowed: a,b,... or run in a job)")
    try:
        cfg = run_config(out, run_args)
    except SystemExit:
        problems.append(f"run arguments {shlex.join(run_args)!r}: not what `validate run` takes (see its --help)")
    for p in problems:
        print(f"validate pair-search: {p}", file=sys.stderr)
    if problems:
        return 3

    def addr(node: str) -> str:
        try:
            return slurm_nodes.show(node).addr or node
        except (slurm_nodes.SlurmNodeError, OSError, subprocess.TimeoutExpired):
            return node

    sp = SlurmPairs(
        out=out,
        python=args.search_python,
        ranks_per_node=args.ranks_per_node,
        rdzv_port=args.rdzv_port,
        run_args=tuple(run_args),
        time_limit_min=args.pair_time_limit or step_time_limit_min(cfg, cfg.timeout_s),
        job_id=os.environ.get("SLURM_JOB_ID", "pairs"),
        addr=addr,
    )
    drive(out, nodes, run_args, slurm_round(sp), ranks_per_node=args.ranks_per_node)
    return 0
