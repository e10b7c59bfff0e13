"""A collective that hangs inside the backend, on the real local pipeline (four torchrun agents
standing for four nodes, gloo): the main phase's watchdog ends every rank, each rank's status
keeps the calls it entered, and the search runs one job per pair, each suspect then with a
known-good node. The run FAILs (exit 2) and names exactly the node that hung."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JOB_FILE = re.compile(r"^(pairs-.+)-local-\d+-r\d+\.json$")


@pytest.mark.slow
def test_a_hang_on_one_of_four_local_nodes_fails_and_names_exactly_that_node(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = dict(os.environ, GPUC_INJECT_HANG_NODE="local-2", GPUC_INJECT_HANG_PHASES="main,pairs")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpu_cluster.workloads.validate",
            "--local",
            "--nodes",
            "4",
            "--procs-per-node",
            "1",
            # Each bound (arrival, side group, watchdog) is a multiple of this: long enough that a
            # loaded machine's slow start is not read as a hang; the hang itself never ends.
            "--timeout",
            "10",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert "pairwise search: the main phase left no results" in proc.stdout, proc.stdout[-3000:]
    assert not (out / "phase-main.json").exists()
    assert proc.returncode == 2, proc.stdout[-3000:]
    report = json.loads((out / "report.json").read_text())
    nodes = {n["node"]: n for n in report["nodes"]}
    assert {n for n, v in nodes.items() if v["verdict"] != "PASS"} == {"local-2"}, json.dumps(nodes)
    assert nodes["local-2"]["verdict"] == "FAIL"
    reasons = " ".join(nodes["local-2"]["reasons"])
    # Named twice over: the main phase's counts (it never reached the call the others waited in),
    # and the second pass (it hung again with a known-good partner, in a job of its own).
    # The second pass names it whatever the timing: paired with a known-good node it hangs again.
    # The call counts ("it was the peer they waited on") name it too only when the others had
    # entered the hung call before the watchdog spoke, which a loaded machine does not promise.
    assert "known-good" in reasons, reasons
    search = json.loads((out / "phase-pairs.json").read_text())["pairs"]
    assert search["jobs"] == "per-pair" and list(search["bad"]) == ["local-2"] and search["bad_links"] == []
    # One job per pair: each left its own status lines, and the pairs that passed their own result.
    # status/pairs-<a>+<b>-<node>-r<rank>.json: the job's name is all but the last node and rank.
    jobs = {m.group(1) for p in (out / "status").glob("pairs-*.json") if (m := JOB_FILE.match(p.name))}
    assert "pairs-local-1+local-2" in jobs and len(jobs) == 4, jobs
    assert (out / "phase-pairs-local-3+local-4.json").exists()
    assert not (out / "phase-pairs-local-1+local-2.json").exists()
