"""A hang is a FAIL with a culprit: the calls each rank entered tell the rank that stopped from the
ranks that waited on it, even when NCCL's teardown ends every rank at the group's timeout and no
one writes an error; every deadline stays under the group's timeout; the pairs phase does not run
after a node that never started."""

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
from gpu_cluster.workloads.validate.blame import blame, node_failures, waited_on
from gpu_cluster.workloads.validate.judge import judge
from gpu_cluster.workloads.validate.verdict import Verdict

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _statuses(root: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((root / "status").glob("*.json"))]


def test_every_rank_torn_down_at_the_group_timeout_blames_the_hung_node_not_the_cluster(tmp_path: Path) -> None:
    """Four real gloo ranks (one per "node"); n3 hangs inside the timed loop; NCCL's teardown is
    emulated (each rank ends itself, no Python cleanup, once it made no progress for a while), so
    the status lines stay "joined" and the heartbeats stop together, as on a GPU cluster."""
    world, port = 4, _free_port()
    procs = []
    for r in range(world):
        env = dict(
            os.environ,
            RANK=str(r),
            LOCAL_RANK="0",
            WORLD_SIZE=str(world),
            LOCAL_WORLD_SIZE="1",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            GPUC_FORCE_CPU="1",
            GPUC_NODE_NAME=f"n{r + 1}",
            GPUC_INJECT_HANG_NODE="n3",
            GPUC_TEST_TEARDOWN_S="3",
            PYTHONPATH=str(ROOT),
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, str(ROOT / "tests/workloads/_teardown_worker.py"), str(tmp_path)],
                env=env,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    outputs = [p.communicate(timeout=300)[0].decode(errors="replace") for p in procs]
    assert [p.returncode for p in procs] == [6] * world, outputs
    statuses = _statuses(tmp_path)
    assert len(statuses) == world and all(s["state"] == "joined" for s in statuses), statuses
    # Without the calls: four silent ranks whose beats stopped together say nothing about who;
    # every node is a suspect (the pairwise search decides), none is failed.
    beats = [float(s["beat"]) for s in statuses]
    assert max(beats) - min(beats) <= 4.0
    without_calls = [{k: v for k, v in s.items() if k != "calls"} for s in statuses]
    assert node_failures(without_calls, ["n1", "n2", "n3", "n4"])[0] == {}
    assert set(blame(without_calls, ["n1", "n2", "n3", "n4"]).suspects) == {"n1", "n2", "n3", "n4"}
    # With the calls each rank entered: n3 never reached the call the other three waited in.
    blamed, _ = node_failures(statuses, ["n1", "n2", "n3", "n4"])
    assert set(blamed) == {"n3"}, blamed
    assert "it was the peer they waited on" in blamed["n3"] and "timed loop" in blamed["n3"]
    calls = {s["node"]: s["calls"] for s in statuses}
    assert all(calls[n]["entered"] == calls["n3"]["entered"] + 1 for n in ("n1", "n2", "n4"))
    assert all(calls[n]["completed"] == calls["n3"]["completed"] for n in ("n1", "n2", "n4"))


def _gpu_status(node: str, rank: int, entered: int, completed: int, what: str) -> dict[str, Any]:
    return {
        "phase": "main",
        "node": node,
        "rank": rank,
        "state": "joined",
        "stages": {"started": 1.0, "device-ready": 2.0, "joined": 3.0},
        "beat": 1600.0 + rank * 0.001,
        "calls": {"entered": entered, "completed": completed, "what": what},
    }


def test_sixteen_p5_nodes_one_stuck_short_of_the_call_the_rest_waited_in() -> None:
    """16 x p5 (128 ranks) torn down together: n7's ranks never queued the timed loop's last
    launches (their host was stuck in the driver); the other 120 queued all 20 and waited in the sync."""
    loop = "all_reduce size 8589934592 B (8G) in-place (timed loop)"
    statuses = [
        _gpu_status(f"n{n}", 8 * (n - 1) + g, 408 if n == 7 else 412, 392, loop) for n in range(1, 17) for g in range(8)
    ]
    culprits, waiters = waited_on(statuses)
    assert {statuses[r]["node"] for r in culprits} == {"n7"} and len(waiters) == 120
    blamed, _ = node_failures(statuses, [f"n{i}" for i in range(1, 17)])
    assert set(blamed) == {"n7"}
    # Every rank inside the same call: the counts cannot tell, and they say nothing (the search does).
    same = [_gpu_status(f"n{n}", 8 * (n - 1) + g, 412, 392, loop) for n in range(1, 17) for g in range(8)]
    assert waited_on(same) == ({}, set())


