"""The nccl-tests reader and judge, on 15 published runs (../shared/data/nccl-logs, each with its
source and what a sound judge concludes in cases.yaml), and the CLI branch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_cluster.components.catalog import CatalogError, load_catalog
from gpu_cluster.workloads.validate import nccltests
from gpu_cluster.workloads.validate.__main__ import main as validate_main
from gpu_cluster.workloads.validate.verdict import Verdict

# shared/ sits beside the clone (CI), or beside the folder of worktrees (this workplace).
_ROOT = Path(__file__).resolve().parents[2]
_PLACES = [base / "shared" / "data" / "nccl-logs" for base in (_ROOT.parent, _ROOT.parent.parent)]
LOGS = next((p for p in _PLACES if (p / "cases.yaml").is_file()), _PLACES[0])
pytestmark = pytest.mark.skipif(
    not (LOGS / "cases.yaml").is_file(),
    reason=f"published nccl-tests corpus not found at {LOGS} (CI puts shared/ beside the clone)",
)


def _cases() -> list[dict[str, Any]]:
    if not (LOGS / "cases.yaml").is_file():
        return []
    return list(yaml.safe_load((LOGS / "cases.yaml").read_text(encoding="utf-8")))


def _runs(case: dict[str, Any]) -> list[nccltests.NcclTestsRun]:
    path = LOGS / case["file"]
    return nccltests.parse(path.read_text(encoding="utf-8"), str(path))


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["file"][:2])
def test_parser_reads_every_published_run(case: dict[str, Any]) -> None:
    runs = _runs(case)
    assert len(runs) == 1
    run = runs[0]
    oop = [r for r in run.rows if not r["in_place"]]
    largest = max(oop, key=lambda r: r["size_bytes"])
    assert largest["size_bytes"] == case["largest_size_bytes"]
    assert largest["busbw_gbps"] == pytest.approx(case["busbw_at_largest"])
    assert run.avg_busbw == (None if case["avg_busbw"] is None else pytest.approx(case["avg_busbw"]))
    # The op and the rank count come from the table alone (busbw / algbw is nccl-tests' factor).
    op, ranks = run.infer_op(len(run.devices) or None)
    assert op == case["collective"].removesuffix("_perf")
    assert ranks == case["nodes"] * case["gpus_per_node"]
    if run.devices:
        assert len(run.hosts) == case["nodes"]
    assert all(r["busbw_gbps"] >= 0 and r["algbw_gbps"] >= 0 for r in run.rows)
    assert {r["in_place"] for r in run.rows} == {False, True}


def _known(case: dict[str, Any]) -> bool:
    try:
        load_catalog().judge_type(str(case.get("instance_type")))
        return True
    except CatalogError:
        return False


ALLOWED = {
    "healthy": {Verdict.PASS, Verdict.WARN},
    "degraded": {Verdict.FAIL},
    "either": {Verdict.WARN, Verdict.FAIL},
}


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["file"][:2])
def test_verdict_matches_what_a_sound_judge_concludes(case: dict[str, Any]) -> None:
    rep = nccltests.judge_runs(_runs(case), case.get("instance_type"), case["nodes"])
    if not _known(case):
        # Outside the catalog the log alone judges: a degraded run still FAILs (sockets between
        # nodes), and only a healthy one may stay UNKNOWN, labelled so.
        assert rep.label == "type unknown" and not rep.floors_applied
        assert rep.verdict in ALLOWED[case["expected"]] | (
            {Verdict.UNKNOWN} if case["expected"] == "healthy" else set()
        )
        return
    assert rep.verdict in ALLOWED[case["expected"]], [m.to_json() for m in rep.measurements]
    judged = rep.measurements[0]
    assert judged.floor_fail is not None and "expected" in judged.basis
    it = load_catalog().judge_type(case["instance_type"])
    path = "single-node" if case["nodes"] == 1 else "multi-node"
    # The floors are the model's at the size judged: 8 GiB, or the largest size of a shorter sweep.
    sizes = sorted({r["size_bytes"] for r in _runs(case)[0].rows})
    assert judged.at_bytes == next((x for x in sizes if x >= 8 << 30), sizes[-1])
    e = it.bandwidth.expected(judged.check.split(".")[1], case["nodes"], path, judged.at_bytes)  # type: ignore[arg-type]
    assert (judged.floor_warn, judged.floor_fail) == (e.floor_warn_gbps, e.floor_fail_gbps)


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["file"][:2])
def test_the_command_line_judges_every_published_run_with_its_type(
    case: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Through ``validate judge --nccl-tests``, as a user runs it: the type the case names (the
    judge-only ones too: p4de.24xlarge, Standard_ND96asr_v4, g4dn.8xlarge), the verdict its label allows."""
    argv = ["judge", "--nccl-tests", str(LOGS / case["file"]), "--nodes", str(case["nodes"])]
    if case.get("instance_type"):
        argv += ["--instance-type", case["instance_type"]]
    code = validate_main(argv)
    out = capsys.readouterr()
    allowed = ALLOWED[case["expected"]] | (
        {Verdict.UNKNOWN} if not _known(case) and case["expected"] == "healthy" else set()
    )
    assert Verdict(code) in allowed, out.out[-2000:] + out.err


