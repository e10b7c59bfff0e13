"""A real, throwaway Slurm cluster on this host: munged, slurmctld and two (or more) slurmd "nodes".

Debian's slurm-wlm 22.05 runs two slurmd daemons on one machine when each gets its own node
name (``slurmd -N n1``), port, spool, pid and log file (``%n`` in slurm.conf). Everything the
cluster uses lives in one temporary directory: its own munge key and socket (so a system
munged, if any, is neither used nor disturbed), its own ports, and a slurm.conf that clients
find through ``SLURM_CONF`` in :attr:`SlurmCluster.env`.

Every process the cluster starts (daemons, slurmstepd, job tasks) inherits the marker
variable ``GPUC_TEST_SLURM=<directory>``; :meth:`SlurmCluster.stop` ends them all and
:meth:`SlurmCluster.leftover_processes` finds any that survived by that marker.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_cluster.components.engine import run_offline
from gpu_cluster.components.spec import read_stack_file
from gpu_cluster.workloads.launch import sbatch as sbatch_launcher
from gpu_cluster.workloads.launch import slurm_nodes

REPO = Path(__file__).resolve().parents[2]
MARKER = "GPUC_TEST_SLURM"
NODES = ("n1", "n2")
PARTITION = "test"
DYNAMIC_NODESET = "dynnodes"
DYNAMIC_FEATURE = "dyn"
TERMINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
)
BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "sinfo", "squeue", "scancel")


def unavailable_reason() -> str | None:
    """Why this host cannot run the test cluster, or None when it can."""
    if os.geteuid() != 0:
        return "the test Slurm cluster runs its daemons as root (SlurmUser=root); run the tests as root"
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        return f"Slurm/munge binaries missing: {', '.join(missing)} (install with `make sysdeps`)"
    return None


# sinfo's long states (%T) of a node that runs no job and takes work. Slurm 22.05's sinfo(1),
# NODE STATE CODES: "PLANNED: The node is planned by the backfill scheduler for a higher priority
# job", so an idle node shows "planned" whenever a pending job is planned onto it. A "*" suffix
# (not responding) is not idle: such a node cannot take the job the caller is about to start.
_NO_JOB_IN_SERVICE = frozenset({"idle", "planned"})


def _free_ports(count: int) -> list[int]:
    # Hold every socket open until all are chosen so the same port is never picked twice.
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    """A TCP port free on all addresses right now (for a rendezvous store, say)."""
    return _free_ports(1)[0]


@dataclass(frozen=True, slots=True)
class JobResult:
    """A finished batch job."""

    job_id: int
    state: str
    """Slurm's final JobState: COMPLETED, FAILED, CANCELLED, TIMEOUT..."""
    returncode: int
    """The batch script's exit status (128 + signal when a signal ended it)."""
    output: str
    """The job's output file, or "" if it wrote none."""


class ClusterError(RuntimeError):
    """The cluster did not come up or a client command failed; the message holds the logs."""


