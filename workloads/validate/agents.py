"""Which nodes reached a rendezvous, from the torchrun agents' own output.

When a rendezvous never completes (one node's agent never starts: a pod Pending or unable to pull
its image, a node Slurm could not launch on, an interpreter missing), no worker starts and no
rank writes a status line: the status files cannot tell the node that never came from the nodes
that waited for it. Each node's agent output is kept in the run directory
(``agents/<step>-<node>.log``: ``workloads.launch`` tees torchrun's output there, ``sbatch`` under
``SLURMD_NODENAME``, a JobSet's pod under its host name, and a pod writes a line there as soon as
it starts, before it waits for pod 0's name).

What a log shows (torch 2.13, ``torch/distributed/elastic``): an agent that waited for the others
and gave up raises ``RendezvousTimeoutError`` (its traceback is printed at any log level); with
``LOGLEVEL=INFO`` it also prints ``Rendezvous'ing worker group``; a pod that could not reach pod 0
says ``rendezvous host ... did not resolve``; our pod's first line says it started and is waiting.
A log with none of those but an error of its own (a traceback, "No such file", "not found") is a
node that failed before the rendezvous: the cause, not a victim.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_REACHED = (
    re.compile(r"RendezvousTimeoutError"),
    re.compile(r"Rendezvous'ing worker group"),
    re.compile(r"[Rr]endezvous complete for workers"),
    re.compile(r"has joined round \d+ of the rendezvous"),
    re.compile(r"attempts to join the next round of the rendezvous"),
    re.compile(r"rendezvous host \S+ did not resolve"),
    re.compile(r"started on \S+; waiting for the rendezvous host"),
)
_OWN_ERROR = re.compile(
    r"(Traceback \(most recent call last\)|No such file or directory|command not found|: not found|"
    r"ModuleNotFoundError|ImportError|Segmentation fault|Killed|error while loading shared libraries)"
)
_TIMEOUT = re.compile(r"RendezvousTimeoutError")


@dataclass(frozen=True, slots=True)
class AgentLog:
    node: str
    path: Path
    reached: bool
    """The agent (or the pod before it) reached the rendezvous and waited there."""
    evidence: str
    """The line that says so, or the node's own error, shortened."""


def _node_of(path: Path, step: str) -> str:
    return path.name[len(step) + 1 : -len(".log")]


def read(run_dir: Path, step: str = "main") -> dict[str, AgentLog]:
    """node -> what its agent log for ``step`` shows; empty when the run kept no agent logs."""
    out: dict[str, AgentLog] = {}
    folder = run_dir / "agents"
    if not folder.is_dir():
        return out
    for path in sorted(folder.glob(f"{step}-*.log")):
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        node = _node_of(path, step)
        reached = [ln for ln in lines if any(rx.search(ln) for rx in _REACHED)]
        # The last rendezvous line a node printed says the most (it waited, then timed out).
        timeout = [ln for ln in lines if _TIMEOUT.search(ln)]
        own = [ln for ln in lines if _OWN_ERROR.search(ln) and not _TIMEOUT.search(ln)]
        waited = bool(timeout) or any("Rendezvous'ing" in ln or "joined round" in ln for ln in reached)
        if waited or (reached and not own):
            line = (timeout or reached)[-1].strip()
            out[node] = AgentLog(node, path, True, f"reached the rendezvous ({line[-160:]})")
        else:
            # Started (the pod's first line) but failed on its own before the rendezvous.
            why = (own[-1] if own else lines[-1] if lines else "an empty log").strip()
            out[node] = AgentLog(node, path, False, f"failed before the rendezvous: {why[-200:]}")
    return out
