"""Run one job over thousands of independent inputs on every rank, self-balancing, safe to rerun,
with outputs on a shared file system or in object storage.

    torchrun --nproc-per-node 8 -m gpu_cluster.workloads.tasks --glob '/fsx/videos/*.mov' \\
        --output-dir s3://my-bucket/encoded --state-dir /fsx/fleet/encode1 --output-ext .mp4 \\
        --command 'ffmpeg -y -hwaccel cuda -hwaccel_device {gpu} -i {input} -c:v h264_nvenc {output}'

    torchrun ... -m gpu_cluster.workloads.tasks --inputs /fsx/lists/tensors.txt \\
        --output-dir /fsx/scores --callable gpu_cluster.workloads.tasks.gpt_scores:run

Inputs: the lines of ``--inputs`` (relative paths taken from the list file's directory) or the
files ``--glob`` matches, made absolute and sorted. Every rank must see the same list: the final
count carries a fingerprint of the list each rank saw, so a list that changed under the job is
reported instead of silently skipping or doubling work.

How the work is split (``--schedule``, :mod:`gpu_cluster.workloads.tasks.fleet`): ``dynamic`` (default),
each rank claims the next unclaimed item through a lease on the shared file system
(``--state-dir``, default ``<output-dir>/.shard_tasks``), renewed while it works and taken over
by another worker when it expires (``--lease-s``) because its worker died; a slow item delays
only its own worker. ``static``: item ``i`` to rank ``i % world_size``, no coordination at all.

Where outputs go: ``--output-dir`` / (the input's path relative to ``--input-root``, by default
the inputs' common directory), with the extension replaced by ``--output-ext`` when given.
``--output-dir`` is a path, or an ``s3://`` / ``gs://`` URI (fsspec with s3fs / gcsfs; the work
is then written to ``--scratch-dir`` on the node and uploaded with a conditional put).

Exactly once, even across crashes (:mod:`gpu_cluster.workloads.tasks.outputs`): an input whose output
already exists is skipped; work is written under a temporary name and published in one step
that refuses to replace an existing output, so no partial file or object ever carries a final
name, a rerun after a crash redoes nothing that finished, and an item done twice (a lease taken
over from a stalled worker) is published once.

The command: ``--command`` is split like a shell line and run without a shell, once per input,
with ``{input}``, ``{output}`` (both required), ``{rank}``, ``{local_rank}`` and ``{gpu}`` (the
index of the GPU this rank is bound to, e.g. ``ffmpeg -hwaccel_device {gpu}``; the child
inherits ``CUDA_VISIBLE_DEVICES``, so the index means the same GPU to it).

Failures: an input whose command exits non-zero (or times out, or writes nothing), or whose
callable raises, is counted and recorded with the tail of its stderr/traceback in
``<state-dir>/failures-rank<R>.jsonl``; the other inputs go on. The exit code is 1 if any input
failed anywhere, else 0.
"""

from __future__ import annotations

import argparse
import collections
import glob as globlib
import hashlib
import importlib
import json
import os
import shlex
import shutil
import string
import subprocess
import sys
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from gpu_cluster.workloads.runtime import device as devmod
from gpu_cluster.workloads.runtime.atomic import write_bytes_atomic
from gpu_cluster.workloads.runtime.flags import Problems, output_dir_problem, output_file_problem
from gpu_cluster.workloads.tasks import fleet
from gpu_cluster.workloads.tasks.outputs import Outputs, is_uri, uri_problem

STATE_DIR = ".shard_tasks"
TAIL_CHARS = 2000
REQUIRED = ("input", "output")
PLACEHOLDERS = (*REQUIRED, "rank", "local_rank", "gpu")


