"""``python -m gpu_cluster.workloads.tasks.infer run``: the user's model over the user's dataset, as a fleet.

See :mod:`gpu_cluster.workloads.tasks.gpt_scores` for what it writes. Flags are checked (and the factories called)
before any process group starts, every problem reported at once, exit 2.

``--tp N``: a model too big for one GPU is split over ``N`` ranks by tensor parallelism
(DTensor's ``parallelize_module``: :func:`gpu_cluster.workloads.parallel.plans.tp_inference_plan` for the
bundled GPT; a ``--model`` whose module has a ``tp_plan()`` method returning such a plan), and
the fleet's workers are the model replicas, not the ranks: consecutive ranks ``N*g .. N*g+N-1``
(on one node, NVLink) form replica ``g``; its first rank claims tasks from the fleet (leases
and outputs exactly as without ``--tp``, one holder per replica) and hands each claimed range of
rows to the others of its replica, which take part in every forward pass; only it publishes.
The model is built and its weights loaded in host memory (as without ``--tp``) and each rank
moves only its shards to its device, one parameter at a time: GPU memory holds ~1/N of the
model (and the replicated LayerNorms), host memory the whole model while loading.
"""

from __future__ import annotations

import argparse
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import default_collate

from gpu_cluster.workloads.runtime import device as devmod
from gpu_cluster.workloads.runtime.flags import Problems, output_dir_problem, output_file_problem
from gpu_cluster.workloads.train.config import gpt_config
from gpu_cluster.workloads.train.data import TokenWindows, check_shards
from gpu_cluster.workloads.train.model import GPT
from gpu_cluster.workloads.parallel import plans
from gpu_cluster.workloads.parallel.materialise import storage_bytes
from gpu_cluster.workloads.tasks import fleet
from gpu_cluster.workloads.tasks.gpt_scores import DEFAULT_CONFIG, make_inputs, score
from gpu_cluster.workloads.tasks.outputs import Outputs, is_uri, uri_problem
from gpu_cluster.workloads.tasks.shard import report
from gpu_cluster.workloads.train import plugins

STATE_DIR = ".batch_infer"


@dataclass(kw_only=True, slots=True)
class InferConfig:
    """One inference run, parsed and checked from the flags."""

    model: torch.nn.Module
    """The model (the ``--model`` factory's, or the bundled GPT), weights loaded, on the CPU."""
    gpt: bool
    """The bundled GPT: outputs are its scores rather than raw model outputs."""
    dataset: Any
    """Map-style dataset; an item is an input or an ``(input, target)`` pair."""
    spec: str
    """What the dataset is, for the fingerprint every rank must agree on."""
    rows_per_task: int
    """Consecutive rows in one task (one output part)."""
    batch_size: int
    """Rows per forward pass."""
    outputs: Outputs
    """Where the parts go."""
    fleet: fleet.FleetConfig
    """How the tasks are shared out."""
    json_path: Path | None
    """Summary as JSON (rank 0)."""
    tp: int
    """Ranks per model replica (tensor parallel); 1: a whole model on every rank."""
    force_cpu: bool
    """Run on the CPU even where GPUs are visible."""


def add_flags(r: argparse.ArgumentParser) -> None:
    r.add_argument(
        "--model",
        default=None,
        metavar="MODULE:FACTORY",
        help="callable returning a torch.nn.Module (default: the bundled GPT and its flags)",
    )
    r.add_argument(
        "--weights",
        default=None,
        help="ddp_train checkpoint directory (newest complete step) or step_<N>, or a state-dict file",
    )
    r.add_argument(
        "--dataset",
        default=None,
        metavar="MODULE:FACTORY",
        help="callable returning a map-style dataset (default: the token shards of --data)",
    )
    r.add_argument("--data", default=None, help="glob of token shards for the bundled dataset")
    for flag, default in (
        ("--vocab-size", "256"),
        ("--seq-len", "16"),
        ("--d-model", "32"),
        ("--n-layers", "2"),
        ("--n-heads", "2"),
    ):
        r.add_argument(flag, default=default, help=f"bundled GPT shape (default {default})")
    r.add_argument("--seed", default="0", help="initial weights when no --weights are given (default 0)")
    r.add_argument("--rows-per-task", default="1024", help="rows per task and output part (default 1024)")
    r.add_argument("--batch-size", default="64", help="rows per forward pass (default 64)")
    r.add_argument("--output-dir", required=True, help="directory, or s3://BUCKET/PREFIX or gs://BUCKET/PREFIX")
    r.add_argument("--state-dir", default=None, help="shared directory for leases (default <output-dir>/.batch_infer)")
    r.add_argument("--scratch-dir", default=None, help="node-local directory for parts before upload")
    r.add_argument("--schedule", default="dynamic", help="dynamic (default) or static")
    r.add_argument("--lease-s", default="60", help="lease expiry in seconds (default 60)")
    r.add_argument("--fleet-id", default=None, help="fleet id (default: torchrun's run id)")
    r.add_argument(
        "--tp",
        default="1",
        help="ranks per model replica, tensor parallel; the fleet claims tasks per replica (default 1)",
    )
    r.add_argument("--json", default=None, help="write the summary to this JSON file")
    r.add_argument("--cpu", action="store_true", help="run on the CPU even if GPUs are visible")


