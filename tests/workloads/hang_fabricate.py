"""Run directories of hung and never-rendezvoused validation runs, written by the writers the phases
use (gpu_cluster.workloads.validate.run.Status for every rank's status line, the watchdog's own message,
pair_jobs.search for the pairwise result) and, for the torchrun agents' logs, by a real c10d
rendezvous of several torchrun agents one node never joins (one timed out, the others found it
closed or lost its store): the exact shapes a cluster leaves."""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path
from typing import Literal

from gpu_cluster.workloads.health import hang
from gpu_cluster.workloads.validate.run import Status
from gpu_cluster.workloads.validate.run_config import Phase, RunConfig

Scenario = Literal["nccl-abort", "watchdog", "cpu-hang"]
LOOP = "all_reduce size 8589934592 B (8G) in-place (timed loop)"


def main_statuses(
    out: Path,
    nodes: list[str],
    ranks_per_node: int,
    culprit: str,
    scenario: Scenario,
    *,
    phase: Phase = "main",
    later_s: float = 0.0,
) -> None:
    """Every rank's status line of ``phase`` (the main phase unless told) after a hang of ``culprit``,
    its clock ``later_s`` after now (a later step of the same job):

    - nccl-abort: a wedged GPU on ``culprit``: every rank queued the same launches (the GPU's are
      queued too, the sync never returns), NCCL's async error handling ended every process at once;
      each line stays 'joined', last beats within a second.
    - watchdog: the same hang, but our watchdog spoke first on every rank: each line is its error.
    - cpu-hang: ``culprit``'s host thread stuck before launching the last calls; the others waited
      inside the call it never reached; NCCL then tore every rank down.
    """
    cfg = RunConfig(out_dir=out, phase=phase)
    for i, node in enumerate(nodes):
        for g in range(ranks_per_node):
            rank = i * ranks_per_node + g
            st = Status(cfg, node, rank)
            st.set("started")
            st.set("device-ready")
            st.set("joined")
            st._stop.set()  # noqa: SLF001 - the process is gone: its line stops beating
            entered = 408 if scenario == "cpu-hang" and node == culprit else 412
            st.doc["calls"] = {"entered": entered, "completed": 392, "what": LOOP, "entered_at": time.time()}
            if scenario == "watchdog":
                limit = 300 + hang.grace_s(300)
                message = (
                    f"collectives: rank {rank}: {LOOP} did not finish within {limit:g} s; a peer rank is stuck or gone"
                )
                st.set("error", error=message, missing_ranks=[], peer_lost=True)
            else:
                st.set("joined")
                st._stop.set()  # noqa: SLF001
            if later_s:
                doc = json.loads(st.path.read_text(encoding="utf-8"))
                for key in ("at", "beat", "started_at"):
                    doc[key] += later_s
                doc["stages"] = {k: v + later_s for k, v in doc["stages"].items()}
                doc["calls"]["entered_at"] += later_s
                st.path.write_text(json.dumps(doc), encoding="utf-8")


@functools.cache
def _agent_logs() -> tuple[str, tuple[str, ...]]:
    """(the store host's log, the workers' logs) of a real rendezvous one worker never joined:
    five real torchrun agents on this machine (tests/workloads/rendezvous_agents.py)."""
    import tempfile

    from tests.workloads import rendezvous_agents

    with tempfile.TemporaryDirectory(prefix="gpuc-agents-") as tmp:
        small = [f"a{i}" for i in range(6)]
        logs = rendezvous_agents.run(Path(tmp), small, "a3")
    return logs["a0"], tuple(logs[n] for n in small[1:] if n != "a3")


def agent_logs(out: Path, nodes: list[str], absent: str, *, pod_lines: bool) -> None:
    """``agents/main-<node>.log`` as the launchers keep them, for a rendezvous ``absent`` never
    joined: each other node's agent waited and timed out. ``pod_lines``: a JobSet pod's first line
    (written before it waits for pod 0's name) heads each log."""
    folder = out / "agents"
    folder.mkdir(parents=True, exist_ok=True)
    host_log, worker_logs = _agent_logs()
    for i, node in enumerate(nodes):
        if node == absent:
            continue
        head = (
            f"pod {i} started on {node}; waiting for the rendezvous host {nodes[0]}.{nodes[0].rsplit('-node', 1)[0]}\n"
            if pod_lines
            else ""
        )
        # The first node hosts the store; the others are the real agents' logs in turn (timed out,
        # found the rendezvous closed, lost the store when its host left).
        log = host_log if i == 0 else worker_logs[i % len(worker_logs)]
        (folder / f"main-{node}.log").write_text(head + log, encoding="utf-8")
