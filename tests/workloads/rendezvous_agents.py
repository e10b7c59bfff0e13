"""Real torchrun agents at a c10d rendezvous that never completes, one agent per node, each writing
``agents/main-<node>.log`` as the launchers keep it: the command is the launchers' own
(gpu_cluster.workloads.launch.common.torchrun_argv), with a short join timeout.

On a cluster only the first node's agent hosts the store (torch infers ``is_host`` from the
endpoint's address); here every agent shares 127.0.0.1, so the test says which one hosts it. The
workers start first and keep trying the store until their read timeout; the store host a moment
later. So the first agent to give up is a worker (RendezvousTimeoutError), it closes the rendezvous
and the others find it closed (RendezvousClosedError), or lose the store when its host leaves
(RendezvousConnectionError): the outcomes a real job leaves, in whatever order this machine's
scheduler runs them. With the store host absent, every agent fails to reach the store."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from gpu_cluster.workloads.launch import common

JOIN_TIMEOUT_S = 4
HOST_DELAY_S = 1.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _argv(nnodes: int, port: int, *, is_host: bool) -> str:
    words = common.torchrun_argv(
        python=sys.executable,
        nnodes=str(nnodes),
        nproc_per_node=1,
        endpoint=f"127.0.0.1:{port}",
        rdzv_id="gpuc-rendezvous-test",
        join_timeout_s=JOIN_TIMEOUT_S,
        # Never runs: the rendezvous never completes.
        module="platform",
        module_args=[],
    )
    conf = f"--rdzv-conf=join_timeout={JOIN_TIMEOUT_S},read_timeout={JOIN_TIMEOUT_S}"
    assert conf in words, words
    words[words.index(conf)] = f"{conf},is_host={int(is_host)}"
    return " ".join(words)


def run(out: Path, nodes: list[str], absent: str, *, pod_lines: bool = False) -> dict[str, str]:
    """Start one agent per node of ``nodes`` but ``absent`` (``nodes[0]`` hosts the store), wait for
    all to give up, and return node -> its log (also written under ``out/agents``).
    ``pod_lines``: each log begins with a JobSet pod's first line, written before torchrun starts."""
    folder = out / "agents"
    folder.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUC_", "TORCHELASTIC_", "LOGLEVEL"))}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    procs: list[subprocess.Popen[bytes]] = []
    order = [n for n in nodes[1:] if n != absent] + ([nodes[0]] if nodes[0] != absent else [])
    for k, node in enumerate(order):
        log = folder / f"main-{node}.log"
        if pod_lines:
            i = nodes.index(node)
            log.write_text(f"pod {i} started on {node}; waiting for the rendezvous host {nodes[0]}.gpuc\n")
        if node == nodes[0] and k:
            time.sleep(HOST_DELAY_S)
        with log.open("ab") as fh:
            procs.append(
                subprocess.Popen(
                    ["bash", "-c", _argv(len(nodes), port, is_host=node == nodes[0])],
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=out,
                )
            )
    for p in procs:
        # Each agent gives up on its own after its join and read timeouts (a few seconds).
        assert p.wait(timeout=120) != 0
    return {n: (folder / f"main-{n}.log").read_text(encoding="utf-8", errors="replace") for n in order}
