"""The launcher model: what runs, apart from where it runs.

A :class:`TorchrunJob` is a multi-node torchrun job: the module and its arguments, nodes and
ranks per node, the c10d rendezvous, the environment (the catalog's fabric facts, the job's
own variables, NCCL's debug settings, the fabric's library directories and environment
script) and the further steps. Where it runs is a subclass that adds the scheduler's options:
:class:`gpu_cluster.workloads.launch.sbatch.LaunchSpec` (Slurm) and
:class:`gpu_cluster.workloads.launch.jobset.JobSetSpec` (a JobSet's pods). Both renderers share this
module's validator (:func:`check_job`), the torchrun command (``common.torchrun_argv``) and
the step script (:func:`step_lines`), so a rule or a step's shape is written once.
"""

from __future__ import annotations

import re

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gpu_cluster.workloads.launch import common
from gpu_cluster.workloads.launch.fabric import LINK_LAYERS, Discover, FoundDir, shell_lines
from gpu_cluster.workloads.runtime.nccl_env import NCCL_ERROR_HANDLING
from gpu_cluster.workloads.launch.common import (
    Problems,
    Step,
    check_args,
    check_env,
    check_int,
    check_module,
    check_nccl_debug,
    check_path,
    check_steps,
    has_control_chars,
    merged_env,
)

_SUBSYS_RE = __import__("re").compile(r"^\^?[A-Z]+(,[A-Z]+)*\Z")


@dataclass(kw_only=True, frozen=True, slots=True)
class TorchrunJob:
    """What runs: one torchrun per node, every node's ranks meeting at one c10d rendezvous."""

    nodes: int
    """Number of nodes; one torchrun runs on each."""
    module: str
    """Python module every rank runs (``torchrun -m``), e.g. ``gpu_cluster.workloads.validate``."""
    workdir: str
    """Absolute directory on shared storage: the job's cwd, its output and NCCL logs."""
    module_args: tuple[str, ...] = ()
    """Arguments after the module, each quoted for the shell."""
    python: str = "python3"
    """Interpreter that runs torchrun; it must exist on every node (or in the image)."""
    gpus_per_node: int = 0
    """GPUs per node and ranks per node; 0 on CPU-only nodes."""
    procs_per_node: int | None = None
    """Ranks per node on CPU (default 1); with GPUs it must be unset or equal ``gpus_per_node``."""
    rdzv_port: int = 29500
    """TCP port of the c10d rendezvous store on the first node."""
    rdzv_join_timeout_s: int = 600
    """How long torchrun waits for all nodes to join before failing the job."""
    fabric_env: Mapping[str, str] = field(default_factory=dict)
    """Environment the fabric needs (the catalog's ``software.fabric_env`` and the scheduler's part)."""
    extra_env: Mapping[str, str] = field(default_factory=dict)
    """Further variables for the job; may not silently change a ``fabric_env`` value."""
    library_path: tuple[str, ...] = ()
    """Directories put first on ``LD_LIBRARY_PATH`` before torchrun (the fabric's plugin and libraries)."""
    env_script: str | None = None
    """A script of the fabric's plugin sourced before torchrun (gIB's ``set_nccl_env.sh``); the
    launcher's variables are exported again after it."""
    discover: Discover | None = None
    """Found on the node when the job starts (Slurm): the plugin's root, the NIC names."""
    found_at_start: tuple[FoundDir, ...] = ()
    """Library directories found on the node or in the image when the job starts (lib64 or lib)."""
    ib_hca_link_layer: str | None = None
    """``NCCL_IB_HCA`` found at start: the HCAs whose ports report this link layer (InfiniBand)."""
    nccl_debug: str = "INFO"
    """``NCCL_DEBUG`` level; INFO is what the transport check reads."""
    nccl_debug_subsys: str | None = None
    """``NCCL_DEBUG_SUBSYS`` (e.g. ``INIT,NET``); unset keeps NCCL's default."""
    nccl_debug_dir: str | None = None
    """Directory of the per-process NCCL logs (``nccl-<host>-<pid>.log``); default ``<workdir>/nccl``."""
    then: tuple[Step, ...] = ()
    """Steps after the first. Every step runs even when an earlier one failed."""
    first_step: str = "main"
    """Label of the first step in the job's ``step N: name`` lines."""
    prologue: str = ""
    """Bash run before the first step (e.g. unpacking the job's code); rendered by the
    launcher, never from user input."""
    agent_logs: str | None = None
    """Directory on shared storage where each node keeps its torchrun agent's output, one file per
    step and node (``<step>-<node>.log``) besides the job's own log: what tells a judge on one
    host which nodes reached a rendezvous that never completed. None: not kept."""

    @property
    def ranks_per_node(self) -> int:
        return common.ranks_per_node(self.gpus_per_node, self.procs_per_node)

    @property
    def nccl_dir(self) -> str:
        return common.nccl_dir(self.nccl_debug_dir, self.workdir)

    def environment(self) -> dict[str, str]:
        """Every variable the job sets, in order: NCCL's debug settings, the fabric's, the job's."""
        env = {"NCCL_DEBUG": self.nccl_debug}
        if self.nccl_debug_subsys is not None:
            env["NCCL_DEBUG_SUBSYS"] = self.nccl_debug_subsys
        # NCCL expands %h (host) and %p (pid): one file per process, never interleaved.
        env["NCCL_DEBUG_FILE"] = f"{self.nccl_dir}/nccl-%h-%p.log"
        # What NCCL does at the group's timeout, stated before torchrun (which would put its own 1
        # in an unset variable): see gpu_cluster.workloads.runtime.nccl_env for the source.
        env.update(NCCL_ERROR_HANDLING)
        return {**env, **merged_env(self.fabric_env, self.extra_env, Problems())}

    def fabric_lines(self) -> list[str]:
        """Bash that puts the fabric's libraries first and sources its environment script."""
        return shell_lines(
            library_path=self.library_path,
            env_script=self.env_script,
            reexport=self.environment(),
            discover=self.discover,
            found=self.found_at_start,
            ib_hca=self.ib_hca_link_layer,
        )


