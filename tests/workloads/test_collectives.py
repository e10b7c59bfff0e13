"""The collectives benchmark: pure helpers in-process, the job itself under real torchrun + gloo."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.workloads.torchrun_util import cpu_torchrun
from gpu_cluster.workloads.collectives import bench as col
from gpu_cluster.workloads.health import hang
from gpu_cluster.workloads.collectives import ops as ops
from gpu_cluster.workloads.collectives import table as table
from gpu_cluster.workloads.runtime import sizes

ROOT = Path(__file__).resolve().parents[2]


def _torchrun(
    nproc: int, args: list[str], *, env_extra: dict[str, str] | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    return cpu_torchrun("gpu_cluster.workloads.collectives", nproc, args, env_extra=env_extra, timeout=timeout)


# ----------------------------------------------------------------------------- pure helpers


@pytest.mark.parametrize(
    "text,expected",
    [
        ("8", 8),
        ("512K", 512 * 1024),
        ("1M", 1 << 20),
        ("16G", 16 << 30),
        ("1m", 1 << 20),
        ("2MiB", 2 << 20),
        ("4KB", 4096),
        ("1T", 1 << 40),
    ],
)
def test_parse_size_binary_units(text: str, expected: int) -> None:
    assert sizes.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "1X", "M", "1.5M", "-1K", "1 M B", "0x10"])
def test_parse_size_rejects_and_names_the_value(text: str) -> None:
    with pytest.raises(ValueError, match="is not a size"):
        sizes.parse_size(text)


def test_format_size_round_trips() -> None:
    for n in (1, 1000, 1024, 3 << 20, 1 << 30, 1536):
        assert sizes.parse_size(sizes.format_size(n)) == n
    assert sizes.format_size(1 << 20) == "1M"


def test_sweep_is_nccl_tests_geometric_sweep() -> None:
    assert sizes.size_sweep(1 << 20, 64 << 20, 4) == [1 << 20, 4 << 20, 16 << 20, 64 << 20]
    assert sizes.size_sweep(8, 100, 2) == [8, 16, 32, 64]
    assert sizes.size_sweep(5, 5, 2) == [5]


@pytest.mark.parametrize("n", [2, 3, 8])
def test_busbw_factors_are_nccl_tests(n: int) -> None:
    assert ops.busbw_factor("all_reduce", n) == pytest.approx(2 * (n - 1) / n)
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert ops.busbw_factor(op, n) == pytest.approx((n - 1) / n)
    assert ops.busbw_factor("broadcast", n) == 1.0
    algbw, busbw = ops.bandwidths("all_reduce", 10**9, 0.5, n)
    assert algbw == pytest.approx(2.0) and busbw == pytest.approx(2.0 * 2 * (n - 1) / n)


def test_layout_rounds_gathered_buffers_to_the_world_size() -> None:
    ag = ops.layout("all_gather", 1024, 4, 3)  # 256 floats -> 85 per rank
    assert (ag.count, ag.send_elems, ag.recv_elems, ag.nbytes) == (85, 85, 255, 1020)
    rs = ops.layout("reduce_scatter", 1024, 4, 3)
    assert (rs.count, rs.send_elems, rs.recv_elems, rs.nbytes) == (85, 255, 85, 1020)
    a2a = ops.layout("all_to_all", 1024, 2, 3)
    assert (a2a.count, a2a.send_elems, a2a.recv_elems, a2a.nbytes) == (170, 510, 510, 1020)
    ar = ops.layout("all_reduce", 1026, 4, 3)
    assert (ar.count, ar.nbytes) == (256, 1024)


def test_percentile_nearest_rank() -> None:
    vals = list(range(1, 101))
    assert table.percentile(vals, 50) == 50 and table.percentile(vals, 99) == 99
    assert table.percentile([7.0], 99) == 7.0
    assert table.percentile([3.0, 1.0, 2.0], 50) == 2.0


def test_row_lines_up_with_the_header_and_shows_na() -> None:
    row = table.Row(
        op="all_reduce",
        size_bytes=1 << 20,
        count=1 << 18,
        dtype="float32",
        in_place=False,
        time_us=123.456,
        algbw_gbps=8.49,
        busbw_gbps=12.7,
        wrong=0,
    )
    line = table.format_row(
        size_bytes=1 << 20,
        count=1 << 18,
        type_name="float",
        redop="sum",
        root=-1,
        out_of_place=row,
        in_place=None,
        checked=True,
    )
    header = table.header_lines()[1]
    assert len(line) == len(header)
    assert line.split() == [
        "1048576",
        "262144",
        "float",
        "sum",
        "-1",
        "123.5",
        "8.49",
        "12.70",
        "0",
        "N/A",
        "N/A",
        "N/A",
        "N/A",
    ]
    unchecked = table.format_row(
        size_bytes=8, count=2, type_name="float", redop="sum", root=-1, out_of_place=row, in_place=row, checked=False
    )
    assert unchecked.split()[8] == "N/A"


def test_every_bad_flag_is_reported_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    rc = col.main(
        ["-b", "1X", "-e", "5", "-f", "1", "-n", "0", "-c", "2", "-d", "float8", "-o", "all_reduce,bogus", "-T", "-1"]
    )
    err = capsys.readouterr().err
    assert rc == 2
    for needle in (
        "-o/--op: 'all_reduce,bogus'",
        "-b/--minbytes: '1X' is not a size",
        "-f/--stepfactor: 1 is too small",
        "-n/--iters: 0 is too small",
        "-c/--check: '2'",
        "-d/--datatype: 'float8'",
        "-T/--timeout: '-1'",
    ):
        assert needle in err


def test_min_above_max_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert col.main(["-b", "2M", "-e", "1M"]) == 2
    assert "-b/--minbytes 2M is larger than -e/--maxbytes 1M" in capsys.readouterr().err


def test_bad_flags_end_without_traceback_in_a_real_process() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpu_cluster.workloads.collectives", "-b", "one", "-f", "x"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "-b/--minbytes: 'one'" in proc.stderr and "-f/--stepfactor: 'x'" in proc.stderr


def test_check_values_stay_exact_for_every_dtype() -> None:
    for dtype, limit in ops._EXACT_LIMIT.items():
        for n in (2, 3, 8, 64, 300, 1000, 4096, 100_000):
            ma, k = ops._reduce_terms(dtype, n)
            assert (ma - 1) + k <= limit, (dtype, n)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n", [2, 8, 512, 4096])
def test_reduction_check_stays_meaningful_at_any_rank_count(dtype: torch.dtype, n: int) -> None:
    # Summed rank by rank in the dtype itself (any order stays exact), the result is the expected
    # one; and dropping any one rank's contribution leaves wrong elements. At 512 ranks in bf16 and
    # 4,096 in fp16 the old data was all zeros, so a lost rank went unseen.
    idx = torch.arange(2 * n, dtype=torch.int64)
    inputs = [ops.reduce_data(dtype, n, r)[0](idx).to(dtype) for r in range(n)]
    _, red_sum = ops.reduce_data(dtype, n, 0)
    expected = red_sum(idx).to(dtype)
    total = torch.zeros(2 * n, dtype=dtype)
    for x in inputs:
        total += x
    assert torch.equal(total, expected)
    assert len(set(expected.tolist())) > 2 and all(bool(x.any()) for x in inputs)
    for dropped in (0, n // 2, n - 1):
        assert bool((total - inputs[dropped] != expected).any()), dropped


# ----------------------------------------------------------------------------- real runs


def _rows_by_op(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {res["op"]: res["rows"] for res in doc["results"]}


def _check_rows(doc: dict[str, Any], nproc: int, requested: tuple[int, ...]) -> None:
    """Every op ran every size; busbw is algbw times nccl-tests' factor in every row."""
    assert doc["world_size"] == nproc and doc["backend"] == "gloo"
    rows = _rows_by_op(doc)
    assert set(rows) == set(ops.OPS)
    for op, op_rows in rows.items():
        factor = ops.busbw_factor(op, nproc)
        sizes = sorted({r["size_bytes"] for r in op_rows})
        assert sizes == sorted({ops.layout(op, s, 4, nproc).nbytes for s in requested}), op
        placements = {r["in_place"] for r in op_rows}
        # torch has no in-place all_to_all and no out-of-place all_reduce or broadcast: N/A, not emulated.
        want = {False} if op == "all_to_all" else {True} if op in ("all_reduce", "broadcast") else {False, True}
        assert placements == want, op
        for r in op_rows:
            # The time is the ranks' mean (nccl-tests -a 1); the slowest rank's is kept and is never faster.
            assert 0 < r["time_us"] <= r["slowest_us"] * (1 + 1e-9)
            assert math.isclose(r["algbw_gbps"], r["size_bytes"] / 1e9 / (r["time_us"] / 1e6), rel_tol=1e-9)
            assert math.isclose(r["busbw_gbps"], r["algbw_gbps"] * factor, rel_tol=1e-12), (op, r)
            assert r["event_us"] is None  # CUDA events only on GPUs
        res = next(x for x in doc["results"] if x["op"] == op)
        assert math.isclose(res["avg_busbw_gbps"], sum(r["busbw_gbps"] for r in op_rows) / len(op_rows))
        assert res["largest_size_bytes"] == max(sizes)


