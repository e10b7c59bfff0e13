"""Which nodes reached a rendezvous, from the torchrun agents' own output.

When a rendezvous never completes (one node's agent never starts: a pod Pending or unable to pull
its image, a node Slurm could not launch on, an interpreter missing), no worker starts and no
rank writes a status line: the status files cannot tell the node that never came from the nodes
that waited for it. Each node's agent output is kept in the run directory
(``agents/<step>-<node>.log``: ``gpu_cluster.workloads.launch`` tees torchrun's output there, ``sbatch`` under
``SLURMD_NODENAME``, a JobSet's pod under its host name, and a pod writes a line there as soon as
it starts, before it waits for pod 0's name).

What a log shows, as torch's elastic rendezvous means it (torch 2.13.0,
``torch/distributed/elastic/rendezvous/``): the agent that waited for the others until its join
timeout raises ``RendezvousTimeoutError`` (``dynamic_rendezvous.py`` ``_RendezvousOpExecutor.run``,
``_Action.ERROR_TIMEOUT``) and, leaving, closes the rendezvous (``launcher/api.py`` ``launch_agent``
calls ``shutdown()``, which runs ``_RendezvousCloseOp``); every agent still waiting then reads the
closed state and raises ``RendezvousClosedError`` (``_Action.ERROR_CLOSED``). When the agent that
hosts the c10d store leaves, the agents still syncing with it lose the store:
``RendezvousConnectionError`` from ``c10d_rendezvous_backend.py`` ``_call_store``. All three are
witnesses: they reached the rendezvous and waited for a node that never came. An agent that
cannot reach the store at all raises ``RendezvousConnectionError`` from ``_create_tcp_store``
before it joins: a witness too, and when every agent says so, the store's host (the job's first
node: Slurm's first host, a JobSet's pod 0) is the suspect. A pod that could not resolve pod 0
says ``rendezvous host ... did not resolve``; our pod's first line says it started and is waiting.
A log with none of those but an error of its own (a traceback, "No such file", "not found") is a
node that failed before the rendezvous: the cause, not a victim. A node with no log never started.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Outcome = Literal["joined", "timed-out", "closed", "store-lost", "no-store", "waiting", "own-error"]

_REACHED = (
    re.compile(r"Rendezvous'ing worker group"),
    re.compile(r"[Rr]endezvous complete for workers"),
    re.compile(r"has joined round \d+ of the rendezvous"),
    re.compile(r"attempts to join the next round of the rendezvous"),
    re.compile(r"rendezvous host \S+ did not resolve"),
    re.compile(r"started on \S+; waiting for the rendezvous host"),
)
_JOINED = re.compile(r"has joined round \d+ of the rendezvous|[Rr]endezvous complete for workers")
_OWN_ERROR = re.compile(
    r"(Traceback \(most recent call last\)|No such file or directory|command not found|: not found|"
    r"ModuleNotFoundError|ImportError|Segmentation fault|Killed|error while loading shared libraries)"
)
_TIMEOUT = re.compile(r"RendezvousTimeoutError")
_CLOSED = re.compile(r"RendezvousClosedError")
_CONNECTION = re.compile(r"RendezvousConnectionError")
_CREATE_STORE = re.compile(r"in _create_tcp_store\b")
_STORE_OP = re.compile(r"in _call_store\b|has failed to shutdown the rendezvous")
_STORE_HOST = (
    re.compile(r"trying to connect to \(([^,\s]+), \d+\)"),
    re.compile(r"failed to connect/validate to host ([^\s:]+):\d+"),
    re.compile(r"waiting for the rendezvous host (\S+)"),
)


@dataclass(frozen=True, slots=True)
class AgentLog:
    node: str
    path: Path
    reached: bool
    """The agent (or the pod before it) reached the rendezvous and waited there (or was trying
    to reach its store): a witness, not a cause."""
    evidence: str
    """The line that says so, or the node's own error, shortened."""
    outcome: Outcome = "waiting"
    """How its rendezvous ended, in torch's terms (see the module's docstring)."""
    store: str = ""
    """The rendezvous store's host the log names (as the agent was given it), if any."""


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
        out[node] = classify(node, path, lines)
    return out


def _last(lines: list[str], rx: re.Pattern[str]) -> str:
    return next((ln.strip() for ln in reversed(lines) if rx.search(ln)), "")


def classify(node: str, path: Path, lines: list[str]) -> AgentLog:
    """What one agent's log says about its rendezvous (see the module's docstring)."""
    store = next((m.group(1) for ln in lines for rx in _STORE_HOST if (m := rx.search(ln))), "")
    # The exception the agent ended on says the most; the lines before it only that it waited.
    if any(_JOINED.search(ln) for ln in lines):
        line = _last(lines, _JOINED)
        return AgentLog(node, path, True, f"joined the rendezvous ({line[-160:]})", "joined", store)
    if any(_TIMEOUT.search(ln) for ln in lines):
        return AgentLog(
            node,
            path,
            True,
            "reached the rendezvous and timed out waiting for the others (RendezvousTimeoutError)",
            "timed-out",
            store,
        )
    if any(_CLOSED.search(ln) for ln in lines):
        return AgentLog(
            node,
            path,
            True,
            "reached the rendezvous and found it closed by an agent that gave up waiting (RendezvousClosedError)",
            "closed",
            store,
        )
    if any(_CONNECTION.search(ln) for ln in lines):
        if any(_CREATE_STORE.search(ln) for ln in lines) and not any(_STORE_OP.search(ln) for ln in lines):
            where = f" at {store}" if store else ""
            return AgentLog(
                node,
                path,
                True,
                f"could not reach the rendezvous store{where} (RendezvousConnectionError creating the c10d store)",
                "no-store",
                store,
            )
        return AgentLog(
            node,
            path,
            True,
            "reached the rendezvous and lost its store while waiting: the agent hosting it left "
            "(RendezvousConnectionError)",
            "store-lost",
            store,
        )
    reached = [ln for ln in lines if any(rx.search(ln) for rx in _REACHED)]
    own = [ln for ln in lines if _OWN_ERROR.search(ln)]
    if reached and not own:
        line = reached[-1].strip()
        return AgentLog(node, path, True, f"reached the rendezvous ({line[-160:]})", "waiting", store)
    # Started (the pod's first line) but failed on its own before the rendezvous.
    why = (own[-1] if own else lines[-1] if lines else "an empty log").strip()
    return AgentLog(node, path, False, f"failed before the rendezvous: {why[-200:]}", "own-error", store)