def load_weights(model: torch.nn.Module, raw: str, p: Problems) -> None:
    path = Path(raw)
    try:
        if path.is_dir():
            from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

            from gpu_cluster.workloads.train.checkpoint import complete_checkpoints

            found = complete_checkpoints(path)
            step = found[-1][1] if found else path
            state = {"model": model.state_dict()}
            dcp_load(state, checkpoint_id=step)  # no process group: DCP reads it as one process
            model.load_state_dict(state["model"])
        else:
            blob = torch.load(path, map_location="cpu", weights_only=True)
            model.load_state_dict(blob.get("state_dict", blob) if isinstance(blob, dict) else blob)
    except Exception as e:  # a file that does not fit the model: say which and why
        p.add("--weights", f"{raw}: cannot load into the model: {type(e).__name__}: {str(e)[:300]}")


def parse(a: argparse.Namespace) -> InferConfig:
    p = Problems()
    seed = p.integer("--seed", a.seed, lo=0)
    rows = p.integer("--rows-per-task", a.rows_per_task, lo=1)
    batch = p.integer("--batch-size", a.batch_size, lo=1)
    lease_s = p.number("--lease-s", a.lease_s, gt=0.0)
    tp = p.integer("--tp", a.tp, lo=1)
    if a.schedule not in fleet.SCHEDULES:
        p.add("--schedule", f"{a.schedule!r} is not one of {', '.join(fleet.SCHEDULES)}")
    gcfg = gpt_config(p, a)
    if not p:
        p.extend([(f"--{k.replace('_', '-')}", r) for k, r in gcfg.problems()])
    remote = is_uri(a.output_dir)
    root = a.output_dir.rstrip("/") if remote else os.path.abspath(a.output_dir)
    if remote and (why := uri_problem(root)):
        p.add("--output-dir", why)
    elif not remote and (why := output_dir_problem(Path(root))):
        p.add("--output-dir", why)
    if remote and a.state_dir is None:
        p.add("--state-dir", f"needed with --output-dir {root}: leases live on a shared file system")
    state = Path(os.path.abspath(a.state_dir)) if a.state_dir else Path(root) / STATE_DIR
    json_path = Path(a.json) if a.json else None
    if json_path is not None and (why := output_file_problem(json_path)):
        p.add("--json", why)

    torch.manual_seed(seed)
    model: torch.nn.Module | None
    if a.model is not None:
        model = plugins.build_model(a.model, p)
    elif not p:
        model = GPT(gcfg)
    else:
        model = None
    if model is not None and a.weights is not None:
        load_weights(model, a.weights, p)
    if tp > 1 and a.model is None and not p:
        p.extend(plans.tp_problems(gcfg, tp, "--tp"))
    if tp > 1 and model is not None and a.model is not None and not callable(getattr(model, "tp_plan", None)):
        p.add(
            "--tp",
            f"{tp} needs a sharding plan: {a.model!r} returned a {type(model).__name__} without a tp_plan() "
            "method (return a torch.distributed.tensor.parallel.parallelize_module plan from it), "
            "or run with --tp 1",
        )
    dataset: Any = None
    if a.dataset is not None:
        if a.data is not None:
            p.add("--data", f"{a.data!r} and --dataset {a.dataset!r} both name the data: give one")
        dataset = plugins.build_dataset(a.dataset, p)
        if dataset is not None and plugins.is_iterable(dataset):
            p.add(
                "--dataset",
                f"{a.dataset!r} is an IterableDataset: tasks are ranges of rows that any worker "
                "can claim, which needs a map-style dataset (__len__, __getitem__); give a stream's "
                "files to shard_tasks --callable instead",
            )
            dataset = None
        spec = a.dataset
    elif a.data is None:
        p.add("--data", "missing: give a glob of token shards, or --dataset MODULE:FACTORY")
        spec = ""
    else:
        shards, problems = check_shards(a.data, seq_len=gcfg.seq_len, vocab_size=gcfg.vocab_size)
        p.extend(problems)
        dataset = TokenWindows(shards, gcfg.seq_len)
        spec = "\n".join(f"{s.path}:{s.n_tokens}" for s in shards)
    outputs = Outputs(root, Path(a.scratch_dir) if a.scratch_dir else None)
    if remote and not p and (why := outputs.reachable_problem()):
        p.add("--output-dir", why)
    p.exit_if_any()
    assert model is not None
    return InferConfig(
        model=model.eval(),
        gpt=a.model is None,
        dataset=dataset,
        spec=f"{spec} len {len(dataset)} rows {rows}",
        rows_per_task=rows,
        batch_size=batch,
        outputs=outputs,
        fleet=fleet.FleetConfig(
            schedule=a.schedule,
            state_dir=state,
            lease_s=lease_s,
            fleet_id=a.fleet_id or os.environ.get("TORCHELASTIC_RUN_ID", "") or os.urandom(8).hex(),
            progress_every_s=30.0,
        ),
        json_path=json_path,
        tp=tp,
        force_cpu=bool(a.cpu),
    )