@dataclass(kw_only=True, frozen=True, slots=True)
class TaskConfig:
    """One sharded run, parsed and checked from the flags."""

    items: list[tuple[Path, Any]]
    """``(input, final output)`` for every input, sorted by input path: the output a ``Path``,
    or a ``str`` URI when ``--output-dir`` is one."""
    list_digest: str
    """SHA-256 of the sorted input list; every rank must see the same one."""
    output_dir: str
    """Root of the outputs: a path on shared storage, or an ``s3://`` / ``gs://`` URI."""
    outputs: Outputs
    """How outputs are checked and published under ``output_dir``."""
    state_dir: Path
    """Shared directory for leases and failure records."""
    schedule: str
    """``dynamic`` (leases) or ``static`` (``i % world_size``)."""
    lease_s: float
    """Lease expiry after the holder's last heartbeat."""
    fleet_id: str
    """Workers with the same id share failure records (a failed item is not retried within it)."""
    command: list[str] | None
    """``--command`` split into arguments, placeholders still in; run without a shell."""
    function: Callable[[str, str], Any] | None
    """``--callable`` resolved: called as ``function(input_path, output_tmp_path)``."""
    timeout_s: float | None
    """Per-input limit for ``--command``; ``None`` for none."""
    progress_every_s: float
    """Rank 0 prints its progress this often."""
    json_path: Path | None
    """Summary as JSON (rank 0, atomically)."""
    force_cpu: bool
    """Use gloo even where GPUs are visible (the final count is all the job communicates)."""


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m gpu_cluster.workloads.tasks",
        description="Process independent inputs across all ranks, self-balancing; skips finished outputs.",
    )
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--inputs", help="file with one input path per line ('#' comments allowed)")
    src.add_argument("--glob", help="glob of input files (quote it)")
    ap.add_argument(
        "--output-dir",
        required=True,
        help="root of the outputs: a directory, or s3://BUCKET/PREFIX or gs://BUCKET/PREFIX",
    )
    ap.add_argument("--output-ext", default=None, help="replace each input's extension, e.g. .mp4")
    ap.add_argument(
        "--input-root",
        default=None,
        help="inputs' paths below this dir are kept under --output-dir (default: their common directory)",
    )
    work = ap.add_mutually_exclusive_group(required=True)
    work.add_argument(
        "--command",
        help="command run per input (no shell), with {input} and {output}, and optionally {rank}, {local_rank}, {gpu}",
    )
    work.add_argument(
        "--callable", dest="callable_", metavar="MODULE:FUNCTION", help="python callable f(input_path, output_tmp_path)"
    )
    ap.add_argument("--schedule", default="dynamic", help="dynamic (leases, default) or static (i %% world)")
    ap.add_argument(
        "--state-dir",
        default=None,
        help="shared directory for leases and failure records (default <output-dir>/.shard_tasks; "
        "needed with an s3:// or gs:// --output-dir)",
    )
    ap.add_argument(
        "--lease-s", default="60", help="a dead worker's lease expires after this many seconds (default 60)"
    )
    ap.add_argument(
        "--fleet-id",
        default=None,
        help="workers with the same id are one fleet (default: torchrun's run id, else Slurm's job id)",
    )
    ap.add_argument(
        "--scratch-dir",
        default=None,
        help="node-local directory for work before it is uploaded to a URI (default: the temp dir)",
    )
    ap.add_argument("--timeout-s", default=None, help="per-input time limit for --command (default none)")
    ap.add_argument("--progress-every-s", default="30", help="rank 0 progress interval (default 30)")
    ap.add_argument("--json", default=None, help="write the final summary to this JSON file")
    ap.add_argument("--cpu", action="store_true", help="use gloo even if GPUs are visible")
    return ap


def _read_list(path: Path, p: Problems) -> list[Path]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        p.add("--inputs", f"cannot read {path}: {e.strerror}")
        return []
    except UnicodeDecodeError as e:
        p.add("--inputs", f"{path} is not UTF-8 text (byte {e.start}; allowed: a UTF-8 file, one path a line)")
        return []
    base = path.resolve().parent
    out = []
    for line in lines:
        s = line.strip()
        if s and not s.startswith("#"):
            out.append(Path(os.path.normpath(base / os.path.expanduser(s))))
    if not out:
        p.add("--inputs", f"{path} lists no inputs")
    return out


