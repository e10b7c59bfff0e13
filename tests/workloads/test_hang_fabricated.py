"""Hangs and rendezvous failures on Slurm, from run directories in the exact shapes the phases
leave (tests/workloads/hang_fabricate.py): 16 x p5.48xlarge, one bad node. Each run FAILs exactly
that node (or is UNKNOWN naming it where nothing can be measured) and ``--drain`` drains only it,
through a stand-in ``scontrol`` that records what it was asked."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.workloads.hang_fabricate import agent_logs, main_statuses
from gpu_cluster.workloads.validate import pair_jobs
from gpu_cluster.workloads.validate.blame import blame
from gpu_cluster.workloads.validate.__main__ import judge_and_report
from gpu_cluster.workloads.validate.verdict import Verdict

NODES = [f"gpu-{i:02d}" for i in range(1, 17)]
CULPRIT = "gpu-07"
RUN_ARGS = ("--instance-type", "p5.48xlarge")


@pytest.fixture
def scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in scontrol on PATH inside a "Slurm job": every call is written to a file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "scontrol-calls"
    fake = bin_dir / "scontrol"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n', encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    return calls


def _pair_steps(out: Path, bad: str) -> pair_jobs.RunRound:
    """Each pair's srun step, as its rank 0 leaves it: phase-pairs-A+B.json with its figure, none
    when the pair hung (the bad node's GPU never finishes a call)."""

    def run_round(rnd: list[tuple[str, str]]) -> None:
        for a, b in rnd:
            if bad in (a, b):
                continue
            doc = {"phase": f"pairs-{a}+{b}", "pairs": {"first": [[a, b, 479.5]], "op": "all_reduce"}}
            (out / f"phase-pairs-{a}+{b}.json").write_text(json.dumps(doc))

    return run_round


def _drained(calls: Path) -> list[str]:
    if not calls.exists():
        return []
    return [
        w.split("=", 1)[1] for line in calls.read_text().splitlines() for w in line.split() if w.startswith("nodename=")
    ]


@pytest.mark.parametrize("scenario", ["nccl-abort", "watchdog", "cpu-hang"])
def test_a_hang_on_one_of_16_nodes_fails_it_alone_and_drains_only_it(
    tmp_path: Path, scontrol: Path, scenario: str
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    main_statuses(out, NODES, 8, CULPRIT, scenario)  # type: ignore[arg-type]
    found = pair_jobs.drive(out, NODES, RUN_ARGS, _pair_steps(out, CULPRIT), ranks_per_node=8, say=lambda _: None)
    assert list(found["bad"]) == [CULPRIT]
    code = judge_and_report(out, "p5.48xlarge", NODES, drain=True, cpu=False, duration_s=1.0)
    report = json.loads((out / "report.json").read_text())
    verdicts = {n["node"]: n["verdict"] for n in report["nodes"]}
    assert code == int(Verdict.FAIL) and {n for n, v in verdicts.items() if v != "PASS"} == {CULPRIT}, verdicts
    assert _drained(scontrol) == [CULPRIT] and report["drained"] == [CULPRIT]


@pytest.mark.parametrize("scenario", ["nccl-abort", "watchdog", "cpu-hang"])
def test_the_same_hang_seen_again_in_a_later_step_adds_no_culprit(
    tmp_path: Path, scontrol: Path, scenario: str
) -> None:
    """The main phase hangs on gpu-07, the pairwise search clears the other 15, and the storage step
    a minute later is torn down by the same fault: each phase is judged on its own clock, so the main
    phase's ranks did not "die first" against the storage step's, and only gpu-07 fails."""
    out = tmp_path / "run"
    out.mkdir()
    main_statuses(out, NODES, 8, CULPRIT, scenario)  # type: ignore[arg-type]
    found = pair_jobs.drive(out, NODES, RUN_ARGS, _pair_steps(out, CULPRIT), ranks_per_node=8, say=lambda _: None)
    assert list(found["bad"]) == [CULPRIT]
    main_statuses(out, NODES, 8, CULPRIT, scenario, phase="storage", later_s=60.0)  # type: ignore[arg-type]
    assert len(list((out / "status").glob("storage-*.json"))) == 128
    code = judge_and_report(out, "p5.48xlarge", NODES, drain=True, cpu=False, duration_s=1.0)
    report = json.loads((out / "report.json").read_text())
    verdicts = {n["node"]: n["verdict"] for n in report["nodes"]}
    assert code == int(Verdict.FAIL) and {n for n, v in verdicts.items() if v != "PASS"} == {CULPRIT}, verdicts
    assert _drained(scontrol) == [CULPRIT]


def test_a_node_the_search_cleared_is_never_failed_for_a_hang() -> None:
    """A rank whose beat stopped first, and a rank the others waited on, on nodes the pairwise search
    passed with a known-good partner: suspects, never failures; the same on an untested node fails."""
    beat = 1_000_000.0
    dead = [
        {"phase": "main", "rank": r, "node": f"n{r}", "state": "joined", "beat": beat - (30.0 if r == 1 else 0.0)}
        for r in range(4)
    ]
    assert set(blame(dead, [], cleared=["n0", "n1", "n2", "n3"]).failed) == set()
    assert "n1" in blame(dead, [], cleared=["n0", "n1", "n2", "n3"]).suspects
    assert set(blame(dead, [], cleared=["n0", "n2", "n3"]).failed) == {"n1"}
    calls = [
        {
            "phase": "main",
            "rank": r,
            "node": f"n{r}",
            "state": "joined",
            "beat": beat,
            "calls": {"entered": 7 if r == 2 else 9, "completed": 6 if r == 2 else 8, "what": "all_reduce"},
        }
        for r in range(4)
    ]
    assert set(blame(calls, [], cleared=["n0", "n1", "n3"]).failed) == {"n2"}
    cleared_all = blame(calls, [], cleared=["n0", "n1", "n2", "n3"])
    assert cleared_all.failed == {} and "waited on" in cleared_all.suspects["n2"]


def test_without_the_search_a_teardown_of_every_rank_names_suspects_and_drains_nobody(
    tmp_path: Path, scontrol: Path
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    main_statuses(out, NODES, 8, CULPRIT, "nccl-abort")
    code = judge_and_report(out, "p5.48xlarge", NODES, drain=True, cpu=False, duration_s=1.0)
    report = json.loads((out / "report.json").read_text())
    assert code == int(Verdict.UNKNOWN) and not [n for n in report["nodes"] if n["verdict"] == "FAIL"]
    assert all(n["verdict"] == "WARN" and "suspect" in n["reasons"][0] for n in report["nodes"])
    assert _drained(scontrol) == []


def test_a_rendezvous_one_node_never_joined_fails_that_node_alone(tmp_path: Path, scontrol: Path) -> None:
    out = tmp_path / "run"
    (out / "status").mkdir(parents=True)
    agent_logs(out, NODES, "gpu-11", pod_lines=False)
    # The pairs step does not run: no rank started, and the agents say who never came.
    found = pair_jobs.drive(out, NODES, RUN_ARGS, _pair_steps(out, "gpu-11"), ranks_per_node=8, say=lambda _: None)
    assert "gpu-11 never joined" in found["skipped"]
    code = judge_and_report(out, "p5.48xlarge", NODES, drain=True, cpu=False, duration_s=1.0)
    report = json.loads((out / "report.json").read_text())
    verdicts = {n["node"]: n for n in report["nodes"]}
    assert code == int(Verdict.FAIL) and {n for n, v in verdicts.items() if v["verdict"] != "PASS"} == {"gpu-11"}
    assert "never started" in verdicts["gpu-11"]["reasons"][0]
    assert _drained(scontrol) == ["gpu-11"]


def test_with_no_agent_log_a_rendezvous_that_never_completed_is_unknown_naming_the_evidence(
    tmp_path: Path, scontrol: Path
) -> None:
    out = tmp_path / "run"
    (out / "status").mkdir(parents=True)
    code = judge_and_report(out, "p5.48xlarge", NODES, drain=True, cpu=False, duration_s=1.0)
    report = json.loads((out / "report.json").read_text())
    assert code == int(Verdict.UNKNOWN) and _drained(scontrol) == []
    reasons = {n["node"]: " ".join(n["reasons"]) for n in report["nodes"]}
    assert "agents/main-gpu-11.log" in reasons["gpu-11"] and "missing evidence" in reasons["gpu-11"]
