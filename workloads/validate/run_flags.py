"""The flags of ``validate run`` (one phase, on every rank), shared by the command and by the
pairs driver, which reads the same arguments its pair jobs will be given."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def size(text: str) -> int:
    from gpu_cluster.workloads.runtime.sizes import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def instance_type(text: str) -> str:
    from gpu_cluster.components.catalog import CatalogError, load_catalog

    try:
        load_catalog().get(text)
    except CatalogError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def judge_instance_type(text: str) -> str:
    """``judge --instance-type``: every type the judge holds runs to, the judge-only ones too
    (``judge_types``: p4de.24xlarge, Standard_ND96asr_v4, ...), with the same error for one it lacks."""
    from gpu_cluster.components.catalog import CatalogError, load_catalog

    try:
        load_catalog().judge_type(text)
    except CatalogError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_run_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``run`` to ``sub`` (the subparsers of ``python -m gpu_cluster.workloads.validate``)."""
    run: argparse.ArgumentParser = sub.add_parser("run", help="one phase, on every rank under torchrun")
    run.add_argument("--out", type=Path, required=True, dest="run_out")
    run.add_argument("--phase", choices=("main", "fabric", "pairs", "storage"), default="main")
    run.add_argument("--storage-size", type=size, help="storage phase: bytes each rank writes and reads")
    run.add_argument("--ckpt-size", type=size, help="storage phase: checkpoint bytes per rank")
    run.add_argument(
        "--storage-expect-gbps",
        type=float,
        help="storage phase: the file system's provisioned throughput (stack outputs), GB/s",
    )
    run.add_argument("--instance-type", type=instance_type)
    run.add_argument("--multi-max", type=size, help="largest multi-node message (default 8G on GPU)")
    run.add_argument("--single-max", type=size, help="largest single-node message (default 8G on GPU)")
    run.add_argument("--pair-size", type=size, help="pairwise test message (default 8G on GPU)")
    run.add_argument("--sweep-min", type=size, help="smallest swept message (default 1M on GPU, 64K on CPU)")
    run.add_argument("--iters", type=int, default=20)
    run.add_argument("--warmup", type=int, default=5)
    run.add_argument("--pairwise", choices=("auto", "always", "never"), default="auto")
    run.add_argument(
        "--pair-timeout",
        type=float,
        default=120.0,
        help="seconds each pair's call may take: a pair that hangs makes both nodes suspects",
    )
    run.add_argument(
        "--pairing",
        choices=("topology", "random"),
        default="topology",
        help="topology: neighbours in the scheduler's node order; random: shuffled",
    )
    run.add_argument("--timeout", type=float, default=300.0, dest="run_timeout")
    run.add_argument(
        "--pair-job",
        default="",
        metavar="A+B",
        help="pairs phase: this job is the one pair A+B of a search run one job per pair (after a hang)",
    )
    return run


def add_pair_search_parser(sub: Any) -> None:
    """``pair-search``: the driver of :mod:`gpu_cluster.workloads.validate.pair_jobs` (imports no torch here)."""
    p = sub.add_parser(
        "pair-search",
        help="after a hang: the pairwise search one Slurm job step per pair (the batch host runs it)",
    )
    p.add_argument("--out", type=Path, required=True, dest="search_out", help="the job's run directory")
    p.add_argument(
        "--nodes",
        dest="search_nodes",
        default="",
        help="comma-separated nodes in the scheduler's order (default: the job's, from SLURM_JOB_NODELIST)",
    )
    p.add_argument("--python", dest="search_python", default="python3", help="the interpreter of the pair jobs")
    p.add_argument("--ranks-per-node", type=int, default=1, help="ranks per node (one per GPU)")
    p.add_argument("--rdzv-port", type=int, default=29500, help="the job's rendezvous port; pairs use the next ones")
    p.add_argument(
        "--pair-time-limit",
        type=int,
        help="minutes each pair's step may run (default: from the run's timeouts, iterations and warm-up)",
    )
    p.add_argument("run_args", nargs="*", help="after --: the arguments every `validate run` phase of the job takes")


def add_pair_gate_parsers(sub: Any) -> None:
    """``pair-gate`` (a JobSet's pairs step, on every pod) and ``record-pairs`` (the search submit
    ran, written into the run directory before the judge)."""
    g = sub.add_parser("pair-gate", help="after the main phase, on every pod of a JobSet: end it when pairs are needed")
    g.add_argument("--out", type=Path, required=True, dest="gate_out", help="the job's run directory")
    g.add_argument("--nodes", required=True, dest="gate_nodes", help="the JobSet's pod host names, comma-separated")
    g.add_argument("--ranks-per-node", type=int, default=1, help="ranks per pod (one per GPU)")
    g.add_argument(
        "--wait", type=float, default=900.0, dest="gate_wait", help="seconds a pod waits for pod 0's decision"
    )
    r = sub.add_parser("record-pairs", help="write the pairwise search submit ran (base64 JSON) into the run directory")
    r.add_argument("--out", type=Path, required=True, dest="record_out", help="the job's run directory")
    r.add_argument("--result", required=True, dest="record_result", help="phase-pairs.json as base64")