def _check_template(template: str, p: Problems, force_cpu: bool) -> list[str] | None:
    try:
        argv = shlex.split(template)
    except ValueError as e:
        p.add("--command", f"cannot split {template!r}: {e}")
        return None
    if not argv:
        p.add("--command", "is empty")
        return None
    seen: set[str] = set()
    for arg in argv:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(arg) if f is not None]
        except ValueError as e:
            p.add("--command", f"argument {arg!r}: {e} (write a literal brace as {{{{ or }}}})")
            continue
        for f in fields:
            if f not in PLACEHOLDERS:
                allowed = ", ".join(f"{{{x}}}" for x in PLACEHOLDERS)
                p.add("--command", f"unknown placeholder {{{f}}} in {arg!r} (allowed: {allowed})")
            seen.add(f)
    for need in REQUIRED:
        if need not in seen:
            p.add("--command", f"{template!r} has no {{{need}}} placeholder")
    if "{" not in argv[0] and shutil.which(argv[0]) is None:
        p.add("--command", f"program {argv[0]!r} is not on PATH")
    if "gpu" in seen and devmod.detect_accelerator(force_cpu) == "cpu":
        p.add(
            "--command",
            f"{template!r} uses {{gpu}}, the index of this rank's GPU, and this job runs on the "
            "CPU (no GPU visible, or --cpu / GPUC_FORCE_CPU=1)",
        )
    return argv


def _resolve_callable(spec: str, p: Problems) -> Callable[[str, str], Any] | None:
    mod_name, sep, fn_name = spec.partition(":")
    if not sep or not mod_name or not fn_name:
        p.add("--callable", f"{spec!r} is not MODULE:FUNCTION (e.g. gpu_cluster.workloads.tasks.gpt_scores:run)")
        return None
    try:
        mod = importlib.import_module(mod_name)
    except Exception as e:
        p.add("--callable", f"cannot import {mod_name!r}: {type(e).__name__}: {e}")
        return None
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        p.add("--callable", f"{mod_name} has no callable {fn_name!r}")
        return None
    return fn  # type: ignore[no-any-return]


def output_for(inp: Path, root: Path, output_dir: Path, ext: str | None) -> Path:
    rel = inp.relative_to(root)
    return output_dir / (rel.with_suffix(ext) if ext is not None else rel)


def _fleet_id(raw: str | None) -> str:
    return raw or os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("SLURM_JOB_ID") or uuid.uuid4().hex


