"""Property: every parser a user types into fails with its own error type or exit code, never
a traceback; bad arguments leave no files behind.

Each parser gets a valid base command line plus generated (flag, odd value) pairs and stray
tokens. The exits are: collectives UsageError, ddp_train/shard_tasks/data SystemExit(2),
validate SystemExit(3); the shard reader raises ShardError on any bytes that are not a shard.
"""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpu_cluster.workloads.collectives import bench as collectives

from gpu_cluster.workloads.train import data

from gpu_cluster.workloads.train import ddp as ddp_train

from gpu_cluster.workloads.tasks import shard as shard_tasks
from gpu_cluster.workloads.validate import __main__ as validate_cli

SETTINGS = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

odd = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        [
            "",
            "-1",
            "0",
            "-0",
            "1e309",
            "nan",
            "inf",
            "-inf",
            "1.5",
            "0x10",
            "1_000",
            "99999999999999999999",
            "9" * 5000,
            "\n",
            "a\nb",
            "\x00",
            "\x1b[2J",
            "{input}",
            "{",
            "}",
            "{x}",
            "'",
            '"',
            "*",
            "?",
            "/",
            "..",
            "/dev/null",
            "/nonexistent/x",
            "٣",
            "1G",
            "8T",
            "-5K",
            " 3 ",
            "4294967296",
            "a\x00b",
        ]
    ),
)


def _argv(flags: list[str], base: list[str]) -> st.SearchStrategy[list[str]]:
    pair = st.tuples(st.sampled_from(flags), odd).map(list)
    stray = st.one_of(odd.map(lambda v: [v]), st.sampled_from(flags).map(lambda f: [f]))
    return st.lists(st.one_of(pair, pair, stray), min_size=1, max_size=4).map(
        lambda chunks: base + [tok for c in chunks for tok in c]
    )


def _expect_exit(fn: Callable[[], Any], code: int) -> None:
    try:
        fn()
    except SystemExit as e:
        assert e.code == code, f"exit {e.code!r}, expected {code}"


def _no_help(argv: list[str]) -> bool:
    return not any(
        a in ("-h", "--help") or (a.startswith("--") and "--help".startswith(a) and len(a) > 2) for a in argv
    )


# --------------------------------------------------------------------------- collectives

COLL_FLAGS = [
    "-o",
    "--op",
    "-b",
    "--minbytes",
    "-e",
    "--maxbytes",
    "-f",
    "--stepfactor",
    "-n",
    "--iters",
    "-w",
    "--warmup_iters",
    "-c",
    "--check",
    "-d",
    "--datatype",
    "-T",
    "--timeout",
    "--json",
]


@SETTINGS
@given(_argv(COLL_FLAGS, []).filter(_no_help))
def test_collectives_flags_fail_only_with_usage_error(argv: list[str]) -> None:
    try:
        cfg = collectives.parse_args(argv)
    except collectives.UsageError as e:
        assert e.problems and all(isinstance(p.path, str) and p.reason for p in e.problems)
        text = e.lines("collectives")
        assert text.startswith("collectives: ") and all(f"collectives: {p.render()}\n" in text for p in e.problems)
        return
    assert cfg.iters >= 1 and cfg.factor >= 2 and cfg.timeout_s > 0


# --------------------------------------------------------------------------- ddp_train / data


@pytest.fixture(scope="module")
def shard_dir() -> Any:
    with tempfile.TemporaryDirectory() as d:
        data.write_synthetic(out=Path(d), shards=1, tokens_per_shard=200, vocab=64, seed=0)
        yield d


DDP_FLAGS = [
    "--data",
    "--vocab-size",
    "--seq-len",
    "--d-model",
    "--n-layers",
    "--n-heads",
    "--batch-size",
    "--steps",
    "--lr",
    "--warmup-steps",
    "--weight-decay",
    "--seed",
    "--ckpt-dir",
    "--ckpt-every",
    "--ckpt-keep",
    "--log-every",
    "--peak-tflops",
    "--instance-type",
    "--json",
]


@settings(SETTINGS, suppress_health_check=[*SETTINGS.suppress_health_check, HealthCheck.function_scoped_fixture])
@given(argv=_argv(DDP_FLAGS, []).filter(_no_help))
def test_ddp_config_fails_only_with_exit_2(shard_dir: str, argv: list[str]) -> None:
    _expect_exit(lambda: ddp_train.parse_config(["--data", f"{shard_dir}/train-*.bin", *argv]), 2)


