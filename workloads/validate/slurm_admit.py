"""Only a passed check admits a Slurm node to work (issue 41, I6): ``validate submit``'s side of the
registration drain.

On a stack whose nodes register themselves (Azure Slurm's dynamic nodes), a node registers drained
and its boot script sets the reason :data:`~gpu_cluster.components.contract.UNVALIDATED_SLURM_REASON`
(components/azure/slurm_config.py). A drained node takes no job, not even one of a reservation
(gpu_cluster/heal/slurm.py), so ``submit`` does what heal's check does, in this order:

1. takes the nodes of the partition drained with the registration's reason, and only those: a drain
   of anyone else's (a person's, the judge's, heal's) is left as it is;
2. holds them, and as many of the partition's other nodes in service as the job needs, in one
   maintenance reservation, ``gpuc-validate-<run id>`` (``Flags=MAINT,IGNORE_JOBS``: made while
   those nodes still run jobs), read back;
3. marks each taken node (its ``Comment``, scontrol(1) UPDATE NODE: "Arbitrary descriptive
   string") and resumes it inside the reservation, read back: it shows
   ``IDLE+MAINTENANCE+RESERVED`` and a user's job waits;
4. runs the validation's job with ``--reservation``;
5. after the judge: a taken node the report PASSed or WARNed keeps running (its mark cleared); one
   it FAILed, or did not measure, is drained again with the registration's reason (read back); then
   the reservation is deleted (read back), and only then does a passed node take user work.

A ``submit`` killed after a resume leaves a marked node resumed inside its reservation, which has
no end (``Duration=UNLIMITED``) so that it never lapses into service; the next ``submit``
(:func:`recover`) drains every marked node that is not drained, with the registration's reason, and
deletes the leftover ``gpuc-validate-`` reservations, before it takes anything: a node it resumed is
never left in service without a pass. A reservation a job still runs or waits in (another
``submit`` running now, or a killed one's job still running) is left, with its nodes, to its own
``submit`` or to a later one: the live validation is not cut off.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from gpu_cluster.components.contract import UNVALIDATED_SLURM_REASON, unvalidated_reason
from gpu_cluster.workloads.launch.slurm_nodes import NodeInfo, parse_show_node
from gpu_cluster.workloads.validate.slurm import SchedulerError, Shell

RESERVATION_PREFIX = "gpuc-validate-"
MARK = "gpuc-validate-resumed"
"""A taken node's Comment while it is resumed inside the reservation."""
# A node in these states takes no job: scontrol(1) NODE STATE CODES.
_UNUSABLE = frozenset({"DOWN", "FUTURE", "NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN", "FAIL"})


def _q(*args: str) -> str:
    return " ".join(shlex.quote(a) for a in args)


def nodes(shell: Shell, partition: str | None) -> list[NodeInfo]:
    """Every node of the partition, as ``scontrol show node`` reports it."""
    part = f" -p {shlex.quote(partition)}" if partition else ""
    names = shell.run(f"sinfo -N -h{part} -o '%N'").stdout.decode().split()
    return [i for n in sorted(set(names)) if (i := info(shell, n)) is not None]


def info(shell: Shell, name: str) -> NodeInfo | None:
    done = shell.run(f"scontrol show node -o {shlex.quote(name)}", check=False)
    lines = [ln for ln in done.stdout.decode(errors="replace").splitlines() if ln.strip()]
    return parse_show_node(lines[0]) if done.returncode == 0 and len(lines) == 1 else None


def comment(shell: Shell, name: str) -> str:
    done = shell.run(f"scontrol show node -o {shlex.quote(name)}", check=False)
    line = done.stdout.decode(errors="replace")
    return line.split(" Comment=", 1)[1].split(" ", 1)[0].strip() if " Comment=" in line else ""