def parse_config(argv: list[str] | None = None) -> TaskConfig:
    a = build_parser().parse_args(argv)
    p = Problems()
    if a.inputs is not None:
        inputs = _read_list(Path(a.inputs), p)
    else:
        inputs = [Path(os.path.abspath(x)) for x in globlib.glob(os.path.expanduser(a.glob)) if os.path.isfile(x)]
        if not inputs:
            p.add("--glob", f"{a.glob!r} matches no files")
    inputs.sort(key=str)
    dups = sorted(str(x) for x, n in collections.Counter(inputs).items() if n > 1)
    if dups:
        p.add("--inputs", f"{len(dups)} inputs listed more than once, e.g. {dups[:3]}")
    ext = a.output_ext
    ext_ok = ext is None or (
        ext.startswith(".")
        and len(ext) >= 2
        and ext != ".."
        and not any(c in ext for c in "/\x00")
        and not any(ord(c) < 0x20 for c in ext)
    )
    if not ext_ok:
        p.add("--output-ext", f"{ext!r} must look like .mp4")
    for flag, value in (
        ("--output-dir", a.output_dir),
        ("--input-root", a.input_root),
        ("--json", a.json),
        ("--state-dir", a.state_dir),
        ("--scratch-dir", a.scratch_dir),
    ):
        if value is not None and "\x00" in value:
            p.add(flag, f"{value!r} contains a NUL byte")
    force_cpu = bool(a.cpu) or os.environ.get("GPUC_FORCE_CPU", "") == "1"
    remote = is_uri(a.output_dir)
    raw_out = a.output_dir.replace("\x00", "")
    if remote:
        if why := uri_problem(raw_out):
            p.add("--output-dir", why)
        if a.state_dir is None:
            p.add(
                "--state-dir",
                f"needed with --output-dir {raw_out}: leases and failure records live on a "
                "shared file system (e.g. /fsx/fleet/<job>)",
            )
        output_root = raw_out.rstrip("/")
    else:
        output_root = os.path.abspath(raw_out)
        if why := output_dir_problem(Path(output_root)):
            p.add("--output-dir", why)
    state_dir = Path(os.path.abspath(a.state_dir.replace("\x00", ""))) if a.state_dir else Path(output_root) / STATE_DIR
    if a.state_dir and (why := output_dir_problem(state_dir)):
        p.add("--state-dir", why)
    scratch = Path(os.path.abspath(a.scratch_dir.replace("\x00", ""))) if a.scratch_dir else None
    if scratch is not None and (why := output_dir_problem(scratch)):
        p.add("--scratch-dir", why)
    if a.schedule not in fleet.SCHEDULES:
        p.add("--schedule", f"{a.schedule!r} is not one of {', '.join(fleet.SCHEDULES)}")
    lease_s = p.number("--lease-s", a.lease_s, gt=0.0)
    root: Path | None = None
    if inputs:
        root = (
            Path(os.path.abspath(a.input_root))
            if a.input_root
            else Path(os.path.commonpath([str(x.parent) for x in inputs]))
        )
        outside = [x for x in inputs if not x.is_relative_to(root)]
        if outside:
            p.add("--input-root", f"{root} does not contain {len(outside)} inputs, e.g. {outside[0]}")
            root = None
    command = _check_template(a.command, p, force_cpu) if a.command is not None else None
    function = _resolve_callable(a.callable_, p) if a.callable_ is not None else None
    timeout = None if a.timeout_s is None else p.number("--timeout-s", a.timeout_s, gt=0.0)
    if timeout is not None and command is None:
        p.add("--timeout-s", "applies to --command only (a callable runs in this process)")
    every = p.number("--progress-every-s", a.progress_every_s, gt=0.0)
    json_path = Path(a.json) if a.json else None
    if json_path is not None and (why := output_file_problem(json_path)):
        p.add("--json", why)
    outputs = Outputs(output_root, scratch)
    items: list[tuple[Path, Any]] = []
    if root is not None and not dups and ext_ok:
        rels = [output_for(x, root, Path("."), ext) for x in inputs]
        finals: list[Any] = [outputs.final(r) if remote else Path(outputs.final(r)) for r in rels]
        items = list(zip(inputs, finals))
        by_out: dict[Any, Path] = {}
        for inp, out in items:
            if out in by_out:
                p.add("--output-ext", f"{by_out[out]} and {inp} would both write {out}")
            by_out[out] = inp
            if out == inp:
                p.add("--output-dir", f"output {out} would overwrite its input")
    if remote and not p and (why := outputs.reachable_problem()):  # one round trip, once all else is right
        p.add("--output-dir", why)
    p.exit_if_any()
    digest = hashlib.sha256("\n".join(str(x) for x in inputs).encode()).hexdigest()
    return TaskConfig(
        items=items,
        list_digest=digest,
        output_dir=output_root,
        outputs=outputs,
        state_dir=state_dir,
        schedule=a.schedule,
        lease_s=lease_s,
        fleet_id=_fleet_id(a.fleet_id),
        command=command,
        function=function,
        timeout_s=timeout,
        progress_every_s=every,
        json_path=json_path,
        force_cpu=force_cpu,
    )


def _tail(text: str) -> str:
    return text[-TAIL_CHARS:]


