"""The self-balancing task fleet: leases that outlive a dead worker, placeholders, object-storage
outputs against moto's S3 server, and uneven items against the static split."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.workloads.torchrun_util import REPO, explain, job_env, torchrun

CALLABLE = "tests.workloads._fleet_callables:sleepy"


def _inputs(d: Path, seconds: list[float]) -> list[Path]:
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, s in enumerate(seconds):
        p = d / f"item{i:02d}.txt"
        p.write_text(f"{s} item {i}\n")
        paths.append(p)
    return paths


def _calls(log: Path) -> list[tuple[str, int, float, str]]:
    out = []
    for line in log.read_text().splitlines():
        event, pid, t, inp = line.split(" ", 3)
        out.append((event, int(pid), float(t), inp))
    return out


def _failures(state: Path) -> str:
    return "".join(p.read_text() for p in sorted(state.glob("failures-*.jsonl")))


def _published(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if not p.name.startswith("."))


def test_dynamic_fleet_crash_then_rerun_publishes_each_output_once(tmp_path: Path) -> None:
    inputs = _inputs(tmp_path / "in", [0.05] * 8)
    out, log = tmp_path / "out", tmp_path / "calls.log"
    args = [
        "--glob",
        str(tmp_path / "in" / "*.txt"),
        "--output-dir",
        str(out),
        "--output-ext",
        ".rev",
        "--callable",
        CALLABLE,
        "--json",
        str(tmp_path / "s.json"),
    ]
    env = dict(GPUC_TEST_CALL_LOG=str(log))
    crashed = torchrun(
        "gpu_cluster.workloads.tasks.shard",
        args,
        nproc=2,
        env=job_env(GPUC_CRASH_AFTER="2", GPUC_CRASH_RANK="0", **env),
    )
    assert crashed.returncode != 0 and "GPUC_CRASH_AFTER=2: exiting hard" in crashed.stderr, explain(crashed)
    assert "claimed dynamically" in crashed.stdout
    first = {n: (out / n).stat().st_ino for n in _published(out)}
    # The crashed item's work sits under a temporary name, its lease still names the dead rank.
    assert [p for p in out.iterdir() if ".tmp-" in p.name]
    assert list((out / ".shard_tasks" / "leases").glob("*.[0-9]"))

    rerun = torchrun("gpu_cluster.workloads.tasks.shard", args, nproc=2, env=job_env(**env))
    assert rerun.returncode == 0, explain(rerun) + _failures(out / ".shard_tasks")
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["schedule"] == "dynamic" and s["skipped"] == len(first) and s["done"] == 8 - len(first)
    assert s["failed"] == 0 and s["duplicates"] == 0 and s["done_elsewhere"] == 0
    assert _published(out) == [f"item{i:02d}.rev" for i in range(8)]
    for p in inputs:
        assert (out / p.with_suffix(".rev").name).read_text() == p.read_text()[::-1]
    assert {n: (out / n).stat().st_ino for n in first} == first  # finished work was not redone
    ends = collections.Counter(inp for e, _, _, inp in _calls(log) if e == "end")
    assert all(ends[str(tmp_path / "in" / n.replace(".rev", ".txt"))] == 1 for n in first), ends
    assert [p.name for p in out.iterdir() if ".tmp-" in p.name] == []
    # The dead rank's lease was taken over at once (its process is gone from this host) and released.
    assert list((out / ".shard_tasks" / "leases").glob("*.[0-9]")) == []


def _worker(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpu_cluster.workloads.tasks.shard", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_a_killed_workers_item_is_finished_by_another_once_its_lease_expires(tmp_path: Path) -> None:
    """Two independent workers (two jobs of one rank each) share a list. The first hangs in
    item00 and is killed; it looks like another host (GPUC_LEASE_HOST), so only the lease's
    expiry can free its item, and the second worker finishes it after that, not before."""
    _inputs(tmp_path / "in", [0.05] * 6)
    out, log, state = tmp_path / "out", tmp_path / "calls.log", tmp_path / "state"
    lease_s = 3.0
    args = [
        "--glob",
        str(tmp_path / "in" / "*.txt"),
        "--output-dir",
        str(out),
        "--output-ext",
        ".rev",
        "--callable",
        CALLABLE,
        "--state-dir",
        str(state),
        "--lease-s",
        str(lease_s),
        "--fleet-id",
        "f1",
    ]
    a = _worker(args, job_env(GPUC_TEST_CALL_LOG=str(log), GPUC_TEST_HANG_ON="item00.txt", GPUC_LEASE_HOST="node-a"))
    deadline = time.monotonic() + 120
    while not (log.exists() and "item00.txt" in log.read_text()):
        assert a.poll() is None and time.monotonic() < deadline, a.communicate()
        time.sleep(0.2)
    b = _worker([*args, "--json", str(tmp_path / "b.json")], job_env(GPUC_TEST_CALL_LOG=str(log)))
    while not (out.is_dir() and len(_published(out)) >= 5):  # b does the other five, then waits
        assert b.poll() is None and time.monotonic() < deadline, b.communicate()
        time.sleep(0.2)
    time.sleep(2 * lease_s)  # a lives on, heartbeating: its item must stay its own
    assert "item00.rev" not in _published(out)
    os.killpg(a.pid, signal.SIGKILL)
    killed_at = time.time()
    a.wait(timeout=60)
    b_out, b_err = b.communicate(timeout=300)
    assert b.returncode == 0, f"{b_out}\n{b_err}"
    assert _published(out) == [f"item{i:02d}.rev" for i in range(6)]
    calls = _calls(log)
    starts = [(pid, t) for e, pid, t, inp in calls if e == "start" and inp.endswith("item00.txt")]
    assert [pid for pid, _ in starts] == [a.pid, b.pid], starts
    waited = starts[1][1] - killed_at
    print(f"\nitem00 taken over {waited:.1f} s after its worker was killed (lease {lease_s} s)")
    assert lease_s * 0.5 <= waited <= lease_s + 10, waited  # mtime granularity and polling, not earlier
    s = json.loads((tmp_path / "b.json").read_text())
    assert (s["done"], s["failed"], s["duplicates"]) == (6, 0, 0)


def test_command_placeholders_name_the_rank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _inputs(tmp_path / "in", [0.0] * 4)
    out = tmp_path / "out"
    cmd = "sh -c 'cat {input} > {output}; echo rank={rank} local_rank={local_rank} >> {output}'"
    r = torchrun(
        "gpu_cluster.workloads.tasks.shard",
        ["--glob", str(tmp_path / "in" / "*.txt"), "--output-dir", str(out), "--schedule", "static", "--command", cmd],
        nproc=2,
    )
    assert r.returncode == 0, explain(r)
    for i in range(4):  # static: item i on rank i % 2, one node so local_rank == rank
        assert (out / f"item{i:02d}.txt").read_text().endswith(f"rank={i % 2} local_rank={i % 2}\n")
    from gpu_cluster.workloads.tasks.shard import parse_config

    os.environ["GPUC_FORCE_CPU"] = "1"
    try:
        with pytest.raises(SystemExit):
            parse_config(
                [
                    "--glob",
                    str(tmp_path / "in" / "*.txt"),
                    "--output-dir",
                    str(out),
                    "--command",
                    "ffmpeg -hwaccel_device {gpu} -i {input} {output} {node}",
                ]
            )
    finally:
        del os.environ["GPUC_FORCE_CPU"]
    err = capsys.readouterr().err
    assert "uses {gpu}, the index of this rank's GPU, and this job runs on the CPU" in err
    assert "unknown placeholder {node} in '{node}' (allowed: {input}, {output}, {rank}, {local_rank}, {gpu})" in err


def _fleet_run(tmp_path: Path, name: str, schedule: str, seconds: list[float], nproc: int) -> dict[str, Any]:
    _inputs(tmp_path / f"in-{name}", seconds)
    r = torchrun(
        "gpu_cluster.workloads.tasks.shard",
        [
            "--glob",
            str(tmp_path / f"in-{name}" / "*.txt"),
            "--output-dir",
            str(tmp_path / f"out-{name}"),
            "--callable",
            CALLABLE,
            "--schedule",
            schedule,
            "--json",
            str(tmp_path / f"{name}.json"),
        ],
        nproc=nproc,
    )
    assert r.returncode == 0, explain(r)
    return json.loads((tmp_path / f"{name}.json").read_text())  # type: ignore[no-any-return]


def uneven_seconds() -> list[float]:
    """Four 1 s items among twelve of 0.05 s, all four in the first half at even places: the
    static split (i % 2) puts every long one on rank 0, and so would a split into halves."""
    return [1.0 if i in (0, 2, 4, 6) else 0.05 for i in range(16)]


def test_uneven_items_finish_near_the_ideal_time_only_when_claimed_dynamically(tmp_path: Path) -> None:
    seconds = uneven_seconds()
    ideal = sum(seconds) / 2
    static = _fleet_run(tmp_path, "static", "static", seconds, 2)
    dynamic = _fleet_run(tmp_path, "dynamic", "dynamic", seconds, 2)
    print(
        f"\nuneven items: total {sum(seconds):.2f} s over 2 ranks, ideal {ideal:.2f} s; "
        f"static {static['elapsed_s']:.2f} s ({static['elapsed_s'] / ideal:.2f}x ideal), "
        f"dynamic {dynamic['elapsed_s']:.2f} s ({dynamic['elapsed_s'] / ideal:.2f}x ideal)"
    )
    assert static["done"] == dynamic["done"] == 16
    # What each rank was given, as its items' own time (each item sleeps its seconds), not the
    # job's wall clock, which a loaded machine stretches: the static split gives rank 0 all four
    # 1 s items; claiming dynamically, no rank runs three of them.
    assert static["busy_s_per_rank"][0] >= 4.0, static
    assert max(dynamic["busy_s_per_rank"]) < 3.0, dynamic


@pytest.fixture(scope="module")
def s3() -> Any:
    """moto's S3 server on a free local port, with one bucket; yields the workers' environment."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = dict(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL_S3=f"http://{host}:{port}",
    )
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    import boto3

    boto3.client("s3").create_bucket(Bucket="fleet-out")
    try:
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


