"""Slurm: quarantine is a drain with the incident in the reason, the check runs in a reservation of
the node and its peer, return is ``state=resume``.

Every command goes through the same shell as ``validate submit`` (here on the login node, or
``ssh``/``gcloud compute ssh`` to it: gpu_cluster.workloads.validate.slurm.Shell). Slurm's words, from
scontrol(1) and slurm.conf(5) of slurm-wlm 22.05 (the Debian package tests/slurm runs):

- ``scontrol update NodeName=N State=DRAIN Reason=...``: "DRAIN" lets running jobs finish and
  starts no new one; Slurm keeps the reason and appends ``[user@time]`` (tests/slurm/test_drain.py
  reads it back). A node is *drained* (safe to replace) once its base state is IDLE or DOWN.
- A drained node takes no job, not even inside a reservation (tried on the test cluster:
  "Required node not available (down, drained or reserved)"). So the check's job runs in an
  advanced reservation of the two nodes, ``Flags=MAINT,IGNORE_JOBS``, made before the node is
  resumed: resumed inside it, the node shows ``IDLE+MAINTENANCE+RESERVED`` and a job outside the
  reservation is refused ("Requested nodes are busy"). After the check the node is drained again
  with the same reason and the reservation deleted, so it is out of service until heal returns it.
- ``scontrol update NodeName=N State=RESUME`` returns it; the release also returns a replacement
  that registered drained with the registration's reason (Azure Slurm's dynamic nodes,
  components/azure/slurm_config.py REGISTER_DRAINED), as the Kubernetes release lifts the
  registration taint: only a passed revalidation leads there (I6).
- A replacement that keeps the node's name (PCS, Cluster Director) is held out of work across its
  relaunch by a second maintenance reservation of the node alone, ``<incident>-slot``
  (``Flags=MAINT,IGNORE_JOBS``, ``Duration=UNLIMITED``), made before the cloud is asked and deleted
  only by the release after a passed revalidation (issue 41, I6). Tried on the test cluster
  (tests/slurm/test_heal_relaunch_rerun.py): the drain, its reason and the reservation all outlive
  the node's slurmd being killed and a new one, with an empty spool, registering under the name;
  a drain cleared by anyone (a power down clears it) still leaves the node
  ``IDLE+MAINTENANCE+RESERVED``, where a user's job waits ("ReqNodeNotAvail, May be reserved for
  other job"). The check's own reservation of the node and its peer overlaps it, which scontrol(1)
  allows a MAINT reservation ("permitted to use resources that are already in another reservation").
"""

from __future__ import annotations

import argparse
import json
import shlex
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpu_cluster.components.contract import unvalidated_reason
from gpu_cluster.heal.adapters import CheckResult, NodeState, Outcome
from gpu_cluster.heal.evidence import judge_pair
from gpu_cluster.workloads.launch.slurm_nodes import NodeInfo, parse_show_node
from gpu_cluster.workloads.validate.slurm import SchedulerError, Shell, SlurmJob

MARK = "gpu-cluster heal "
HOLD = "-slot"
"""The slot's hold across a relaunch is the reservation ``<incident>-slot``."""
REASON_MAX = 120
"""Slurm keeps the reason as one field; workloads/validate/drain.py keeps it this short too."""
# State flags of a node that is not (yet) answering: scontrol(1) NODE STATE CODES.
NOT_READY = frozenset(
    {"DOWN", "FUTURE", "UNKNOWN", "NOT_RESPONDING", "POWERING_UP", "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN"}
)


def reason_for(incident: str, why: str) -> str:
    return " ".join(f"{MARK}{incident}: {why}".split())[:REASON_MAX]


def held_by(reason: str) -> str | None:
    if not reason.startswith(MARK):
        return None
    return reason[len(MARK) :].split(":", 1)[0].split()[0]


def view(info: NodeInfo) -> NodeState:
    flags = set(info.state.split("+"))
    drained = info.draining_or_drained
    return NodeState(
        node=info.name,
        present=True,
        ready=not (flags & NOT_READY),
        in_service=not drained and not ({"DOWN", "MAINTENANCE", "RESERVED"} & flags),
        held_by=held_by(info.reason) if drained else None,
        address=info.addr,
        detail=f"{info.state}" + (f", reason {info.reason!r}" if info.reason else ""),
    )