def _inputs(item: Any) -> Any:
    return item[0] if isinstance(item, (tuple, list)) and len(item) == 2 else item


@torch.inference_mode()
def infer_rows(cfg: InferConfig, lo: int, hi: int, dev: torch.device) -> dict[str, torch.Tensor]:
    """The model's outputs for rows ``lo..hi-1`` of the dataset."""
    parts: dict[str, list[torch.Tensor]] = {}
    for b in range(lo, hi, cfg.batch_size):
        x = default_collate([_inputs(cfg.dataset[i]) for i in range(b, min(hi, b + cfg.batch_size))])
        if cfg.gpt:
            got = score(cfg.model, x, cfg.batch_size)  # type: ignore[arg-type]
        else:
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dev.type == "cuda"):
                out = cfg.model(x.to(dev) if isinstance(x, torch.Tensor) else x)
            if not isinstance(out, torch.Tensor):
                raise TypeError(f"the model returned {type(out).__name__}; batch_infer saves tensors")
            got = {"output": out.float().cpu()}
        for k, v in got.items():
            parts.setdefault(k, []).append(v)
    return {"index": torch.arange(lo, hi), **{k: torch.cat(v) for k, v in parts.items()}}


def _items(cfg: InferConfig) -> list[fleet.Item]:
    n = len(cfg.dataset)
    return [
        fleet.Item(
            name=f"rows {lo}..{min(n, lo + cfg.rows_per_task) - 1}",
            final=cfg.outputs.final(Path(f"part-{k:06d}.pt")),
        )
        for k, lo in enumerate(range(0, n, cfg.rows_per_task))
    ]


def _first_row(it: fleet.Item) -> int:
    return int(it.name.split()[1].split("..")[0])


def run_fleet(a: argparse.Namespace) -> int:
    cfg = parse(a)
    rt = devmod.setup(force_cpu=True if cfg.force_cpu else None)
    try:
        if rt.world_size % cfg.tp:
            devmod.fail_together(
                [("--tp", f"{cfg.tp} does not divide the {rt.world_size} ranks into whole model replicas")]
            )
        if cfg.tp > 1:
            return _run_sharded(cfg, rt)
        cfg.model.to(rt.device)
        n = len(cfg.dataset)
        items = _items(cfg)

        def work(it: fleet.Item, tmp: Path) -> str | None:
            lo = _first_row(it)
            try:
                torch.save(infer_rows(cfg, lo, min(n, lo + cfg.rows_per_task), rt.device), tmp)
            except Exception as e:  # one bad task is recorded; the others go on
                return f"{type(e).__name__}: {e}"
            return None

        c = fleet.process(items, cfg.outputs, cfg.fleet, rt, work)
        return _report(cfg, len(items), c, rt)
    finally:
        devmod.teardown()


def _report(cfg: InferConfig, n_items: int, c: fleet.Counts, rt: devmod.Runtime) -> int:
    digest = hashlib.sha256(cfg.spec.encode()).hexdigest()
    return report(digest, n_items, c, rt, cfg.json_path, cfg.fleet.state_dir, cfg.fleet.schedule, job="batch_infer")


