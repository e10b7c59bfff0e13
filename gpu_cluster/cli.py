"""``gpu-cluster SUBCOMMAND [ARGS...]``: hands ``ARGS`` to the entry point the subcommand names.

Every subcommand keeps the flags of its module (``gpu-cluster train --help`` is
``python -m workloads.train --help``), so the two spellings stay interchangeable.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Subcommand:
    name: str
    module: str
    """The module whose ``main`` runs it; also what ``python -m`` takes."""
    summary: str
    under_torchrun: bool = False
    """Runs on every rank: ``torchrun ... -m MODULE`` on a cluster, or one process here."""
    entry: str = "main"


SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand("plan", "gpu_cluster.plan", "what a stack will create, cost and must achieve (offline, no account)"),
    Subcommand("spec", "components.spec", "check a stack file alone and print what it describes"),
    Subcommand(
        "schema",
        "components.provider",
        "the package schema, as `pulumi package get-schema` prints it",
        entry="schema_main",
    ),
    Subcommand("preflight", "components.preflight", "ask the cloud account what the offline checks cannot know"),
    Subcommand("pin", "gpu_cluster.pin", "pin every image the stack pulls by tag to its registry's digest"),
    Subcommand(
        "validate",
        "workloads.validate",
        "prove a cluster: submit | render | rehearse | status | run | judge | diff | --local",
    ),
    Subcommand(
        "heal",
        "gpu_cluster.heal",
        "replace the nodes the last validation named, revalidate, return them (dry run unless --apply)",
    ),
    Subcommand("collectives", "workloads.collectives", "the nccl-tests-style collectives benchmark", True),
    Subcommand("node-gate", "workloads.health.node_gate", "one node's GPU health counters, DCGM and a sustained GEMM"),
    Subcommand(
        "gpu-health", "workloads.health.gpu", "per-GPU matmul rate and memory bandwidth against the catalog", True
    ),
    Subcommand("fabric-check", "workloads.health.fabric", "is the fabric where NCCL will look for it", True),
    Subcommand("train", "workloads.train", "data-parallel training (DDP), the bundled GPT or your model", True),
    Subcommand("data", "workloads.train.data", "write or check token shards"),
    Subcommand(
        "parallel", "workloads.parallel", "model-parallel training: FSDP2, tensor parallel, 2-D, pipeline", True
    ),
    Subcommand(
        "tasks", "workloads.tasks", "one job over many independent inputs, self-balancing (the task fleet)", True
    ),
    Subcommand("infer", "workloads.tasks.infer", "batch inference of your model over your dataset as a fleet", True),
)
_MODULE_OF = {
    # ``python -m`` of a package runs its __main__; the function lives in the job's module.
    "workloads.collectives": "workloads.collectives.bench",
    "workloads.train": "workloads.train.ddp",
    "workloads.parallel": "workloads.parallel.run",
    "workloads.tasks": "workloads.tasks.shard",
    "workloads.validate": "workloads.validate.__main__",
    "components.preflight": "components.preflight.__main__",
    "gpu_cluster.heal": "gpu_cluster.heal.cli",
}


def usage() -> str:
    width = max(len(s.name) for s in SUBCOMMANDS)
    lines = [
        "usage: gpu-cluster SUBCOMMAND [ARGS...]   (gpu-cluster SUBCOMMAND --help for its flags)",
        "",
        "subcommands:",
    ]
    lines += [f"  {s.name:<{width}} {'*' if s.under_torchrun else ' '} {s.summary}" for s in SUBCOMMANDS]
    lines += [
        "",
        "* runs on every rank: on a cluster, `torchrun ... -m MODULE` (the module is in",
        "  `gpu-cluster SUBCOMMAND --help`'s usage line); here, one process.",
    ]
    return "\n".join(lines)


def resolve(name: str) -> Callable[[list[str]], int]:
    sub = next(s for s in SUBCOMMANDS if s.name == name)
    module = importlib.import_module(_MODULE_OF.get(sub.module, sub.module))
    entry: Callable[[list[str]], int] = getattr(module, sub.entry)
    return entry


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if args else 2
    names = [s.name for s in SUBCOMMANDS]
    if args[0] not in names:
        print(f"gpu-cluster: {args[0]!r} is not a subcommand (allowed: {', '.join(names)})", file=sys.stderr)
        return 2
    code = resolve(args[0])(args[1:])
    return int(code or 0)