def _objects(prefix: str) -> dict[str, bytes]:
    import boto3

    c = boto3.client("s3")
    keys = [o["Key"] for o in c.list_objects_v2(Bucket="fleet-out", Prefix=prefix).get("Contents", [])]
    return {k: c.get_object(Bucket="fleet-out", Key=k)["Body"].read() for k in keys}


def test_a_temporary_left_beside_a_published_output_is_swept_at_the_next_start(
    tmp_path: Path, s3: dict[str, str]
) -> None:
    # What a survivor SIGTERMed between its upload and its clean-up leaves: the output exists and
    # its scratch folder too. The next run skips the item, so only the start-up sweep removes it;
    # the folder of an item whose output is missing stays for the claim that redoes it.
    import boto3

    from gpu_cluster.workloads.tasks.fleet import Item, sweep_published_scratch
    from gpu_cluster.workloads.tasks.outputs import Outputs, item_key

    outs = Outputs("s3://fleet-out/sweep", tmp_path / "scratch")
    done, todo = outs.final(Path("a.rev")), outs.final(Path("b.rev"))
    boto3.client("s3").put_object(Bucket="fleet-out", Key="sweep/a.rev", Body=b"whole")
    for final in (done, todo):
        tmp = outs.work_path(final)
        tmp.write_bytes(b"work")
    items = [Item(name="a", final=done), Item(name="b", final=todo)]
    assert outs.leftover_keys() == sorted([item_key(done), item_key(todo)])
    assert sweep_published_scratch(items, outs) == 1
    assert outs.leftover_keys() == [item_key(todo)]
    assert sweep_published_scratch(items, outs) == 0