def test_an_unknown_type_is_refused_with_the_types_the_judge_knows(capsys: pytest.CaptureFixture[str]) -> None:
    case = next(c for c in _cases() if c["file"].startswith("01-"))
    with pytest.raises(SystemExit) as done:
        validate_main(["judge", "--nccl-tests", str(LOGS / case["file"]), "--nodes", "2", "--instance-type", "p9"])
    err = capsys.readouterr().err
    assert done.value.code == 3 and "'p9' is not in the catalog" in err
    # The judge-only types are among those offered.
    assert "p4de.24xlarge" in err and "Standard_ND96asr_v4" in err and "g4dn.8xlarge" in err


def test_socket_fallback_is_a_fail_that_says_so() -> None:
    # Case 15 on a catalog type that expects EFA: "Using network Socket" fails whatever the bandwidth.
    case = next(c for c in _cases() if c["file"].startswith("15-"))
    runs = _runs(case)
    rep = nccltests.judge_runs(runs, "p5.48xlarge", 2)
    assert rep.verdict == Verdict.FAIL
    assert rep.transport["ok"] is False and "fell back to TCP sockets" in rep.transport["message"]
    # The table says 2 ranks: the judge notices it does not match 2 x 8 GPUs.
    assert any("does not match" in e for e in rep.errors)


def test_efa_log_transport_is_accepted() -> None:
    case = next(c for c in _cases() if c["file"].startswith("03-"))
    rep = nccltests.judge_runs(_runs(case), "p4d.24xlarge", 2)
    assert rep.transport["ok"] is True and rep.transport["provider"] == "efa"
    assert rep.versions.get("nccl") == "2.9.9+cuda11.2"


def test_short_sweep_is_judged_at_its_largest_size_and_said() -> None:
    case = next(c for c in _cases() if c["file"].startswith("08-"))
    rep = nccltests.judge_runs(_runs(case), case["instance_type"], 2)
    m = rep.measurements[0]
    assert m.at_bytes == case["largest_size_bytes"] and "sweep ended" in m.detail
    # ...against the model's figure at 512 MiB, which is under the 8 GiB one.
    it = load_catalog().get(case["instance_type"])
    at_512 = it.bandwidth.expected("all_gather", 2, "multi-node", case["largest_size_bytes"])
    assert m.floor_fail == at_512.floor_fail_gbps < it.bandwidth.expected("all_gather", 2, "multi-node").floor_fail_gbps


def test_wrong_node_count_is_reported() -> None:
    case = next(c for c in _cases() if c["file"].startswith("06-"))
    rep = nccltests.judge_runs(_runs(case), case["instance_type"], 4)
    assert any("names 2 host(s)" in e for e in rep.errors) and rep.verdict != Verdict.PASS


def test_cli_writes_the_same_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = next(c for c in _cases() if c["file"].startswith("01-"))
    code = validate_main(
        [
            "judge",
            "--nccl-tests",
            str(LOGS / case["file"]),
            "--instance-type",
            "p5.48xlarge",
            "--nodes",
            "2",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == int(Verdict.PASS)
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["verdict"] == "PASS" and doc["measurements"][0]["at_bytes"] == 8 << 30
    assert (tmp_path / "report.md").read_text().startswith("# Cluster validation: PASS")
    assert "expected" in capsys.readouterr().out
    assert validate_main(["judge", "--nccl-tests", str(LOGS / case["file"]), "--instance-type", "p5.48xlarge"]) == 3


def test_text_without_a_table_is_refused() -> None:
    with pytest.raises(nccltests.ParseError, match="no nccl-tests table"):
        nccltests.parse("NCCL INFO Using network Socket\n# Avg bus bandwidth : 1.0\n")


@pytest.mark.parametrize("case", [c for c in _cases() if c["expected"] == "healthy"], ids=lambda c: c["file"][:2])
def test_a_healthy_published_run_cut_at_32M_is_not_failed(case: dict[str, Any]) -> None:
    """nccl-tests' default ``-e 32M``: the run as it would have printed with that default."""
    (run,) = _runs(case)
    if not any(r["size_bytes"] == 32 << 20 for r in run.rows):
        pytest.skip("the published table has no 32 MiB row")
    run.rows = [r for r in run.rows if r["size_bytes"] <= 32 << 20]
    rep = nccltests.judge_runs([run], case.get("instance_type"), case["nodes"])
    assert rep.verdict != Verdict.FAIL, [m.to_json() for m in rep.measurements]
    m = rep.measurements[0]
    if _known(case):
        assert m.at_bytes == 32 << 20 and "for the size" in m.basis
