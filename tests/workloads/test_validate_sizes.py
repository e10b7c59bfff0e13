"""The validation sweep reaches the size its floors are stated at, capped to device memory as
nccl-tests caps maxBytes, and the pairs run the op and size of the floor they are judged by."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_cluster.components.bandwidth import FLOOR_MESSAGE_BYTES
from gpu_cluster.workloads.runtime.sizes import size_sweep
from gpu_cluster.workloads.validate.judge import judge
from gpu_cluster.workloads.runtime.device import memory_cap
from gpu_cluster.workloads.validate.pairs import pair_op as _pair_op
from gpu_cluster.workloads.validate.pairs import want_pairs as _want_pairs
from gpu_cluster.workloads.validate.run import _sizes, sweep_start
from gpu_cluster.workloads.validate.run_config import RunConfig
from gpu_cluster.workloads.validate.verdict import Verdict


@pytest.mark.parametrize(
    "lo,hi,factor", [(1 << 20, 8 << 30, 4), (1 << 20, 8 << 30, 2), (1 << 16, 4 << 20, 2), (1 << 20, 3 << 30, 4)]
)
def test_sweep_lands_on_the_largest_size(lo: int, hi: int, factor: int) -> None:
    start = sweep_start(lo, hi, factor)
    sizes = size_sweep(start, hi, factor)
    assert sizes[-1] == hi and start <= lo and start * factor > lo


def test_gpu_default_reaches_8_gib_and_memory_caps_it() -> None:
    cfg = RunConfig(out_dir=Path("."))
    _, single, multi, pair = _sizes(cfg, "nccl")
    assert single == multi == pair == FLOOR_MESSAGE_BYTES
    # nccl-tests src/common.cu: (totalGlobalMem - 1 GiB) / 3 with the data check on.
    small = 16 << 30
    _, single, multi, pair = _sizes(cfg, "nccl", small)
    assert single == multi == pair == memory_cap(small, check=True) == (small - (1 << 30)) // 3
    assert _sizes(cfg, "nccl", 80 << 30)[2] == FLOOR_MESSAGE_BYTES  # an 80 GiB GPU fits 8 GiB
    assert _sizes(cfg, "gloo")[2] == 4 << 20


def test_pairs_use_the_floor_op() -> None:
    assert _pair_op(RunConfig(out_dir=Path("."), instance_type="a3-megagpu-8g")) == "all_gather"
    assert _pair_op(RunConfig(out_dir=Path("."), instance_type="p5.48xlarge")) == "all_reduce"
    assert _pair_op(RunConfig(out_dir=Path("."))) == "all_reduce"


def _result(op: str, busbw: float, nodes: int = 4, hung: bool = False) -> dict[str, object]:
    rows = [{"size_bytes": FLOOR_MESSAGE_BYTES, "in_place": ip, "busbw_gbps": busbw} for ip in (False, True)]
    return {
        "backend": "nccl",
        "nodes": {f"n{i}": {} for i in range(nodes)},
        "multi_node": {op: {"rows": rows}},
        "health": [],
        **({"hung": True} if hung else {}),
    }


def test_pairs_run_below_the_warn_floor_and_after_a_hang() -> None:
    cfg = RunConfig(out_dir=Path("."), instance_type="a3-megagpu-8g")
    # A3 Mega on 4 nodes: all_gather expected 188.7, warn under 169.8; all_reduce figures do not decide.
    assert not _want_pairs(cfg, _result("all_gather", 185.0))
    assert _want_pairs(cfg, _result("all_gather", 160.0))  # WARN, not FAIL: the search still runs
    assert _want_pairs(cfg, _result("all_gather", 185.0, hung=True))


def test_report_states_rounds_and_bad_links(tmp_path: Path) -> None:
    main = {
        "phase": "main",
        "world_size": 32,
        "backend": "nccl",
        "nodes": {f"n{i}": {"ranks": list(range(8 * i, 8 * i + 8))} for i in range(4)},
        "multi_node": {},
        "health": [],
        "single_node": {},
        "pairs": {
            "first": [["n0", "n1", 100.0], ["n2", "n3", 480.0]],
            "second": [],
            "floor": 360.3,
            "floor_basis": "catalog floor",
            "good": ["n0", "n1", "n2", "n3"],
            "bad": {},
            "unresolved": {},
            "message_bytes": FLOOR_MESSAGE_BYTES,
            "op": "all_reduce",
            "rounds": 2,
            "pairing": "topology",
            "bad_links": [["n0", "n1", "n0+n1: 100.00 together, both pass with a known-good partner"]],
        },
    }
    (tmp_path / "phase-main.json").write_text(json.dumps(main))
    rep = judge(tmp_path, instance_type="p5.48xlarge", local=False)
    link = next(m for m in rep.measurements if m.check == "pair.link")
    assert link.verdict == Verdict.FAIL and link.scope == "pair:n0+n1"
    rounds = next(m for m in rep.measurements if m.check == "pair.search_rounds")
    assert rounds.value == 2.0
    assert all(n.verdict != Verdict.FAIL or "pairwise" not in " ".join(n.reasons) for n in rep.nodes)


def test_collectives_caps_maxbytes_to_memory_like_nccl_tests() -> None:
    from gpu_cluster.workloads.collectives.bench import CollectivesConfig, cap_to_memory

    cfg = CollectivesConfig(min_bytes=1 << 20, max_bytes=64 << 30, factor=2)
    capped, note = cap_to_memory(cfg, 80 << 30, "nccl")
    assert capped.max_bytes == (79 << 30) // 3 and "Reducing maxBytes" in note
    assert cap_to_memory(cfg, None, "gloo") == (cfg, "")
    fits = CollectivesConfig(min_bytes=1 << 20, max_bytes=8 << 30)
    assert cap_to_memory(fits, 80 << 30, "nccl") == (fits, "")


def test_collectives_refuses_an_unwritable_json_path_before_measuring(tmp_path: Path) -> None:
    from gpu_cluster.workloads.collectives.bench import UsageError, parse_args

    with pytest.raises(UsageError, match="--json"):
        parse_args(["--json", str(tmp_path / "missing-dir" / "out.json")])
    assert parse_args(["--json", str(tmp_path / "out.json")]).json_path == str(tmp_path / "out.json")
