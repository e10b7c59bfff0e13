"""Bad inputs give one clear line and a usage exit, never a traceback (issue 42 item 5): malformed
and truncated run files, non-UTF-8 inputs, a folder where a file is expected, a missing or
read-only ``--out``. The judge exits 3 (its scheme: could not run); the job entry points exit
their usage code (workloads/runtime/flags.py EXIT_USAGE) before any work starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.workloads.nccl_fabricate import curve, nccl_tests_log
from gpu_cluster.workloads.runtime.flags import EXIT_USAGE
from gpu_cluster.workloads.validate.__main__ import main as validate_main

REPO = Path(__file__).resolve().parents[2]
NOT_UTF8 = b"\xff\xfe\x00\x81 not text"


def _read_only_dir() -> Path | None:
    """A directory this user cannot write into (root writes through mode bits: try sysfs)."""
    for cand in (Path("/sys/kernel"), Path("/proc/self")):
        try:
            fd, probe = tempfile.mkstemp(dir=cand)
        except OSError:
            return cand
        os.close(fd)
        os.unlink(probe)
    return None


def _run_dir(tmp: Path, name: str, files: dict[str, bytes]) -> Path:
    root = tmp / name
    (root / "status").mkdir(parents=True)
    for rel, data in files.items():
        (root / rel).write_bytes(data)
    return root


STATUS = "status/main-n1-r0.json"
BAD_RUNS: dict[str, dict[str, bytes]] = {
    "truncated status": {STATUS: b'{"phase": "main", "rank": 0, "nod'},
    "truncated phase": {"phase-main.json": b'{"phase": "main", "backend": "nccl", "nodes": {"n1": {'},
    "non-UTF-8 phase": {"phase-main.json": NOT_UTF8},
    "non-UTF-8 status": {STATUS: NOT_UTF8},
    "phase a list": {"phase-main.json": b"[1, 2]"},
    "rank not a number": {STATUS: json.dumps({"phase": "main", "rank": "x", "node": 3, "state": "error"}).encode()},
    "nodes a list": {"phase-main.json": json.dumps({"phase": "main", "nodes": [1, 2], "ops": "x"}).encode()},
    "status a directory": {},
}


@pytest.mark.parametrize("case", list(BAD_RUNS))
def test_the_judge_on_a_malformed_run_exits_3_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    root = _run_dir(tmp_path, "run", BAD_RUNS[case])
    if case == "status a directory":
        (root / STATUS).mkdir()
    code = validate_main(["judge", "--out", str(root), "--instance-type", "p5.48xlarge", "--expect-nodes", "n1,n2"])
    out, err = capsys.readouterr()
    assert code == 3 and "Traceback" not in out + err
    if err.strip():
        # Refused: one line naming the directory and what is allowed.
        assert len(err.strip().splitlines()) == 1 and str(root) in err and "allowed" in err, err
    else:
        # Judged what could be read: UNKNOWN, and the report names the file it could not read.
        doc = json.loads((root / "report.json").read_text())
        assert doc["verdict"] == "UNKNOWN"
        if BAD_RUNS[case]:
            named = Path(next(iter(BAD_RUNS[case]))).name
            assert any(named in e for e in doc["errors"]), doc["errors"]


def _judge_out_cases(tmp: Path) -> list[tuple[list[str], str]]:
    a_file = tmp / "a-file"
    a_file.write_text("x")
    not_utf8 = tmp / "not-utf8.log"
    not_utf8.write_bytes(NOT_UTF8)
    truncated = tmp / "truncated.log"
    truncated.write_text("# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592\n#  Rank  0 Group  0 Pid  1 on")
    folder = tmp / "a-folder"
    folder.mkdir()
    good = tmp / "good.log"
    good.write_text(nccl_tests_log("all_reduce", 2, 8, curve(480.0, 170.0), max_bytes=8 << 30))
    nccl = ["judge", "--instance-type", "p5.48xlarge", "--nodes", "2", "--nccl-tests"]
    cases = [
        (["judge", "--out", str(tmp / "missing")], "no such run directory"),
        (["judge", "--out", str(a_file)], "no such run directory"),
        ([*nccl, str(not_utf8)], str(not_utf8)),
        ([*nccl, str(truncated)], str(truncated)),
        ([*nccl, str(folder)], str(folder)),
        ([*nccl, str(tmp / "nope.log")], "nope.log"),
        ([*nccl, str(good), "--out", str(a_file)], "not a directory"),
        ([*nccl, str(good), "--out", str(tmp / "no-parent" / "rep")], "does not exist"),
    ]
    ro = _read_only_dir()
    if ro is not None:
        cases += [
            (["judge", "--out", str(ro)], "cannot write the report"),
            ([*nccl, str(good), "--out", str(ro)], "cannot write the report"),
        ]
    return cases


def test_the_judge_refuses_bad_paths_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = _judge_out_cases(tmp_path)
    assert len(cases) >= 8
    for argv, said in cases:
        code = validate_main(argv)
        out, err = capsys.readouterr()
        assert code == 3 and "Traceback" not in out + err, (argv, err)
        assert len(err.strip().splitlines()) == 1 and said in err, (argv, err)


def _call(entry: Callable[[list[str]], int], argv: list[str]) -> int:
    try:
        return entry(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def test_the_jobs_refuse_bad_files_in_one_line_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpu_cluster.workloads.collectives.bench import main as collectives
    from gpu_cluster.workloads.parallel.run import main as parallel
    from gpu_cluster.workloads.tasks.infer import main as infer
    from gpu_cluster.workloads.tasks.shard import main as tasks
    from gpu_cluster.workloads.train.ddp import main as train

    monkeypatch.setenv("GPUC_FORCE_CPU", "1")
    folder = tmp_path / "a-folder"
    folder.mkdir()
    not_utf8 = tmp_path / "list.txt"
    not_utf8.write_bytes(NOT_UTF8)
    shard = tmp_path / "shard.bin"
    shard.write_bytes(b"\x00" * 3)
    out = ["--output-dir", str(tmp_path / "o"), "--state-dir", str(tmp_path / "s")]
    cmd = ["--command", "cp {input} {output}"]
    cases: list[tuple[Callable[[list[str]], int], list[str], str]] = [
        (collectives, ["--json", str(folder), "--op", "all_reduce"], "is a directory"),
        (collectives, ["--json", str(tmp_path / "no-dir" / "r.json"), "--op", "all_reduce"], "does not exist"),
        (tasks, ["--inputs", str(not_utf8), *cmd, *out], "not UTF-8"),
        (tasks, ["--inputs", str(folder), *cmd, *out], "cannot read"),
        (tasks, ["--inputs", str(tmp_path / "none.txt"), *cmd, *out], "cannot read"),
        (tasks, ["--glob", str(tmp_path / "*.bin"), *cmd, *out, "--json", str(folder)], "is a directory"),
        (train, ["--data", str(shard), "--steps", "1"], "truncated"),
        (train, ["--data", str(folder), "--steps", "1"], "matches no files"),
        (train, ["--data", str(shard), "--steps", "1", "--json", str(folder)], "is a directory"),
        (parallel, ["--mode", "fsdp", "--data", str(folder), "--steps", "1"], "--data"),
        (parallel, ["--mode", "fsdp", "--steps", "1", "--json", str(folder)], "is a directory"),
        (
            infer,
            ["run", "--data", str(folder), "--output-dir", str(tmp_path / "o2"), "--json", str(folder)],
            "is a directory",
        ),
    ]
    for entry, argv, said in cases:
        code = _call(entry, argv)
        o, err = capsys.readouterr()
        assert code == EXIT_USAGE and "Traceback" not in o + err, (entry.__module__, argv, o[-500:], err[-2000:])
        assert said in err and all(": " in line for line in err.strip().splitlines()), (argv, err)


def _unwritable_outs(tmp: Path) -> list[tuple[Path, str]]:
    """Run directories that cannot be written, root or not: under a file, a file, and (where
    this machine has one) inside a directory that refuses new files."""
    a_file = tmp / "a-file"
    a_file.write_text("x")
    cases = [(a_file / "run", f"{a_file} is not a directory"), (a_file, "exists and is not a directory")]
    ro = _read_only_dir()
    if ro is not None:
        cases.append((ro / "run", f"{ro} is not writable by this user"))
    return cases


@pytest.mark.parametrize("command", [["render", "aws-h100-eks"], ["--local"]], ids=["render", "local"])
def test_validate_refuses_an_unwritable_out_before_any_work(tmp_path: Path, command: list[str]) -> None:
    """Issue 47 item 4: `validate render --out` and `validate --local --out` to a path that cannot
    be written stop in one line naming the path, exit 3, before the plan or the phases (nothing on
    stdout, where both say their first step)."""
    for out, said in _unwritable_outs(tmp_path):
        done = subprocess.run(
            [sys.executable, "-m", "gpu_cluster.workloads.validate", *command, "--out", str(out)],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr
        assert len(lines) == 1 and f"--out: {out}" in lines[0] and said in lines[0], lines
        assert done.stdout == "", done.stdout
