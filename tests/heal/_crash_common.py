"""What the crash workers (_eks_crash_worker.py, _pcs_crash_worker.py) share: dying hard
(``os._exit``, as a SIGKILL leaves things: no finally, no flush) after the N-th journal line, or on
either side of the N-th call of a client's method, and the log of the calls that act, written and
fsynced before the process may die.

A kill point is ``N`` (after the N-th journal line), ``before:METHOD[#N]`` or ``after:METHOD[#N]``
(the N-th call of METHOD on a wrapped client, the first when no ``#N``), or ``none``.

The workers' clock: the journal and the engine's deadlines read the wall clock plus what the engine
has waited in this run, each wait counted as the poll it stands for and never slept (the tests
measure work, not the clock); the cluster's lock reads that plus an offset the test gives, a rerun
"later" than the killed run whose Lease it finds. Heal never compares its own clock with the
cloud's (the EKS replacement is told by EC2's LaunchTime against the old instance's
StateTransitionReason, both AWS's; tests/heal/test_aws.py skews heal's clock both ways)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

KILLED = 9


def die() -> None:
    os._exit(KILLED)


def line_killer(when: str) -> Callable[[str], None]:
    """The journal's echo: dies after the N-th line (on disk: written and fsynced before the echo)."""
    lines = [0]

    def echo(_line: str) -> None:
        lines[0] += 1
        if when.isdigit() and lines[0] == int(when):
            die()

    return echo


def call_point(when: str) -> tuple[str, str, int]:
    """``before:patch_node#2`` -> ("before", "patch_node", 2); ("", "", 0) for a line or none."""
    side, sep, rest = when.partition(":")
    if not sep or side not in ("before", "after"):
        return "", "", 0
    method, _, n = rest.partition("#")
    return side, method, int(n or 1)


class Dying:
    """A client that dies on the asked side of the N-th call of one method, and appends each call of
    the methods in ``logged`` to ``log`` (JSON lines, fsynced) once the call returned."""

    def __init__(self, client: Any, when: str, log: Path | None = None, logged: tuple[str, ...] = ()) -> None:
        self._client, self._log, self._logged = client, log, logged
        self._side, self._method, self._nth = call_point(when)
        self._calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._client, name)
        if not callable(real) or (name != self._method and name not in self._logged):
            return real

        def call(*a: Any, **kw: Any) -> Any:
            self._calls[name] = n = self._calls.get(name, 0) + 1
            mine = name == self._method and n == self._nth
            if mine and self._side == "before":
                die()
            got = real(*a, **kw)
            if name in self._logged and self._log is not None:
                append(self._log, {"call": name, **{k: v for k, v in kw.items() if not k.startswith("_")}})
            if mine and self._side == "after":
                die()
            return got

        return call


def append(log: Path, doc: dict[str, Any]) -> None:
    with log.open("a", encoding="utf-8") as f:
        f.write(json.dumps(doc, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_log(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


class Clock:
    """Wall clock + what this run has waited (each engine wait counted as ``poll_s``); ``lease``
    reads it ``offset_s`` ahead."""

    def __init__(self, offset_s: float, poll_s: float) -> None:
        self.offset, self.poll, self.waited = offset_s, poll_s, 0.0

    def __call__(self) -> float:
        return time.time() + self.waited

    def lease(self) -> float:
        return self() + self.offset

    def wait(self) -> None:
        self.waited += self.poll


# ---- what the tests read back from the Kubernetes API server (tests/kubeapi.py) -----------------


def record_nodes(store: Any, journal: Path, taint_key: str, history: list[dict[str, Any]]) -> None:
    """Append to ``history`` every state a node is written in, as the server stores it: its taint
    keys, its cordon, whether heal's journal held the node's revalidation ``passed`` line at that
    moment (I6), and how many nodes carried heal's taint then (I7)."""
    from gpu_cluster.heal.journal import read
    from gpu_cluster.heal.states import State

    def hook(st: Any, event: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        passed = journal.exists() and any(
            e.state is State.REVALIDATING and e.event == "passed" and e.node == name for e in read(journal)[0]
        )
        nodes = st.list(st.resource("nodes"), None)
        history.append(
            {
                "node": name,
                "event": event,
                "keys": {t.get("key") for t in obj["spec"].get("taints") or []},
                "cordoned": bool(obj["spec"].get("unschedulable")),
                "passed": passed,
                "held": sum(1 for n in nodes if any(t.get("key") == taint_key for t in n["spec"].get("taints") or [])),
            }
        )

    store.on("nodes", hook, "*")


def lease_holder(server: Any) -> str:
    st = server.store
    got = st.get(st.resource("leases", "coordination.k8s.io"), "kube-system", "gpu-cluster-heal")
    return str(got["spec"].get("holderIdentity") or "")


def killed_then_rerun(
    heal: Callable[..., tuple[int, str]], run_dir: Path, server: Any, kill: str, stale: float
) -> tuple[int, str]:
    """Kill heal at ``kill``, then rerun it with its Lease clock ``stale`` ahead (I9): the rerun
    says it took the Lease over from the killed process, by its pid."""
    if kill == "none":
        return heal(run_dir, "none")
    assert heal(run_dir, kill)[0] == KILLED
    holder = lease_holder(server)
    assert holder, "the killed heal held the Lease"
    code, out = heal(run_dir, "none", stale)
    pid = holder.split()[1].removeprefix("pid=")
    assert "took over Lease kube-system/gpu-cluster-heal from a stale holder" in out and f"pid {pid}," in out, out
    return code, out
