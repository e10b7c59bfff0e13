"""Token shards: the writer, the header checks and the windows the trainer reads."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import pytest

from tests.workloads.torchrun_util import explain, python_m
from gpu_cluster.workloads.train.data import (
    HEADER,
    HEADER_BYTES,
    MAGIC,
    VERSION,
    ShardError,
    TokenWindows,
    check_shards,
    read_shard,
    write_synthetic,
)


def _tokens(path: Path) -> np.ndarray:
    s = read_shard(path)
    return np.fromfile(path, dtype=s.dtype, offset=HEADER_BYTES)


def test_write_synthetic_cli_writes_checked_deterministic_shards(tmp_path: Path) -> None:
    r = python_m(
        "gpu_cluster.workloads.train.data",
        [
            "write-synthetic",
            "--out",
            str(tmp_path / "a"),
            "--shards",
            "3",
            "--tokens-per-shard",
            "500",
            "--vocab",
            "100",
            "--seed",
            "7",
        ],
    )
    assert r.returncode == 0, explain(r)
    paths = sorted((tmp_path / "a").iterdir())
    # Only the three shards: no temporary file is left behind.
    assert [p.name for p in paths] == ["train-00000.bin", "train-00001.bin", "train-00002.bin"]
    for p in paths:
        s = read_shard(p)
        assert (s.n_tokens, s.vocab_size, s.dtype.name) == (500, 100, "uint16")
        toks = _tokens(p)
        assert toks.max() < 100
        # Learnable structure: most steps add the fixed stride.
        assert np.mean((toks[1:] - toks[:-1]) % 100 == 7) > 0.8
    again = write_synthetic(out=tmp_path / "b", shards=3, tokens_per_shard=500, vocab=100, seed=7)
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in paths]
    other = write_synthetic(out=tmp_path / "c", shards=1, tokens_per_shard=500, vocab=100, seed=8)
    assert other[0].read_bytes() != paths[0].read_bytes()
    assert _tokens(paths[0]).tolist() != _tokens(paths[1]).tolist()


def test_truncated_shard_is_named(tmp_path: Path) -> None:
    (p,) = write_synthetic(out=tmp_path, shards=1, tokens_per_shard=100, vocab=50, seed=0)
    p.write_bytes(p.read_bytes()[:-10])
    with pytest.raises(
        ShardError, match=rf"{re.escape(str(p))}: truncated.*100 tokens of uint16 = 200 data bytes, file has 190"
    ):
        read_shard(p)
    p.write_bytes(p.read_bytes()[:20])
    with pytest.raises(ShardError, match=rf"{re.escape(str(p))}: truncated: 20 bytes, shorter than the 32-byte header"):
        read_shard(p)


def test_wrong_dtype_shard_is_named(tmp_path: Path) -> None:
    p = tmp_path / "wide.bin"
    # Header promises uint16 but the writer used 4-byte tokens.
    p.write_bytes(HEADER.pack(MAGIC, VERSION, 1, 100, 50, 0) + np.arange(100, dtype="<u4").tobytes())
    with pytest.raises(ShardError, match=rf"{re.escape(str(p))}: wrong dtype.*fits 4-byte tokens"):
        read_shard(p)
    q = tmp_path / "code.bin"
    q.write_bytes(HEADER.pack(MAGIC, VERSION, 9, 1, 50, 0) + b"\0\0")
    with pytest.raises(ShardError, match=rf"{re.escape(str(q))}: unknown dtype code 9 \(allowed: 1=uint16, 2=uint32\)"):
        read_shard(q)
    r = tmp_path / "magic.bin"
    r.write_bytes(struct.pack("<8sIIQII", b"NOTATOKS", 1, 1, 0, 1, 0))
    with pytest.raises(ShardError, match="not a token shard"):
        read_shard(r)


def test_trainer_reports_every_bad_shard_and_flag_at_once(tmp_path: Path) -> None:
    good, short, trunc = write_synthetic(out=tmp_path, shards=3, tokens_per_shard=200, vocab=64, seed=1)
    trunc.write_bytes(trunc.read_bytes()[:-3])
    short.write_bytes(HEADER.pack(MAGIC, VERSION, 1, 10, 64, 0) + np.zeros(10, "<u2").tobytes())
    wide = tmp_path / "train-00009.bin"
    wide.write_bytes(HEADER.pack(MAGIC, VERSION, 1, 200, 64, 0) + np.zeros(200, "<u4").tobytes())
    r = python_m(
        "gpu_cluster.workloads.train.ddp",
        [
            "--data",
            str(tmp_path / "train-*.bin"),
            "--seq-len",
            "16",
            "--vocab-size",
            "64",
            "--steps",
            "0",
            "--lr",
            "fast",
        ],
    )
    assert r.returncode == 2, explain(r)
    assert "Traceback" not in r.stderr
    err = r.stderr
    assert f"{trunc}: truncated" in err
    assert f"{wide}: wrong dtype" in err
    assert f"{short}: 10 tokens, fewer than seq_len + 1 = 17" in err
    assert "--steps: 0 is below the minimum 1" in err
    assert "--lr: 'fast' is not a number" in err
    assert str(good) not in err


def test_trainer_flags_checked_before_any_process_group(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_cluster.workloads.train.ddp import parse_config

    with pytest.raises(SystemExit) as e:
        parse_config(
            [
                "--data",
                str(tmp_path / "nothing-*.bin"),
                "--n-heads",
                "3",
                "--instance-type",
                "no-such-type",
                "--ckpt-every",
                "5",
            ]
        )
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"error: --data: glob '{tmp_path}/nothing-*.bin' matches no files" in err
    assert "error: --n-heads: 3 does not divide d_model=32" in err
    assert "error: --instance-type:" in err
    assert "error: --ckpt-every: 5 needs --ckpt-dir" in err


def test_windows_cover_each_shard_without_crossing(tmp_path: Path) -> None:
    paths = write_synthetic(out=tmp_path, shards=2, tokens_per_shard=50, vocab=64, seed=3)
    shards, problems = check_shards(str(tmp_path / "*.bin"), seq_len=8, vocab_size=64)
    assert problems == []
    ds = TokenWindows(shards, 8)
    assert len(ds) == 2 * ((50 - 1) // 8)  # 6 per shard
    t0, t1 = _tokens(paths[0]), _tokens(paths[1])
    x, y = ds[5]  # last window of shard 0: tokens 40..48
    assert x.tolist() == t0[40:48].tolist() and y.tolist() == t0[41:49].tolist()
    x, y = ds[6]  # first window of shard 1
    assert x.tolist() == t1[0:8].tolist() and y.tolist() == t1[1:9].tolist()
    with pytest.raises(IndexError):
        ds[12]
    _, problems = check_shards(str(tmp_path / "*.bin"), seq_len=8, vocab_size=32)
    assert len(problems) == 2 and "larger than the model's --vocab-size 32" in problems[0][1]


def test_mfu_peak_comes_from_the_catalog(tmp_path: Path) -> None:
    from gpu_cluster.components.catalog import load_catalog
    from gpu_cluster.workloads.train.ddp import parse_config

    write_synthetic(out=tmp_path, shards=1, tokens_per_shard=100, vocab=64, seed=0)
    cfg, _ = parse_config(["--data", str(tmp_path / "*.bin"), "--instance-type", "p5.48xlarge"])
    it = load_catalog().get("p5.48xlarge")
    assert cfg.peak_tflops == it.accelerator.peak_dense_bf16_tflops
    assert cfg.peak_source is not None and "p5.48xlarge" in cfg.peak_source