class SlurmCluster:
    """A running two-node cluster. Start with :meth:`start`, end with :meth:`stop`."""

    def __init__(
        self,
        root: Path,
        *,
        cpus_per_node: int = 2,
        real_memory_mb: int = 1000,
        nodes: Sequence[str] = NODES,
        dynamic: bool = False,
    ) -> None:
        self.root = root
        self.dynamic = dynamic
        """Room for one dynamic node (``slurmd -Z``, :meth:`start_dynamic`) in the partition."""
        self.conf = root / "slurm.conf"
        self.logs = root / "log"
        self.jobs = root / "jobs"
        self.nodes = tuple(nodes)
        self.partition = PARTITION
        self.cpus_per_node = cpus_per_node
        self.real_memory_mb = real_memory_mb
        self._munge_dir = root / "munge"
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._last_sinfo = ""
        self.ctld_port, self.dynamic_port, *node_ports = _free_ports(2 + len(self.nodes))
        self.node_ports = dict(zip(self.nodes, node_ports, strict=True))
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        env[MARKER] = str(root)
        self.env: dict[str, str] = env
        """Environment for Slurm clients (and jobs): SLURM_CONF plus the marker."""

    # ---- life cycle ---------------------------------------------------------------------

    @classmethod
    def start(
        cls, *, ready_timeout_s: float = 60.0, nodes: Sequence[str] = NODES, dynamic: bool = False, **kwargs: int
    ) -> SlurmCluster:
        """Write the config, start munged, slurmctld and one slurmd per node (``n1``, ``n2`` unless
        ``nodes`` names more), wait until the nodes are idle."""
        reason = unavailable_reason()
        if reason:
            raise ClusterError(reason)
        root = Path(tempfile.mkdtemp(prefix="gpuc-slurm-"))
        cluster = cls(root, nodes=nodes, dynamic=dynamic, **kwargs)
        # Undone by stop(); atexit covers a test run that dies before its teardown.
        atexit.register(cluster.stop)
        try:
            cluster._write_files()
            cluster._start_daemons()
            cluster.wait_until_idle(timeout_s=ready_timeout_s)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _write_files(self) -> None:
        # munged refuses a socket directory that others cannot enter, and a key readable by others.
        self.root.chmod(0o755)
        for d in (self._munge_dir, self.logs, self.jobs, self.root / "state", self.root / "spool"):
            d.mkdir(mode=0o755)
        for node in self.nodes:
            (self.root / "spool" / node).mkdir(mode=0o755)
        key = self._munge_dir / "munge.key"
        subprocess.run(["mungekey", "--create", f"--keyfile={key}", "--bits=1024"], check=True, capture_output=True)
        key.chmod(0o600)
        self.conf.write_text(self.render_conf())

    def render_conf(self) -> str:
        host = socket.gethostname().split(".")[0]
        r = self.root
        nodes = "\n".join(
            f"NodeName={n} NodeAddr=127.0.0.1 Port={self.node_ports[n]} CPUs={self.cpus_per_node} "
            f"RealMemory={self.real_memory_mb} State=UNKNOWN"
            for n in self.nodes
        )
        members = ",".join(self.nodes)
        dynamic = ""
        if self.dynamic:
            # One dynamic node: --conf takes no Port ("NodeName and Port are not supported",
            # slurmd(8) of 22.05), so it listens on SlurmdPort, which no static node uses here.
            # MaxNodeCount and a feature's node set as SchedMD dynamic_nodes.shtml shows them
            # ("Partition Assignment"), the Azure stack's way (components/azure/slurm_config.py).
            members += f",{DYNAMIC_NODESET}"
            dynamic = (
                f"SlurmdPort={self.dynamic_port}\nMaxNodeCount={len(self.nodes) + 1}\n"
                f"Nodeset={DYNAMIC_NODESET} Feature={DYNAMIC_FEATURE}\n"
            )
        return f"""\
# Throwaway test cluster written by tests/slurm/cluster.py
ClusterName=gpuctest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={self.ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self._munge_dir}/munge.sock
CredType=cred/munge
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/spool/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
# No cgroups in a container: track tasks by process tree, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
# Trust slurm.conf over the detected hardware: both nodes share this machine.
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=600
MessageTimeout=20
{dynamic}{nodes}
PartitionName={PARTITION} Nodes={members} Default=YES MaxTime=INFINITE State=UP
"""

    def _spawn(self, name: str, argv: Sequence[str]) -> None:
        log = open(self.logs / f"{name}.stderr", "wb")  # noqa: SIM115 - closed with the process
        try:
            # A session of its own: a Ctrl-C meant for pytest does not reach the daemons first,
            # so stop() decides the order they end in.
            self._procs[name] = subprocess.Popen(
                list(argv), stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
            )
        finally:
            log.close()

    def _start_daemons(self) -> None:
        m = self._munge_dir
        self._spawn(
            "munged",
            [
                "munged",
                "--foreground",
                f"--socket={m}/munge.sock",
                f"--key-file={m}/munge.key",
                f"--pid-file={m}/munged.pid",
                f"--seed-file={m}/munged.seed",
                f"--log-file={self.logs}/munged.log",
            ],
        )
        self._wait_for(lambda: (m / "munge.sock").exists(), 15.0, "munged socket")
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        for node in self.nodes:
            self._spawn(f"slurmd-{node}", ["slurmd", "-D", "-N", node, "-f", str(self.conf)])

    def _wait_for(self, ok: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ok():
                return
            dead = {n: p.returncode for n, p in self._procs.items() if p.poll() is not None}
            if dead:
                raise ClusterError(f"daemon(s) exited while waiting for {what}: {dead}\n{self.log_report()}")
            time.sleep(0.3)
        raise ClusterError(f"timed out after {timeout_s:.0f}s waiting for {what}\n{self.log_report()}")

    def wait_for(self, ok: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Poll ``ok`` until it holds; a ClusterError naming ``what`` with the daemons' logs if it
        never does, or at once if a daemon exits."""
        self._wait_for(ok, timeout_s, what)

    def wait_until_idle(self, timeout_s: float = 60.0, nodes: Sequence[str] | None = None) -> None:
        """Block until every node in ``nodes`` (default: the cluster's) is idle in sinfo; the logs
        are in the error."""
        nodes = self.nodes if nodes is None else tuple(nodes)

        def idle() -> bool:
            states = self.node_states()
            return all(states.get(n) in _NO_JOB_IN_SERVICE for n in nodes)

        try:
            self._wait_for(idle, timeout_s, f"nodes {', '.join(nodes)} idle")
        except ClusterError as err:
            raise ClusterError(f"{err}\nlast sinfo: {self._last_sinfo!r}") from None

    def node_states(self) -> dict[str, str]:
        """Node -> sinfo's long state (``idle``, ``drained``, ``allocated``...); {} when the
        controller does not answer yet."""
        done = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, env=self.env, timeout=30
        )
        self._last_sinfo = (done.stdout + done.stderr).strip()
        if done.returncode != 0:
            return {}
        return dict(line.split(None, 1) for line in done.stdout.splitlines() if line.strip())

    def log_report(self, tail_lines: int = 40) -> str:
        """The last lines of every daemon log, for error messages."""
        parts = []
        for f in sorted(self.logs.glob("*")):
            lines = f.read_text(errors="replace").splitlines()[-tail_lines:]
            parts.append(f"--- {f.name} (last {len(lines)} lines)\n" + "\n".join(lines))
        return "\n".join(parts) or "(no daemon logs)"

    def stop(self, timeout_s: float = 20.0) -> None:
        """Cancel jobs, stop the daemons (nodes, controller, munged) and anything left with
        the marker. Safe to call twice."""
        if not self._procs:
            return
        if self._procs.get("slurmctld") is not None and self._procs["slurmctld"].poll() is None:
            subprocess.run(
                ["scancel", "--full", "--quiet", "--partition", PARTITION],
                env=self.env,
                capture_output=True,
                timeout=30,
                check=False,
            )
        slurmds = [n for n in self._procs if n.startswith("slurmd-")]
        for name in slurmds + ["slurmctld", "munged"]:
            proc = self._procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        # slurmstepd and job tasks outlive a stopped slurmd; they carry the marker.
        deadline = time.monotonic() + timeout_s
        while (left := self.leftover_processes()) and time.monotonic() < deadline:
            for pid, _ in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)
        self._procs.clear()
        atexit.unregister(self.stop)

    def relaunch(self, node: str) -> None:
        """Play a relaunched machine under the same node name (PCS, Cluster Director): the node's
        slurmd is killed (SIGKILL, as the old instance ends), its spool emptied, and a new slurmd
        started that registers with the controller afresh."""
        old = self._procs.pop(f"slurmd-{node}")
        old.kill()
        old.wait(timeout=30)
        spool = self.root / "spool" / node
        shutil.rmtree(spool)
        spool.mkdir(mode=0o755)
        self._spawn(f"slurmd-{node}", ["slurmd", "-D", "-N", node, "-f", str(self.conf)])

    def start_dynamic(self, node: str, conf: str) -> None:
        """Start a dynamic node as the Azure Slurm stack's boot script does (``slurmd -Z --conf``,
        components/azure/slurm_config.py node_script), under ``node`` (the VM's host name there),
        with this machine's CPUs and memory, the partition's feature and ``conf`` (the stack's
        registration words, e.g. ``State=DRAIN``). Needs ``dynamic=True``; a fresh spool."""
        assert self.dynamic, "start the cluster with dynamic=True"
        spool = self.root / "spool" / node
        shutil.rmtree(spool, ignore_errors=True)
        spool.mkdir(mode=0o755)
        words = f"NodeAddr=127.0.0.1 CPUs={self.cpus_per_node} RealMemory={self.real_memory_mb} "
        words += f"Feature={DYNAMIC_FEATURE} {conf}"
        self._spawn(f"slurmd-{node}", ["slurmd", "-D", "-Z", "-N", node, "-f", str(self.conf), "--conf", words])

    def remove_dynamic(self, node: str) -> None:
        """End a dynamic node's slurmd and delete its record (``scontrol delete nodename``, as
        heal does for a deleted VM): the next :meth:`start_dynamic` registers it afresh."""
        proc = self._procs.pop(f"slurmd-{node}", None)
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        self.run("scontrol", "delete", f"nodename={node}", check=False)

    def daemon_pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self._procs.items()}

    def leftover_processes(self) -> list[tuple[int, str]]:
        """(pid, command line) of every live process carrying this cluster's marker."""
        needle = f"{MARKER}={self.root}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = (entry / "environ").read_bytes()
                if needle not in environ.split(b"\0"):
                    continue
                stat = (entry / "stat").read_text()
                # A zombie has exited; only its parent's wait is missing.
                if stat.rsplit(")", 1)[1].split()[0] == "Z":
                    continue
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
            found.append((int(entry.name), cmd))
        return found

    def cleanup_files(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    # ---- clients ------------------------------------------------------------------------

    def run(self, *argv: str, timeout_s: float = 60.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command (``srun``, ``scontrol``...) against this cluster."""
        done = subprocess.run(list(argv), capture_output=True, text=True, env=self.env, timeout=timeout_s)
        if check and done.returncode != 0:
            raise ClusterError(
                f"{' '.join(argv)} exited {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}\n"
                f"{self.log_report()}"
            )
        return done

    def run_job(
        self,
        script: str | Path,
        *,
        extra_args: Sequence[str] = (),
        timeout_s: float = 120.0,
        env: Mapping[str, str] | None = None,
    ) -> JobResult:
        """Submit ``script`` (a path, or the script's text) and block until the job ends;
        return its state, exit status and output. The job is cancelled if it outlives
        ``timeout_s``.

        Polls ``scontrol show job`` twice a second rather than ``sbatch --wait``, which
        sleeps 2, 8, then 32 s between looks and so adds up to half a minute per job.
        """
        if isinstance(script, str) and "\n" in script:
            fd, name = tempfile.mkstemp(dir=self.jobs, suffix=".sh")
            os.close(fd)
            Path(name).write_text(script)
            script = Path(name)
        args = list(extra_args)
        if (
            not any(a.startswith(("--output", "-o")) for a in args)
            and "#SBATCH --output" not in Path(script).read_text()
        ):
            args.append(f"--output={self.jobs}/job-%j.out")
        sub = sbatch_launcher.submit(script, extra_args=args, env={**self.env, **(env or {})}, timeout_s=60)
        deadline = time.monotonic() + timeout_s
        while (state := self.job_field(sub.job_id, "JobState")) not in TERMINAL_STATES:
            if time.monotonic() > deadline:
                self.run("scancel", str(sub.job_id), check=False)
                raise ClusterError(
                    f"job {sub.job_id} still {state or 'unknown'} after {timeout_s:.0f}s\n{self.log_report()}"
                )
            time.sleep(0.5)
        code, _, sig = self.job_field(sub.job_id, "ExitCode").partition(":")
        returncode = 128 + int(sig) if sig not in ("", "0") else int(code or -1)
        out_file = self.job_field(sub.job_id, "StdOut")
        output = Path(out_file).read_text(errors="replace") if out_file and Path(out_file).exists() else ""
        return JobResult(job_id=sub.job_id, state=state, returncode=returncode, output=output)

    def job_field(self, job_id: int, name: str) -> str:
        """One field of ``scontrol show job`` (jobs stay visible for MinJobAge=600 s)."""
        done = self.run("scontrol", "show", "job", "-o", str(job_id), check=False)
        for token in done.stdout.split():
            key, _, value = token.partition("=")
            if key == name:
                return value
        return ""

    def node(self, name: str) -> slurm_nodes.NodeInfo:
        """One node's state, address and drain reason."""
        return slurm_nodes.show(name, env=self.env)

    def drain(self, name: str, reason: str) -> slurm_nodes.NodeInfo:
        """Drain a node (gpu_cluster.workloads.launch.slurm_nodes.drain against this cluster)."""
        return slurm_nodes.drain(name, reason, env=self.env)

    def resume(self, name: str) -> slurm_nodes.NodeInfo:
        """Return a drained node to service; wait_until_idle() then sees it idle."""
        return slurm_nodes.resume(name, env=self.env)


def drained_idle(info: slurm_nodes.NodeInfo) -> bool:
    """Drained with no job on it, whatever other flags Slurm adds (PLANNED, MAINTENANCE...)."""
    return info.base_state == "IDLE" and "DRAIN" in info.flags


def idle_in_service(info: slurm_nodes.NodeInfo) -> bool:
    """Idle and taking work: no DRAIN flag, whatever other flags Slurm adds."""
    return info.base_state == "IDLE" and not info.draining_or_drained


# ---- the validation command against the test cluster ---------------------------------------

STACK = "aws-h200-slurm"
# Small messages and few iterations: the point of these runs is the path, not CPU bandwidth.
SMALL_RUN = ("--multi-max", "1M", "--single-max", "1M", "--pair-size", "1M", "--iters", "3", "--warmup", "1")
_OFFLINE_OUTPUTS: dict[str, Any] = {}


def validation_outputs(cluster: SlurmCluster, nodes: int | None = None) -> Path:
    """The outputs a deployed aws-h200-slurm would give, pointed at ``cluster``: its partition,
    its number of nodes (``nodes``, default its static ones), and the shared directory standing in
    for the Lustre mount."""
    if not _OFFLINE_OUTPUTS:
        name, raw = read_stack_file(STACK)
        _OFFLINE_OUTPUTS.update(run_offline(name, raw).outputs)
    outs = json.loads(json.dumps(_OFFLINE_OUTPUTS))
    outs["nodes"] = len(cluster.nodes) if nodes is None else nodes
    outs["mount"]["mount_point"] = str(cluster.jobs / "fsx")
    outs["scheduler"]["partition"] = cluster.partition
    path = cluster.jobs / "outputs.json"
    path.write_text(json.dumps(outs))
    return path


def submit_validation(
    cluster: SlurmCluster,
    tmp_path: Path,
    inject: Mapping[str, str],
    *,
    run_args: Sequence[str],
    time_limit_min: int,
    timeout_s: float,
    strict: bool = False,
    nodes: int | None = None,
    worker: Sequence[str] = ("-m", "gpu_cluster.workloads.validate"),
) -> tuple[int, str, Path]:
    """``python -m gpu_cluster.workloads.validate submit`` as a user runs it on a login node (``--here``):
    CPU, one process per node, :data:`SMALL_RUN` plus ``run_args`` for the job, ``inject`` in
    its environment, fetched back to ``tmp_path/back``. The job carries its own code (no
    PYTHONPATH reaches it). Returns the exit code, what the command printed and the run
    directory it fetched. ``nodes``: the stack's node count (default the cluster's static nodes);
    ``worker``: what runs instead of ``-m gpu_cluster.workloads.validate`` (a module that dies
    on purpose)."""
    argv = [
        sys.executable,
        *worker,
        "submit",
        STACK,
        "--outputs",
        str(validation_outputs(cluster, nodes)),
        "--here",
        "--cpu",
        "--procs-per-node",
        "1",
        "--python",
        sys.executable,
        "--shared",
        "--time-limit",
        str(time_limit_min),
        "--rdzv-port",
        str(free_port()),
        "--poll",
        "1",
        "--fetch-to",
        str(tmp_path / "back"),
        *[f"--run-arg={a}" for a in (*SMALL_RUN, *run_args)],
        *[f"--env={k}={v}" for k, v in {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", **inject}.items()],
        *(["--strict"] if strict else []),
    ]
    env = {k: v for k, v in cluster.env.items() if k != "PYTHONPATH"}  # the job must bring its own code
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout_s)
    runs = sorted((tmp_path / "back" / STACK).iterdir())
    return done.returncode, done.stdout + done.stderr, runs[-1] if runs else tmp_path / "back"


def report_node(report: dict[str, Any], name: str) -> dict[str, Any]:
    """The entry of node ``name`` in a validation report."""
    return next(n for n in report["nodes"] if n["node"] == name)
