"""Task sharding launched with torchrun: real ffmpeg across 2 ranks, a crash, a rerun; batch inference."""

from __future__ import annotations

import collections
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from tests.workloads.torchrun_util import explain, job_env, torchrun
from gpu_cluster.workloads.tasks.gpt_scores import load_model, make_inputs, score

pytestmark = pytest.mark.skipif(
    shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None,
    reason="ffmpeg/ffprobe not installed (make sysdeps)",
)

COMMAND = "ffmpeg -nostdin -loglevel error -y -i {input} -c:v libx264 -preset ultrafast {output}"


def _make_clips(d: Path, n: int) -> list[Path]:
    d.mkdir(parents=True)
    clips = []
    for i in range(n):
        p = d / f"clip{i}.avi"
        subprocess.run(
            [
                "ffmpeg",
                "-nostdin",
                "-loglevel",
                "error",
                "-f",
                "lavfi",
                "-i",
                "testsrc=duration=0.2:size=64x48:rate=10",
                "-c:v",
                "mpeg4",
                str(p),
            ],
            check=True,
            timeout=120,
        )
        clips.append(p)
    return clips


def _finals(d: Path) -> list[Path]:
    # pathlib's "*" also matches dot-files; the shell's (and glob.glob's) does not.
    return sorted(p for p in d.glob("*.mp4") if not p.name.startswith("."))


