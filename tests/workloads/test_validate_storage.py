"""The storage phase: who reads whose file, the sizes it picks, and how the judge holds the
figures against what the stack provisioned. The phase itself runs for real in the local
pipeline (tests/workloads/test_validate_hang.py, `make demo`) and on the Slurm cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_cluster.workloads.validate.storage import judge_storage
from gpu_cluster.workloads.validate.run import storage_sizes
from gpu_cluster.workloads.validate.run_config import RunConfig
from gpu_cluster.workloads.validate.storage import provisioned_gbps, read_partner
from gpu_cluster.workloads.validate.verdict import Verdict


def test_each_rank_reads_a_file_another_node_wrote() -> None:
    nodes = {"a": [0, 1], "b": [2, 3], "c": [4, 5]}
    assert [read_partner(r, nodes) for r in range(6)] == [2, 3, 4, 5, 0, 1]
    # Uneven nodes: the local index wraps on the smaller node; one node reads its own files.
    assert read_partner(1, {"a": [0, 1], "b": [2]}) == 2
    assert read_partner(1, {"a": [0, 1]}) == 1


def test_provisioned_throughput_is_capacity_times_throughput_per_tib() -> None:
    # 4.8 TiB of PERSISTENT_2 at 250 MB/s/TiB: 1.2 GB/s.
    assert provisioned_gbps(4800, 250) == pytest.approx(4800 / 1024 * 0.25)
    assert provisioned_gbps(0, 250) is None and provisioned_gbps(4800, 0) is None


def test_sizes_fit_about_thirty_seconds_at_the_provisioned_rate() -> None:
    cfg = RunConfig(out_dir=Path("/x"), phase="storage", storage_expect_gbps=1.2)
    stream, ckpt = storage_sizes(cfg, "nccl", ranks=64)
    assert stream == int(1.2e9 * 30 / 64) // (1 << 20) * (1 << 20)
    assert ckpt == int(1.2e9 * 20 / 64) // (1 << 20) * (1 << 20)
    # A big cluster on a small file system gets the floor of 64 MiB per rank, a small one the cap.
    assert storage_sizes(cfg, "nccl", ranks=4096)[0] == 64 << 20
    big = RunConfig(out_dir=Path("/x"), phase="storage", storage_expect_gbps=500.0)
    assert storage_sizes(big, "nccl", ranks=8) == (4 << 30, 1 << 30)
    # Unknown throughput on a GPU cluster, and CPU runs.
    assert storage_sizes(RunConfig(out_dir=Path("/x")), "nccl", 8) == (1 << 30, 256 << 20)
    assert storage_sizes(RunConfig(out_dir=Path("/x")), "gloo", 8) == (32 << 20, 8 << 20)


def _result(write: float, read: float, ok: bool = True, expect: float | None = 1.2) -> dict[str, object]:
    return {
        "write_gbps": write,
        "read_gbps": read,
        "ranks": 16,
        "nodes": 2,
        "file_bytes_per_rank": 1 << 30,
        "cached": False,
        "expect_gbps": expect,
        "checkpoint": {
            "bytes": 1 << 30,
            "save_s": 2.0,
            "load_s": 1.0,
            "save_gbps": 0.5,
            "load_gbps": 1.0,
            "ok": ok,
            "bad_ranks": [] if ok else [3],
        },
    }


def test_the_judge_warns_below_half_the_provisioned_rate_and_never_fails_on_throughput() -> None:
    ms = {m.check: m for m in judge_storage(_result(1.0, 0.9), floors=True)}
    assert ms["storage.write"].verdict == Verdict.PASS and ms["storage.write"].floor_warn == pytest.approx(0.6)
    ms = {m.check: m for m in judge_storage(_result(0.3, 0.1), floors=True)}
    assert ms["storage.write"].verdict == Verdict.WARN and ms["storage.read"].verdict == Verdict.WARN
    assert ms["storage.write"].floor_fail is None
    assert "provisioned 1.2 GB/s" in ms["storage.write"].basis
    # On CPU (floors off) and without a provisioned figure the same numbers are information.
    assert all(m.verdict == Verdict.PASS for m in judge_storage(_result(0.3, 0.1), floors=False))
    assert all(m.verdict == Verdict.PASS for m in judge_storage(_result(0.3, 0.1, expect=None), floors=True))


def test_a_checkpoint_that_loads_back_other_values_fails() -> None:
    ms = {m.check: m for m in judge_storage(_result(1.0, 1.0, ok=False), floors=False)}
    assert ms["storage.checkpoint_roundtrip"].verdict == Verdict.FAIL
    assert "[3]" in ms["storage.checkpoint_roundtrip"].detail
