"""``gpu-cluster SUBCOMMAND [ARGS...]``: hands ``ARGS`` to the entry point the subcommand names.

Every subcommand keeps the flags of its module (``gpu-cluster train --help`` is
``python -m gpu_cluster.workloads.train --help``), so the two spellings stay interchangeable.
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
    extra: str | None = None
    """gpu-cluster's extra (pyproject.toml) that installs what it imports beyond the core."""


SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand("init", "gpu_cluster.init", "write a Pulumi project of your own from a bundled example stack"),
    Subcommand("plan", "gpu_cluster.plan", "what a stack will create, cost and must achieve (offline, no account)"),
    Subcommand("spec", "gpu_cluster.components.spec", "check a stack file alone and print what it describes"),
    Subcommand(
        "schema",
        "gpu_cluster.components.provider",
        "the package schema, as `pulumi package get-schema` prints it",
        entry="schema_main",
    ),
    Subcommand(
        "preflight",
        "gpu_cluster.components.preflight",
        "ask the cloud account what the offline checks cannot know",
        extra="preflight",
    ),
    Subcommand(
        "dashboards",
        "gpu_cluster.dashboards",
        "put the stack's GPU dashboard into its Grafana: import STACK --url URL",
        extra="validate",
    ),
    Subcommand("pin", "gpu_cluster.pin", "pin every image the stack pulls by tag to its registry's digest"),
    Subcommand(
        "validate",
        "gpu_cluster.workloads.validate",
        "prove a cluster: submit | render | rehearse | status | run | judge | diff | --local",
        extra="validate",
    ),
    Subcommand(
        "heal",
        "gpu_cluster.heal",
        "replace the nodes the last validation named, revalidate, return them (dry run unless --apply)",
        extra="validate",
    ),
    Subcommand(
        "collectives",
        "gpu_cluster.workloads.collectives",
        "the nccl-tests-style collectives benchmark",
        True,
        extra="validate",
    ),
    Subcommand(
        "node-gate",
        "gpu_cluster.workloads.health.node_gate",
        "one node's GPU health counters, DCGM and a sustained GEMM",
        extra="validate",
    ),
    Subcommand(
        "gpu-health",
        "gpu_cluster.workloads.health.gpu",
        "per-GPU matmul rate and memory bandwidth against the catalog",
        True,
        extra="validate",
    ),
    Subcommand(
        "fabric-check",
        "gpu_cluster.workloads.health.fabric",
        "is the fabric where NCCL will look for it",
        True,
        extra="validate",
    ),
    Subcommand(
        "train",
        "gpu_cluster.workloads.train",
        "data-parallel training (DDP), the bundled GPT or your model",
        True,
        extra="validate",
    ),
    Subcommand("data", "gpu_cluster.workloads.train.data", "write or check token shards", extra="validate"),
    Subcommand(
        "parallel",
        "gpu_cluster.workloads.parallel",
        "model-parallel training: FSDP2, tensor parallel, 2-D, pipeline",
        True,
        extra="validate",
    ),
    Subcommand(
        "tasks",
        "gpu_cluster.workloads.tasks",
        "one job over many independent inputs, self-balancing (the task fleet)",
        True,
        extra="tasks",
    ),
    Subcommand(
        "infer",
        "gpu_cluster.workloads.tasks.infer",
        "batch inference of your model over your dataset as a fleet",
        True,
        extra="tasks",
    ),
)
_MODULE_OF = {
    # ``python -m`` of a package runs its __main__; the function lives in the job's module.
    "gpu_cluster.workloads.collectives": "gpu_cluster.workloads.collectives.bench",
    "gpu_cluster.workloads.train": "gpu_cluster.workloads.train.ddp",
    "gpu_cluster.workloads.parallel": "gpu_cluster.workloads.parallel.run",
    "gpu_cluster.workloads.tasks": "gpu_cluster.workloads.tasks.shard",
    "gpu_cluster.workloads.validate": "gpu_cluster.workloads.validate.__main__",
    "gpu_cluster.components.preflight": "gpu_cluster.components.preflight.__main__",
    "gpu_cluster.heal": "gpu_cluster.heal.cli",
}


# A third-party module the product imports beyond the core -> the extras that install it (pyproject.toml).
EXTRA_OF_MODULE: dict[str, tuple[str, ...]] = {
    "torch": ("validate", "tasks"),
    "numpy": ("validate", "tasks"),
    "matplotlib": ("validate",),
    "kubernetes": ("validate",),
    "pynvml": ("validate",),
    "boto3": ("preflight",),
    "botocore": ("preflight",),
    "google": ("preflight",),
    "fsspec": ("tasks",),
    "s3fs": ("tasks",),
    "gcsfs": ("tasks",),
    "pulumi_policy": ("policy",),
    "pulumi_aws": ("aws",),
    "pulumi_aws_native": ("aws",),
    "pulumi_gcp": ("gcp",),
    "pulumi_azure_native": ("azure",),
}


def missing_extra(sub: Subcommand, exc: ModuleNotFoundError) -> str | None:
    """The one line for a module a subcommand needs that is not installed, naming the extra that
    installs it (the subcommand's own where it is one of them); None for any other missing module
    (a bug of ours, which keeps its traceback)."""
    top = (exc.name or "").split(".")[0]
    extras = EXTRA_OF_MODULE.get(top)
    if not extras:
        return None
    extra = sub.extra if sub.extra in extras else extras[0]
    return (
        f"gpu-cluster {sub.name}: needs the Python package {top}, which is not installed "
        f"(gpu-cluster's [{extra}] extra): run pip install 'gpu-cluster[{extra}]'"
    )


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
    sub = next(s for s in SUBCOMMANDS if s.name == args[0])
    try:
        code = resolve(sub.name)(args[1:])
    except ModuleNotFoundError as exc:
        # Importing the subcommand's module (its --help too) or, later, what it imports for the
        # task at hand (preflight's boto3 for an AWS stack).
        line = missing_extra(sub, exc)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 3
    return int(code or 0)
