"""Outside the collectives, the watchdog still speaks: around the process group's setup (NCCL's
communicator is made there), every new_group, and the GEMM/matmul syncs. Two real ranks of the
validation run (gloo, one per "node"); one never returns from the work named by
GPUC_INJECT_WEDGE_AT, as a wedged GPU's sync or a communicator init on a dead NIC never does.
What each status line says, and whom the judge fails, is checked, never the clock."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.workloads.health import hang
from gpu_cluster.workloads.validate.judge import judge
from gpu_cluster.workloads.validate.verdict import Verdict

ROOT = Path(__file__).resolve().parents[2]


def _run_two(out: Path, wedge_at: str) -> list[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(2):
        env = dict(
            os.environ,
            RANK=str(r),
            LOCAL_RANK="0",
            WORLD_SIZE="2",
            LOCAL_WORLD_SIZE="1",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            GPUC_FORCE_CPU="1",
            GPUC_NODE_NAME=f"n{r + 1}",
            GPUC_INJECT_WEDGE_NODE="n2",
            GPUC_INJECT_WEDGE_AT=wedge_at,
            PYTHONPATH=str(ROOT),
        )
        cmd = [sys.executable, "-m", "gpu_cluster.workloads.validate", "run", "--out", str(out), "--phase", "main"]
        cmd += ["--timeout", "3", "--iters", "1", "--warmup", "0"]
        procs.append(subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    for p in procs:
        p.communicate(timeout=240)
    return [int(p.returncode) for p in procs]


def _status(out: Path, node: str) -> dict[str, Any]:
    (path,) = (out / "status").glob(f"main-{node}-r*.json")
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


@pytest.mark.slow
def test_a_gpu_wedged_in_its_matmul_sync_names_its_own_node(tmp_path: Path) -> None:
    codes = _run_two(tmp_path, "health")
    assert codes[1] == hang.EXIT_HANG and codes[0] != 0, codes
    mine = _status(tmp_path, "n2")
    assert mine["state"] == "error" and mine["peer_lost"] is False
    assert "health: matmul and memory copy" in mine["error"] and "own device is stuck" in mine["error"]
    assert _status(tmp_path, "n1")["peer_lost"] is True
    rep = judge(tmp_path, instance_type=None, local=True, expected_nodes=["n1", "n2"])
    assert {n.node: n.verdict for n in rep.nodes} == {"n1": Verdict.PASS, "n2": Verdict.FAIL}


@pytest.mark.slow
def test_a_process_group_setup_that_never_returns_is_named_in_the_status(tmp_path: Path) -> None:
    codes = _run_two(tmp_path, "init")
    assert codes == [hang.EXIT_HANG, hang.EXIT_HANG], codes
    for node in ("n1", "n2"):
        st = _status(tmp_path, node)
        # Every rank waited there: the watchdog's label says where, and nobody is named by it alone.
        assert st["state"] == "error" and "process group's setup" in st["error"] and st["peer_lost"] is True
        assert "joined" not in st["stages"]
    rep = judge(tmp_path, instance_type=None, local=True, expected_nodes=["n1", "n2"])
    assert rep.verdict == Verdict.UNKNOWN and not [n for n in rep.nodes if n.verdict == Verdict.FAIL]


@pytest.mark.slow
def test_a_device_whose_context_creation_never_returns_names_its_own_node(tmp_path: Path) -> None:
    """CUDA (or ROCm) context creation under the watchdog (issue 42 item 7): a wedged GPU's driver
    once held the rank in set_device until the Slurm job's time limit."""
    codes = _run_two(tmp_path, "device")
    assert codes[1] == hang.EXIT_HANG and codes[0] != 0, codes
    mine = _status(tmp_path, "n2")
    assert mine["state"] == "error" and mine["peer_lost"] is False, mine
    assert "context creation" in mine["error"] and "own device is stuck" in mine["error"], mine["error"]
    assert "device-ready" not in mine["stages"]
    assert _status(tmp_path, "n1")["peer_lost"] is True
    rep = judge(tmp_path, instance_type=None, local=True, expected_nodes=["n1", "n2"])
    assert {n.node: n.verdict for n in rep.nodes} == {"n1": Verdict.PASS, "n2": Verdict.FAIL}