def test_outputs_to_s3_exactly_once_and_never_partial(tmp_path: Path, s3: dict[str, str]) -> None:
    inputs = _inputs(tmp_path / "in", [0.05] * 6)
    log = tmp_path / "calls.log"
    args = [
        "--glob",
        str(tmp_path / "in" / "*.txt"),
        "--output-dir",
        "s3://fleet-out/run1",
        "--output-ext",
        ".rev",
        "--state-dir",
        str(tmp_path / "state"),
        "--scratch-dir",
        str(tmp_path / "scratch"),
        "--callable",
        CALLABLE,
        "--json",
        str(tmp_path / "s.json"),
    ]
    crashed = torchrun(
        "gpu_cluster.workloads.tasks.shard",
        args,
        nproc=2,
        env=job_env(GPUC_CRASH_AFTER="1", GPUC_TEST_CALL_LOG=str(log), **s3),
    )
    assert crashed.returncode != 0 and "GPUC_CRASH_AFTER=1: exiting hard" in crashed.stderr, explain(crashed)
    first = _objects("run1/")
    want = {f"run1/{p.stem}.rev": p.read_bytes()[::-1] for p in inputs}
    # Only final keys, each one whole: the crashed item's work stayed in node-local scratch.
    assert first and all(want[k] == v for k, v in first.items()), sorted(first)
    assert [p.name for p in (tmp_path / "scratch").rglob("*.tmp-*")]

    rerun = torchrun("gpu_cluster.workloads.tasks.shard", args, nproc=2, env=job_env(GPUC_TEST_CALL_LOG=str(log), **s3))
    assert rerun.returncode == 0, explain(rerun) + _failures(tmp_path / "state")
    s = json.loads((tmp_path / "s.json").read_text())
    assert (s["skipped"], s["done"], s["failed"], s["duplicates"]) == (len(first), 6 - len(first), 0, 0)
    assert _objects("run1/") == want
    assert list((tmp_path / "scratch").rglob("*.tmp-*")) == []

    # A second writer of an existing output is refused by the conditional put, the object kept.
    from gpu_cluster.workloads.tasks.outputs import Outputs

    outs = Outputs("s3://fleet-out/run1", tmp_path / "scratch")
    final = outs.final(Path("item00.rev"))
    tmp = outs.work_path(final)
    tmp.write_bytes(b"a second, different copy")
    assert outs.publish(tmp, final) is False and not tmp.exists()
    assert _objects("run1/item00.rev")["run1/item00.rev"] == want["run1/item00.rev"]
    fresh = outs.final(Path("new.rev"))
    tmp = outs.work_path(fresh)
    tmp.write_bytes(b"new")
    assert outs.publish(tmp, fresh) is True and _objects("run1/new.rev") == {"run1/new.rev": b"new"}


