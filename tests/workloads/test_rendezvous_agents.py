"""A rendezvous that never completes, read from the logs real torchrun agents wrote on this machine
(tests/workloads/rendezvous_agents.py: one agent per node, the launchers' command): the node that
never came FAILs alone; the agents that timed out, found the rendezvous closed or lost its store
are witnesses; when none could reach the store, its host is named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.workloads import rendezvous_agents
from gpu_cluster.workloads.validate import agents
from gpu_cluster.workloads.validate.__main__ import judge_and_report
from gpu_cluster.workloads.validate.verdict import Verdict

NODES = [f"gpu-{i:02d}" for i in range(1, 6)]
STORE_HOST = NODES[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One real rendezvous per case, shared by the tests (each takes some 15 s of agents' waiting)."""
    out: dict[str, Path] = {}
    for case, absent, pod_lines in (
        ("worker", "gpu-03", False),
        ("store-host", STORE_HOST, False),
        ("pending-pod", "gpu-04", True),
    ):
        run = tmp_path_factory.mktemp(case)
        (run / "status").mkdir()
        rendezvous_agents.run(run, NODES, absent, pod_lines=pod_lines)
        out[case] = run
    return out


def _judge(run: Path, tmp_path: Path) -> tuple[int, dict[str, dict[str, object]]]:
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    code = judge_and_report(copy, "p5.48xlarge", NODES, drain=False, cpu=False, duration_s=1.0)
    report = json.loads((copy / "report.json").read_text())
    return code, {n["node"]: n for n in report["nodes"]}


def test_the_agents_left_what_torch_raises_not_one_log_copied(runs: dict[str, Path]) -> None:
    logs = agents.read(runs["worker"])
    assert sorted(logs) == [n for n in NODES if n != "gpu-03"]
    outcomes = {a.outcome for a in logs.values()}
    # Someone waited out its join timeout; the rest found the rendezvous closed or lost its store.
    # (An agent this loaded machine started after the store host left cannot reach the store.)
    assert "timed-out" in outcomes and outcomes <= {"timed-out", "closed", "store-lost", "no-store"}, outcomes
    host_gone = agents.read(runs["store-host"])
    assert {a.outcome for a in host_gone.values()} == {"no-store"}
    assert {a.store for a in host_gone.values()} == {"127.0.0.1"}


@pytest.mark.parametrize(
    ("case", "culprit"), [("worker", "gpu-03"), ("store-host", STORE_HOST), ("pending-pod", "gpu-04")]
)
def test_the_node_that_never_came_fails_alone(runs: dict[str, Path], tmp_path: Path, case: str, culprit: str) -> None:
    code, nodes = _judge(runs[case], tmp_path)
    failed = {n for n, v in nodes.items() if v["verdict"] == "FAIL"}
    assert code == int(Verdict.FAIL) and failed == {culprit}, {n: v["reasons"] for n, v in nodes.items()}
    assert "never started" in " ".join(nodes[culprit]["reasons"])  # type: ignore[arg-type]


def test_a_store_host_that_started_but_nobody_reached_is_the_suspect(runs: dict[str, Path], tmp_path: Path) -> None:
    """The store host's pod started (its first line is there) and no other agent could reach its
    store: nobody is failed, the store host is named."""
    run = tmp_path / "src"
    shutil.copytree(runs["store-host"], run)
    (run / "agents" / f"main-{STORE_HOST}.log").write_text(
        f"pod 0 started on {STORE_HOST}; waiting for the rendezvous host {STORE_HOST}.gpuc\n"
    )
    code, nodes = _judge(run, tmp_path)
    assert code == int(Verdict.UNKNOWN) and not [n for n, v in nodes.items() if v["verdict"] == "FAIL"]
    assert nodes[STORE_HOST]["verdict"] == "WARN"
    assert "hosts the rendezvous store" in " ".join(nodes[STORE_HOST]["reasons"])  # type: ignore[arg-type]
    # The agents that could not reach it are witnesses: not named.
    assert {n for n, v in nodes.items() if v["verdict"] != "PASS"} == {STORE_HOST}