def reservation_nodes(shell: Shell, name: str) -> list[str] | None:
    """The nodes reservation ``name`` holds, or None when there is no such reservation."""
    shown = shell.run(f"scontrol show reservation -o {shlex.quote(name)}", check=False)
    line = shown.stdout.decode(errors="replace")
    if shown.returncode != 0 or f"ReservationName={name} " not in line:
        return None
    spec = dict(f.split("=", 1) for f in line.split() if "=" in f).get("Nodes", "")
    hosts = shell.run(f"scontrol show hostnames {shlex.quote(spec)}", check=False)
    return hosts.stdout.decode(errors="replace").split()


def _drain(shell: Shell, name: str, why: str) -> NodeInfo:
    reason = f"{UNVALIDATED_SLURM_REASON}: {why}"[:120]
    shell.run("scontrol update " + _q(f"nodename={name}", "state=drain", f"reason={reason}"))
    shell.run("scontrol update " + _q(f"nodename={name}", "comment="), check=False)
    back = info(shell, name)
    if back is None or not back.draining_or_drained or not unvalidated_reason(back.reason):
        raise SchedulerError(f"{name}: drained with the registration reason, but reads back {back}")
    return back


def live(shell: Shell, reservation: str) -> bool:
    """Whether a job runs or waits in ``reservation`` (squeue(1) ``--reservation``, ``-h`` no header,
    ``-o %i`` the job id): a submit's own job, which its close, not another submit, ends."""
    out = shell.run("squeue -h -o %i " + _q(f"--reservation={reservation}"), check=False)
    return bool(out.stdout.decode(errors="replace").strip())


def recover(shell: Shell, partition: str | None, say: Callable[[str], None]) -> None:
    """Undo what a killed ``submit`` left: a marked node not drained is drained with the
    registration's reason (it was never passed), then our leftover reservations are deleted; both
    only where no job runs or waits in the node's reservation (:func:`live`)."""
    shown = shell.run("scontrol show reservation -o", check=False).stdout.decode(errors="replace")
    ours = [
        name
        for line in shown.splitlines()
        if (name := dict(f.split("=", 1) for f in line.split() if "=" in f).get("ReservationName", "")).startswith(
            RESERVATION_PREFIX
        )
    ]
    busy = {name for name in ours if live(shell, name)}
    for name in sorted(busy):
        say(f"reservation {name}: a validation job still runs or waits in it; left, with its nodes, to its submit")
    for n in nodes(shell, partition):
        mark = comment(shell, n.name)
        if mark.startswith(MARK) and not n.draining_or_drained and mark.partition(":")[2] not in busy:
            _drain(shell, n.name, "resumed by a validate submit that did not finish")
            say(f"{n.name}: resumed by an earlier submit that did not finish; drained again (read back)")
    for name in ours:
        if name not in busy:
            shell.run("scontrol delete " + _q(f"reservation={name}"), check=False)
            say(f"reservation {name} of an earlier submit deleted")


@dataclass(frozen=True, slots=True)
class Admission:
    """The reservation a submit runs in and the registration-drained nodes it resumed there."""

    reservation: str
    taken: tuple[str, ...]
    members: tuple[str, ...]

    def sbatch_args(self) -> tuple[str, ...]:
        return (f"--reservation={self.reservation}",)