def _shard_bytes() -> st.SearchStrategy[bytes]:
    header = st.builds(
        lambda magic, ver, code, n, vocab, pad: struct.pack("<8sIIQII", magic, ver, code, n, vocab, pad),
        st.sampled_from([data.MAGIC, b"GPUCTOK\x01", b"\x00" * 8]),
        st.sampled_from([1, 0, 2, 2**32 - 1]),
        st.integers(0, 2**32 - 1),
        st.integers(0, 2**64 - 1),
        st.integers(0, 2**32 - 1),
        st.integers(0, 2**32 - 1),
    )
    return st.one_of(
        st.binary(max_size=64),
        st.tuples(header, st.binary(max_size=40), st.integers(0, 40)).map(lambda t: (t[0] + t[1])[: 32 + t[2]]),
        st.tuples(header, st.integers(0, 32)).map(lambda t: t[0][: t[1]]),  # truncated header
    )


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_shard_bytes())
def test_shard_reader_fails_only_with_shard_error(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "x.bin"
        path.write_bytes(raw)
        try:
            shard = data.read_shard(path)
        except data.ShardError as e:
            assert str(path) in str(e)
            return
        # Accepted: the header and the size agree, so every token can be mapped.
        assert data.HEADER_BYTES + shard.n_tokens * shard.dtype.itemsize == len(raw)
        np.memmap(
            path, dtype=shard.dtype, mode="r", offset=data.HEADER_BYTES, shape=(shard.n_tokens,)
        ) if shard.n_tokens else None


WRITE_FLAGS = ["--shards", "--tokens-per-shard", "--vocab", "--seed", "--prefix"]


@SETTINGS
@given(_argv(WRITE_FLAGS, []).filter(_no_help))
@example(["--vocab", "4294967296"])  # does not fit the header's uint32 field
@example(["--prefix", "a\x00b"])
def test_write_synthetic_bad_args_exit_2_and_leave_nothing(argv: list[str]) -> None:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "out"
        # A bad value anywhere must stop the run before the directory is even made.
        full = ["write-synthetic", "--out", str(out), "--shards", "1", "--tokens-per-shard", "4", "--vocab", "8", *argv]
        try:
            code = data.main(full)
        except SystemExit as e:
            assert e.code == 2, f"exit {e.code!r}"
            assert not out.exists() or not any(out.iterdir()), list(out.iterdir())
            return
        assert code == 0
        names = sorted(p.name for p in out.iterdir())
        assert names and all(n.endswith(".bin") for n in names), names  # no temporary left over
        for p in out.iterdir():
            data.read_shard(p)


# --------------------------------------------------------------------------- shard_tasks

TASK_FLAGS = [
    "--inputs",
    "--glob",
    "--output-dir",
    "--output-ext",
    "--input-root",
    "--command",
    "--timeout-s",
    "--progress-every-s",
    "--json",
]
# --callable imports the module it names; only harmless names are tried.
callable_values = st.sampled_from(
    [
        "nope",
        ":",
        "os:",
        ":f",
        "gpu_cluster.workloads.train.data:nothere",
        "gpu_cluster.workloads.train.data:MAGIC",
        "no_such_module_xyz:f",
        "gpu_cluster.workloads.train.data:main",
    ]
)


@SETTINGS
@given(_argv(TASK_FLAGS, []).filter(_no_help), st.one_of(st.none(), callable_values))
@example(["--output-ext", "0"], None)  # failed its check, then crashed in Path.with_suffix
@example(["--output-dir", "/tmp/a\x00b"], None)
def test_shard_tasks_config_fails_only_with_exit_2(argv: list[str], fn: str | None) -> None:
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "a.txt").write_text("x")
        base = ["--glob", f"{d}/*.txt", "--output-dir", f"{d}/out"]
        base += ["--callable", fn] if fn else ["--command", "cp {input} {output}"]
        before = sorted(os.listdir(d))
        _expect_exit(lambda: shard_tasks.parse_config([*base, *argv]), 2)
        assert sorted(os.listdir(d)) == before  # parsing writes nothing


