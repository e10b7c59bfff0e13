"""`make bench` runs every benchmark in bench/ (issue 26: it once stopped at its first), and each
benchmark's `--help` exits 0. The benchmarks themselves are run by `make bench`, not here: they
measure, and a test must not depend on the machine's speed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Benchmarks are the modules of bench/; a leading underscore marks a helper they share (_torchrun), not one.
MODULES = sorted(p.stem for p in (ROOT / "bench").glob("*.py") if not p.stem.startswith("_"))


def _benches() -> list[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    (line,) = [ln for ln in text.splitlines() if ln.startswith("BENCHES :=")]
    return line.split(":=", 1)[1].split()


def test_make_bench_runs_every_benchmark_in_bench() -> None:
    benches = _benches()
    assert len(benches) == len(set(benches))
    assert sorted(benches) == MODULES, "a module of bench/ that `make bench` does not run, or one it names that is gone"


def test_make_bench_goes_on_past_a_failing_benchmark_and_names_it(tmp_path: Path) -> None:
    """The target's own loop, with a stand-in interpreter that fails for one benchmark: every
    benchmark is still started, the status is the failure's, and the last line names it."""
    fake = tmp_path / "py"
    log = tmp_path / "ran"
    fake.write_text(f'#!/bin/sh\necho "$2" >> {log}\n[ "$2" = bench.b ] && exit 2\nexit 0\n', encoding="utf-8")
    fake.chmod(0o755)
    # A make of its own, not a sub-make of `make test`'s (whose flags would change what it prints).
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    proc = subprocess.run(
        ["make", "-s", "--no-print-directory", "-o", ".venv/.installed", "bench", f"PY={fake}", "BENCHES=a b c"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode != 0
    assert log.read_text().split() == ["bench.a", "bench.b", "bench.c"]
    assert proc.stdout.splitlines()[-1] == "make bench: 3 of 3 benchmarks ran, bench.b exited 2"


@pytest.mark.parametrize("module", MODULES)
def test_every_benchmark_help_exits_0(module: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert re.search(rf"usage: .*bench[./]{module}", proc.stdout), proc.stdout[:200]


def test_plan_scale_passes_the_eks_split_and_fails_other_growth() -> None:
    from collections import Counter

    from bench.plan_scale import EKS_NODE_GROUP, SIZES, scale_problems

    eks = {"cloud": "aws", "orchestration": {"kind": "eks"}}
    groups = {2: 2, 16: 2, 128: 2, 1024: 4}  # 1024 nodes: three GPU groups (<= 450 each) + system
    ok = {n: Counter({"aws:s3/bucket:Bucket": 3, EKS_NODE_GROUP: groups[n]}) for n in SIZES}
    assert scale_problems(eks, ok) == []
    flat = {n: Counter({"aws:s3/bucket:Bucket": 3, EKS_NODE_GROUP: 2}) for n in SIZES}
    assert scale_problems(eks, flat) == [f"{EKS_NODE_GROUP}: 2 at 1024 nodes (the 450-node split gives 4)"]
    grown = {n: Counter({"aws:ec2/instance:Instance": n}) for n in SIZES}
    slurm = {"cloud": "aws", "orchestration": {"kind": "slurm"}}
    assert scale_problems(slurm, grown)[0] == "aws:ec2/instance:Instance: 2 at 2 nodes, 16 at 16"
