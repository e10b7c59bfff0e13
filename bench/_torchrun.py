"""Launching a job under torchrun on this machine's CPU, as the benchmarks compare runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def torchrun_json(module: str, args: Sequence[str], *, ranks: int, json_path: Path, what: str) -> dict[str, Any]:
    """Run ``python -m module args`` on ``ranks`` CPU ranks (gloo, one thread per rank, so every
    run gets the same compute per rank) and return the JSON it wrote to ``json_path``; exit with
    the job's output tail, naming ``what`` failed, when it does not finish."""
    env = dict(os.environ, PYTHONPATH=str(REPO), GPUC_FORCE_CPU="1", OMP_NUM_THREADS="1")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={ranks}",
        "-m",
        module,
        *args,
    ]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200, check=False)
    if r.returncode != 0:
        sys.exit(f"{what} failed (exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return json.loads(json_path.read_text())  # type: ignore[no-any-return]
