"""No PASS on bandwidth the judge cannot see: 16 x p5 sweeps, healthy and at 1/2 to 1/16 of the
plateau, cut at 8 GiB, 32 MiB (nccl-tests' default -e) and 512 KiB, judged through
``validate judge --nccl-tests`` by a catalog that holds out the published figure the healthy curve
is built on. No degraded run PASSes, no healthy run FAILs, and a sweep too short to tell a cluster
at half its bandwidth from a healthy one says how far to run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bench.bandwidth_model import _held_out
from gpu_cluster.components.catalog import CATALOG_PATH, Catalog, load_catalog
from tests.workloads.nccl_fabricate import curve, nccl_tests_log
from gpu_cluster.workloads.validate import nccltests
from gpu_cluster.workloads.validate.__main__ import main as validate_main
from gpu_cluster.workloads.validate.verdict import Verdict

# The published 16-node all_reduce on the same 3200 Gbps EFA (p5en.48xlarge, 16 GiB row:
# awsome-distributed-training 0edaf15, topology-aware-nccl-tests/README.md lines 260-267, in
# ../shared/data/nccl-logs/04-p5en-16node-efa-allreduce-partial.log).
PLATEAU = 369.86
SIZE = 16 << 30
CUTS = (8 << 30, 32 << 20, 512 << 10)
SLOWER = (1, 2, 4, 8, 16)


def _held_out_catalog() -> Catalog:
    doc = yaml.safe_load(CATALOG_PATH.read_text(encoding="utf-8"))
    held = _held_out(doc, "multi-node", "all_reduce", 16, {SIZE: PLATEAU})
    assert held is not None, "the catalog no longer holds the p5en 16-node figure"
    return held[0]


def _latencies() -> list[float]:
    """The latencies (us) the catalog knows for EFA all_reduce: p5's, fitted on its published curve,
    and the median of the EFA curves that a type without a curve takes. Each healthy sweep takes one,
    and a slower cluster keeps it (the slowdown hardest to see at small sizes)."""
    cat = load_catalog()
    return sorted(
        {
            round(cat.get(t).bandwidth.latency_for("multi-node", "all_reduce")[0] * 1e6, 1)
            for t in ("p5.48xlarge", "p4d.24xlarge")
        }
    )


@pytest.fixture(scope="module")
def held() -> Catalog:
    return _held_out_catalog()


def _judge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: Catalog, slower: int, lat: float, cut: int) -> dict:
    monkeypatch.setattr(nccltests, "load_catalog", lambda: held)
    log = tmp_path / f"ar-{slower}-{lat}-{cut}.log"
    log.write_text(
        nccl_tests_log("all_reduce", 16, 8, curve(PLATEAU / slower, lat), max_bytes=cut, min_bytes=8),
        encoding="utf-8",
    )
    out = tmp_path / f"rep-{slower}-{lat}-{cut}"
    code = validate_main(
        ["judge", "--nccl-tests", str(log), "--instance-type", "p5.48xlarge", "--nodes", "16", "--out", str(out)]
    )
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert code == int(Verdict[doc["verdict"]])
    return doc


def test_no_degraded_pass_and_no_healthy_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: Catalog, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: dict[tuple[int, float, int], str] = {}
    for lat in _latencies():
        for slower in SLOWER:
            for cut in CUTS:
                seen[(slower, lat, cut)] = _judge(tmp_path, monkeypatch, held, slower, lat, cut)["verdict"]
    capsys.readouterr()
    wrong = {k: v for k, v in seen.items() if (k[0] == 1 and v == "FAIL") or (k[0] > 1 and v == "PASS")}
    assert not wrong, wrong
    # And the judge still judges: a whole sweep passes a healthy cluster and fails every slower one.
    assert all(v == "PASS" for (s, _, c), v in seen.items() if s == 1 and c == 8 << 30), seen
    assert all(v == "FAIL" for (s, _, c), v in seen.items() if s > 1 and c == 8 << 30), seen


def test_a_32M_sweep_that_cannot_see_a_2x_slowdown_says_how_far_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: Catalog
) -> None:
    lat = _latencies()[0]
    need = held.judge_type("p5.48xlarge").bandwidth.shortest_sweep("all_reduce", 16, "multi-node")
    assert need is not None and 32 << 20 < need <= 8 << 30
    doc = _judge(tmp_path, monkeypatch, held, 8, lat, 32 << 20)
    (m,) = [m for m in doc["measurements"] if m["check"] == "multi_node.all_reduce"]
    assert doc["verdict"] == "UNKNOWN" and m["verdict"] == "UNKNOWN"
    assert f"run to at least {need} bytes" in m["detail"]
    # At that size a cluster at half the model's plateau, with its latency, is no longer a PASS (the
    # size is the smallest where that holds), and a healthy one still passes.
    e = held.judge_type("p5.48xlarge").bandwidth.expected("all_reduce", 16, "multi-node", need)
    assert e.plateau_gbps is not None and e.latency_us is not None
    plateau, model_lat = e.plateau_gbps, e.latency_us
    half = nccl_tests_log("all_reduce", 16, 8, curve(plateau / 2, model_lat), max_bytes=need, min_bytes=8)
    rep = nccltests.judge_runs(nccltests.parse(half), "p5.48xlarge", 16, catalog=held)
    assert rep.verdict in (Verdict.WARN, Verdict.FAIL)
    shorter = nccl_tests_log("all_reduce", 16, 8, curve(plateau / 2, model_lat), max_bytes=need // 2, min_bytes=8)
    assert nccltests.judge_runs(nccltests.parse(shorter), "p5.48xlarge", 16, catalog=held).verdict == Verdict.UNKNOWN
    assert _judge(tmp_path, monkeypatch, held, 1, lat, need)["verdict"] == "PASS"
