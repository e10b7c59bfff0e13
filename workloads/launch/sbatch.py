"""Render and submit the Slurm batch script that runs one torchrun per node.

The script asks Slurm for whole nodes, starts one ``torchrun`` per node with ``srun
--ntasks-per-node=1``, and lets torchrun start the ranks of its node. The ranks meet through
torchrun's c10d rendezvous on the first node of the allocation; its address comes from
``scontrol show node`` (NodeAddr), because a node's Slurm name need not resolve in DNS (two
test nodes on one host, cloud nodes named after their partition). ``--max-restarts=0``: a
restart would hide exactly the fault a validation job exists to find.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpu_cluster.workloads.launch import common
from gpu_cluster.workloads.launch.common import Problems, Step, check_int, check_path, has_control_chars
from gpu_cluster.workloads.launch.job import TorchrunJob, check_job, step_lines, step_name

__all__ = ["LaunchSpec", "Step", "Submission", "render", "submit", "validate", "write"]

# Slurm job, partition and account names: sbatch accepts more, but a name a shell or a
# log parser would trip over is never worth it.
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
# Paths in #SBATCH lines: sbatch splits directive values on blanks and quotes by its own
# rules, so only characters that need no quoting at all are allowed there.
_DIRECTIVE_PATH_RE = re.compile(r"^/[A-Za-z0-9_./@+=,:-]*\Z")
# Slurm host lists (n1,n[3-5]) for --exclude.
_NODELIST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\[\],-]*\Z")
MAX_TIME_MIN = 365 * 24 * 60


@dataclass(kw_only=True, frozen=True, slots=True)
class LaunchSpec(TorchrunJob):
    """One multi-node torchrun job (what runs: :class:`TorchrunJob`) under Slurm (where: the
    fields below)."""

    job_name: str
    """Slurm job name (``--job-name``); letters, digits, ``_ . -``, at most 64."""
    cpus_per_task: int | None = None
    """CPUs for each node's torchrun and its ranks (``--cpus-per-task``); unset leaves Slurm's default."""
    partition: str | None = None
    """Slurm partition (``--partition``); unset uses the cluster's default partition."""
    account: str | None = None
    """Slurm account (``--account``), where the cluster requires one."""
    time_limit_min: int = 30
    """Wall-clock limit in minutes (``--time``)."""
    exclusive: bool = True
    """Whole nodes (``--exclusive``): a validation run must not share a node's GPUs or NICs."""
    exclude: tuple[str, ...] = ()
    """Nodes to keep out (``--exclude``), e.g. ones a previous run isolated."""
    output: str | None = None
    """Batch output file (``--output``, Slurm patterns allowed); default ``<workdir>/%x-%j.out``."""
    kill_on_bad_exit: bool = True
    """End every node's step when one node's torchrun fails. The validation job turns it off:
    its ranks have their own timeouts, and a survivor that is left to notice the lost peer
    records it, which is how the judge tells the node that died from the ones it took along."""

    @property
    def output_path(self) -> str:
        return self.output or f"{self.workdir.rstrip('/')}/%x-%j.out"


