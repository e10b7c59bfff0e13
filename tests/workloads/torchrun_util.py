"""Launching the jobs for real, as a cluster would: torchrun, gloo, one process per rank."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The machine is shared and small: a job that is merely slow must not fail a test.
TIMEOUT_S = 600
# The GPT the torchrun tests train: some 30k parameters, so gloo on a shared CPU keeps up.
TINY_GPT = ("--vocab-size", "64", "--seq-len", "16", "--d-model", "32", "--n-layers", "2", "--n-heads", "2")


def job_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUC_CRASH")}
    env.update(
        PYTHONPATH=str(REPO),
        GPUC_FORCE_CPU="1",
        OMP_NUM_THREADS="1",
        # torch 2.13's agent shares its rendezvous store with the workers, and a restarted
        # attempt reads the previous attempt's gloo addresses from it (pytorch#135712).
        TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
    )
    env.update(extra)
    return env


def torchrun(
    module: str, args: list[str], *, nproc: int = 2, max_restarts: int = 0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        f"--max-restarts={max_restarts}",
        "-m",
        module,
        *args,
    ]
    return subprocess.run(
        cmd, cwd=REPO, env=env or job_env(), capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )


def cpu_torchrun(
    module: str, nproc: int, args: list[str], *, env_extra: dict[str, str] | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """``module`` under torchrun on CPU ranks with none of the caller's ``GPUC_`` settings (a
    fault or stall a test injects comes in ``env_extra`` only), warnings silenced, from the
    checkout; unlike :func:`torchrun`, the environment is otherwise the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUC_")}
    env.update({"GPUC_FORCE_CPU": "1", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"})
    env.update(env_extra or {})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
    return subprocess.run(
        [*cmd, "-m", module, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


def python_m(module: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        env=env or job_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def explain(r: subprocess.CompletedProcess[str]) -> str:
    return f"exit {r.returncode}\n--- stdout\n{r.stdout[-4000:]}\n--- stderr\n{r.stderr[-4000:]}"