def test_the_watchdog_never_waits_past_the_group_timeout() -> None:
    code = (
        "import sys, time\n"
        "from gpu_cluster.workloads.health.hang import Watchdog\n"
        "w = Watchdog(rank=0, limit_s=0.5, group_timeout_s=2.0, out=sys.stdout)\n"
        "with w.phase('timed loop', calls=8):\n"  # 8 x 0.5 s would be 4 s, past the group's 2 s
        "    time.sleep(3)\n"
        "print('not reached', flush=True)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == hang.EXIT_HANG, proc.stderr
    assert "not reached" not in proc.stdout
    limit = float(proc.stdout.split("within ")[1].split(" s")[0])
    assert limit == hang.ceiling_s(2.0) and limit < 2.0
    # Every stage's bound sits under the timeout of the group it runs on, at every --timeout.
    for t in (3.0, 10.0, 120.0, 300.0, 600.0):
        group = hang.group_timeout_s(t)
        assert t < t + hang.grace_s(t) <= hang.ceiling_s(group) < group


def test_pairs_do_not_run_after_a_node_that_never_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_cluster.workloads.validate import pairs
    from gpu_cluster.workloads.validate.run import run_phase
    from gpu_cluster.workloads.validate.run_config import RunConfig

    status = tmp_path / "status"
    status.mkdir()
    for r, (node, doc) in enumerate(
        [
            ("n1", {"state": "error", "peer_lost": True, "stages": {"started": 1.0, "device-ready": 2.0}}),
            ("n2", {"state": "error", "peer_lost": False, "stages": {"started": 1.0}, "error": "device setup: no GPU"}),
        ]
    ):
        (status / f"main-{node}-r{r}.json").write_text(json.dumps({"phase": "main", "node": node, "rank": r, **doc}))
    assert "n2 failed before joining" in pairs.not_started(tmp_path, 2)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("GPUC_NODE_NAME", "n1")
    assert run_phase(RunConfig(out_dir=tmp_path, phase="pairs")) == 0
    assert json.loads((tmp_path / "phase-pairs.json").read_text())["skipped"].startswith("node(s) n2")
    assert not (status / "pairs-n1-r0.json").exists()  # it never joined a group
    rep = judge(tmp_path, instance_type=None, local=True, expected_nodes=["n1", "n2"])
    assert any(e.startswith("pairwise search not run: node(s) n2") for e in rep.errors), rep.errors
    by_node = {v.node: v for v in rep.nodes}
    assert by_node["n2"].verdict == Verdict.FAIL and by_node["n1"].verdict == Verdict.PASS
    # A rank with no status line at all: its node never came up.
    (status / "main-n2-r1.json").unlink()
    assert "rank(s) 1 never started" in pairs.not_started(tmp_path, 2)


def test_ranks_done_with_their_calls_waited_on_nobody() -> None:
    """The in-job pairwise search: n1+n2 hung (n2 stopped short), n3+n4 finished their pair and wait
    for the round outside any collective. The counts name no one there (the pair is suspect)."""
    what = "pair n1+n2: all_reduce size 4194304 B (4M) in-place (timed loop)"
    statuses = [
        {
            "phase": "pairs",
            "node": "n1",
            "rank": 0,
            "state": "error",
            "calls": {"entered": 9, "completed": 8, "what": what},
        },
        {
            "phase": "pairs",
            "node": "n2",
            "rank": 1,
            "state": "error",
            "calls": {"entered": 8, "completed": 8, "what": what},
        },
        {
            "phase": "pairs",
            "node": "n3",
            "rank": 2,
            "state": "error",
            "calls": {"entered": 30, "completed": 30, "what": "x"},
        },
        {
            "phase": "pairs",
            "node": "n4",
            "rank": 3,
            "state": "error",
            "calls": {"entered": 30, "completed": 30, "what": "x"},
        },
    ]
    assert waited_on(statuses) == ({}, set())
    # The same two ranks alone (the pair's job of its own): n2 was the peer n1 waited on.
    culprits, waiters = waited_on(statuses[:2])
    assert set(culprits) == {1} and waiters == {0}
