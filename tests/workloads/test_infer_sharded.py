"""batch_infer --tp: a model split over several ranks per replica scores a fleet of inputs, the
fleet claiming tasks per replica, with the scores of one process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.workloads.torchrun_util import explain, torchrun


def _parts(out: Path, n: int) -> list[dict[str, torch.Tensor]]:
    assert sorted(p.name for p in out.glob("part-*.pt")) == [f"part-{k:06d}.pt" for k in range(n)]
    return [torch.load(out / f"part-{k:06d}.pt", weights_only=True) for k in range(n)]


def test_gpt_split_over_two_ranks_scores_as_one_process(tmp_path: Path) -> None:
    from gpu_cluster.workloads.tasks.gpt_scores import score
    from gpu_cluster.workloads.train.data import TokenWindows, check_shards, write_synthetic
    from gpu_cluster.workloads.train.model import GPT, GPTConfig

    write_synthetic(out=tmp_path / "tok", shards=1, tokens_per_shard=400, vocab=64, seed=2)  # 24 windows
    out = tmp_path / "scores"
    r = torchrun(
        "gpu_cluster.workloads.tasks.infer",
        [
            "run",
            "--tp",
            "2",
            "--data",
            str(tmp_path / "tok" / "*.bin"),
            "--vocab-size",
            "64",
            "--seed",
            "4",
            "--rows-per-task",
            "8",
            "--batch-size",
            "5",
            "--output-dir",
            str(out),
            "--json",
            str(tmp_path / "s.json"),
        ],
        nproc=2,
    )
    assert r.returncode == 0, explain(r)
    s = json.loads((tmp_path / "s.json").read_text())
    # One replica of two ranks: its first rank did every task, the other only took part.
    assert (s["inputs"], s["done"], s["failed"]) == (3, 3, 0)
    assert [row["done"] for row in s["per_rank"]] == [3, 0]
    # Split, not copied: rank 0 holds about half the parameters (LayerNorms are replicated).
    line = next(x for x in r.stdout.splitlines() if x.startswith("batch_infer: 1 replica(s) of 2 ranks"))
    held, whole = (int(w) for w in line.split("holds ")[1].split(" parameter")[0].split(" of the model's "))
    assert whole == 4 * 28_032 and held < 0.6 * whole, line  # GPT(vocab 64): 28,032 parameters, tied
    torch.manual_seed(4)
    model = GPT(GPTConfig(vocab_size=64)).eval()  # the one-process model, tied head and all
    shards, _ = check_shards(str(tmp_path / "tok" / "*.bin"), seq_len=16, vocab_size=64)
    ds = TokenWindows(shards, 16)
    for k, got in enumerate(_parts(out, 3)):
        want = score(model, torch.stack([ds[i][0] for i in range(8 * k, 8 * k + 8)]), 64)
        assert torch.equal(got["index"], torch.arange(8 * k, 8 * k + 8))
        assert torch.equal(got["next_token"], want["next_token"])
        # Only the order of the partial sums differs (row-wise layers all-reduce them).
        torch.testing.assert_close(got["next_logprob"], want["next_logprob"], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got["nll"], want["nll"], rtol=1e-5, atol=1e-6)
        assert not torch.equal(got["nll"], torch.zeros(8))


def test_users_model_with_its_plan_two_replicas_of_two_ranks(tmp_path: Path) -> None:
    from tests.workloads._tp_plugins import split_mlp
    from tests.workloads._user_plugins import Blobs

    out = tmp_path / "preds"
    r = torchrun(
        "gpu_cluster.workloads.tasks.infer",
        [
            "run",
            "--tp",
            "2",
            "--model",
            "tests.workloads._tp_plugins:split_mlp",
            "--dataset",
            "tests.workloads._user_plugins:blobs",
            "--rows-per-task",
            "10",
            "--batch-size",
            "4",
            "--schedule",
            "static",
            "--output-dir",
            str(out),
            "--json",
            str(tmp_path / "s.json"),
        ],
        nproc=4,
    )
    assert r.returncode == 0, explain(r)
    s = json.loads((tmp_path / "s.json").read_text())
    assert (s["inputs"], s["done"], s["failed"]) == (10, 10, 0)
    # Tasks go to replicas (static: task i to replica i % 2), each done by its first rank.
    assert [row["done"] for row in s["per_rank"]] == [5, 0, 5, 0]
    parts = _parts(out, 10)
    assert torch.equal(torch.cat([p["index"] for p in parts]), torch.arange(96))
    ds = Blobs()
    with torch.no_grad():
        want = split_mlp()(torch.stack([ds[i][0] for i in range(96)]))
    torch.testing.assert_close(torch.cat([p["output"] for p in parts]), want, rtol=1e-5, atol=1e-6)


def test_tp_flags_name_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_cluster.workloads.tasks.infer import main

    base = ["run", "--output-dir", str(tmp_path / "o")]
    with pytest.raises(SystemExit) as e:
        main([*base, "--model", "tests.workloads._user_plugins:mlp", "--dataset", "tests.workloads._user_plugins:blobs",
              "--tp", "2"])  # fmt: skip
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--tp: 2 needs a sharding plan: 'tests.workloads._user_plugins:mlp' returned a Sequential" in err
    (tmp_path / "tok").mkdir()
    with pytest.raises(SystemExit):
        main([*base, "--data", str(tmp_path / "tok" / "*.bin"), "--n-heads", "2", "--tp", "4"])
    assert "--tp: 4-way tensor parallel needs --n-heads divisible by it, got 2" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*base, "--data", str(tmp_path / "tok" / "*.bin"), "--tp", "0"])
    assert "--tp" in capsys.readouterr().err


def test_a_tp_degree_that_does_not_divide_the_ranks_fails_before_any_work(tmp_path: Path) -> None:
    from gpu_cluster.workloads.train.data import write_synthetic

    write_synthetic(out=tmp_path / "tok", shards=1, tokens_per_shard=200, vocab=64, seed=2)
    r = torchrun(
        "gpu_cluster.workloads.tasks.infer",
        [
            "run",
            "--tp",
            "2",
            "--data",
            str(tmp_path / "tok" / "*.bin"),
            "--vocab-size",
            "64",
            "--output-dir",
            str(tmp_path / "o"),
        ],  # fmt: skip
        nproc=3,
    )
    assert r.returncode != 0
    assert "--tp: 2 does not divide the 3 ranks into whole model replicas" in r.stderr + r.stdout
    assert not list((tmp_path / "o").glob("part-*"))
