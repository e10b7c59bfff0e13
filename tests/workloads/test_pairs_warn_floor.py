"""Pairs judged at the warn floor, and a hang after which the search runs one job per pair, on run
directories fabricated in the shapes our phases write (16 x p5.48xlarge)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.components.catalog import load_catalog
from tests.workloads.nccl_fabricate import phase_rows
from gpu_cluster.workloads.validate import isolate, pair_jobs, pairs
from gpu_cluster.workloads.validate.judge import judge
from gpu_cluster.workloads.validate.run_config import RunConfig
from gpu_cluster.workloads.validate.verdict import Verdict

P5 = "p5.48xlarge"
NODES = [f"n{i}" for i in range(1, 17)]
EFA_LOG = (
    "node1:1234:1234 [0] NCCL INFO NET/OFI Selected Provider is efa (found 32 nics)\n"
    "node1:1234:1234 [0] NCCL INFO Using network Libfabric\n"
    "node1:1234:1300 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Libfabric/0/GDRDMA\n"
)
SIZES = [2**20 * 2**i for i in range(14)]  # 1 MiB .. 8 GiB, as the main phase sweeps on GPU


def _ranks(n: str) -> list[int]:
    i = NODES.index(n)
    return list(range(8 * i, 8 * i + 8))


def _write_common(root: Path) -> None:
    (root / "nccl").mkdir(exist_ok=True)
    (root / "nccl" / "nccl-n1-1.log").write_text(EFA_LOG)
    (root / "ddp.json").write_text(json.dumps({"loss_first": 10.8, "loss_last": 6.1}))


def _write_main(root: Path, multi: float, pairs_doc: dict[str, Any] | None) -> None:
    main: dict[str, Any] = {
        "phase": "main",
        "world_size": 128,
        "backend": "nccl",
        "instance_type": P5,
        "nodes": {n: {"ranks": _ranks(n)} for n in NODES},
        "health": [
            {"node": n, "local_rank": g, "matmul_tflops": 740.0, "mem_gbps": 3000.0} for n in NODES for g in range(8)
        ],
        "single_node": {n: phase_rows("all_reduce", SIZES, 470.0) for n in NODES},
        "multi_node": {"all_reduce": phase_rows("all_reduce", SIZES, multi)},
        "versions": {"torch": "2.13.0", "nccl": "2.27.3"},
    }
    if pairs_doc is not None:
        main["pairs"] = pairs_doc
    (root / "phase-main.json").write_text(json.dumps(main))
    (root / "status").mkdir(exist_ok=True)
    for n in NODES:
        for r in _ranks(n):
            (root / "status" / f"main-{n}-r{r}.json").write_text(
                json.dumps({"phase": "main", "node": n, "rank": r, "state": "finished"})
            )
    _write_common(root)


def _pair_figures(drag: str, drag_value: float, good: float = 480.0) -> isolate.Measure:
    def measure(rnd: list[isolate.Pair]) -> dict[isolate.Pair, float | None]:
        return {(a, b): (drag_value if drag in (a, b) else good) for a, b in rnd}

    return measure


def _search(drag: str, drag_value: float, floor: float | None) -> dict[str, Any]:
    iso = isolate.isolate(NODES, _pair_figures(drag, drag_value), floor)
    return pairs.result_json(
        iso,
        size=8 << 30,
        op="all_reduce",
        pairing="topology",
        floor_fail=pairs.pair_floors(RunConfig(out_dir=Path("."), instance_type=P5), "nccl")[1],
    )


def test_a_node_that_drags_sixteen_p5_to_warn_is_named(tmp_path: Path) -> None:
    cfg = RunConfig(out_dir=tmp_path, instance_type=P5)
    e = load_catalog().get(P5).bandwidth.expected("all_reduce", 2, "pair")
    assert e.floor_warn_gbps is not None and e.floor_fail_gbps is not None
    assert e.floor_fail_gbps < 380.0 < e.floor_warn_gbps  # the drag is between the pair's floors
    # The search is run at the warn floor.
    assert pairs.pair_floor(cfg, "nccl") == e.floor_warn_gbps
    sixteen = load_catalog().get(P5).bandwidth.expected("all_reduce", 16, "multi-node")
    assert sixteen.floor_fail_gbps is not None and sixteen.floor_warn_gbps is not None
    assert sixteen.floor_fail_gbps < 320.0 < sixteen.floor_warn_gbps  # the cluster is WARN, not FAIL
    # The main phase runs the pairs for a cluster under its warn floor.
    main_doc = {
        "backend": "nccl",
        "nodes": {n: {} for n in NODES},
        "multi_node": {"all_reduce": phase_rows("all_reduce", SIZES, 320.0)},
    }
    assert pairs.want_pairs(cfg, main_doc)

    _write_main(tmp_path, 320.0, _search("n7", 380.0, pairs.pair_floor(cfg, "nccl")))
    rep = judge(tmp_path, instance_type=P5, local=False)
    by_node = {v.node: v for v in rep.nodes}
    named = {n for n, v in by_node.items() if v.verdict != Verdict.PASS}
    assert named == {"n7"}, {n: v.reasons for n, v in by_node.items() if v.reasons}
    assert by_node["n7"].verdict == Verdict.WARN and "known-good" in " ".join(by_node["n7"].reasons)
    assert rep.verdict == Verdict.WARN
    pair_ms = [m for m in rep.measurements if m.check == "pair.all_reduce"]
    assert {m.scope for m in pair_ms if m.verdict == Verdict.WARN} == {"pair:n7+n8"}
    assert all(m.floor_warn == e.floor_warn_gbps and m.floor_fail == e.floor_fail_gbps for m in pair_ms)

    # Searched at the fail floor (as before), the same figures name nobody.
    assert _search("n7", 380.0, e.floor_fail_gbps)["bad"] == {}


def test_a_node_under_the_pair_fail_floor_fails(tmp_path: Path) -> None:
    cfg = RunConfig(out_dir=tmp_path, instance_type=P5)
    _write_main(tmp_path, 250.0, _search("n12", 200.0, pairs.pair_floor(cfg, "nccl")))
    rep = judge(tmp_path, instance_type=P5, local=False)
    failed = {v.node for v in rep.nodes if v.verdict == Verdict.FAIL}
    assert failed == {"n12"} and rep.verdict == Verdict.FAIL


def _hung_main(root: Path, loop: str) -> None:
    """Every rank's watchdog spoke first (under the group's timeout), all inside the same call."""
    (root / "status").mkdir(exist_ok=True)
    for n in NODES:
        for r in _ranks(n):
            doc = {
                "phase": "main",
                "node": n,
                "rank": r,
                "state": "error",
                "peer_lost": True,
                "missing_ranks": [],
                "stages": {"started": 1.0, "device-ready": 2.0, "joined": 3.0},
                "error": f"collectives: rank {r}: {loop} did not finish within 450 s; a peer rank is stuck or gone",
                "calls": {"entered": 412, "completed": 392, "what": loop},
            }
            (root / "status" / f"main-{n}-r{r}.json").write_text(json.dumps(doc))


def test_a_gpu_hang_on_one_of_sixteen_p5_names_that_node_through_one_job_per_pair(tmp_path: Path) -> None:
    """The GPU hang: all 128 ranks inside the same call, so the counts cannot tell who; each pair
    then runs as a job of its own, and the pair jobs with n5 hang (they leave no result)."""
    loop = "all_reduce size 8589934592 B (8G) in-place (timed loop)"
    _hung_main(tmp_path, loop)
    _write_common(tmp_path)
    cfg = RunConfig(out_dir=tmp_path, instance_type=P5)
    warn, fail = pairs.pair_floors(cfg, "nccl")
    ran: list[list[tuple[str, str]]] = []

    def run_round(rnd: list[tuple[str, str]]) -> None:
        ran.append(rnd)
        for a, b in rnd:
            tag = f"{a}+{b}"
            if "n5" in (a, b):  # the job hangs: its watchdog writes the pair's label, no result
                for i, n in enumerate((a, b)):
                    (tmp_path / "status" / f"pairs-{tag}-{n}-r{i}.json").write_text(
                        json.dumps(
                            {
                                "phase": f"pairs-{tag}",
                                "node": n,
                                "rank": i,
                                "state": "error",
                                "peer_lost": True,
                                "error": f"collectives: rank {i}: pair {tag}: {loop} did not finish within 450 s",
                            }
                        )
                    )
                continue
            doc = {"phase": "pairs", "backend": "nccl", "pairs": {"first": [[a, b, 478.0]]}}
            (tmp_path / f"phase-pairs-{tag}.json").write_text(json.dumps(doc))

    found = pair_jobs.search(
        tmp_path, NODES, run_round, backend="nccl", floor=warn, floor_fail=fail, op="all_reduce", size=8 << 30
    )
    assert found["bad"].keys() == {"n5"} and found["bad_links"] == []
    assert len(ran) == 2 and len(ran[0]) == 8 and len(ran[1]) == 2  # 8 pairs at once, then the two suspects
    rep = judge(tmp_path, instance_type=P5, local=False, expected_nodes=NODES)
    by_node = {v.node: v for v in rep.nodes}
    assert {n for n, v in by_node.items() if v.verdict != Verdict.PASS} == {"n5"}, {
        n: v.reasons for n, v in by_node.items() if v.reasons
    }
    assert by_node["n5"].verdict == Verdict.FAIL and rep.verdict == Verdict.FAIL and int(rep.verdict) == 2


@pytest.mark.parametrize("bad_pair", [("n3", "n4")])
def test_a_hung_pair_whose_nodes_both_pass_with_known_good_partners_is_the_link(
    tmp_path: Path, bad_pair: tuple[str, str]
) -> None:
    def run_round(rnd: list[tuple[str, str]]) -> None:
        for a, b in rnd:
            if {a, b} == set(bad_pair):
                continue  # hung: no result
            doc = {"pairs": {"first": [[a, b, 478.0]]}}
            (tmp_path / f"phase-pairs-{a}+{b}.json").write_text(json.dumps(doc))

    (tmp_path / "status").mkdir()
    warn, fail = pairs.pair_floors(RunConfig(out_dir=tmp_path, instance_type=P5), "nccl")
    found = pair_jobs.search(
        tmp_path, NODES, run_round, backend="nccl", floor=warn, floor_fail=fail, op="all_reduce", size=8 << 30
    )
    assert found["bad"] == {} and [tuple(x[:2]) for x in found["bad_links"]] == [bad_pair]