def check_job(p: Problems, job: TorchrunJob, *, max_nodes: int | None = None) -> None:
    """The checks of what runs, the same on every scheduler."""
    check_int(p, "nodes", job.nodes, minimum=1, maximum=max_nodes)
    check_module(p, "module", job.module)
    check_args(p, "module_args", job.module_args)
    check_path(p, "workdir", job.workdir)
    if job.nccl_debug_dir is not None:
        check_path(p, "nccl_debug_dir", job.nccl_debug_dir)
    if not isinstance(job.python, str) or not job.python or has_control_chars(job.python):
        p.add("python", f"{job.python!r} is not an interpreter path or command name")
    check_int(p, "gpus_per_node", job.gpus_per_node, minimum=0, maximum=64)
    if job.procs_per_node is not None:
        check_int(p, "procs_per_node", job.procs_per_node, minimum=1, maximum=1024)
        if isinstance(job.gpus_per_node, int) and job.gpus_per_node > 0 and job.procs_per_node != job.gpus_per_node:
            p.add(
                "procs_per_node",
                f"{job.procs_per_node} differs from gpus_per_node={job.gpus_per_node} "
                "(allowed: unset, or one rank per GPU)",
            )
    check_int(p, "rdzv_port", job.rdzv_port, minimum=1, maximum=65535)
    check_int(p, "rdzv_join_timeout_s", job.rdzv_join_timeout_s, minimum=1)
    check_env(p, "fabric_env", job.fabric_env)
    check_env(p, "extra_env", job.extra_env)
    if isinstance(job.fabric_env, Mapping) and isinstance(job.extra_env, Mapping):
        merged_env(job.fabric_env, job.extra_env, p)
    if isinstance(job.library_path, str) or not isinstance(job.library_path, (list, tuple)):
        p.add("library_path", f"{job.library_path!r} must be a sequence of absolute directories")
    else:
        for i, d in enumerate(job.library_path):
            check_path(p, f"library_path[{i}]", d)
            if isinstance(d, str) and ":" in d:
                p.add(f"library_path[{i}]", f"{d!r} contains ':', the LD_LIBRARY_PATH separator")
    if job.env_script is not None:
        check_path(p, "env_script", job.env_script)
    if job.agent_logs is not None:
        check_path(p, "agent_logs", job.agent_logs)
    if job.discover is not None:
        _check_discover(p, job.discover)
    _check_found(p, job.found_at_start)
    if job.ib_hca_link_layer is not None and job.ib_hca_link_layer not in LINK_LAYERS:
        p.add("ib_hca_link_layer", f"{job.ib_hca_link_layer!r} (allowed: None, {', '.join(LINK_LAYERS)})")
    check_nccl_debug(p, "nccl_debug", job.nccl_debug)
    if job.nccl_debug_subsys is not None and (
        not isinstance(job.nccl_debug_subsys, str) or not _SUBSYS_RE.match(job.nccl_debug_subsys)
    ):
        p.add(
            "nccl_debug_subsys", f"{job.nccl_debug_subsys!r} is not a subsystem list (allowed: e.g. INIT,NET or ^GRAPH)"
        )
    check_steps(p, "then", job.then)
    if not isinstance(job.first_step, str) or not common.STEP_NAME_RE.match(job.first_step):
        p.add("first_step", f"{job.first_step!r} is not a step name (allowed: [A-Za-z0-9][A-Za-z0-9_.-]{{0,63}})")
    common.check_script(p, "prologue", job.prologue)


# A kernel driver's name as /sys/class/net/*/device/driver links it, a Debian package's name
# (Debian policy 5.6.1: lower case letters, digits, + - .; two characters at least).
_DRIVER_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")
_PACKAGE_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]{1,127}\Z")