def test_object_storage_flags_are_checked_before_the_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], s3: dict[str, str]
) -> None:
    from gpu_cluster.workloads.tasks.shard import parse_config

    _inputs(tmp_path / "in", [0.0])
    base = ["--glob", str(tmp_path / "in" / "*.txt"), "--callable", CALLABLE]
    with pytest.raises(SystemExit):
        parse_config([*base, "--output-dir", "s3://fleet-out/x"])
    assert (
        "error: --state-dir: needed with --output-dir s3://fleet-out/x: leases and failure records"
        in capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        parse_config([*base, "--output-dir", "s3://no-such-bucket-here/x", "--state-dir", str(tmp_path / "st")])
    assert "bucket 'no-such-bucket-here' does not exist or is not visible" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_config(
            [
                *base,
                "--output-dir",
                "ftp://host/x",
                "--state-dir",
                str(tmp_path / "st"),
                "--schedule",
                "random",
                "--lease-s",
                "0",
            ]
        )
    err = capsys.readouterr().err
    assert "scheme 'ftp' is not supported (allowed: s3://, gs://, or a path)" in err
    assert "error: --schedule: 'random' is not one of dynamic, static" in err
    assert "error: --lease-s: 0.0 must be greater than 0.0" in err
    cfg = parse_config([*base, "--output-dir", "s3://fleet-out/x/", "--state-dir", str(tmp_path / "st")])
    assert cfg.items[0][1] == "s3://fleet-out/x/item00.txt" and cfg.outputs.remote


def test_gs_outputs_go_through_the_same_conditional_put(tmp_path: Path) -> None:
    """No GCS emulator runs here: this checks our side only (gcsfs maps mode="create" to
    ifGenerationMatch=0), with a stand-in for the file system that behaves like a bucket."""
    from gpu_cluster.workloads.tasks.outputs import Outputs

    class Bucket:
        def __init__(self) -> None:
            self.objects: dict[str, bytes] = {}
            self.modes: list[str] = []

        def put_file(self, lpath: str, rpath: str, mode: str = "overwrite") -> None:
            self.modes.append(mode)
            if mode == "create" and rpath in self.objects:
                raise FileExistsError(rpath)
            self.objects[rpath] = Path(lpath).read_bytes()

    outs = Outputs("gs://bucket/prefix", tmp_path)
    outs._fs = Bucket()
    final = outs.final(Path("a/b.npy"))
    assert final == "gs://bucket/prefix/a/b.npy"
    for payload, published in ((b"first", True), (b"second", False)):
        tmp = outs.work_path(final)
        tmp.write_bytes(payload)
        assert outs.publish(tmp, final) is published and not tmp.exists()
    assert outs._fs.objects == {final: b"first"} and outs._fs.modes == ["create", "create"]


def _mlp_checkpoint(d: Path) -> Any:
    """A ddp_train-style checkpoint directory (DCP, with the completion marker) of the user's MLP."""
    import torch
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    from tests.workloads._user_plugins import mlp

    torch.manual_seed(5)
    model = mlp()
    dcp_save({"model": model.state_dict()}, checkpoint_id=d / "step_3")
    (d / "step_3" / "COMPLETE").write_text("{}")
    return model


def test_batch_infer_runs_the_users_model_and_dataset_as_a_fleet(tmp_path: Path) -> None:
    import torch

    from tests.workloads._user_plugins import Blobs

    model = _mlp_checkpoint(tmp_path / "ckpt")
    out = tmp_path / "preds"
    job = ["run", "--model", "tests.workloads._user_plugins:mlp", "--weights", str(tmp_path / "ckpt")]
    job += ["--dataset", "tests.workloads._user_plugins:blobs", "--rows-per-task", "10"]
    job += ["--output-dir", str(out), "--json", str(tmp_path / "s.json")]
    r = torchrun("gpu_cluster.workloads.tasks.infer", [*job, "--batch-size", "4"], nproc=2)
    assert r.returncode == 0, explain(r)
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["job"] == "batch_infer" and (s["inputs"], s["done"], s["failed"]) == (10, 10, 0)
    parts = [torch.load(out / f"part-{k:06d}.pt", weights_only=True) for k in range(10)]
    assert torch.equal(torch.cat([p["index"] for p in parts]), torch.arange(96))
    ds = Blobs()
    want = model(torch.stack([ds[i][0] for i in range(96)])).detach()
    torch.testing.assert_close(torch.cat([p["output"] for p in parts]), want, rtol=1e-5, atol=1e-6)
    again = torchrun("gpu_cluster.workloads.tasks.infer", job, nproc=2)  # at the default batch size: every task is done
    assert again.returncode == 0 and json.loads((tmp_path / "s.json").read_text())["skipped"] == 10, explain(again)


def test_batch_infer_scores_token_shards_with_the_gpt_into_s3(tmp_path: Path, s3: dict[str, str]) -> None:
    import io

    import torch

    from gpu_cluster.workloads.tasks.gpt_scores import score
    from gpu_cluster.workloads.train.data import TokenWindows, check_shards, write_synthetic
    from gpu_cluster.workloads.train.model import GPT, GPTConfig

    write_synthetic(out=tmp_path / "tok", shards=1, tokens_per_shard=400, vocab=64, seed=2)  # 24 windows of 16
    r = torchrun(
        "gpu_cluster.workloads.tasks.infer",
        [
            "run",
            "--data",
            str(tmp_path / "tok" / "*.bin"),
            "--vocab-size",
            "64",
            "--seed",
            "4",
            "--rows-per-task",
            "8",
            "--output-dir",
            "s3://fleet-out/scores",
            "--state-dir",
            str(tmp_path / "state"),
            "--json",
            str(tmp_path / "s.json"),
        ],
        nproc=2,
        env=job_env(**s3),
    )
    assert r.returncode == 0, explain(r)
    objs = _objects("scores/")
    assert sorted(objs) == [f"scores/part-{k:06d}.pt" for k in range(3)]
    torch.manual_seed(4)
    model = GPT(GPTConfig(vocab_size=64)).eval()
    shards, _ = check_shards(str(tmp_path / "tok" / "*.bin"), seq_len=16, vocab_size=64)
    ds = TokenWindows(shards, 16)
    for k in range(3):
        got = torch.load(io.BytesIO(objs[f"scores/part-{k:06d}.pt"]), weights_only=True)
        want = score(model, torch.stack([ds[i][0] for i in range(8 * k, 8 * k + 8)]), 64)
        assert torch.equal(got["index"], torch.arange(8 * k, 8 * k + 8))
        assert torch.equal(got["next_token"], want["next_token"])
        torch.testing.assert_close(got["nll"], want["nll"], rtol=1e-5, atol=1e-6)


def test_batch_infer_flags_name_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from gpu_cluster.workloads.tasks.infer import main

    torch.save({"state_dict": {"0.weight": torch.zeros(3, 3)}}, tmp_path / "w.pt")
    with pytest.raises(SystemExit):
        main(
            [
                "run",
                "--model",
                "tests.workloads._user_plugins:mlp",
                "--weights",
                str(tmp_path / "w.pt"),
                "--dataset",
                "tests.workloads._user_plugins:blob_stream",
                "--output-dir",
                str(tmp_path / "o"),
            ]
        )
    err = capsys.readouterr().err
    assert f"error: --weights: {tmp_path / 'w.pt'}: cannot load into the model: RuntimeError" in err
    assert "is an IterableDataset: tasks are ranges of rows that any worker can claim" in err


# --- the block protocol, in one process: workers are claim_steps generators over the real
# Leases and Outputs in tmp_path, advanced in turn (deterministic: no clock, no threads racing).


class _Sim:
    """``n`` items with outputs in ``tmp/out``; one Leases per worker; every call of the work
    recorded as (worker, item index)."""

    def __init__(self, tmp: Path, n: int, fleet_id: str = "f1", max_blocks: int | None = None) -> None:
        from gpu_cluster.workloads.tasks import fleet
        from gpu_cluster.workloads.tasks.outputs import Outputs

        self.tmp, self.fleet_id = tmp, fleet_id
        (tmp / "out").mkdir(exist_ok=True)
        self.items = [fleet.Item(name=f"item{i}", final=str(tmp / "out" / f"item{i:05d}.out")) for i in range(n)]
        self.outputs = Outputs(str(tmp / "out"))
        self.max_blocks = max_blocks or fleet.MAX_BLOCKS
        self.calls: list[tuple[int, int]] = []
        self.fail: set[int] = set()
        self.hooks: dict[int, Any] = {}  # item -> called while a worker is inside it
        self.leases: list[Any] = []

    def worker(self, rank: int, world: int, pid: int | None = None) -> Any:
        from gpu_cluster.workloads.tasks import fleet
        from gpu_cluster.workloads.tasks.leases import Holder, Leases

        me = Holder(host="sim", pid=os.getpid() if pid is None else pid, rank=rank, fleet=self.fleet_id)
        ls = Leases(self.tmp / "state", 3600.0, me)
        self.leases.append(ls)
        index = {it.final: i for i, it in enumerate(self.items)}

        def do(it: Any, key: str, leases: Any) -> None:
            i = index[it.final]
            self.calls.append((rank, i))
            if i in self.hooks:
                self.hooks.pop(i)()
            if i in self.fail:
                leases.mark_failed(key, {"input": it.name, "error": "boom"})
                return
            tmp = self.outputs.work_path(it.final, leases.previous_pids(key))
            tmp.write_text(it.name)
            self.outputs.publish(tmp, it.final)

        existed = fleet.prescan(self.items, self.outputs, ls, rank, world)
        return fleet.claim_steps(self.items, self.outputs, ls, rank, world, existed, do, self.max_blocks)

    def run(self, workers: dict[int, Any], max_rounds: int = 100_000) -> int:
        rounds = 0
        while workers:
            rounds += 1
            assert rounds < max_rounds, "the fleet did not finish"
            for r in list(workers):
                try:
                    next(workers[r])
                except StopIteration:
                    del workers[r]
        return rounds

    def close(self) -> None:
        for ls in self.leases:
            ls.close()

    def published(self) -> list[int]:
        return sorted(int(p.name[4:9]) for p in (self.tmp / "out").iterdir() if not p.name.startswith("."))


def test_blocks_publish_every_item_once_and_leave_no_lease(tmp_path: Path) -> None:
    sim = _Sim(tmp_path, 300, max_blocks=40)  # blocks of 8 items
    sim.run({r: sim.worker(r, 16) for r in range(16)})
    sim.close()
    assert sim.published() == list(range(300))
    assert sorted(i for _, i in sim.calls) == list(range(300))  # each item's work ran once
    assert len({r for r, _ in sim.calls}) == 16  # and every worker had a share
    leases = tmp_path / "state" / "leases"
    assert [p for p in leases.rglob("*") if p.is_file() and not p.parent.name.startswith("done-")] == []
    (done,) = leases.glob("blocks-*/done-*")
    assert sorted(int(p.name[1:]) for p in done.iterdir()) == list(range(38))


def test_each_worker_touches_its_share_not_the_whole_list(tmp_path: Path) -> None:
    """The output checks are counted: with the old scan every worker looked at every item."""
    from gpu_cluster.workloads.tasks.outputs import Outputs

    looked: collections.Counter[int] = collections.Counter()
    real = Outputs.exists

    def exists(self: Outputs, final: str) -> bool:
        looked[0] += 1
        return real(self, final)

    Outputs.exists = exists  # type: ignore[method-assign]
    try:
        sim = _Sim(tmp_path, 2000)
        sim.run({r: sim.worker(r, 64) for r in range(64)})
        sim.close()
    finally:
        Outputs.exists = real  # type: ignore[method-assign]
    assert sim.published() == list(range(2000))
    per_item = looked[0] / 2000
    print(f"\n2000 items over 64 workers: {per_item:.2f} output checks per item")
    assert per_item <= 4, per_item  # prescan, before the lease, after it (+ a few at the end), never 64


def test_a_thief_takes_the_tail_behind_a_slow_item_and_the_holder_stops_at_it(tmp_path: Path) -> None:
    sim = _Sim(tmp_path, 8, max_blocks=2)  # two blocks of four
    a, b = sim.worker(0, 2), sim.worker(1, 2)
    seen: dict[str, Any] = {}

    def while_a_is_in_item1() -> None:
        # b does its block, finds none free, and steals block 0's tail up to a's item.
        while True:
            if next(b) is False:
                break
        seen["published"] = sim.published()
        seen["b"] = [i for r, i in sim.calls if r == 1]

    sim.hooks[1] = while_a_is_in_item1
    sim.run({0: a, 1: b})
    sim.close()
    assert seen["b"] == [4, 5, 6, 7, 3, 2], seen  # its own block, then 3 and 2 from the back
    assert seen["published"] == [0, 2, 3, 4, 5, 6, 7]  # item 1 still a's, unpublished
    assert [i for r, i in sim.calls if r == 0] == [0, 1]  # a did not redo 2 and 3
    assert sim.published() == list(range(8))


def test_a_dead_holders_block_is_taken_over_and_its_temporary_removed(tmp_path: Path) -> None:
    """The dead worker looks local with a pid that no longer exists, so its leases are dead at
    once (by expiry the same happens after the lease time: the torchrun tests show that)."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    sim = _Sim(tmp_path, 8, max_blocks=2)
    a = sim.worker(0, 1, pid=dead.pid)
    next(a)  # item 0 done
    assert sim.published() == [0]
    # a dies inside item 1: its block and item leases stay, with its temporary file.
    leases = tmp_path / "state" / "leases"
    from gpu_cluster.workloads.tasks.outputs import item_key

    key = item_key(sim.items[1].final)
    sim.leases[0].claim(key)
    stale = Path(sim.items[1].final).with_name(f".item00001.tmp-{dead.pid}.out")
    stale.write_text("half")
    sim.leases[0]._stop.set()  # its heartbeat ends with it
    b = sim.worker(0, 1)
    sim.run({0: b})
    sim.close()
    assert sim.published() == list(range(8))
    assert sorted(i for r, i in sim.calls if r == 0) == [0, *range(1, 8)]
    assert not stale.exists() and Path(sim.items[1].final).read_text() == "item1"
    assert [p for p in leases.rglob("*.[0-9]")] == []


def test_a_rerun_is_a_new_fleet_that_retries_failures_and_redoes_nothing_else(tmp_path: Path) -> None:
    sim = _Sim(tmp_path, 40, max_blocks=10)
    sim.fail = {3, 17}
    sim.run({r: sim.worker(r, 4) for r in range(4)})
    assert sim.published() == [i for i in range(40) if i not in (3, 17)]
    # The same fleet again (another job with this fleet id): failures stay settled, nothing is redone.
    sim.calls.clear()
    sim.run({r: sim.worker(r, 3) for r in range(3)})
    assert sim.calls == []
    # A new fleet: both failures are retried (and now succeed), nothing else runs again.
    sim.fail, sim.fleet_id = set(), "f2"
    sim.run({r: sim.worker(r, 4) for r in range(4)})
    sim.close()
    assert sorted(i for _, i in sim.calls) == [3, 17] and sim.published() == list(range(40))


def test_two_fleets_at_once_share_the_items(tmp_path: Path) -> None:
    """Two jobs with different fleet ids and world sizes on one list: every item once."""
    one = _Sim(tmp_path, 500, fleet_id="job-a", max_blocks=50)
    two = _Sim(tmp_path, 500, fleet_id="job-b", max_blocks=50)
    two.calls = one.calls
    workers = {r: one.worker(r, 3) for r in range(3)} | {10 + r: two.worker(r, 5) for r in range(5)}
    one.run(workers)
    one.close()
    two.close()
    assert sorted(i for _, i in one.calls) == list(range(500)) and one.published() == list(range(500))