def _probe(p: Path) -> tuple[str, int, int]:
    r = subprocess.run(
        [
            "ffprobe",
            "-v",
            "error",
            "-select_streams",
            "v:0",
            "-show_entries",
            "stream=codec_name,width,height",
            "-of",
            "json",
            str(p),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    s = json.loads(r.stdout)["streams"][0]
    return s["codec_name"], s["width"], s["height"]


def test_ffmpeg_fleet_survives_a_crash_and_a_rerun_redoes_nothing(tmp_path: Path) -> None:
    clips = _make_clips(tmp_path / "in", 5)
    broken = tmp_path / "in" / "broken.avi"
    broken.write_bytes(b"not a video")
    out = tmp_path / "out"
    # Sorted inputs: broken, clip0..clip4; the static split gives input i to rank i % 2, so rank
    # 1 owns clip0, 2, 4 (the self-balancing schedule has its own tests in test_fleet.py).
    args = [
        "--glob",
        str(tmp_path / "in" / "*.avi"),
        "--output-dir",
        str(out),
        "--schedule",
        "static",
        "--output-ext",
        ".mp4",
        "--command",
        COMMAND,
        "--json",
        str(tmp_path / "s.json"),
    ]

    crashed = torchrun("gpu_cluster.workloads.tasks.shard", args, nproc=2, env=job_env(GPUC_CRASH_AFTER="1"))
    assert crashed.returncode != 0, explain(crashed)
    assert "GPUC_CRASH_AFTER=1: exiting hard" in crashed.stderr, explain(crashed)
    assert not (tmp_path / "s.json").exists()
    # Rank 1 finished clip0, then died with clip2 encoded but not renamed: the partial work
    # sits under a hidden temporary name, never under the final one.
    assert (out / "clip0.mp4").is_file() and not (out / "clip2.mp4").exists()
    assert list(out.glob(".clip2.tmp-*.mp4")), sorted(p.name for p in out.iterdir())
    first = {p.name: p.stat() for p in _finals(out)}
    for name in first:  # whatever carries a final name is a whole video
        assert _probe(out / name) == ("h264", 64, 48)

    rerun = torchrun("gpu_cluster.workloads.tasks.shard", args, nproc=2)
    assert rerun.returncode == 1, explain(rerun)  # the broken input fails, and says so
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["inputs"] == 6 and s["same_input_list_on_all_ranks"] is True
    assert s["skipped"] == len(first)
    assert s["done"] == 5 - len(first) and s["failed"] == 1
    # Each rank handled exactly its share (6 inputs over 2 ranks: 3 each).
    assert [sum(r.values()) for r in s["per_rank"]] == [3, 3]
    assert s["per_rank"][0]["failed"] == 1  # broken.avi is input 0 -> rank 0

    finals = [p.name for p in _finals(out)]
    assert finals == [f"clip{i}.mp4" for i in range(len(clips))]
    for name in finals:
        assert _probe(out / name) == ("h264", 64, 48)
    for name, st in first.items():  # finished outputs were not redone
        now = (out / name).stat()
        assert (now.st_ino, now.st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
    leftovers = [p.name for p in out.iterdir() if p.name.startswith(".") and p.name != ".shard_tasks"]
    assert leftovers == []
    (record,) = [json.loads(line) for line in (out / ".shard_tasks" / "failures-rank0.jsonl").read_text().splitlines()]
    assert record["input"] == str(broken) and "exit code" in record["error"]
    assert "Invalid data" in record["error"]


def test_batch_inference_callable_matches_in_process_scores(tmp_path: Path) -> None:
    inputs = make_inputs(tmp_path / "in", files=3, rows=10, seq=16, vocab=256, seed=5)
    bad = tmp_path / "in" / "batch-bad.pt"
    torch.save(torch.rand(4, 16), bad)
    out = tmp_path / "out"
    r = torchrun(
        "gpu_cluster.workloads.tasks.shard",
        [
            "--glob",
            str(tmp_path / "in" / "*.pt"),
            "--output-dir",
            str(out),
            "--output-ext",
            ".scores.pt",
            "--callable",
            "gpu_cluster.workloads.tasks.gpt_scores:run",
            "--json",
            str(tmp_path / "s.json"),
        ],
        nproc=2,
    )
    assert r.returncode == 1, explain(r)
    s = json.loads((tmp_path / "s.json").read_text())
    assert (s["done"], s["skipped"], s["failed"]) == (3, 0, 1)
    failures = list((out / ".shard_tasks").glob("failures-rank*.jsonl"))
    errors = "".join(f.read_text() for f in failures)
    assert "expected an int64 tensor [rows, seq], got torch.float32 (4, 16)" in errors
    model = load_model()  # same default seed as the ranks used
    for p in inputs:
        got = torch.load(out / f"{p.stem}.scores.pt", weights_only=True)
        want = score(model, torch.load(p, weights_only=True), batch=4)
        assert torch.equal(got["next_token"], want["next_token"])
        torch.testing.assert_close(got["nll"], want["nll"], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got["next_logprob"], want["next_logprob"], rtol=1e-5, atol=1e-6)


def test_bad_flags_are_reported_together(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_cluster.workloads.tasks.shard import parse_config

    with pytest.raises(SystemExit) as e:
        parse_config(
            [
                "--glob",
                str(tmp_path / "none-*.avi"),
                "--output-dir",
                str(tmp_path / "o"),
                "--command",
                "ffmpeg -i {inptu} {output}",
                "--timeout-s",
                "-1",
                "--output-ext",
                "mp4",
            ]
        )
    assert e.value.code == 2
    err = capsys.readouterr().err
    for msg in (
        f"error: --glob: '{tmp_path}/none-*.avi' matches no files",
        "error: --command: unknown placeholder {inptu}",
        "has no {input} placeholder",
        "error: --timeout-s: -1.0 must be greater than 0.0",
        "error: --output-ext: 'mp4' must look like .mp4",
    ):
        assert msg in err, err
    with pytest.raises(SystemExit):
        parse_config(
            [
                "--glob",
                str(tmp_path / "*"),
                "--output-dir",
                str(tmp_path),
                "--callable",
                "gpu_cluster.workloads.tasks.gpt_scores:nope",
            ]
        )
    assert "error: --callable: gpu_cluster.workloads.tasks.gpt_scores has no callable 'nope'" in capsys.readouterr().err


def test_input_list_maps_outputs_and_refuses_collisions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_cluster.workloads.tasks.shard import parse_config

    for rel in ("videos/a/x.mov", "videos/b/x.mov", "videos/b/y.avi"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    lst = tmp_path / "videos" / "list.txt"
    lst.write_text("# relative to this file\nb/y.avi\n\na/x.mov\n  b/x.mov  \n")
    argv = ["--inputs", str(lst), "--output-dir", str(tmp_path / "out"), "--output-ext", ".mp4"]
    argv += ["--command", "true {input} {output}"]
    cfg = parse_config(argv)
    assert [(str(i.relative_to(tmp_path)), str(o.relative_to(tmp_path))) for i, o in cfg.items] == [
        ("videos/a/x.mov", "out/a/x.mp4"),
        ("videos/b/x.mov", "out/b/x.mp4"),
        ("videos/b/y.avi", "out/b/y.mp4"),
    ]

    (tmp_path / "videos/b/y.mov").write_bytes(b"")
    lst.write_text("b/y.avi\nb/y.mov\na/x.mov\na/x.mov\n")
    with pytest.raises(SystemExit):
        parse_config(argv)
    err = capsys.readouterr().err
    assert "1 inputs listed more than once" in err
    lst.write_text("b/y.avi\nb/y.mov\n")
    with pytest.raises(SystemExit):
        parse_config(argv)
    assert f"would both write {tmp_path}/out/y.mp4" in capsys.readouterr().err


def test_rank_0_killed_mid_item_then_rerun_publishes_every_input_exactly_once(tmp_path: Path) -> None:
    """The callable path, and the rank that aggregates dying: counted by a log of every call."""
    inp = tmp_path / "in"
    inp.mkdir()
    for i in range(6):
        (inp / f"t{i}.txt").write_bytes(f"input {i}".encode())
    out, log = tmp_path / "out", tmp_path / "calls.log"
    args = [
        "--glob",
        str(inp / "*.txt"),
        "--output-dir",
        str(out),
        "--output-ext",
        ".rev",
        "--schedule",
        "static",
        "--callable",
        "tests.workloads._logging_callable:run",
        "--json",
        str(tmp_path / "s.json"),
    ]
    env = dict(GPUC_TEST_CALL_LOG=str(log))
    crashed = torchrun(
        "gpu_cluster.workloads.tasks.shard",
        args,
        nproc=2,
        env=job_env(GPUC_CRASH_AFTER="1", GPUC_CRASH_RANK="0", **env),
    )
    assert crashed.returncode != 0 and "GPUC_CRASH_AFTER=1: exiting hard" in crashed.stderr, explain(crashed)
    # Rank 0 owns t0, t2, t4: t0 published, t2 written under a temporary name only.
    assert (out / "t0.rev").is_file() and not (out / "t2.rev").exists()
    assert list(out.glob(".t2.tmp-*.rev"))
    first = {p.name: p.stat().st_ino for p in out.glob("t*.rev")}
    for name in first:
        assert (out / name).read_bytes() == (inp / name.replace(".rev", ".txt")).read_bytes()[::-1]

    rerun = torchrun("gpu_cluster.workloads.tasks.shard", args, nproc=2, env=job_env(**env))
    assert rerun.returncode == 0, explain(rerun)
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["skipped"] == len(first) and s["done"] == 6 - len(first) and s["failed"] == 0
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [f"t{i}.rev" for i in range(6)]
    for i in range(6):
        assert (out / f"t{i}.rev").read_bytes() == f"input {i}".encode()[::-1]
    assert {n: (out / n).stat().st_ino for n in first} == first  # finished work was not redone
    calls = collections.Counter(log.read_text().splitlines())
    # The item the crash cut short ran again; one published by the first run never did (rank
    # 1 may itself be stopped mid-item when torchrun ends the first run, so its unpublished
    # items may also show two calls).
    assert calls[str(inp / "t2.txt")] == 2
    assert all(calls[str(inp / n.replace(".rev", ".txt"))] == 1 for n in first), calls
    assert set(calls) == {str(inp / f"t{i}.txt") for i in range(6)} and max(calls.values()) <= 2, calls
    assert [p.name for p in out.iterdir() if p.name.startswith(".") and p.name != ".shard_tasks"] == []
