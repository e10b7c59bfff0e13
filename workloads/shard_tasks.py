"""Run one job over thousands of independent inputs, split across every rank, safe to rerun.

    torchrun --nproc-per-node 8 -m workloads.shard_tasks --glob '/fsx/videos/*.mov' \\
        --output-dir /fsx/out --output-ext .mp4 \\
        --command 'ffmpeg -y -i {input} -c:v libx264 -preset veryfast {output}'

    torchrun ... -m workloads.shard_tasks --inputs /fsx/lists/tensors.txt \\
        --output-dir /fsx/scores --callable workloads.batch_infer:run

How the work is split: the input list (lines of ``--inputs``, relative paths taken from the
list file's directory; or the files ``--glob`` matches) is made absolute and sorted, and item
``i`` goes to rank ``i % world_size``. Every rank computes the same split from the same list,
so the ranks never talk while working; the only collective is the final count
(an all-gather of done/skipped/failed and a fingerprint of the list each rank saw, so a list
that changed under the job is reported instead of silently skipping or doubling work).

Where outputs go: ``--output-dir`` / (the input's path relative to ``--input-root``, by default
the inputs' common directory), with the extension replaced by ``--output-ext`` when given.

Exactly once, even across crashes: an input whose output already exists is skipped. Work is
written under a hidden temporary name in the output's directory that keeps the extension
(``.clip.tmp-<pid>.mp4``, ffmpeg picks the format from it), fsynced, and renamed onto the final
name only on success, so no partial file ever carries a final name and a rerun after a crash
redoes nothing that finished. Temporaries a crashed run left are removed before the item
is redone.

Failures: an input whose command exits non-zero (or times out, or writes nothing), or whose
callable raises, is counted and recorded with the tail of its stderr/traceback in
``<output-dir>/.shard_tasks/failures-rank<R>.jsonl``; the other inputs go on. The exit code is
1 if any input failed anywhere, else 0.

Test hook: ``GPUC_CRASH_AFTER=N`` makes rank ``GPUC_CRASH_RANK`` (default 1) do the work of
its item N+1 into the temporary file and then exit hard (``os._exit(1)``) before renaming it:
a crash at the worst moment.
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
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from workloads import device as devmod
from workloads.atomic import publish, stale_temps_for, temp_path_for, write_bytes_atomic
from workloads.cli import Problems, output_dir_problem

STATE_DIR = ".shard_tasks"
TAIL_CHARS = 2000
PLACEHOLDERS = ("input", "output")


@dataclass(kw_only=True, frozen=True, slots=True)
class TaskConfig:
    """One sharded run, parsed and checked from the flags."""

    items: list[tuple[Path, Path]]
    """``(input, final output)`` for every input, sorted by input path."""
    list_digest: str
    """SHA-256 of the sorted input list; every rank must see the same one."""
    output_dir: Path
    """Root of the outputs (shared storage)."""
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
        prog="python -m workloads.shard_tasks",
        description="Process independent inputs across all ranks; skips finished outputs.",
    )
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--inputs", help="file with one input path per line ('#' comments allowed)")
    src.add_argument("--glob", help="glob of input files (quote it)")
    ap.add_argument("--output-dir", required=True, help="root directory of the outputs")
    ap.add_argument("--output-ext", default=None, help="replace each input's extension, e.g. .mp4")
    ap.add_argument("--input-root", default=None,
                    help="inputs' paths below this dir are kept under --output-dir (default: their common directory)")
    work = ap.add_mutually_exclusive_group(required=True)
    work.add_argument("--command",
                      help="command run per input, with {input} and {output} placeholders (no shell)")
    work.add_argument("--callable", dest="callable_", metavar="MODULE:FUNCTION",
                      help="python callable f(input_path, output_tmp_path)")
    ap.add_argument("--timeout-s", default=None, help="per-input time limit for --command (default none)")
    ap.add_argument("--progress-every-s", default="30", help="rank 0 progress interval (default 30)")
    ap.add_argument("--json", default=None, help="write the final summary to this JSON file")
    ap.add_argument("--cpu", action="store_true", help="use gloo even if GPUs are visible")
    return ap


def _read_list(path: Path, p: Problems) -> list[Path]:
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        p.add("--inputs", f"cannot read {path}: {e.strerror}")
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


def _check_template(template: str, p: Problems) -> list[str] | None:
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
                p.add("--command", f"unknown placeholder {{{f}}} in {arg!r} (allowed: {{input}}, {{output}})")
            seen.add(f)
    for need in PLACEHOLDERS:
        if need not in seen:
            p.add("--command", f"{template!r} has no {{{need}}} placeholder")
    if "{" not in argv[0] and shutil.which(argv[0]) is None:
        p.add("--command", f"program {argv[0]!r} is not on PATH")
    return argv


def _resolve_callable(spec: str, p: Problems) -> Callable[[str, str], Any] | None:
    mod_name, sep, fn_name = spec.partition(":")
    if not sep or not mod_name or not fn_name:
        p.add("--callable", f"{spec!r} is not MODULE:FUNCTION (e.g. workloads.batch_infer:run)")
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


def parse_config(argv: list[str] | None = None) -> TaskConfig:
    a = build_parser().parse_args(argv)
    p = Problems()
    if a.inputs is not None:
        inputs = _read_list(Path(a.inputs), p)
    else:
        inputs = [Path(os.path.abspath(x)) for x in globlib.glob(os.path.expanduser(a.glob))
                  if os.path.isfile(x)]
        if not inputs:
            p.add("--glob", f"{a.glob!r} matches no files")
    inputs.sort(key=str)
    dups = sorted(str(x) for x, n in collections.Counter(inputs).items() if n > 1)
    if dups:
        p.add("--inputs", f"{len(dups)} inputs listed more than once, e.g. {dups[:3]}")
    ext = a.output_ext
    ext_ok = ext is None or (ext.startswith(".") and len(ext) >= 2 and ext != ".."
                             and not any(c in ext for c in "/\x00") and not any(ord(c) < 0x20 for c in ext))
    if not ext_ok:
        p.add("--output-ext", f"{ext!r} must look like .mp4")
    for flag, value in (("--output-dir", a.output_dir), ("--input-root", a.input_root), ("--json", a.json)):
        if value is not None and "\x00" in value:
            p.add(flag, f"{value!r} contains a NUL byte")
    output_dir = Path(os.path.abspath(a.output_dir.replace("\x00", "")))
    if why := output_dir_problem(output_dir):
        p.add("--output-dir", why)
    root: Path | None = None
    if inputs:
        root = Path(os.path.abspath(a.input_root)) if a.input_root else Path(
            os.path.commonpath([str(x.parent) for x in inputs]))
        outside = [x for x in inputs if not x.is_relative_to(root)]
        if outside:
            p.add("--input-root", f"{root} does not contain {len(outside)} inputs, e.g. {outside[0]}")
            root = None
    command = _check_template(a.command, p) if a.command is not None else None
    function = _resolve_callable(a.callable_, p) if a.callable_ is not None else None
    timeout = None if a.timeout_s is None else p.number("--timeout-s", a.timeout_s, gt=0.0)
    if timeout is not None and command is None:
        p.add("--timeout-s", "applies to --command only (a callable runs in this process)")
    every = p.number("--progress-every-s", a.progress_every_s, gt=0.0)
    json_path = Path(a.json) if a.json else None
    if json_path is not None and not json_path.parent.is_dir():
        p.add("--json", f"directory {json_path.parent} does not exist")
    items: list[tuple[Path, Path]] = []
    if root is not None and not dups and ext_ok:
        items = [(x, output_for(x, root, output_dir, ext)) for x in inputs]
        by_out: dict[Path, Path] = {}
        for inp, out in items:
            if out in by_out:
                p.add("--output-ext", f"{by_out[out]} and {inp} would both write {out}")
            by_out[out] = inp
            if out == inp:
                p.add("--output-dir", f"output {out} would overwrite its input")
    p.exit_if_any()
    digest = hashlib.sha256("\n".join(str(x) for x in inputs).encode()).hexdigest()
    return TaskConfig(items=items, list_digest=digest, output_dir=output_dir, command=command,
                      function=function, timeout_s=timeout, progress_every_s=every,
                      json_path=json_path, force_cpu=bool(a.cpu))


def _tail(text: str) -> str:
    return text[-TAIL_CHARS:]


def run_item(cfg: TaskConfig, inp: Path, tmp: Path) -> str | None:
    """Produce ``tmp`` from ``inp``; ``None`` on success, else the reason with its stderr tail."""
    if cfg.command is not None:
        argv = [arg.format(input=str(inp), output=str(tmp)) for arg in cfg.command]
        try:
            r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                               timeout=cfg.timeout_s, check=False)
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


@dataclass(slots=True)
class Counts:
    done: int = 0
    skipped: int = 0
    failed: int = 0


def process(cfg: TaskConfig, rt: devmod.Runtime) -> Counts:
    mine = cfg.items[rt.rank :: rt.world_size]
    state = cfg.output_dir / STATE_DIR
    state.mkdir(parents=True, exist_ok=True)
    failures_path = state / f"failures-rank{rt.rank}.jsonl"
    failures_path.unlink(missing_ok=True)  # this file describes the latest run only
    crash_after = os.environ.get("GPUC_CRASH_AFTER")
    crash_here = crash_after is not None and rt.rank == int(os.environ.get("GPUC_CRASH_RANK", "1"))
    c = Counts()
    t0 = last = time.monotonic()
    if rt.is_main:
        print(f"shard_tasks: {len(cfg.items)} inputs over {rt.world_size} ranks "
              f"(input i -> rank i % {rt.world_size}); rank 0 has {len(mine)}", flush=True)
    for inp, out in mine:
        if out.exists():
            c.skipped += 1
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        for stale in stale_temps_for(out):
            stale.unlink(missing_ok=True)
        tmp = temp_path_for(out)
        error = run_item(cfg, inp, tmp)
        if crash_here and c.done + c.failed == int(crash_after or 0):
            print(f"[rank {rt.rank}] GPUC_CRASH_AFTER={crash_after}: exiting hard with {tmp} "
                  "written but not renamed", file=sys.stderr, flush=True)
            os._exit(1)
        if error is None:
            publish(tmp, out)
            c.done += 1
        else:
            tmp.unlink(missing_ok=True)
            c.failed += 1
            record = {"input": str(inp), "output": str(out), "rank": rt.rank,
                      "time": time.time(), "error": error}
            with open(failures_path, "a") as f:
                f.write(json.dumps(record) + "\n")
        now = time.monotonic()
        if rt.is_main and now - last >= cfg.progress_every_s:
            last = now
            n = c.done + c.skipped + c.failed
            rate = (c.done + c.failed) / (now - t0)
            left = len(mine) - n
            eta = f", ~{left / rate:.0f} s left" if rate > 0 else ""
            print(f"rank 0: {n}/{len(mine)} of its inputs (done {c.done}, skipped {c.skipped}, "
                  f"failed {c.failed}), {rate:.2f} inputs/s{eta}", flush=True)
    return c


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(argv)
    rt = devmod.setup(force_cpu=True if cfg.force_cpu else None)
    try:
        t0 = time.monotonic()
        c = process(cfg, rt)
        elapsed = time.monotonic() - t0
        fingerprint = int(cfg.list_digest[:12], 16)  # 48 bits: exact in an int64
        mine = torch.tensor([c.done, c.skipped, c.failed, fingerprint], dtype=torch.int64)
        if rt.backend == "nccl":
            mine = mine.to(rt.device)
        gathered = [torch.zeros_like(mine) for _ in range(rt.world_size)]
        dist.all_gather(gathered, mine)
        rows = [g.cpu().tolist() for g in gathered]
        done, skipped, failed = (sum(r[k] for r in rows) for k in range(3))
        same_list = len({r[3] for r in rows}) == 1
        if rt.is_main:
            print(f"shard_tasks: {len(cfg.items)} inputs: done {done}, skipped (output existed) "
                  f"{skipped}, failed {failed} in {elapsed:.1f} s", flush=True)
            if failed:
                print(f"failures recorded in {cfg.output_dir / STATE_DIR}/failures-rank*.jsonl",
                      file=sys.stderr, flush=True)
            if not same_list:
                print("error: ranks saw different input lists: keep the list (and the files a "
                      "glob matches) on shared storage and unchanged during the run",
                      file=sys.stderr, flush=True)
            if cfg.json_path is not None:
                summary = {
                    "job": "shard_tasks", "world_size": rt.world_size, "inputs": len(cfg.items),
                    "done": done, "skipped": skipped, "failed": failed,
                    "per_rank": [dict(zip(("done", "skipped", "failed"), r[:3])) for r in rows],
                    "same_input_list_on_all_ranks": same_list, "elapsed_s": elapsed,
                    "list_sha256": cfg.list_digest,
                }
                write_bytes_atomic(cfg.json_path, (json.dumps(summary, indent=2) + "\n").encode())
        return 0 if failed == 0 and same_list else 1
    finally:
        devmod.teardown()


if __name__ == "__main__":
    from workloads.device import exit_process

    exit_process(main())