def run_item(cfg: TaskConfig, inp: Path, tmp: Path, rt: devmod.Runtime | None = None) -> str | None:
    """Produce ``tmp`` from ``inp``; ``None`` on success, else the reason with its stderr tail."""
    if cfg.command is not None:
        rank = rt.rank if rt else 0
        local = rt.local_rank if rt else 0
        gpu = rt.device.index if rt is not None and rt.device.type == "cuda" else ""
        argv = [
            arg.format(input=str(inp), output=str(tmp), rank=rank, local_rank=local, gpu=gpu) for arg in cfg.command
        ]
        try:
            r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=cfg.timeout_s, check=False)
        except subprocess.TimeoutExpired as e:
            err = (e.stderr or b"").decode(errors="replace")
            return f"timed out after {cfg.timeout_s} s\n{_tail(err)}"
        except OSError as e:
            return f"cannot run {argv[0]!r}: {e.strerror}"
        if r.returncode != 0:
            return f"exit code {r.returncode}\n{_tail(r.stderr.decode(errors='replace'))}"
    else:
        assert cfg.function is not None
        try:
            cfg.function(str(inp), str(tmp))
        except Exception:
            return _tail(traceback.format_exc())
    if not tmp.is_file():
        return f"finished without writing its output {tmp}"
    return None


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(argv)
    rt = devmod.setup(force_cpu=True if cfg.force_cpu else None)
    try:
        items = [fleet.Item(name=str(inp), final=str(out)) for inp, out in cfg.items]
        fc = fleet.FleetConfig(
            schedule=cfg.schedule,
            state_dir=cfg.state_dir,
            lease_s=cfg.lease_s,
            fleet_id=cfg.fleet_id,
            progress_every_s=cfg.progress_every_s,
        )
        c = fleet.process(items, cfg.outputs, fc, rt, lambda it, tmp: run_item(cfg, Path(it.name), tmp, rt))
        return report(cfg.list_digest, len(items), c, rt, cfg.json_path, cfg.state_dir, cfg.schedule)
    finally:
        devmod.teardown()


def report(
    list_digest: str,
    n_items: int,
    c: fleet.Counts,
    rt: devmod.Runtime,
    json_path: Path | None,
    state_dir: Path,
    schedule: str,
    job: str = "shard_tasks",
) -> int:
    """Gather every rank's counts; rank 0 prints them (and writes ``json_path``). The exit code:
    0, or 1 if any item failed or the ranks saw different lists."""
    fingerprint = int(list_digest[:12], 16)  # 48 bits: exact in an int64
    mine = torch.tensor(
        [c.done, c.skipped, c.failed, c.duplicate, fingerprint, round(c.busy_s * 1e6), round(c.wall_s * 1e6)],
        dtype=torch.int64,
    )
    if rt.backend == "nccl":
        mine = mine.to(rt.device)
    gathered = [torch.zeros_like(mine) for _ in range(rt.world_size)]
    dist.all_gather(gathered, mine)
    rows = [g.cpu().tolist() for g in gathered]
    done, skipped, failed, dup = (sum(r[k] for r in rows) for k in range(4))
    same_list = len({r[4] for r in rows}) == 1
    wall = max(r[6] for r in rows) / 1e6  # the slowest rank decides
    busy = [r[5] / 1e6 for r in rows]
    elsewhere = n_items - done - skipped - failed
    if rt.is_main:
        print(
            f"{job}: {n_items} items ({schedule}): done {done}, skipped (output existed) {skipped}, "
            f"failed {failed}"
            + (f", done by another fleet {elsewhere}" if elsewhere else "")
            + (f", duplicates discarded {dup}" if dup else "")
            + f" in {wall:.1f} s "
            f"(busy {sum(busy):.1f} s over {rt.world_size} ranks)",
            flush=True,
        )
        if failed:
            print(f"failures recorded in {state_dir}/failures-rank*.jsonl", file=sys.stderr, flush=True)
        if not same_list:
            print(
                "error: ranks saw different input lists: keep the list (and the files a "
                "glob matches) on shared storage and unchanged during the run",
                file=sys.stderr,
                flush=True,
            )
        if json_path is not None:
            summary = {
                "job": job,
                "world_size": rt.world_size,
                "inputs": n_items,
                "schedule": schedule,
                "done": done,
                "skipped": skipped,
                "failed": failed,
                "duplicates": dup,
                "done_elsewhere": elsewhere,
                "per_rank": [dict(zip(("done", "skipped", "failed"), r[:3])) for r in rows],
                "busy_s_per_rank": busy,
                "same_input_list_on_all_ranks": same_list,
                "elapsed_s": wall,
                "list_sha256": list_digest,
            }
            write_bytes_atomic(json_path, (json.dumps(summary, indent=2) + "\n").encode())
    return 0 if failed == 0 and same_list else 1


if __name__ == "__main__":
    from gpu_cluster.workloads.runtime.device import exit_process

    exit_process(main())