def validate(spec: LaunchSpec) -> None:
    """Raise :class:`LaunchSpecError` naming every bad field at once."""
    p = Problems()
    if not isinstance(spec.job_name, str) or not _NAME_RE.match(spec.job_name):
        p.add("job_name", f"{spec.job_name!r} is not a job name (allowed: [A-Za-z0-9][A-Za-z0-9_.-]{{0,63}})")
    check_job(p, spec)
    if spec.output is not None:
        check_path(p, "output", spec.output)
    for name in ("workdir", "nccl_debug_dir", "output"):
        value = getattr(spec, name)
        # A value that is no absolute one-line path was named by check_job already.
        if not isinstance(value, str) or not value.startswith("/") or has_control_chars(value):
            continue
        # Only --output takes Slurm's %-patterns; elsewhere % would be read as one too
        # (by Slurm, or by NCCL in the debug file name).
        if name != "output" and "%" in value:
            p.add(name, f"{value!r} contains '%', which would be read as a file-name pattern")
        elif not _DIRECTIVE_PATH_RE.match(value.replace("%", "")):
            p.add(
                name,
                f"{value!r} has characters sbatch directives cannot carry (allowed: letters, digits, _ . / @ + = , : - and % in output)",
            )
    if spec.cpus_per_task is not None:
        check_int(p, "cpus_per_task", spec.cpus_per_task, minimum=1)
    for name in ("partition", "account"):
        value = getattr(spec, name)
        if value is not None and (not isinstance(value, str) or not _NAME_RE.match(value)):
            p.add(name, f"{value!r} is not a Slurm name (allowed: [A-Za-z0-9][A-Za-z0-9_.-]{{0,63}})")
    check_int(p, "time_limit_min", spec.time_limit_min, minimum=1, maximum=MAX_TIME_MIN)
    for name in ("exclusive", "kill_on_bad_exit"):
        if not isinstance(getattr(spec, name), bool):
            p.add(name, f"{getattr(spec, name)!r} is not a bool")
    if isinstance(spec.exclude, str) or not isinstance(spec.exclude, (list, tuple)):
        p.add("exclude", f"{spec.exclude!r} must be a sequence of node names")
    else:
        for i, node in enumerate(spec.exclude):
            if not isinstance(node, str) or not _NODELIST_RE.match(node):
                p.add(f"exclude[{i}]", f"{node!r} is not a Slurm node name or host list")
    p.raise_if_any("LaunchSpec")


def _time(minutes: int) -> str:
    return f"{minutes // 60}:{minutes % 60:02d}:00"