def shard_model(cfg: InferConfig, mesh: Any) -> None:
    """Split ``cfg.model`` (whole, on the host) over the ranks of ``mesh``; each keeps its shards.

    ``parallelize_module`` moves one parameter at a time to the mesh's device and keeps this
    rank's part of it (every rank holds the same whole model, so the parts agree)."""
    from torch.distributed.tensor.parallel import parallelize_module

    if cfg.gpt:
        plans.apply_tp_inference(cfg.model, mesh)  # type: ignore[arg-type]
    else:
        parallelize_module(cfg.model, mesh, cfg.model.tp_plan())  # type: ignore[operator]
    for b in cfg.model.buffers():  # buffers are not split: each rank's copy goes to its device
        b.data = b.data.to(mesh.device_type)


def _run_sharded(cfg: InferConfig, rt: devmod.Runtime) -> int:
    """The fleet over model replicas of ``cfg.tp`` consecutive ranks (see the module's docstring)."""
    from dataclasses import replace

    from torch.distributed.device_mesh import init_device_mesh

    replicas = rt.world_size // cfg.tp
    mesh = init_device_mesh(rt.device.type, (replicas, cfg.tp), mesh_dim_names=("replica", "tp"))
    shard_model(cfg, mesh["tp"])
    if rt.is_main:
        held = storage_bytes(cfg.model.parameters())
        whole = sum(p.numel() * p.element_size() for p in set(cfg.model.parameters()))  # global shapes
        print(
            f"batch_infer: {replicas} replica(s) of {cfg.tp} ranks (tensor parallel); rank 0 holds "
            f"{held} of the model's {whole} parameter bytes",
            flush=True,
        )
    tp_group = mesh["tp"].get_group()
    leader = rt.rank - rt.rank % cfg.tp  # global rank of this replica's first rank
    n = len(cfg.dataset)
    items = _items(cfg)
    task = torch.zeros(1, dtype=torch.int64, device=rt.device if rt.backend == "nccl" else torch.device("cpu"))

    def announce(lo: int) -> None:
        task.fill_(lo)
        dist.broadcast(task, src=leader, group=tp_group)

    c = fleet.Counts()
    if rt.rank == leader:

        def work(it: fleet.Item, tmp: Path) -> str | None:
            lo = _first_row(it)
            announce(lo)  # the rest of the replica runs the same rows with it
            try:
                torch.save(infer_rows(cfg, lo, min(n, lo + cfg.rows_per_task), rt.device), tmp)
            except Exception as e:  # one bad task is recorded; the others go on
                return f"{type(e).__name__}: {e}"
            return None

        # The replica as one worker: numbered among the replicas, replica 0's leader prints.
        as_replica = replace(rt, rank=rt.rank // cfg.tp, world_size=replicas)
        try:
            c = fleet.process(items, cfg.outputs, cfg.fleet, as_replica, work, group=mesh["replica"].get_group())
        finally:
            announce(-1)  # no more tasks
    else:
        while True:
            dist.broadcast(task, src=leader, group=tp_group)
            lo = int(task.item())
            if lo < 0:
                break
            try:
                infer_rows(cfg, lo, min(n, lo + cfg.rows_per_task), rt.device)
            except Exception:  # the same rows fail on the leader, which records why
                pass
    return _report(cfg, len(items), c, rt)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpu_cluster.workloads.tasks.infer")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="your model over your dataset as a self-balancing fleet (under torchrun)")
    add_flags(r)
    m = sub.add_parser("make-inputs", help="write example token tensor files")
    m.add_argument("--out", required=True)
    m.add_argument("--files", default="4")
    m.add_argument("--rows", default="32")
    m.add_argument("--seq", default=str(DEFAULT_CONFIG.seq_len))
    m.add_argument("--vocab", default=str(DEFAULT_CONFIG.vocab_size))
    m.add_argument("--seed", default="0")
    a = ap.parse_args(argv)
    if a.cmd == "run":
        return run_fleet(a)
    p = Problems()
    files = p.integer("--files", a.files, lo=1)
    rows = p.integer("--rows", a.rows, lo=1)
    seq = p.integer("--seq", a.seq, lo=1)
    vocab = p.integer("--vocab", a.vocab, lo=1)
    seed = p.integer("--seed", a.seed, lo=0)
    p.exit_if_any()
    paths = make_inputs(Path(a.out), files, rows, seq, vocab, seed)
    print(f"wrote {len(paths)} files of {rows}x{seq} tokens to {a.out}")
    return 0


if __name__ == "__main__":
    from gpu_cluster.workloads.runtime.device import exit_process

    exit_process(main())