def open_admission(
    shell: Shell, partition: str | None, run_id: str, want: int, say: Callable[[str], None]
) -> Admission | None:
    """Steps 1-3 of the module notes, for a job of ``want`` nodes: the taken nodes and as many
    others in service as make up ``want`` (idle ones first), so no more nodes than the job needs
    leave user work. None when no node of the partition is drained with the registration's reason
    (the job then runs as it always has, outside any reservation)."""
    recover(shell, partition, say)
    every = nodes(shell, partition)
    taken = [n.name for n in every if n.drained and n.base_state == "IDLE" and unvalidated_reason(n.reason)]
    for n in every:
        if n.draining_or_drained and not unvalidated_reason(n.reason):
            say(f"{n.name}: drained for another reason ({n.reason or 'none given'}); left as it is")
    if not taken:
        return None
    others = [
        n.name
        for n in sorted(every, key=lambda n: n.base_state != "IDLE")
        if n.name not in taken and not n.draining_or_drained and not ({n.base_state} | n.flags) & _UNUSABLE
    ]
    members = (*taken, *others[: max(0, want - len(taken))])
    name = f"{RESERVATION_PREFIX}{run_id}"
    # scontrol(1) of slurm-wlm 22.05, RESERVATIONS: Duration's "Valid formats are minutes, ... or
    # UNLIMITED",
    # as heal's slot hold (gpu_cluster/heal/slurm.py): a killed submit's reservation never ends by
    # itself with a resumed node in it; IGNORE_JOBS "Ignore currently running jobs when creating the
    # reservation"; MAINT as heal's check uses it (a resumed node shows IDLE+MAINTENANCE+RESERVED).
    shell.run(
        "scontrol create reservation "
        + _q(
            f"ReservationName={name}",
            f"Nodes={','.join(members)}",
            "StartTime=now",
            "Duration=UNLIMITED",
            "Flags=MAINT,IGNORE_JOBS",
        )
        + ' "Users=$(id -un)"'
    )
    held = reservation_nodes(shell, name)
    if held is None or set(held) != set(members):
        raise SchedulerError(f"reservation {name} holds {held} after its create, not {', '.join(members)}")
    say(f"reservation {name} holds {', '.join(members)} (read back)")
    for node in taken:
        shell.run("scontrol update " + _q(f"nodename={node}", f"comment={MARK}:{name}"))
        shell.run("scontrol update " + _q(f"nodename={node}", "state=resume"))
        back = info(shell, node)
        if back is None or back.draining_or_drained:
            raise SchedulerError(f"{node}: still {back.state if back else 'missing'} after state=resume")
        say(f"{node}: registered unvalidated; resumed inside {name} for the validation only ({back.state})")
    return Admission(name, tuple(taken), tuple(members))


def close_admission(shell: Shell, adm: Admission, report: Path, say: Callable[[str], None]) -> list[str]:
    """Step 5 of the module notes: the taken nodes the report passed (PASS or WARN) are returned to
    service, the others drained again; the reservation deleted. Returns the nodes returned."""
    verdicts: dict[str, str] = {}
    if report.is_file():
        doc = json.loads(report.read_text(encoding="utf-8"))
        verdicts = {str(n.get("node")): str(n.get("verdict")) for n in doc.get("nodes", [])}
    returned = []
    for node in adm.taken:
        verdict = verdicts.get(node)
        if verdict in ("PASS", "WARN"):
            shell.run("scontrol update " + _q(f"nodename={node}", "comment="), check=False)
            returned.append(node)
            continue
        why = f"{verdict or 'not measured'} in {adm.reservation.removeprefix(RESERVATION_PREFIX)}"
        back = _drain(shell, node, why)
        say(f"{node}: {verdict or 'not measured'}; drained again with the registration reason ({back.reason!r})")
    shell.run("scontrol delete " + _q(f"reservation={adm.reservation}"), check=False)
    if reservation_nodes(shell, adm.reservation) is not None:
        raise SchedulerError(f"scontrol delete reservation={adm.reservation} left it: delete it by hand")
    for node in returned:
        now = info(shell, node)
        if now is None or now.draining_or_drained:
            raise SchedulerError(f"{node}: passed, but reads back {now} after its reservation went")
        say(f"{node}: passed; returned to service (reservation {adm.reservation} deleted, read back)")
    _record(report, returned)
    return returned


def _record(report: Path, admitted: Iterable[str]) -> None:
    """The report lists the nodes admitted to work (``admitted``), as on Kubernetes."""
    admitted = sorted(admitted)
    if not admitted or not report.is_file():
        return
    doc = json.loads(report.read_text(encoding="utf-8"))
    doc["admitted"] = sorted({*doc.get("admitted", []), *admitted})
    report.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    md = report.with_name("report.md")
    if md.is_file():
        md.write_text(
            md.read_text(encoding="utf-8")
            + f"\nAdmitted to work (registration drain lifted): {', '.join(admitted)}.\n",
            encoding="utf-8",
        )