def _check_discover(p: Problems, d: object) -> None:
    """What the job looks up on its node goes into the script as words: names, never text."""
    if not isinstance(d, Discover):
        p.add("discover", f"{d!r} is not a Discover (gpu_cluster.workloads.launch.fabric)")
        return
    if d.socket_ifname_driver is not None and (
        not isinstance(d.socket_ifname_driver, str) or not _DRIVER_RE.match(d.socket_ifname_driver)
    ):
        p.add("discover.socket_ifname_driver", f"{d.socket_ifname_driver!r} is not a kernel driver name")
    if d.plugin_package is not None and (
        not isinstance(d.plugin_package, str) or not _PACKAGE_RE.match(d.plugin_package)
    ):
        p.add("discover.plugin_package", f"{d.plugin_package!r} is not a package name")
    if d.plugin_root is not None:
        check_path(p, "discover.plugin_root", d.plugin_root)


# A marker is shell globs of a file name ("libfabric.so*"), "|"-separated; an exported variable
# names a file in the found directory.
_MARKER_RE = re.compile(r"^[A-Za-z0-9._+*-]+(\|[A-Za-z0-9._+*-]+)*\Z")
_FILE_RE = re.compile(r"^[A-Za-z0-9._+-]+\Z")
_VAR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


def _check_found(p: Problems, found: object) -> None:
    """What the job finds at start goes into the script as words: paths, globs and names, never text."""
    if isinstance(found, (str, bytes)) or not isinstance(found, (list, tuple)):
        p.add("found_at_start", f"{found!r} must be a sequence of FoundDir (gpu_cluster.workloads.launch.fabric)")
        return
    for i, f in enumerate(found):
        at = f"found_at_start[{i}]"
        if not isinstance(f, FoundDir):
            p.add(at, f"{f!r} is not a FoundDir")
            continue
        if not isinstance(f.what, str) or not f.what or has_control_chars(f.what):
            p.add(f"{at}.what", f"{f.what!r} is not a description")
        if isinstance(f.dirs, (str, bytes)) or not isinstance(f.dirs, (list, tuple)) or not f.dirs:
            p.add(f"{at}.dirs", f"{f.dirs!r} must be a non-empty sequence of absolute directories")
        else:
            for j, d in enumerate(f.dirs):
                check_path(p, f"{at}.dirs[{j}]", d)
        if not isinstance(f.marker, str) or not _MARKER_RE.match(f.marker):
            p.add(f"{at}.marker", f"{f.marker!r} is not a file glob (allowed: e.g. libfabric.so* or a.so|b.so)")
        if not isinstance(f.exports, Mapping):
            p.add(f"{at}.exports", f"{f.exports!r} must map a variable to a file name")
        else:
            for var, name in f.exports.items():
                if not isinstance(var, str) or not _VAR_RE.match(var):
                    p.add(f"{at}.exports", f"{var!r} is not a variable name")
                if not isinstance(name, str) or not _FILE_RE.match(name):
                    p.add(f"{at}.exports[{var!r}]", f"{name!r} is not a file name")


def env_prefix(env: Mapping[str, str]) -> str:
    """``env K=V ... `` before a step's command, or nothing."""
    return ("env " + "".join(f"{k}={shlex.quote(v)} " for k, v in env.items())) if env else ""


def python_cmd(job: TorchrunJob, step: Step) -> str:
    """A step that runs once with plain python (not under torchrun)."""
    q = shlex.quote
    return env_prefix(step.env) + " ".join([q(job.python), "-m", q(step.module), *[q(a) for a in step.module_args]])


# A torchrun step's command: (step number, module, arguments, env prefix, index among the
# torchrun steps, 0 for the first) -> the shell command.
TorchrunCmd = Callable[[int, str, tuple[str, ...], str, int], str]


def step_name(job: TorchrunJob, n: int) -> str:
    """The name of step ``n`` (1 is the first, torchrun step)."""
    return job.first_step if n == 1 else job.then[n - 2].name


def step_lines(
    job: TorchrunJob, torchrun_cmd: TorchrunCmd, *, announce_first: bool, local_guard: str | None = None
) -> list[str]:
    """Every step in order, each recording its status in ``step_rc``; the last one's status is
    the script's. ``local_guard`` (a shell condition) wraps the steps that run once, where
    only one of several hosts may run them (pod 0 of a JobSet)."""
    q = shlex.quote
    lines = [f"echo {q('step 1: ' + job.first_step)}"] if announce_first else []
    lines += [
        "step_rc=0",
        f"{torchrun_cmd(1, job.module, job.module_args, '', 0)} || step_rc=$?",
        'echo "step 1 exit status $step_rc"',
    ]
    index = 0
    for n, step in enumerate(job.then, start=2):
        if step.torchrun:
            index += 1
            cmd = torchrun_cmd(n, step.module, step.module_args, env_prefix(step.env), index)
        else:
            cmd = python_cmd(job, step)
        body = [
            f'echo "step {n}: {step.name}"',
            "step_rc=0",
            f"{cmd} || step_rc=$?",
            f'echo "step {n} ({step.name}) exit status $step_rc"',
        ]
        if step.stop_on is not None:
            body += [
                f'if [ "$step_rc" -eq {step.stop_on} ]; then',
                f'  echo "step {n} ({step.name}) ends the job here: the steps after it are not run"',
                "  exit 0",
                "fi",
            ]
        if step.torchrun or step.every_host or local_guard is None:
            lines += ["", *body]
        else:
            lines += ["", f"if {local_guard}; then", *[f"  {line}" for line in body], "fi"]
    return lines
