"""A collective that hangs inside the backend, on the real local pipeline (three torchrun agents
standing for three nodes, gloo): the main phase's watchdog ends every rank, the pairs phase
runs on its own, and the pair that hangs again makes its two nodes suspects, no other."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_hung_collective_leads_to_the_pairs_phase_and_names_the_hung_pair(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = dict(os.environ, GPUC_INJECT_HANG_NODE="local-2", GPUC_INJECT_HANG_PHASES="main,pairs")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "workloads.validate",
            "--local",
            "--nodes",
            "3",
            "--procs-per-node",
            "1",
            "--timeout",
            "3",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "pairwise search: the main phase left no results" in proc.stdout, proc.stdout[-3000:]
    assert not (out / "phase-main.json").exists()
    report = json.loads((out / "report.json").read_text())
    nodes = {n["node"]: n for n in report["nodes"]}
    for n in ("local-1", "local-2"):
        assert nodes[n]["verdict"] == "WARN", json.dumps(nodes)
        assert any("pair local-1+local-2 hung" in r for r in nodes[n]["reasons"]), json.dumps(nodes)
    assert nodes["local-3"]["verdict"] == "PASS", json.dumps(nodes)
    assert proc.returncode in (1, 2, 3), proc.stdout[-2000:]
