"""ddp_train with the user's model and data, and a checkpoint resumed at other world sizes
(2 ranks -> 1 rank -> 3 ranks), launched with torchrun on gloo."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from tests.workloads.torchrun_util import TINY_GPT, explain, job_env, torchrun
from gpu_cluster.workloads.train.data import write_synthetic
from gpu_cluster.workloads.train.ddp import lr_at, parse_config
from gpu_cluster.workloads.train.sampling import RankShardedStream, ResumableSampler

STEPS = 12
GPT = [
    *TINY_GPT,
    "--steps",
    str(STEPS),
    "--lr",
    "1e-2",
    "--warmup-steps",
    "2",
    "--seed",
    "3",
    "--log-every",
    "1",
]
# The same global batch of 24 at every world size: 2 x 4 x 3 = 1 x 4 x 6 = 3 x 4 x 2.
LAYOUT = {
    2: ["--batch-size", "4", "--grad-accum", "3"],
    1: ["--batch-size", "4", "--grad-accum", "6"],
    3: ["--batch-size", "4", "--grad-accum", "2"],
}
STEP_LINE = re.compile(r"^step (\d+)/\d+ loss ([0-9.]+) ", re.M)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tokens")
    write_synthetic(out=out, shards=2, tokens_per_shard=600, vocab=64, seed=11)  # 74 windows
    return out


def _printed_losses(stdout: str) -> dict[int, float]:
    return {int(s): float(v) for s, v in STEP_LINE.findall(stdout)}


def test_resume_at_other_world_sizes_continues_the_loss_curve(data: Path, tmp_path: Path) -> None:
    glob = str(data / "train-*.bin")
    base = torchrun(
        "gpu_cluster.workloads.train.ddp",
        ["--data", glob, *GPT, *LAYOUT[2], "--json", str(tmp_path / "b.json")],
        nproc=2,
    )
    assert base.returncode == 0, explain(base)
    want = {s: v for s, v in json.loads((tmp_path / "b.json").read_text())["loss_curve"]}

    ckpt = ["--ckpt-dir", str(tmp_path / "ckpt"), "--ckpt-every", "4"]
    # 2 ranks, killed before step 5: step_4 is the newest complete checkpoint.
    a = torchrun(
        "gpu_cluster.workloads.train.ddp",
        ["--data", glob, *GPT, *LAYOUT[2], *ckpt],
        nproc=2,
        env=job_env(GPUC_CRASH_AT_STEP="5"),
    )
    assert a.returncode != 0 and "exiting hard before step 5" in a.stderr, explain(a)
    # 1 rank resumes at step 4 and is killed before step 9.
    b = torchrun(
        "gpu_cluster.workloads.train.ddp",
        ["--data", glob, *GPT, *LAYOUT[1], *ckpt],
        nproc=1,
        env=job_env(GPUC_CRASH_AT_STEP="9", GPUC_CRASH_RANK="0"),
    )
    assert b.returncode != 0 and "exiting hard before step 9" in b.stderr, explain(b)
    assert "step_4 (step 4," in b.stdout and "resharded: written by {'world_size': 2" in b.stdout, explain(b)
    # 3 ranks resume at step 8 and finish.
    c = torchrun(
        "gpu_cluster.workloads.train.ddp",
        ["--data", glob, *GPT, *LAYOUT[3], *ckpt, "--json", str(tmp_path / "c.json")],
        nproc=3,
    )
    assert c.returncode == 0, explain(c)
    assert "resharded: written by {'world_size': 1, 'batch_size': 4, 'grad_accum': 6}" in c.stdout, explain(c)
    m = json.loads((tmp_path / "c.json").read_text())
    assert m["resumed_from_step"] == 8 and m["steps"] == STEPS and m["world_size"] == 3
    assert m["params_identical_across_ranks"] is True and m["global_batch"] == 24

    got = {
        **{s: v for s, v in _printed_losses(a.stdout).items() if s <= 4},
        **{s: v for s, v in _printed_losses(b.stdout).items() if 5 <= s <= 8},
        **{s: v for s, v in m["loss_curve"]},
    }
    print("\nstep  ranks  2 ranks uninterrupted  2->1->3 ranks  rel. diff")
    for s in sorted(want):
        ranks = 2 if s <= 4 else 1 if s <= 8 else 3
        print(
            f"{s:>4}  {ranks:>5}  {want[s]:>20.6f}  {got.get(s, float('nan')):>13.6f}  "
            f"{abs(got.get(s, math.nan) - want[s]) / want[s]:.1e}"
        )
    assert sorted(got) == list(range(1, STEPS + 1)), got
    # The curve goes on where it stopped: the same samples make each global batch at every
    # world size, so only the order of floating-point sums differs from the uninterrupted run.
    for s in range(1, STEPS + 1):
        assert got[s] == pytest.approx(want[s], rel=1e-4), (s, got[s], want[s])  # steps 1-8 printed to 4 places
    assert got[5] < 0.9 * got[1] and got[9] < got[5] and got[STEPS] < 0.7 * got[1]


def test_users_model_and_map_style_dataset_train_under_ddp(tmp_path: Path) -> None:
    r = torchrun(
        "gpu_cluster.workloads.train.ddp",
        [
            "--model",
            "tests.workloads._user_plugins:mlp",
            "--dataset",
            "tests.workloads._user_plugins:blobs",
            "--batch-size",
            "8",
            "--grad-accum",
            "2",
            "--steps",
            "15",
            "--lr",
            "2e-2",
            "--log-every",
            "5",
            "--num-workers",
            "2",
            "--json",
            str(tmp_path / "m.json"),
        ],
        nproc=2,
    )
    assert r.returncode == 0, explain(r)
    m = json.loads((tmp_path / "m.json").read_text())
    assert (
        m["model"]["spec"] == "tests.workloads._user_plugins:mlp" and m["model"]["params"] == 8 * 32 + 32 + 32 * 4 + 4
    )
    assert m["params_identical_across_ranks"] is True and m["tokens_per_s_per_gpu"] is None
    assert m["epoch"] == 5  # 96 samples / 32 per step = 3 steps per epoch
    assert m["loss_last"] < 0.7 * m["loss_first"], m
    assert "samples/s/gpu" in r.stdout and "MFU n/a (FLOPs are known for the bundled GPT" in r.stdout


def test_users_iterable_dataset_is_split_over_ranks_and_workers(tmp_path: Path) -> None:
    r = torchrun(
        "gpu_cluster.workloads.train.ddp",
        [
            "--model",
            "tests.workloads._user_plugins:mlp",
            "--dataset",
            "tests.workloads._user_plugins:blob_stream",
            "--batch-size",
            "4",
            "--steps",
            "14",
            "--lr",
            "2e-2",
            "--log-every",
            "7",
            "--num-workers",
            "2",
            "--json",
            str(tmp_path / "m.json"),
        ],
        nproc=2,
    )
    assert r.returncode == 0, explain(r)
    m = json.loads((tmp_path / "m.json").read_text())
    # 96 items over 2 ranks x 2 workers: 24 per reader, 6 batches of 4 each, 12 per rank: 12 steps an epoch.
    assert m["epoch"] == 1 and m["params_identical_across_ranks"] is True
    assert m["loss_last"] < m["loss_first"], m


def test_bad_specs_name_the_spec_and_what_is_expected(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        parse_config(
            [
                "--model",
                "tests.workloads._user_plugins:not_a_module",
                "--dataset",
                "tests.workloads._user_plugins:empty",
                "--loss",
                "hinge",
            ]
        )
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert (
        "error: --model: 'tests.workloads._user_plugins:not_a_module': the factory returned dict, "
        "expected a torch.nn.Module"
    ) in err
    assert "error: --dataset: 'tests.workloads._user_plugins:empty': the dataset is empty (len 0)" in err
    assert "error: --loss: 'hinge' is not one of cross_entropy, mse nor MODULE:FUNCTION" in err
    with pytest.raises(SystemExit):
        parse_config(
            ["--model", "tests.workloads._user_plugins:broken", "--dataset", "no_such_mod_xyz:f", "--data", "x-*.bin"]
        )
    err = capsys.readouterr().err
    assert (
        "error: --model: 'tests.workloads._user_plugins:broken': the factory raised RuntimeError: weights file missing"
        in err
    )
    assert "error: --dataset: 'no_such_mod_xyz:f': cannot import 'no_such_mod_xyz': ModuleNotFoundError" in err
    assert "error: --data: 'x-*.bin' and --dataset 'no_such_mod_xyz:f' both name the training data" in err
    with pytest.raises(SystemExit):
        parse_config(["--model", "torch.nn", "--dataset", "tests.workloads._user_plugins:nope"])
    err = capsys.readouterr().err
    assert "error: --model: 'torch.nn' is not MODULE:FACTORY (a callable returning a torch.nn.Module" in err
    assert "_user_plugins has no callable 'nope' (expected a factory returning a map-style Dataset" in err
    with pytest.raises(SystemExit):
        parse_config([])
    assert "error: --data: missing: give a glob of token shards, or --dataset MODULE:FACTORY" in capsys.readouterr().err


@pytest.mark.parametrize("world", [1, 2, 3])
def test_sampler_starts_where_any_world_size_left_off(world: int) -> None:
    ds = list(range(50))
    plain = [
        list(DistributedSampler(ds, num_replicas=world, rank=r, shuffle=True, seed=7, drop_last=True))
        for r in range(world)
    ]
    for r in range(world):
        s = ResumableSampler(ds, num_replicas=world, rank=r, seed=7)
        assert list(s) == plain[r]  # from the start: exactly DistributedSampler
        s.set_start(6 * world)  # six samples per rank consumed at this world size
        assert list(s) == plain[r][6:] and len(s) == len(plain[r]) - 6
    # Consumed at another world size: the rest of the permutation, split over `world` ranks.
    g = torch.Generator().manual_seed(7)
    perm = torch.randperm(50, generator=g).tolist()
    rest = [list(ResumableSampler(ds, num_replicas=world, rank=r, seed=7)) for r in range(world)]
    for r in range(world):
        s = ResumableSampler(ds, num_replicas=world, rank=r, seed=7)
        s.set_start(12)
        rest[r] = list(s)
    seen = sorted(i for part in rest for i in part)
    assert set(seen).isdisjoint(perm[:12]) and len(seen) == len(set(seen)) == (50 - 12) // world * world


def test_stream_split_gives_each_item_to_one_rank_and_worker() -> None:
    stream = list(range(23))
    got: list[int] = []
    for rank in range(2):
        loader = DataLoader(RankShardedStream(stream, rank=rank, world_size=2), batch_size=None, num_workers=2)
        got += [int(x) for x in loader]
    assert sorted(got) == stream


def test_cosine_schedule_after_warmup(tmp_path: Path) -> None:
    write_synthetic(out=tmp_path, shards=1, tokens_per_shard=100, vocab=64, seed=0)
    d = str(tmp_path / "*.bin")
    cfg, _ = parse_config(["--data", d, "--steps", "11", "--lr", "1.0", "--warmup-steps", "1", "--min-lr-ratio", "0.1"])
    lrs = [lr_at(cfg, s) for s in range(11)]
    assert lrs[0] == 1.0 and lrs[1] == 1.0 and lrs[-1] == pytest.approx(0.1)
    assert lrs[6] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 5 / 9)))  # 5 of 9 decay steps
    assert all(a >= b for a, b in zip(lrs[1:], lrs[2:]))
    const, _ = parse_config(["--data", d, "--steps", "11", "--lr", "1.0", "--lr-schedule", "constant"])
    assert [lr_at(const, s) for s in range(11)] == [1.0] * 11
