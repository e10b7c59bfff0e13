"""Checks and pieces both launchers share: the error type, name rules, environment checks.

A launcher turns a typed spec into text another system will parse (bash, a Kubernetes API
server), so every value that reaches that text is checked here first and every problem is
reported at once, as ``field: reason (allowed: ...)``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpu_cluster.components.problems import Problems as _Problems
from gpu_cluster.components.problems import ProblemsError

# torchrun's training module, e.g. ``gpu_cluster.workloads.validate``: dotted Python identifiers only, so
# the name can never carry a shell word or an option.
_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
# POSIX shell variable names; anything else cannot be exported and is a typo.
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
# Step labels: printed in status lines and safe in any log parser.
STEP_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
# NCCL_DEBUG levels NCCL understands (nccl docs, "Environment Variables").
NCCL_DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE")
# Variables the launchers own; setting them through an env dict would silently fight the
# launcher (or torchrun, which assigns the rank variables itself).
RESERVED_ENV = frozenset(
    {
        "NCCL_DEBUG",
        "NCCL_DEBUG_FILE",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "GROUP_RANK",
    }
)


class LaunchSpecError(ProblemsError):
    """Every problem found in a launch spec, each as ``(field, reason)`` (components/problems.py)."""

    def __init__(self, spec_name: str, problems: Sequence[tuple[str, str]]) -> None:
        super().__init__(f"{spec_name} has {len(problems)} problem(s):", problems)


class Problems(_Problems):
    """The shared collector; a launch check raises what it found as one :class:`LaunchSpecError`."""

    def raise_if_any(self, spec_name: str) -> None:
        if self.items:
            raise LaunchSpecError(spec_name, self.items)


def has_control_chars(value: str) -> bool:
    """True for newlines, NUL and other control characters, which no quoting makes safe
    in a one-line ``#SBATCH`` directive or a Kubernetes name."""
    return any(ord(c) < 0x20 or ord(c) == 0x7F for c in value)


def check_int(p: Problems, field: str, value: object, *, minimum: int, maximum: int | None = None) -> None:
    # bool is an int subclass; True nodes is a typo, not 1 node.
    if not isinstance(value, int) or isinstance(value, bool):
        p.add(field, f"{value!r} is not an integer")
        return
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"{minimum}..{maximum}"
        p.add(field, f"{value} is out of range (allowed: {bound})")


def check_module(p: Problems, field: str, module: object) -> None:
    if not isinstance(module, str) or not _MODULE_RE.match(module):
        p.add(field, f"{module!r} is not a dotted Python module name (allowed: e.g. gpu_cluster.workloads.validate)")


def check_args(p: Problems, field: str, args: object) -> None:
    if isinstance(args, str) or not isinstance(args, Iterable):
        p.add(field, f"{args!r} must be a sequence of strings, one per argument")
        return
    for i, arg in enumerate(args):
        if not isinstance(arg, str):
            p.add(f"{field}[{i}]", f"{arg!r} is not a string")
        elif "\x00" in arg or "\n" in arg or "\r" in arg:
            p.add(f"{field}[{i}]", f"{arg!r} contains a newline or NUL (allowed: one line of text)")


def check_env(p: Problems, field: str, env: object) -> None:
    """Names must be shell identifiers and not owned by the launcher; values one line."""
    if not isinstance(env, Mapping):
        p.add(field, f"{env!r} is not a mapping of name to value")
        return
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME_RE.match(name):
            p.add(f"{field}[{name!r}]", "is not a valid variable name (allowed: [A-Za-z_][A-Za-z0-9_]*)")
            continue
        if name in RESERVED_ENV:
            p.add(f"{field}[{name!r}]", "is set by the launcher or torchrun and may not be overridden")
        if not isinstance(value, str):
            p.add(f"{field}[{name!r}]", f"value {value!r} is not a string")
        elif has_control_chars(value):
            p.add(f"{field}[{name!r}]", f"value {value!r} contains a newline or control character")


def check_path(p: Problems, field: str, path: object) -> None:
    """An absolute POSIX path on one line: it is a mount point or a directory on shared storage."""
    if not isinstance(path, str) or not path.startswith("/"):
        p.add(field, f"{path!r} is not an absolute path")
    elif has_control_chars(path):
        p.add(field, f"{path!r} contains a newline or control character")


def check_script(p: Problems, field: str, value: object) -> None:
    """Bash lines the launcher itself rendered (a prologue): text whose only control
    character is the newline between lines."""
    if not isinstance(value, str):
        p.add(field, f"{value!r} is not text")
    elif any((ord(c) < 0x20 and c != "\n") or ord(c) == 0x7F for c in value):
        p.add(field, "contains a control character other than a newline")