@pytest.mark.slow
def test_two_ranks_every_op_right_and_busbw_is_algbw_times_factor(tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    proc = _torchrun(2, ["-o", "all", "-b", "1K", "-e", "64K", "-f", "8", "-n", "3", "-w", "1", "--json", str(out)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "# Avg bus bandwidth" in proc.stdout and "# Peak bus bandwidth" in proc.stdout
    doc = json.loads(out.read_text())
    _check_rows(doc, 2, (1024, 8192, 65536))
    assert doc["wrong_total"] == 0
    assert all(r["wrong"] == 0 for rows in _rows_by_op(doc).values() for r in rows)


@pytest.mark.slow
def test_three_ranks_right_until_one_rank_plants_a_fault(tmp_path: Path) -> None:
    # One launch covers both: the 1K rows must be exact, the 8K rows carry rank 2's fault.
    out = tmp_path / "f.json"
    proc = _torchrun(
        3,
        ["-o", "all", "-b", "1K", "-e", "8K", "-f", "8", "-n", "2", "-w", "1", "--json", str(out)],
        env_extra={"GPUC_FAULT_RANK": "2", "GPUC_FAULT_SIZE": "8K"},
    )
    assert proc.returncode != 0
    assert "FAILED" in proc.stdout and "wrong elements" in proc.stderr
    doc = json.loads(out.read_text())
    _check_rows(doc, 3, (1024, 8192))
    assert doc["wrong_total"] > 0
    for op, op_rows in _rows_by_op(doc).items():
        small = [r for r in op_rows if r["size_bytes"] <= 1024]
        big = [r for r in op_rows if r["size_bytes"] > 1024]
        assert small and all(r["wrong"] == 0 for r in small), op
        assert big and all(r["wrong"] > 0 for r in big), op


@pytest.mark.slow
def test_a_rank_that_never_arrives_ends_the_job_naming_op_size_and_rank(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    # The stalled rank never arrives: that the job ends at all (within the subprocess timeout) is
    # the watchdog's work; what it says is checked below, not how long it took on this machine.
    proc = _torchrun(
        2,
        ["-o", "all_gather", "-b", "1K", "-e", "16K", "-f", "4", "-n", "2", "-w", "0", "-T", "3", "--json", str(out)],
        env_extra={"GPUC_STALL_RANK": "1", "GPUC_STALL_SIZE": "4K"},
        timeout=120,
    )
    assert proc.returncode != 0
    assert "all_gather size 4096 B (4K): rank(s) 1 did not arrive within 3 s" in proc.stderr
    # ... and its host, from the host names every rank gathered at the start.
    assert f"did not arrive within 3 s; rank 1 on {socket.gethostname()}" in proc.stderr, proc.stderr[-2000:]
    assert hang.missing_ranks(json.loads(out.read_text())["error"]) == [1]  # still parseable
    assert json.loads(out.read_text())["error"].startswith("all_gather size 4096 B")
    # The sizes before the stall were measured and printed.
    assert any(line.split()[:1] == ["1024"] for line in proc.stdout.splitlines())


def test_missing_ranks_reads_both_messages() -> None:
    assert hang.missing_ranks("all_reduce size 8 B (8): rank(s) 3, 12 did not arrive within 3 s") == [3, 12]
    assert hang.missing_ranks("[Rank 0]: Ranks 1, 2 failed to pass monitoredBarrier in 3000 ms") == [1, 2]
    assert hang.missing_ranks("[Rank 0]: Rank 1 failed to pass monitoredBarrier in 3000 ms") == [1]
    assert hang.missing_ranks("Connection closed by peer") is None


@pytest.mark.slow
def test_run_op_on_a_subgroup_uses_group_ranks_and_names_global_ones(tmp_path: Path) -> None:
    # Global ranks 1 and 2 form the group: in-place offsets, the broadcast root and the check
    # must use group ranks, and a missing rank must be named by its global rank.
    out = tmp_path / "sub.json"
    proc = cpu_torchrun("tests.workloads._subgroup_worker", 3, [str(out)])
    assert out.exists(), proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert set(doc["ok"]) == set(ops.OPS)
    for op, res in doc["ok"].items():
        assert res["world_size"] == 2 and res["wrong_total"] == 0, (op, res)
        assert all(r["wrong"] == 0 for r in res["rows"]) and res["rows"], op
    assert "rank(s) 2 did not arrive within 3 s" in doc["stall"]
    assert doc["missing"] == [2] and doc["parsed"] == [2]


def test_overhead_bench_judges_the_harness_against_its_own_control() -> None:
    from bench.collectives_overhead import judge

    assert judge(1.04, 0.01) == "PASS"
    # 1.114 paired with the control at 1.040 is judged 1.071: a quiet control makes it a FAIL ...
    assert judge(1.114 / 1.040, 0.040) == "FAIL"
    # ... a control that strays past the margin makes it undecidable, not a FAIL.
    assert judge(1.114 / 1.040, 0.145) == "INCONCLUSIVE"


def test_the_timeout_bounds_one_call_so_a_loop_of_calls_gets_it_per_call() -> None:
    import subprocess
    import sys

    code = (
        "import sys, time\n"
        "from gpu_cluster.workloads.health.hang import Watchdog\n"
        "w = Watchdog(rank=0, limit_s=0.5, out=sys.stdout)\n"
        "with w.phase('timed loop', calls=8):\n"
        "    time.sleep(1.5)\n"  # 3 calls' worth of time in a loop of 8: within its bound
        "print('loop ok', flush=True)\n"
        "with w.phase('check'):\n"
        "    time.sleep(3)\n"  # one call's bound is 0.5 s
        "print('not reached', flush=True)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == hang.EXIT_HANG, proc.stderr
    assert "loop ok" in proc.stdout and "not reached" not in proc.stdout
    assert "check did not finish within 0.5 s" in proc.stdout
