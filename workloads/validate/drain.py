"""Take bad nodes out of service through the scheduler that runs them.

Slurm: ``scontrol update nodename=N state=drain reason=...`` (running jobs finish, no new
ones start). Kubernetes: a NoSchedule taint on the node. Both are what an operator would do
by hand; the reason names the validation run so the drain can be traced back.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Literal, Sequence

Scheduler = Literal["slurm", "kubernetes", "none"]
TAINT_KEY = "gpu-cluster.io/validation"


@dataclass(frozen=True, slots=True)
class DrainResult:
    node: str
    ok: bool
    message: str


def detect_scheduler() -> Scheduler:
    if os.environ.get("SLURM_JOB_ID") or os.environ.get("SLURM_CONF"):
        if shutil.which("scontrol"):
            return "slurm"
    if os.environ.get("KUBERNETES_SERVICE_HOST") and shutil.which("kubectl"):
        return "kubernetes"
    return "none"


def _command(scheduler: Scheduler, node: str, reason: str) -> list[str]:
    if scheduler == "slurm":
        return ["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"]
    if scheduler == "kubernetes":
        return ["kubectl", "taint", "nodes", node, f"{TAINT_KEY}=failed:NoSchedule", "--overwrite"]
    raise ValueError(f"no scheduler to drain {node} with (allowed: slurm, kubernetes)")


def drain(nodes: Sequence[str], reason: str, scheduler: Scheduler | None = None) -> list[DrainResult]:
    scheduler = scheduler or detect_scheduler()
    results = []
    # Slurm keeps the reason as one field; keep it short and free of characters it splits on.
    reason = " ".join(reason.split())[:120] or "gpu-cluster validation failed"
    for node in nodes:
        if scheduler == "none":
            results.append(
                DrainResult(node, False, "no scheduler found (not in a Slurm job, no kubectl): drain by hand")
            )
            continue
        cmd = _command(scheduler, node, reason)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            results.append(DrainResult(node, False, f"{' '.join(cmd[:2])} failed: {exc}"))
            continue
        ok = proc.returncode == 0
        msg = (
            "drained"
            if ok and scheduler == "slurm"
            else "tainted"
            if ok
            else (proc.stderr or proc.stdout).strip()[:300]
        )
        results.append(DrainResult(node, ok, msg))
    return results
