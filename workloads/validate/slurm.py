"""Run a validation job through Slurm: submit with sbatch, follow with scontrol, fetch the report.

The scheduler commands run where the user says: on this machine (``--here``: you are on the
login node, or ``SLURM_CONF`` points at the cluster, as in the tests), or on the login node
through a remote shell (``ssh host`` or ``gcloud compute ssh ...``), which receives each
command as one string and the batch script on its standard input. Nothing is copied by hand:
the script carries the job's code (``gpu_cluster.workloads.launch.bundle``) and the run directory is made
before sbatch, since ``--chdir`` and ``--output`` must exist when the job starts.
"""

from __future__ import annotations

import io
import re
import shlex
import subprocess
import tarfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpu_cluster.workloads.validate.archive import REPORT_FILES

TERMINAL = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
)
# The exit status the submit command takes where sbatch is not found (not 127, which any missing command gives).
_NO_SBATCH = 97
_STATUS_FILE = re.compile(r"^(?:main|fabric)-(?P<node>.+)-r\d+\.json$")


class SchedulerError(RuntimeError):
    """A scheduler command failed; the message says which and what it printed."""


@dataclass(frozen=True, slots=True)
class Shell:
    """Where scheduler commands run: here (empty prefix) or through a remote shell."""

    prefix: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None

    def run(
        self, command: str, *, stdin: bytes | None = None, timeout_s: float = 120.0, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        if not self.prefix:
            argv = ["bash", "-c", command]
        elif Path(self.prefix[0]).name == "gcloud":
            argv = [*self.prefix, f"--command={command}"]
        else:
            argv = [*self.prefix, command]
        try:
            done = subprocess.run(
                argv,
                input=stdin,
                capture_output=True,
                timeout=timeout_s,
                env=dict(self.env) if self.env is not None else None,
            )
        except FileNotFoundError as exc:
            raise SchedulerError(f"cannot run {argv[0]!r}: {exc.strerror}") from None
        except subprocess.TimeoutExpired:
            raise SchedulerError(f"{argv[0]} did not answer within {timeout_s:.0f} s: {command[:120]}") from None
        if check and done.returncode != 0:
            err = (done.stderr or done.stdout).decode(errors="replace").strip()
            raise SchedulerError(f"`{command[:160]}` failed (exit {done.returncode}): {err[-600:]}")
        return done


def shell_for(ssh_command: str | None, here: bool, env: Mapping[str, str] | None = None) -> Shell:
    """``--here``, else the stack's access command when it is a remote shell that runs a command
    (ssh, gcloud compute ssh); an interactive-only one (an SSM session) must be replaced by
    ``--ssh`` (docs/aws.md, Reaching a PCS login node)."""
    if here:
        return Shell((), env)
    if not ssh_command:
        raise SchedulerError("the stack outputs name no login command; pass --ssh 'ssh user@login-host' or --here")
    argv = tuple(shlex.split(ssh_command))
    if argv[:2] == ("gcloud", "compute") or Path(argv[0]).name == "ssh":
        return Shell(argv, env)
    raise SchedulerError(
        f"access.ssh_command {ssh_command[:80]!r}... opens an interactive session and cannot run a "
        "command; pass --ssh with an ssh command that reaches the login node (for AWS PCS: ssh through "
        "SSM's AWS-StartSSHSession proxy, docs/aws.md), or run on the login node with --here"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class JobState:
    state: str
    """Slurm's JobState, or UNKNOWN once the controller forgot the job."""
    exit_code: int | None
    step: str
    """The last ``step N: name`` line the job printed."""
    nodes_seen: tuple[str, ...]
    """Nodes with at least one rank's status file in the run directory."""


class SlurmJob:
    """One submitted validation run."""

    def __init__(self, shell: Shell, run_dir: str, job_id: int) -> None:
        self.shell, self.run_dir, self.job_id = shell, run_dir, job_id

    @classmethod
    def submit(cls, shell: Shell, run_dir: str, script: str, sbatch_args: tuple[str, ...] = ()) -> SlurmJob:
        """``sbatch_args`` go before the script, where they override its directives (sbatch(1))."""
        q = shlex.quote
        path = f"{run_dir}/validate.sbatch"
        extra = "".join(f"{q(a)} " for a in sbatch_args)
        # sbatch is looked for before the run directory is made on the shared file system.
        command = f"mkdir -p {q(run_dir)} && cat > {q(path)} && sbatch --parsable {extra}{q(path)}"
        done = shell.run(
            f"command -v sbatch >/dev/null || exit {_NO_SBATCH}; {command}", stdin=script.encode(), check=False
        )
        if done.returncode == _NO_SBATCH:
            where = "this machine" if not shell.prefix else f"the login node ({' '.join(shell.prefix)[:80]})"
            raise SchedulerError(
                f"sbatch is not on the PATH of {where}; nothing was written (allowed: a Slurm login node)"
            )
        if done.returncode != 0:
            err = (done.stderr or done.stdout).decode(errors="replace").strip()
            raise SchedulerError(f"`{command[:160]}` failed (exit {done.returncode}): {err[-600:]}")
        first = done.stdout.decode().strip().splitlines()[:1]
        job = first[0].split(";", 1)[0] if first else ""
        if not job.isdigit():
            raise SchedulerError(f"sbatch gave no job id: {done.stdout.decode()[-300:]} {done.stderr.decode()[-300:]}")
        return cls(shell, run_dir, int(job))

    def poll(self) -> JobState:
        q = shlex.quote
        done = self.shell.run(
            f"scontrol show job -o {self.job_id} 2>/dev/null || true; echo '--'; "
            f"cat {q(self.run_dir)}/*.out 2>/dev/null | grep '^step [0-9]*:' | tail -n 1; echo '--'; "
            f"ls {q(self.run_dir)}/status 2>/dev/null || true",
            check=False,
        )
        parts = (done.stdout.decode(errors="replace").split("--\n") + ["", "", ""])[:3]
        fields = dict(f.split("=", 1) for f in parts[0].split() if "=" in f)
        state = fields.get("JobState", "UNKNOWN")
        code = fields.get("ExitCode", "")
        exit_code = int(code.split(":")[0]) if re.match(r"^\d+:\d+$", code) else None
        nodes = sorted({m.group("node") for line in parts[2].split() if (m := _STATUS_FILE.match(line))})
        return JobState(state=state, exit_code=exit_code, step=parts[1].strip(), nodes_seen=tuple(nodes))

    def follow(self, *, expected_nodes: int, poll_s: float, timeout_s: float, say: Callable[[str], None]) -> JobState:
        """Poll until the job ends, printing a line whenever its state, step or nodes change."""
        started = time.monotonic()
        last = ""
        unknown = 0
        while True:
            st = self.poll()
            elapsed = time.monotonic() - started
            line = (
                f"{st.state.lower()}"
                + (f" · {st.step}" if st.step else "")
                + f" · nodes reporting {len(st.nodes_seen)}/{expected_nodes}"
            )
            if line != last:
                say(f"[{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}] job {self.job_id} {line}")
                last = line
            if st.state in TERMINAL:
                return st
            # A job the controller no longer lists ended longer ago than MinJobAge.
            unknown = unknown + 1 if st.state == "UNKNOWN" else 0
            if unknown >= 3:
                return st
            if elapsed > timeout_s:
                raise SchedulerError(
                    f"job {self.job_id} still {st.state} after {timeout_s:.0f} s; it keeps running "
                    f"(scancel {self.job_id} to stop it)"
                )
            time.sleep(poll_s)

    def fetch(self, dest: Path) -> list[str]:
        """Bring the report files and the job's output back into ``dest``."""
        q = shlex.quote
        names = " ".join(REPORT_FILES)
        done = self.shell.run(
            f"cd {q(self.run_dir)} && tar -czf - $(ls {names} *.out 2>/dev/null)", check=False, timeout_s=300
        )
        dest.mkdir(parents=True, exist_ok=True)
        if done.returncode != 0 or not done.stdout:
            return []
        with tarfile.open(fileobj=io.BytesIO(done.stdout), mode="r:gz") as tar:
            tar.extractall(dest, filter="data")
            return tar.getnames()


def node_states(shell: Shell, partition: str | None) -> list[tuple[str, str, str]]:
    """``(node, state, reason)`` for every node of the partition (sinfo, one line a node)."""
    part = f" -p {shlex.quote(partition)}" if partition else ""
    done = shell.run(f"sinfo -N -h{part} -o '%N|%T|%E'")
    rows = []
    for line in done.stdout.decode().splitlines():
        node, state, reason = (line.split("|", 2) + ["", ""])[:3]
        rows.append((node.strip(), state.strip(), "" if reason.strip() == "none" else reason.strip()))
    return sorted(set(rows))
