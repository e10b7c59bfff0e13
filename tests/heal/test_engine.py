"""The heal loop on the rehearsal's file-backed cluster: the states it writes, and every safety
limit (dry run, rate, one at a time, stop-all, attempts, the capacity window)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gpu_cluster.heal.evidence import read_report, scope_of
from gpu_cluster.heal.journal import JOURNAL, Journal, read
from gpu_cluster.heal.states import BadMove, State, check_move
from gpu_cluster.heal.adapters import CheckResult
from tests.heal.world import SLOW, WorldChecker, engine, replacements, write_report


def states(run_dir: Path) -> list[str]:
    entries, notes = read(run_dir / JOURNAL)
    assert not notes
    return [e.state.value + ("" if e.event == "enter" else "/" + e.event) for e in entries]


def test_apply_takes_only_the_named_node_through_every_state(tmp_path: Path) -> None:
    ev = read_report(write_report(tmp_path))
    with Journal(tmp_path) as j:
        e, world = engine(tmp_path, j)
        out = e.run(ev)
    assert out.code == 0 and out.healed == ["local-3"]
    assert states(tmp_path) == [
        "SUSPECT",
        "CONFIRMED",
        "CONFIRMED/intent",
        "QUARANTINED",
        "REPLACING/intent",
        "REPLACING/done",
        "JOINING",
        "REVALIDATING",
        "REVALIDATING/passed",
        "HEALTHY",
    ]
    entries, _ = read(tmp_path / JOURNAL)
    assert {x.node for x in entries} == {"local-3"}
    assert [r["old"] for r in replacements(tmp_path)] == ["local-3.i0"]
    doc = json.loads(world.path.read_text())
    assert doc["nodes"]["local-3"] == {"instance": "local-3.i1", "faults": []} and doc["drained"] == {}
    # the pair partner is a node the report cleared, for the second look and the revalidation alike
    assert isinstance(e.checker, WorldChecker)
    assert e.checker.calls == [("local-3", "local-1", "confirm"), ("local-3", "local-1", "revalidate")]


def test_dry_run_writes_nothing_and_says_what_it_would_do(tmp_path: Path) -> None:
    ev = read_report(write_report(tmp_path))
    said: list[str] = []
    with Journal(tmp_path) as j:
        e, world = engine(tmp_path, j, apply=False, say=said.append)
        out = e.run(ev)
    assert out.code == 0
    assert read(tmp_path / JOURNAL) == ([], [])
    assert replacements(tmp_path) == [] and json.loads(world.path.read_text())["drained"] == {}
    text = "\n".join(said)
    assert "would confirm: node gate and a pair test with local-1" in text
    assert "would replace local-3.i0" in text
    assert isinstance(e.checker, WorldChecker) and e.checker.calls == []


def test_a_rerun_on_the_same_journal_replaces_nothing(tmp_path: Path) -> None:
    ev = read_report(write_report(tmp_path))
    for _ in range(2):
        with Journal(tmp_path) as j:
            e, _w = engine(tmp_path, j)
            out = e.run(ev)
        assert out.code == 0
    assert len(replacements(tmp_path)) == 1
    assert states(tmp_path).count("HEALTHY") == 1


def test_max_per_hour_zero_quarantines_replaces_nothing_and_exits_2(tmp_path: Path) -> None:
    ev = read_report(write_report(tmp_path))
    with Journal(tmp_path) as j:
        e, world = engine(tmp_path, j, max_per_hour=0)
        out = e.run(ev)
    assert out.code == 2 and "rate limit" in out.stopped[0]
    assert replacements(tmp_path) == []
    assert states(tmp_path)[-1] == "RETRY"
    assert "local-3" in json.loads(world.path.read_text())["drained"]
    # a later run with the limit lifted continues the same incident
    with Journal(tmp_path) as j:
        e, _w = engine(tmp_path, j)
        out = e.run(ev)
    assert out.code == 0 and len(replacements(tmp_path)) == 1
    assert len({x.incident for x in read(tmp_path / JOURNAL)[0]}) == 1


def test_the_rolling_hour_counts_every_slot(tmp_path: Path) -> None:
    fail = {"local-2": [SLOW], "local-3": [SLOW]}
    ev = read_report(write_report(tmp_path, nodes=10, fail=fail))
    with Journal(tmp_path) as j:
        e, _w = engine(tmp_path, j, nodes=10, faults={"local-2": ["slow"], "local-3": ["dead"]}, max_per_hour=1)
        out = e.run(ev)
    # one at a time: local-2 completes before local-3 starts; the hour then has no room for local-3
    assert out.healed == ["local-2"] and out.code == 2
    assert [r["node"] for r in replacements(tmp_path)] == ["local-2"]
    last = {x.node: x.state for x in read(tmp_path / JOURNAL)[0]}
    assert last == {"local-2": State.HEALTHY, "local-3": State.RETRY}


def test_replacements_an_hour_ago_no_longer_count(tmp_path: Path) -> None:
    ev = read_report(write_report(tmp_path))
    clock = [time.time()]
    with Journal(tmp_path, clock=lambda: clock[0]) as j:
        e, _w = engine(tmp_path, j, max_per_hour=1, checker=None)
        assert e.run(ev).code == 0
    ev2 = read_report(write_report(tmp_path / "second", fail={"local-3": [SLOW, "gate ecc.volatile (gpu0): 3"]}))
    for offset, expect in ((1800.0, 2), (3700.0, 0)):
        clock[0] += offset
        with Journal(tmp_path, clock=lambda: clock[0]) as j:
            e, world = engine(tmp_path, j, max_per_hour=1)
            world.doc["nodes"]["local-3"]["faults"] = ["slow"]
            world.save()
            assert e.run(ev2).code == expect


def test_stop_all_when_too_many_nodes_fail(tmp_path: Path) -> None:
    ev = read_report(write_report(tmp_path, fail={"local-2": [SLOW], "local-3": [SLOW]}))
    with Journal(tmp_path) as j:
        e, _w = engine(tmp_path, j)
        out = e.run(ev)
    assert out.code == 2 and "2 of 4 nodes FAIL" in out.stopped[0] and "--max-unhealthy" in out.stopped[0]
    assert read(tmp_path / JOURNAL) == ([], []) and replacements(tmp_path) == []
    # 16 nodes allow 3 at once (20 %)
    ev16 = read_report(write_report(tmp_path / "b", nodes=16, fail={f"local-{i}": [SLOW] for i in (2, 3, 4)}))
    with Journal(tmp_path / "b") as j:
        e, _w = engine(tmp_path / "b", j, nodes=16, faults={})
        assert e.run(ev16).code == 0


def test_three_attempts_then_escalated(tmp_path: Path) -> None:
    ev = read_report(write_report(tmp_path))
    with Journal(tmp_path) as j:
        world_checker: list[WorldChecker] = []
        e, world = engine(tmp_path, j, max_per_hour=10)
        e.checker = WorldChecker(world, fail_always=True)
        world_checker.append(e.checker)
        out = e.run(ev)
    assert out.code == 2
    assert len(replacements(tmp_path)) == 3
    entries, _ = read(tmp_path / JOURNAL)
    assert entries[-1].state is State.ESCALATED and "3 replacements of slot local-3 in 24 h" in entries[-1].detail
    # it stays out of service
    assert "local-3" in json.loads(world.path.read_text())["drained"]


def test_the_capacity_window_abandons_before_replacing(tmp_path: Path) -> None:
    ev = read_report(write_report(tmp_path))
    with Journal(tmp_path) as j:
        # the check takes 600 s (WorldChecker.estimate): a window 5 min away cannot hold it
        e, world = engine(tmp_path, j, window_end=time.time() + 300)
        out = e.run(ev)
    assert out.code == 2 and replacements(tmp_path) == []
    last = read(tmp_path / JOURNAL)[0][-1]
    assert last.state is State.ABANDONED and "ends in 5 min" in last.detail
    assert "local-3" in json.loads(world.path.read_text())["drained"]


def test_a_second_look_that_passes_replaces_nothing(tmp_path: Path) -> None:
    ev = read_report(write_report(tmp_path))
    with Journal(tmp_path) as j:
        e, _w = engine(tmp_path, j, faults={})  # the instance is fine: the report's finding was a fluke
        out = e.run(ev)
    assert out.code == 0 and replacements(tmp_path) == []
    assert states(tmp_path) == ["SUSPECT", "HEALTHY"]
    last = read(tmp_path / JOURNAL)[0][-1].detail
    assert "cleared by the second look with local-1" in last
    # I4 (severity 1, shape 2): the check left it drained with the incident's mark (as Slurm's
    # close_check does); cleared, it is resumed and heal says so only after reading it back
    assert json.loads(_w.path.read_text())["drained"] == {}
    assert "back in service (read back: idle)" in last


def test_a_cleared_node_someone_else_drained_is_left_as_it_is(tmp_path: Path) -> None:
    ev = read_report(write_report(tmp_path))
    with Journal(tmp_path) as j:
        e, world = engine(tmp_path, j, faults={})
        world.doc["drained"]["local-3"] = "admin: bad fan"
        world.save()
        out = e.run(ev)
    assert out.code == 0 and replacements(tmp_path) == []
    assert json.loads(world.path.read_text())["drained"] == {"local-3": "admin: bad fan"}
    assert "left as it is, its mark is not this incident's" in read(tmp_path / JOURNAL)[0][-1].detail


def busy_run(run_dir: Path, clock: list[float], **limits: object) -> tuple[int, list[str]]:
    said: list[str] = []
    with Journal(run_dir, clock=lambda: clock[0]) as j:
        e, world = engine(run_dir, j, say=said.append, evict_timeout_s=60.0, **limits)
        world.doc.setdefault("jobs", {"local-3": ["job 4711 pretrain alice RUNNING"]})
        world.save()

        def wait(s: float) -> None:
            clock[0] += 15.0

        e.sleep = wait
        return e.run(read_report(run_dir / "report.json")).code, said


def test_rerun_after_the_evict_timeout_never_replaces_a_busy_node(tmp_path: Path) -> None:
    """Severity 1, shape 3 (I5): past --evict-timeout the incident waits (RETRY) with the job named
    and the node out of new work; a rerun re-asks the scheduler instead of reading our own mark as
    "empty", so it waits again; only --replace-busy replaces it, and the work ending lets it go."""
    write_report(tmp_path)
    clock = [1_000_000.0]
    code, _ = busy_run(tmp_path, clock)
    entries = read(tmp_path / JOURNAL)[0]
    assert code == 2 and entries[-1].state is State.RETRY
    assert "not empty after 60 s" in entries[-1].detail and "job 4711 pretrain alice" in entries[-1].detail
    for _ in range(2):  # reruns, past the deadline: one look, still busy, still waiting
        clock[0] += 3600.0
        code, _ = busy_run(tmp_path, clock)
        assert code == 2 and read(tmp_path / JOURNAL)[0][-1].state is State.RETRY
    assert replacements(tmp_path) == []
    assert "local-3" in json.loads((tmp_path / "local-cluster.json").read_text())["drained"]
    assert not any(e.state is State.QUARANTINED for e in read(tmp_path / JOURNAL)[0])
    code, _ = busy_run(tmp_path, clock, replace_busy=True)
    assert code == 0 and len(replacements(tmp_path)) == 1
    q = [e for e in read(tmp_path / JOURNAL)[0] if e.state is State.QUARANTINED]
    assert "replaced anyway as --replace-busy asks" in q[0].detail and q[0].extra["replaced_busy"] is True


def test_a_busy_node_whose_work_ends_is_replaced_on_the_rerun(tmp_path: Path) -> None:
    write_report(tmp_path)
    clock = [1_000_000.0]
    assert busy_run(tmp_path, clock)[0] == 2
    doc = json.loads((tmp_path / "local-cluster.json").read_text())
    doc["jobs"] = {}
    (tmp_path / "local-cluster.json").write_text(json.dumps(doc))
    assert busy_run(tmp_path, clock)[0] == 0 and len(replacements(tmp_path)) == 1


def test_only_a_nodes_own_findings_open_an_incident(tmp_path: Path) -> None:
    cluster_wide = {
        "local-2": ["main: rank 1 started but never finished nor reported an error (process or node died)"],
        "local-4": ["no rank on this node reported at all (it never started)"],
    }
    ev = read_report(write_report(tmp_path, nodes=10, fail=cluster_wide, warn={"local-3": ["suspect: pair hung"]}))
    said: list[str] = []
    with Journal(tmp_path) as j:
        e, _w = engine(tmp_path, j, nodes=10, say=said.append)
        assert e.run(ev).code == 0
    # the died rank's node gets a second look (its instance is fine here: cleared, nothing replaced);
    # the never-started node and the WARN are not acted on
    entries, _ = read(tmp_path / JOURNAL)
    assert [(x.node, x.state) for x in entries] == [("local-2", State.SUSPECT), ("local-2", State.HEALTHY)]
    assert replacements(tmp_path) == []
    assert sum("not acted on" in s for s in said) == 2
    for reason, kind in (
        ("gate ecc.volatile (gpu3): 12 uncorrected", "node gate"),
        ("health.matmul: straggler, 1 under 0.5 x", "GPU health"),
        ("7 GPUs answered, the catalog says 8", "GPU count"),
        ("single-node collectives failed: x", "single-node collectives"),
        ("pairwise: pair with known-good n1: 12.00 (floor 300.00, catalog floor)", "pairwise search"),
        ("main: rank 5 lacks its fabric: no EFA device", "fabric at start-up"),
        ("main: rank 5 failed: device setup: no GPU", "device at start-up"),
        ("pairwise: every pair fell short; no known-good node to compare with", None),
        ("main: rank 5 did not arrive (reported by rank 0 on n1)", None),
        (
            "main: rank 2 started but never finished nor reported an error (process or node died)",
            "process or node died",
        ),
        ("no rank on this node reported at all (it never started)", None),
        ("suspect: pairs: pair a+b hung: x", None),
    ):
        assert scope_of(reason) == kind, reason


def test_a_killed_heal_leaves_a_line_cut_short_and_the_rerun_reads_past_it(tmp_path: Path) -> None:
    ev = read_report(write_report(tmp_path))
    with Journal(tmp_path) as j:
        e, _w = engine(tmp_path, j, max_per_hour=0)
        e.run(ev)
    with open(tmp_path / JOURNAL, "a", encoding="utf-8") as f:
        f.write('{"at": 1, "slot": "local-3", "incid')
    entries, notes = read(tmp_path / JOURNAL)
    assert notes == [f"{JOURNAL} line {len(entries) + 1}: cut short (a heal was killed while writing it); skipped"]
    kept = len(entries)
    with Journal(tmp_path) as j:
        e, _w = engine(tmp_path, j)
        assert e.run(ev).code == 0
    # the rerun's first line was not glued to the cut one: every line it wrote parses
    after, notes = read(tmp_path / JOURNAL)
    assert notes == [f"{JOURNAL} line {kept + 1}: cut short (a heal was killed while writing it); skipped"]
    assert after[kept].state is State.RETRY or after[kept].state is State.QUARANTINED, after[kept]
    assert after[-1].state is State.HEALTHY and len(replacements(tmp_path)) == 1


def test_a_rerun_on_a_cut_line_and_a_garbage_line_resumes_and_show_reads_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Item 5 of issue 41: a garbage line in the middle is skipped with a warning, a cut last line
    never swallows the next; the rerun resumes, every line it writes parses, --show prints both."""
    from gpu_cluster.heal.cli import main

    ev = read_report(write_report(tmp_path))
    with Journal(tmp_path) as j:
        e, _w = engine(tmp_path, j, max_per_hour=0)
        e.run(ev)
    raw = (tmp_path / JOURNAL).read_bytes().splitlines(keepends=True)
    (tmp_path / JOURNAL).write_bytes(b"".join([*raw[:2], b"\x00garbage\n", *raw[2:], b'{"at": 1, "sl']))
    said: list[str] = []
    with Journal(tmp_path) as j:
        e, _w = engine(tmp_path, j, say=said.append)
        assert e.run(ev).code == 0
    entries, notes = read(tmp_path / JOURNAL)
    assert len(notes) == 2 and "line 3: unreadable" in notes[0] and "cut short" in notes[1]
    assert sum("journal: " in s for s in said) == 2
    assert entries[-1].state is State.HEALTHY and len(replacements(tmp_path)) == 1
    lines = (tmp_path / JOURNAL).read_bytes().splitlines()
    cut_at = next(k for k, ln in enumerate(lines) if ln.startswith(b'{"at": 1, "sl'))
    for ln in lines[cut_at + 1 :]:
        json.loads(ln)
    assert main(["--show", str(tmp_path)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert len(shown) == len(entries) + 3 and shown[-3:-1] == notes
    assert shown[-1] == "out of service by heal (I7, this journal): 0"


def test_one_heal_at_a_time_on_a_journal(tmp_path: Path) -> None:
    from gpu_cluster.heal.journal import JournalBusy

    with Journal(tmp_path):
        with pytest.raises(JournalBusy, match="held by another gpu-cluster heal"):
            Journal(tmp_path).__enter__()


def test_the_machine_refuses_a_skipped_state() -> None:
    check_move(None, State.SUSPECT)
    check_move(State.QUARANTINED, State.REPLACING)
    with pytest.raises(BadMove):
        check_move(State.SUSPECT, State.REPLACING)
    with pytest.raises(BadMove):
        check_move(State.HEALTHY, State.REPLACING)
    with pytest.raises(BadMove):
        check_move(None, State.QUARANTINED)


def test_one_replacement_in_flight_at_a_time(tmp_path: Path) -> None:
    """A replacement that has not registered by its deadline stays in flight: the next named node
    waits for a later run instead of starting a second replacement."""
    from gpu_cluster.heal import local

    fail = {"local-2": [SLOW], "local-3": [SLOW]}
    ev = read_report(write_report(tmp_path, nodes=10, fail=fail))
    real = local.LocalCloud.progress

    def never_registers(self: local.LocalCloud, *a: object, **k: object) -> object:
        p = real(self, *a, **k)  # type: ignore[arg-type]
        return type(p)(started=p.started, detail="booting")

    local.LocalCloud.progress = never_registers  # type: ignore[method-assign,assignment]
    try:
        with Journal(tmp_path) as j:
            e, _w = engine(tmp_path, j, nodes=10, faults={"local-2": ["slow"], "local-3": ["slow"]}, join_timeout_s=0.0)
            out = e.run(ev)
    finally:
        local.LocalCloud.progress = real  # type: ignore[method-assign]
    assert out.code == 2 and "still in flight" in out.stopped[-1]
    assert [r["node"] for r in replacements(tmp_path)] == ["local-2"]
    assert {x.node for x in read(tmp_path / JOURNAL)[0]} == {"local-2"}


def test_the_fleet_budget_keeps_a_second_node_in_service_and_show_counts_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """I7: with --max-out-of-service 1 and local-2 held out (its replacement stopped by the hourly
    rate), local-3 is confirmed but not taken out of service; a later run with room continues it;
    --show prints the count."""
    from gpu_cluster.heal.cli import main

    fail = {"local-2": [SLOW], "local-3": [SLOW]}
    ev = read_report(write_report(tmp_path, nodes=10, fail=fail))
    faults = {"local-2": ["slow"], "local-3": ["dead"]}
    with Journal(tmp_path) as j:
        e, world = engine(tmp_path, j, nodes=10, faults=faults, max_per_hour=0, max_out=1)
        assert e.run(ev).code == 2
    last = {x.node: x for x in read(tmp_path / JOURNAL)[0]}
    assert last["local-2"].state is State.RETRY and "rate limit" in last["local-2"].detail
    assert last["local-3"].state is State.RETRY and "fleet budget: heal holds 1 node(s) out of service" in (
        last["local-3"].detail
    )
    assert set(json.loads(world.path.read_text())["drained"]) == {"local-2"}
    assert main(["--show", str(tmp_path)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[-1].startswith("out of service by heal (I7, this journal): 1: local-2 (h-")
    # the dry run says the same before acting
    said: list[str] = []
    with Journal(tmp_path) as j:
        e, _w = engine(tmp_path, j, nodes=10, faults=faults, apply=False, max_out=1, say=said.append)
        e.run(read_report(write_report(tmp_path / "b", nodes=10, fail={"local-4": [SLOW]})))
    assert any("would stop before quarantining: heal holds 1 node(s) out of service" in x for x in said)
    # room again (the default budget): both go through
    with Journal(tmp_path) as j:
        e, _w = engine(tmp_path, j, nodes=10, faults=faults)
        assert e.run(ev).code == 0
    assert sorted(r["node"] for r in replacements(tmp_path)) == ["local-2", "local-3"]


class BadPeerChecker(WorldChecker):
    """local-1 (cleared by the report) is the bad one now: any pair with it FAILs the node under
    check, for a reason a pair shares (its figure), never a finding of the node's own."""

    def check(self, node: str, peer: str, incident: str, purpose: str) -> CheckResult:
        r = super().check(node, peer, incident, purpose)
        if peer == "local-1":
            return CheckResult(ran=True, passed=False, detail=f"{node} FAIL: the pair's figure was not measured")
        return r


def test_a_pair_failure_needs_a_second_different_peer_before_blaming(tmp_path: Path) -> None:
    """I8: failed with local-1 for a reason the pair shares, passed with local-2: local-1 or the
    link is suspect, not local-3, so nothing is replaced and local-3 is back in service."""
    ev = read_report(write_report(tmp_path, fail={"local-3": ["main: rank 2 started ... (process or node died)"]}))
    with Journal(tmp_path) as j:
        e, world = engine(tmp_path, j, faults={})
        e.checker = BadPeerChecker(world)
        assert e.run(ev).code == 0
        assert e.checker.calls == [("local-3", "local-1", "confirm"), ("local-3", "local-2", "reconfirm")]
    assert replacements(tmp_path) == [] and json.loads(world.path.read_text())["drained"] == {}
    last = read(tmp_path / JOURNAL)[0][-1]
    assert last.state is State.HEALTHY and "failed with local-1" in last.detail and "passed with local-2" in last.detail


def test_a_dead_rank_is_blamed_only_when_two_different_peers_fail_it(tmp_path: Path) -> None:
    ev = read_report(write_report(tmp_path, fail={"local-3": ["main: rank 2 started ... (process or node died)"]}))
    with Journal(tmp_path) as j:
        e, world = engine(tmp_path, j, faults={"local-3": ["dead"]})
        assert e.run(ev).code == 0
        assert isinstance(e.checker, WorldChecker)
        assert e.checker.calls[:2] == [("local-3", "local-1", "confirm"), ("local-3", "local-2", "reconfirm")]
    confirmed = [x for x in read(tmp_path / JOURNAL)[0] if x.state is State.CONFIRMED and x.event == "enter"]
    assert "with local-1" in confirmed[0].detail and "and with local-2" in confirmed[0].detail
    assert len(replacements(tmp_path)) == 1


def test_no_second_peer_no_blame(tmp_path: Path) -> None:
    ev = read_report(
        write_report(tmp_path, nodes=2, fail={"local-2": ["main: rank 1 started ... (process or node died)"]})
    )
    with Journal(tmp_path) as j:
        e, world = engine(tmp_path, j, nodes=2, faults={"local-2": ["dead"]})
        assert e.run(ev).code == 2
    last = read(tmp_path / JOURNAL)[0][-1]
    assert last.state is State.RETRY and "a second, different peer before blaming it: I8" in last.detail
    assert replacements(tmp_path) == []


def test_a_bad_peer_never_costs_a_healthy_replacement_its_revalidation(tmp_path: Path) -> None:
    """I8 on the revalidation too: the new instance fails with local-1 (the bad peer) and passes
    with local-2, so it returns to service after one replacement instead of being replaced again."""
    ev = read_report(write_report(tmp_path))
    with Journal(tmp_path) as j:
        e, world = engine(tmp_path, j, max_per_hour=10)
        e.checker = BadPeerChecker(world)
        assert e.run(ev).code == 0
        assert [c for c in e.checker.calls if "revalidate" in c[2]] == [
            ("local-3", "local-1", "revalidate"),
            ("local-3", "local-2", "rerevalidate"),
        ]
    assert len(replacements(tmp_path)) == 1
    passed = [x for x in read(tmp_path / JOURNAL)[0] if x.event == "passed"]
    assert "failed with local-1" in passed[0].detail and "passed with local-2" in passed[0].detail