# --------------------------------------------------------------------------- validate

VALIDATE_TOP = ["--local", "--out", "--nodes", "--procs-per-node", "--timeout"]
VALIDATE_RUN = [
    "--out",
    "--phase",
    "--instance-type",
    "--multi-max",
    "--single-max",
    "--pair-size",
    "--iters",
    "--warmup",
    "--pairwise",
    "--timeout",
]


@SETTINGS
@given(
    st.one_of(
        _argv(VALIDATE_TOP, []),
        _argv(VALIDATE_RUN, ["run", "--out", "/tmp/x"]),
        _argv(["--out", "--instance-type", "--expect-nodes", "--started"], ["judge", "--out", "/tmp/x"]),
    ).filter(_no_help)
)
def test_validate_cli_fails_only_with_exit_3(argv: list[str]) -> None:
    _expect_exit(lambda: validate_cli.build_parser().parse_args(argv), 3)


@pytest.mark.parametrize(
    "argv",
    [
        ["--local", "--nodes", "0"],
        ["--local", "--procs-per-node", "-1"],
        ["--local", "--timeout", "nan"],
        ["--local", "--timeout", "-5"],
        ["--local", "--timeout", "inf"],
        ["run", "--out", "/nonexistent/x", "--timeout", "nan"],
        ["run", "--out", "/nonexistent/x", "--timeout", "0"],
        ["run", "--out", "/nonexistent/x", "--iters", "0"],
    ],
)
def test_validate_refuses_bad_numbers_before_running(argv: list[str], tmp_path: Path) -> None:
    argv = [a if a != "/nonexistent/x" else str(tmp_path / "run") for a in argv]
    if "--local" in argv:
        argv += ["--out", str(tmp_path / "local")]
    assert validate_cli.main(argv) == 3
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def test_output_directories_that_cannot_be_made_are_refused_before_the_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checkpoint or output directory under a regular file would only fail at the first
    checkpoint or the first finished task; the flags say so before anything runs."""
    from gpu_cluster.workloads.train import ddp as ddp_train
    from gpu_cluster.workloads.tasks import shard as shard_tasks
    from gpu_cluster.workloads.runtime.flags import output_dir_problem

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert output_dir_problem(tmp_path / "new" / "deeper") is None
    assert "is not a directory" in (output_dir_problem(blocker / "ckpt") or "")
    assert "exists and is not a directory" in (output_dir_problem(blocker) or "")
    with pytest.raises(SystemExit) as info:
        ddp_train.parse_config(
            ["--data", str(tmp_path / "none-*.bin"), "--ckpt-dir", str(blocker / "ckpt"), "--ckpt-every", "2"]
        )
    assert info.value.code == 2
    assert f"--ckpt-dir: {blocker / 'ckpt'} cannot be created: {blocker} is not a directory" in capsys.readouterr().err
    inp = tmp_path / "in.txt"
    inp.write_text("x")
    with pytest.raises(SystemExit) as info:
        shard_tasks.parse_config(
            ["--inputs", str(inp), "--output-dir", str(blocker / "out"), "--command", "cp {input} {output}"]
        )
    assert info.value.code == 2
    assert "--output-dir" in capsys.readouterr().err
    # Model parallelism's checkpoints likewise, and every entry's --json file: before the steps.
    from gpu_cluster.workloads.parallel import run as mp_run

    with pytest.raises(SystemExit) as info:
        mp_run.parse_config(["--mode", "fsdp", "--ckpt-dir", str(blocker / "ckpt")])
    assert info.value.code == 2
    assert f"--ckpt-dir: {blocker / 'ckpt'} cannot be created: {blocker} is not a directory" in capsys.readouterr().err
    for parse, argv in (
        (mp_run.parse_config, ["--mode", "fsdp"]),
        (ddp_train.parse_config, ["--data", str(tmp_path / "none-*.bin")]),
        (shard_tasks.parse_config, ["--inputs", str(inp), "--output-dir", str(tmp_path / "o"), "--command", "true"]),
    ):
        with pytest.raises(SystemExit) as info:
            parse([*argv, "--json", str(blocker / "out.json")])
        assert info.value.code == 2
        assert f"--json: directory {blocker} is not a directory" in capsys.readouterr().err