def render(spec: LaunchSpec) -> str:
    """The batch script, after :func:`validate`; every value from the spec is shell-quoted."""
    validate(spec)
    q = shlex.quote
    directives = [
        f"--job-name={spec.job_name}",
        f"--nodes={spec.nodes}",
        "--ntasks-per-node=1",
        f"--time={_time(spec.time_limit_min)}",
        f"--chdir={spec.workdir}",
        f"--output={spec.output_path}",
    ]
    if spec.gpus_per_node > 0:
        directives.append(f"--gpus-per-node={spec.gpus_per_node}")
    if spec.cpus_per_task is not None:
        directives.append(f"--cpus-per-task={spec.cpus_per_task}")
    if spec.partition is not None:
        directives.append(f"--partition={spec.partition}")
    if spec.account is not None:
        directives.append(f"--account={spec.account}")
    if spec.exclusive:
        directives.append("--exclusive")
    if spec.exclude:
        directives.append(f"--exclude={','.join(spec.exclude)}")

    exports = [f"export {name}={q(value)}" for name, value in spec.environment().items()]

    def srun(n: int, module: str, args: Sequence[str], env_prefix: str, index: int) -> str:
        # Each node's agent output also goes to <agent_logs>/<step>-<node>.log (SLURMD_NODENAME:
        # the Slurm name of the node the task runs on, set by slurmd), so the judge can read
        # which nodes reached a rendezvous that never completed.
        keep = (
            [
                "bash -c "
                + q(f'set -o pipefail; "$@" 2>&1 | tee -a "$GPUC_AGENT_LOGS/{step_name(spec, n)}-$SLURMD_NODENAME.log"')
                + " gpuc-agent"
            ]
            if spec.agent_logs
            else []
        )
        return " \\\n    ".join(
            [
                # --kill-on-bad-exit: one node's failure ends the others instead of leaving
                # them blocked in a collective until the time limit. --whole: since Slurm
                # 20.11 a step gets only what it asks for (one CPU per task), and task/cgroup
                # would pin all of a node's ranks to that one core.
                f'{env_prefix}srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 --whole '
                f"--kill-on-bad-exit={int(spec.kill_on_bad_exit)}",
                *keep,
                *common.torchrun_argv(
                    python=spec.python,
                    nnodes='"$SLURM_NNODES"',
                    nproc_per_node=spec.ranks_per_node,
                    endpoint=f'"${{head_addr}}:{spec.rdzv_port}"',
                    rdzv_id='"$SLURM_JOB_ID"',
                    join_timeout_s=spec.rdzv_join_timeout_s,
                    module=module,
                    module_args=args,
                ),
            ]
        )

    if spec.then:
        # Every step runs and reports; the last one's status is the job's.
        launch = "\n".join([*step_lines(spec, srun, announce_first=True), 'exit "$step_rc"'])
    else:
        launch = srun(1, spec.module, spec.module_args, "", 0)
    lines = [
        "#!/bin/bash",
        *[f"#SBATCH {d}" for d in directives],
        "# Rendered by gpu_cluster.workloads.launch.sbatch: one torchrun per node, c10d rendezvous on the",
        "# first node, no restarts (a restart would hide the fault being looked for).",
        "set -euo pipefail",
        "",
        *exports,
        *spec.fabric_lines(),
        f"mkdir -p {q(spec.nccl_dir)}",
        *(
            [f"export GPUC_AGENT_LOGS={q(spec.agent_logs)}", f"mkdir -p {q(spec.agent_logs)}"]
            if spec.agent_logs
            else []
        ),
        "",
        # sed reads all of its input, so a long host list never ends in SIGPIPE, which
        # pipefail would turn into a failed job (head -n1 could).
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)',
        "head_addr=$(scontrol show node -o \"$head_node\" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')",
        'if [ -z "$head_addr" ]; then',
        '  echo "cannot find NodeAddr of first node $head_node in scontrol show node" >&2',
        "  exit 1",
        "fi",
        f'echo "job $SLURM_JOB_ID: $SLURM_NNODES node(s) x {spec.ranks_per_node} rank(s), '
        f'rendezvous ${{head_addr}}:{spec.rdzv_port} on $head_node"',
        "",
        *([spec.prologue.rstrip("\n"), ""] if spec.prologue else []),
        launch,
        "",
    ]
    return "\n".join(lines)


def write(spec: LaunchSpec, path: str | Path) -> Path:
    """Render ``spec`` into ``path`` (made executable) and return the path."""
    out = Path(path)
    out.write_text(render(spec))
    out.chmod(0o755)
    return out


@dataclass(kw_only=True, frozen=True, slots=True)
class Submission:
    """What ``sbatch`` answered."""

    job_id: int
    """Slurm job id."""
    returncode: int
    """sbatch's exit status: with ``wait`` it is the job's own exit status."""
    stderr: str
    """sbatch's messages, kept for error reports."""


def submit(
    script: str | Path,
    *,
    wait: bool = False,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
) -> Submission:
    """``sbatch --parsable`` the script; with ``wait`` block until the job ends (``--wait``).

    ``env`` is the whole environment for sbatch (e.g. one with ``SLURM_CONF``); by default the
    caller's. Raises ``subprocess.TimeoutExpired`` past ``timeout_s`` and ``RuntimeError`` when
    sbatch did not print a job id (it refused the job).
    """
    cmd = ["sbatch", "--parsable", *(["--wait"] if wait else []), *extra_args, str(script)]
    done = subprocess.run(
        cmd, capture_output=True, text=True, env=dict(env) if env is not None else None, timeout=timeout_s
    )
    first = done.stdout.strip().splitlines()[0] if done.stdout.strip() else ""
    # --parsable prints "<id>" or "<id>;<cluster>".
    job = first.split(";", 1)[0]
    if not job.isdigit():
        raise RuntimeError(
            f"sbatch gave no job id (exit {done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
        )
    return Submission(job_id=int(job), returncode=done.returncode, stderr=done.stderr)
