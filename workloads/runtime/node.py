"""Which node this process runs on, and the test-only faults that make one node slow or fail.

A node's name is what its scheduler calls it, so that a verdict can be acted on: Slurm's
``SLURMD_NODENAME`` (the name ``scontrol update`` takes), Kubernetes' node name passed in by
the pod spec as ``NODE_NAME``, else the host name. ``GPUC_NODE_NAME`` overrides all three (the
local mode runs two "nodes" on one host).
"""

from __future__ import annotations

import os
import socket
import time


def node_name() -> str:
    for var in ("GPUC_NODE_NAME", "SLURMD_NODENAME", "NODE_NAME"):
        value = os.environ.get(var, "").strip()
        if value:
            return value
    return socket.gethostname()


# Test hooks. They are how the tests make one node of a real run slow or dead; a user never
# sets them. Each names the node it applies to, so the same environment can go to every node.


def _targets(var: str) -> bool:
    return os.environ.get(var, "").strip() == node_name()


def stall() -> None:
    """On the node named by GPUC_INJECT_SLOW_NODE, sleep GPUC_INJECT_SLOW_MS (default 20) ms:
    called inside timed loops, it makes that node a straggler the way a throttled GPU would."""
    if _targets("GPUC_INJECT_SLOW_NODE"):
        time.sleep(float(os.environ.get("GPUC_INJECT_SLOW_MS", "20")) / 1000.0)


def hang_here() -> None:
    """On the node named by GPUC_INJECT_HANG_NODE, never finish: called inside the collectives'
    timed loops only, every rank has arrived and this one never completes its call, as a
    collective hung on a bad link does (not a rank that never arrived). GPUC_INJECT_HANG_PHASES
    (a comma list of validation phases, default every one) limits where."""
    phases = [p for p in os.environ.get("GPUC_INJECT_HANG_PHASES", "").split(",") if p.strip()]
    if _targets("GPUC_INJECT_HANG_NODE") and (not phases or os.environ.get("GPUC_PHASE", "") in phases):
        time.sleep(3600)


def wedge_here(where: str) -> None:
    """On the node named by GPUC_INJECT_WEDGE_NODE, never return from the work named by
    GPUC_INJECT_WEDGE_AT ('health': the matmul's sync; 'init': the process group's setup;
    'device': the device's context creation), as a
    wedged GPU's synchronize or a communicator init on a dead NIC never returns."""
    if _targets("GPUC_INJECT_WEDGE_NODE") and os.environ.get("GPUC_INJECT_WEDGE_AT", "") == where:
        time.sleep(3600)


def maybe_fail(phase: str) -> None:
    """On the node named by GPUC_INJECT_FAIL_NODE, die hard at the start of the phases named by
    GPUC_INJECT_FAIL_PHASE (comma-separated, default 'main'), as a node that loses power does: no
    message, no cleanup. A node that lost power stays dead for the pairwise search too
    ('main,pairs'); one that dies in 'main' alone and then passes the search is a process that
    crashed, which the judge holds as a suspect, not a FAIL."""
    phases = {p.strip() for p in os.environ.get("GPUC_INJECT_FAIL_PHASE", "main").split(",")}
    if _targets("GPUC_INJECT_FAIL_NODE") and phase in phases:
        os._exit(17)


def no_device_here() -> str | None:
    """On the node named by GPUC_INJECT_NO_DEVICE_NODE, the reason its ranks get no device, as
    on a node whose GPU fell off the bus: device setup fails there before the group forms."""
    if _targets("GPUC_INJECT_NO_DEVICE_NODE"):
        return f"no GPU is visible on {node_name()} (injected: GPUC_INJECT_NO_DEVICE_NODE)"
    return None
