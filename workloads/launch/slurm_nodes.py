"""Read and change a Slurm node's state: what bad-node isolation needs from the scheduler.

A node that fails validation is drained (``scontrol update nodename=X state=drain
reason=...``): running jobs finish, no new job lands there, and the reason is kept for the
operator. ``resume`` returns it to service once it has been repaired.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

_NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
# Keys of `scontrol show node -o` that come after Reason= in 22.05..24.x; Reason itself may
# hold blanks, so it runs up to the next of these (or the end of the line).
_AFTER_REASON = re.compile(r" (?:Comment|Extra|ResumeAfterTime|Partitions|NextState)=")


class SlurmNodeError(RuntimeError):
    """scontrol refused or the node does not exist; the message holds scontrol's answer."""


@dataclass(kw_only=True, frozen=True, slots=True)
class NodeInfo:
    """One node as ``scontrol show node`` reports it."""

    name: str
    """Slurm node name."""
    state: str
    """Full state with flags, e.g. ``IDLE``, ``IDLE+DRAIN``, ``ALLOCATED+DRAIN``."""
    addr: str
    """NodeAddr: where to reach the node (what a rendezvous endpoint must use)."""
    reason: str
    """Why the node is drained or down ('' when none)."""

    @property
    def base_state(self) -> str:
        """The state before the first ``+`` (``IDLE``, ``ALLOCATED``, ``MIXED``, ``DOWN``...), without
        the ``*`` scontrol appends to a node that does not respond (``DOWN*``)."""
        return self.state.split("+", 1)[0].rstrip("*")

    @property
    def flags(self) -> frozenset[str]:
        """The flags after the base state: ``DRAIN``, ``PLANNED``, ``MAINTENANCE``, ``RESERVED``...

        Slurm adds flags of its own whenever it likes (the backfill scheduler marks an idle node
        ``PLANNED`` once it has planned a pending job onto it: Slurm 22.05's sinfo(1), NODE STATE CODES), so a
        caller asks for the flag it means, never for the whole string."""
        return frozenset(self.state.split("+")[1:])

    @property
    def draining_or_drained(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def drained(self) -> bool:
        """Drained and empty: safe to repair (``DRAINING`` still runs jobs)."""
        return self.draining_or_drained and self.base_state in {"IDLE", "DOWN"}


def _check_node(name: str) -> None:
    if not _NODE_RE.match(name):
        raise SlurmNodeError(f"{name!r} is not a Slurm node name (allowed: [A-Za-z0-9][A-Za-z0-9_.-]*)")


def _scontrol(args: list[str], env: Mapping[str, str] | None, timeout_s: float) -> str:
    # No shell: the reason is one argv element, whatever blanks or quotes it holds.
    done = subprocess.run(
        ["scontrol", *args],
        capture_output=True,
        text=True,
        env=dict(env) if env is not None else None,
        timeout=timeout_s,
    )
    if done.returncode != 0:
        raise SlurmNodeError(f"scontrol {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def parse_show_node(line: str) -> NodeInfo:
    """Parse one line of ``scontrol show node -o``."""
    fields: dict[str, str] = {}
    reason = ""
    head = line.strip()
    if " Reason=" in head:
        head, tail = head.split(" Reason=", 1)
        cut = _AFTER_REASON.search(tail)
        reason, rest = (tail[: cut.start()], tail[cut.start() :]) if cut else (tail, "")
        head = f"{head} {rest}"
    for token in head.split():
        key, sep, value = token.partition("=")
        if sep:
            fields.setdefault(key, value)
    if "NodeName" not in fields or "State" not in fields:
        raise SlurmNodeError(f"cannot read scontrol show node output: {line!r}")
    return NodeInfo(
        name=fields["NodeName"], state=fields["State"], addr=fields.get("NodeAddr", ""), reason=reason.strip()
    )


def show(node: str, *, env: Mapping[str, str] | None = None, timeout_s: float = 30.0) -> NodeInfo:
    """The node's current state, address and reason."""
    _check_node(node)
    out = _scontrol(["show", "node", "-o", node], env, timeout_s)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if len(lines) != 1:
        raise SlurmNodeError(f"expected one node named {node!r}, scontrol said: {out.strip()!r}")
    return parse_show_node(lines[0])


def drain(node: str, reason: str, *, env: Mapping[str, str] | None = None, timeout_s: float = 30.0) -> NodeInfo:
    """Drain ``node`` with ``reason`` (required by Slurm, shown by ``sinfo -R``); return its new state."""
    _check_node(node)
    if not reason.strip() or any(ord(c) < 0x20 for c in reason):
        raise SlurmNodeError(f"drain reason {reason!r} must be one non-empty line")
    _scontrol(["update", f"nodename={node}", "state=drain", f"reason={reason}"], env, timeout_s)
    return show(node, env=env, timeout_s=timeout_s)


def resume(node: str, *, env: Mapping[str, str] | None = None, timeout_s: float = 30.0) -> NodeInfo:
    """Return a drained (or down) ``node`` to service; return its new state."""
    _check_node(node)
    _scontrol(["update", f"nodename={node}", "state=resume"], env, timeout_s)
    return show(node, env=env, timeout_s=timeout_s)