def check_nccl_debug(p: Problems, field: str, level: object) -> None:
    if level not in NCCL_DEBUG_LEVELS:
        p.add(field, f"{level!r} is not an NCCL_DEBUG level (allowed: {', '.join(NCCL_DEBUG_LEVELS)})")


def merged_env(fabric_env: Mapping[str, str], extra_env: Mapping[str, str], p: Problems) -> dict[str, str]:
    """Fabric first, then extras; an extra that silently replaces a fabric value is a mistake."""
    for name in sorted(set(fabric_env) & set(extra_env)):
        if fabric_env[name] != extra_env[name]:
            p.add(
                f"extra_env[{name!r}]",
                f"would override fabric_env {name}={fabric_env[name]!r} with {extra_env[name]!r}",
            )
    return {**fabric_env, **extra_env}


@dataclass(kw_only=True, frozen=True, slots=True)
class Step:
    """A further step of the same job, after the first torchrun step (both launchers)."""

    name: str
    """Short label printed before the step and in its exit-status line."""
    module: str
    """Python module the step runs."""
    module_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    """Variables set for this step only (e.g. NCCL_P2P_DISABLE=1 for a fabric-only pass)."""
    torchrun: bool = True
    """True: one torchrun per node, like the first step. False: run once with plain python, on
    the batch host (Slurm) or in pod 0 (JobSet): a step that prepares or reads what the others
    share."""
    every_host: bool = False
    """With ``torchrun=False``: plain python on every host (each pod of a JobSet), not only the first."""
    stop_on: int | None = None
    """An exit status of this step that ends the job's script there, with status 0: the steps after
    it are not run (a JobSet's pairs gate: the nodes must be given back for the per-pair jobs)."""


def check_steps(p: Problems, field_name: str, steps: object) -> None:
    if isinstance(steps, (str, Mapping)) or not isinstance(steps, Iterable):
        p.add(field_name, f"{steps!r} must be a sequence of Step")
        return
    for i, step in enumerate(steps):
        where = f"{field_name}[{i}]"
        if not isinstance(step, Step):
            p.add(where, f"{step!r} is not a Step")
            continue
        if not isinstance(step.name, str) or not STEP_NAME_RE.match(step.name):
            p.add(f"{where}.name", f"{step.name!r} is not a step name (allowed: [A-Za-z0-9][A-Za-z0-9_.-]{{0,63}})")
        check_module(p, f"{where}.module", step.module)
        check_args(p, f"{where}.module_args", step.module_args)
        check_env(p, f"{where}.env", step.env)
        if not isinstance(step.torchrun, bool):
            p.add(f"{where}.torchrun", f"{step.torchrun!r} is not a bool")
        if step.stop_on is not None and (
            not isinstance(step.stop_on, int) or isinstance(step.stop_on, bool) or not 1 <= step.stop_on <= 125
        ):
            p.add(f"{where}.stop_on", f"{step.stop_on!r} is not an exit status (allowed: 1..125)")


def torchrun_argv(
    *,
    python: str,
    nnodes: str,
    nproc_per_node: int,
    endpoint: str,
    rdzv_id: str,
    join_timeout_s: int,
    module: str,
    module_args: Iterable[str],
) -> list[str]:
    """The one torchrun command of both launchers, as shell words. ``python`` and the module
    arguments are quoted here; ``nnodes``, ``endpoint`` and ``rdzv_id`` arrive as shell words
    already (they may expand a variable: ``"$SLURM_NNODES"``, ``"$rdzv_host:29500"``).

    c10d rendezvous; ``--max-restarts=0`` (a restart would hide the fault a validation job is
    looking for). ``read_timeout``, how long an agent keeps trying the store, is the join
    timeout: the first node's address can resolve minutes before its image or its interpreter
    is ready, and in a multi-step job the others reach a step's store before the first node
    has finished the previous step."""
    q = shlex.quote
    return [
        q(python),
        "-m torch.distributed.run",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc_per_node}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={rdzv_id}",
        f"--rdzv-conf=join_timeout={join_timeout_s},read_timeout={join_timeout_s}",
        "--max-restarts=0",
        f"-m {q(module)}",
        *[q(a) for a in module_args],
    ]


def ranks_per_node(gpus_per_node: int, procs_per_node: int | None) -> int:
    """One rank per GPU; on CPU nodes the given count, default 1 (both launchers agree)."""
    if gpus_per_node > 0:
        return gpus_per_node
    return procs_per_node if procs_per_node is not None else 1


def nccl_dir(nccl_debug_dir: str | None, workdir: str) -> str:
    """Where the per-process NCCL logs go: the given directory, else ``<workdir>/nccl``."""
    return nccl_debug_dir or f"{workdir.rstrip('/')}/nccl"