class SlurmScheduler:
    kind = "slurm"

    def __init__(self, shell: Shell, *, partition: str | None = None, check_minutes: int = 60) -> None:
        self.shell = shell
        self.partition = partition
        self.check_minutes = check_minutes

    def _scontrol(self, *args: str, check: bool = True) -> str:
        done = self.shell.run("scontrol " + " ".join(shlex.quote(a) for a in args), check=check)
        return (done.stdout + done.stderr).decode(errors="replace")

    def info(self, name: str) -> NodeInfo | None:
        done = self.shell.run(f"scontrol show node -o {shlex.quote(name)}", check=False)
        lines = [ln for ln in done.stdout.decode(errors="replace").splitlines() if ln.strip()]
        if done.returncode != 0 or len(lines) != 1:
            return None
        return parse_show_node(lines[0])

    def node(self, name: str) -> NodeState:
        info = self.info(name)
        if info is None:
            return NodeState(node=name, present=False, detail=f"scontrol show node {name}: no such node")
        state = view(info)
        if info.draining_or_drained:
            return state
        # Resumed inside a check's reservation: still out of service, held by that incident (the
        # node's own MAINTENANCE+RESERVED flags show only after the controller's next pass).
        resv = self.check_reservation(name)
        if resv:
            held = resv.removesuffix(HOLD)
            return replace(state, in_service=False, held_by=held, detail=f"{state.detail}, in reservation {resv}")
        return state

    def check_reservation(self, name: str) -> str | None:
        """The heal check's reservation, or an incident's hold of its slot (``<incident>-slot``),
        that holds ``name``, if one does."""
        done = self.shell.run("scontrol show reservation -o", check=False)
        for line in done.stdout.decode(errors="replace").splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            rname, nodes = fields.get("ReservationName", ""), fields.get("Nodes", "")
            if not rname.startswith("h-") or "MAINT" not in fields.get("Flags", "").split(","):
                continue
            hosts = self.shell.run(f"scontrol show hostnames {shlex.quote(nodes)}", check=False)
            if name in hosts.stdout.decode(errors="replace").split():
                return rname
        return None

    def quarantine(self, name: str, incident: str, why: str) -> Outcome:
        info = self.info(name)
        if info is None:
            return Outcome(ok=False, detail=f"no node {name}")
        if held_by(info.reason) != incident or not info.draining_or_drained:
            self._scontrol("update", f"nodename={name}", "state=drain", f"reason={reason_for(incident, why)}")
            info = self.info(name)
            assert info is not None
        if held_by(info.reason) != incident:
            return Outcome(ok=False, detail=f"scontrol did not keep the reason: {info.state} {info.reason!r}")
        if not info.drained:
            return Outcome(
                ok=False, pending=True, detail=f"draining: {info.state}; still running: {self.jobs_on(name)}"
            )
        return Outcome(ok=True, detail=f"drained: {info.state}, reason {info.reason!r}")

    def jobs_on(self, name: str) -> str:
        """The jobs on the node, as squeue(1) names them (``-w`` a node list, ``-h`` no header,
        ``%i`` job id, ``%j`` name, ``%u`` user, ``%T`` state)."""
        done = self.shell.run(f"squeue -h -w {shlex.quote(name)} -o '%i %j %u %T'", check=False)
        jobs = [" ".join(ln.split()) for ln in done.stdout.decode(errors="replace").splitlines() if ln.strip()]
        return "; ".join(f"job {j}" for j in jobs[:5]) or "(squeue lists no job; its jobs are ending)"

    def release(self, name: str, incident: str) -> Outcome:
        info = self.info(name)
        if info is None:
            return Outcome(ok=False, detail=f"no node {name}")
        # A replacement that registered drained, unvalidated (Azure Slurm, components/contract.py
        # UNVALIDATED_SLURM_REASON) is released like heal's own drain: release follows only a
        # passed revalidation, the one thing that lifts that mark (I6).
        registered = unvalidated_reason(info.reason)
        if info.draining_or_drained and held_by(info.reason) != incident and not registered:
            return Outcome(ok=False, detail=f"its drain is not this incident's: {info.reason!r}; left as it is")
        held = self._hold_of(name, incident)
        if info.draining_or_drained:
            self._scontrol("update", f"nodename={name}", "state=resume")
        after = self.info(name)
        assert after is not None
        if after.draining_or_drained:
            return Outcome(ok=False, detail=f"still {after.state} after state=resume")
        said = f"state=resume: {after.state}" + (", registration drain lifted" if registered else "")
        if held:
            # The slot's hold goes last: until then the node takes no user job (I6).
            self._scontrol("delete", f"reservation={held}", check=False)
            if self._hold_of(name, incident):
                return Outcome(ok=False, detail=f"scontrol delete reservation={held} left it; {said}")
            said += f"; reservation {held} deleted"
        return Outcome(ok=True, detail=said)

    def _hold_of(self, name: str, incident: str) -> str | None:
        resv = incident + HOLD
        shown = self.shell.run(f"scontrol show reservation -o {shlex.quote(resv)}", check=False)
        line = shown.stdout.decode(errors="replace")
        if shown.returncode != 0 or f"ReservationName={resv} " not in line:
            return None
        nodes = dict(f.split("=", 1) for f in line.split() if "=" in f).get("Nodes", "")
        hosts = self.shell.run(f"scontrol show hostnames {shlex.quote(nodes)}", check=False)
        return resv if name in hosts.stdout.decode(errors="replace").split() else None

    def hold(self, name: str, incident: str) -> Outcome:
        """Keep the slot out of user work across its relaunch (I6): a maintenance reservation of
        the node alone, ``<incident>-slot``, that outlives the drain (a power down clears it) and
        the node's slurmd (a new one registering under the name finds it there). ``IGNORE_JOBS``:
        made while the node still runs jobs heal waits for; ``Duration=UNLIMITED``: it lasts until
        the release after a passed revalidation deletes it, however long the relaunch takes
        (scontrol(1), RESERVATIONS; on slurm-wlm 22.05 it shows as 365 days). Idempotent."""
        if self._hold_of(name, incident):
            return Outcome(ok=True, detail=f"reservation {incident}{HOLD} holds {name}")
        try:
            self.shell.run(
                "scontrol create reservation "
                + " ".join(
                    shlex.quote(a)
                    for a in (
                        f"ReservationName={incident}{HOLD}",
                        f"Nodes={name}",
                        "StartTime=now",
                        "Duration=UNLIMITED",
                        "Flags=MAINT,IGNORE_JOBS",
                    )
                )
                + ' "Users=$(id -un)"'
            )
        except SchedulerError as exc:
            return Outcome(ok=False, detail=str(exc))
        if not self._hold_of(name, incident):
            return Outcome(ok=False, detail=f"reservation {incident}{HOLD} not found holding {name} after its create")
        return Outcome(ok=True, detail=f"reservation {incident}{HOLD} made: {name} takes no user job until released")

    def successor(self, slot_node: str, old_instance: str, new_instance: str) -> str | None:
        return slot_node  # a Slurm node keeps its name across a new instance (PCS, slurm-gcp)

    def forget(self, name: str, incident: str) -> Outcome:
        """Delete a dynamic node whose VM is gone (``scontrol delete nodename=``: "Only dynamic
        nodes that have no running jobs and that are not part of a reservation can be deleted",
        SchedMD dynamic_nodes.shtml), only while our drain for ``incident`` is on it."""
        info = self.info(name)
        if info is None:
            return Outcome(ok=True, detail=f"{name} is no longer a Slurm node")
        if held_by(info.reason) != incident:
            return Outcome(ok=False, detail=f"its drain is not this incident's: {info.state} {info.reason!r}; left")
        self._scontrol("delete", f"nodename={name}")
        if self.info(name) is not None:
            return Outcome(ok=False, detail=f"scontrol delete nodename={name} left it listed")
        return Outcome(ok=True, detail=f"{name} deleted from Slurm (scontrol delete nodename)")

    def open_for_check(self, name: str, peer: str, incident: str) -> Outcome:
        shown = self.shell.run(f"scontrol show reservation -o {shlex.quote(incident)}", check=False)
        if shown.returncode != 0 or f"ReservationName={incident} " not in shown.stdout.decode(errors="replace"):
            try:
                self.shell.run(
                    "scontrol create reservation "
                    + " ".join(
                        shlex.quote(a)
                        for a in (
                            f"ReservationName={incident}",
                            f"Nodes={name},{peer}",
                            "StartTime=now",
                            f"Duration={self.check_minutes}",
                            "Flags=MAINT,IGNORE_JOBS",
                        )
                    )
                    + ' "Users=$(id -un)"'
                )
            except SchedulerError as exc:
                return Outcome(ok=False, detail=str(exc))
        info = self.info(name)
        if info is not None and info.draining_or_drained:
            self._scontrol("update", f"nodename={name}", "state=resume")
        return Outcome(ok=True, detail=f"reservation {incident} holds {name} and {peer}")

    def close_check(self, name: str, peer: str, incident: str) -> None:
        # Out of service again before the reservation goes: only heal's release returns it.
        info = self.info(name)
        why = "checked; awaiting heal"
        if info is not None and not info.draining_or_drained:
            self._scontrol("update", f"nodename={name}", "state=drain", f"reason={reason_for(incident, why)}")
        self._scontrol("delete", f"reservation={incident}", check=False)


class SlurmChecker:
    """The validation's main phase on the two nodes, as a batch job in the incident's reservation
    (``sbatch --reservation --nodelist``, which override the script's own directives: sbatch(1)),
    with the pairwise search off and the sweeps at the floor's size only; judged by the job's own
    judge step, whose report comes back like ``validate submit``'s."""

    def __init__(
        self, shell: Shell, outputs: Any, args: argparse.Namespace, local_dir: Path, poll_s: float = 10.0
    ) -> None:
        self.poll_s = poll_s
        self.shell = shell
        self.outputs = outputs
        self.args = args
        self.local_dir = local_dir

    def estimate(self) -> tuple[float, str]:
        from gpu_cluster.components.catalog import load_catalog
        from gpu_cluster.components.validation_time import revalidate_estimate

        est = revalidate_estimate(load_catalog().get(self.outputs.instance_type))
        return est.seconds, est.basis

    def run_args(self) -> tuple[str, ...]:
        sizes = () if self.args.cpu else ("--sweep-min", "8G")
        return ("--pairwise", "never", *sizes, *getattr(self.args, "run_arg", ()))

    def check(self, node: str, peer: str, incident: str, purpose: str) -> CheckResult:
        from gpu_cluster.workloads.launch import bundle as code_bundle
        from gpu_cluster.workloads.launch import validation as vjob
        from gpu_cluster.workloads.launch.sbatch import render as render_sbatch

        run_id = f"heal-{incident}-{purpose}-{int(time.time())}"
        job = vjob.for_cluster(
            self.outputs,
            run_id,
            code_bundle.build(),
            python=self.args.python,
            cpu=self.args.cpu,
            procs_per_node=self.args.procs_per_node if self.args.cpu else None,
            run_args=self.run_args(),
            drain=False,
            strict=self.args.cpu,
            time_limit_min=max(10, int(self.estimate()[0] // 60) + 10),
            extra_env=dict(kv.split("=", 1) for kv in getattr(self.args, "env", ())),
            exclusive=not getattr(self.args, "shared", False),
            rdzv_port=getattr(self.args, "rdzv_port", 29500),
        )
        job = replace(job, nodes=2, skip_steps=("pairs", "storage", "fabric-only", "ddp"))
        script = render_sbatch(vjob.sbatch_spec(job))
        q = shlex.quote
        path = f"{job.workdir}/validate.sbatch"
        try:
            done = self.shell.run(
                f"mkdir -p {q(job.workdir)} && cat > {q(path)} && sbatch --parsable "
                f"--reservation={q(incident)} --nodelist={q(node + ',' + peer)} {q(path)}",
                stdin=script.encode(),
            )
            first = done.stdout.decode().strip().split(";", 1)[0]
            if not first.isdigit():
                return CheckResult(ran=False, passed=False, detail=f"sbatch gave no job id: {done.stdout!r}")
            sjob = SlurmJob(self.shell, job.workdir, int(first))
            final = sjob.follow(
                expected_nodes=2, poll_s=self.poll_s, timeout_s=job.time_limit_min * 60 + 300, say=print
            )
            dest = self.local_dir / "checks" / run_id
            sjob.fetch(dest)
        except SchedulerError as exc:
            return CheckResult(ran=False, passed=False, detail=str(exc))
        report = dest / "report.json"
        if not report.is_file():
            return CheckResult(
                ran=False, passed=False, detail=f"job {first} ended {final.state} with no report; see {dest}"
            )
        return judge_pair(json.loads(report.read_text(encoding="utf-8")), node, peer, str(report), final.state)
