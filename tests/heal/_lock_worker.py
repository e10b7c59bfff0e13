"""A heal that holds the cluster's lock and then does nothing until it is killed: the holder in
test_lock.py's kill tests. It takes the lock exactly as ``gpu-cluster heal --apply`` does
(gpu_cluster.heal.cli.cluster_lock), prints ``held <pid>`` and waits on its stdin.

    python -m tests.heal._lock_worker kube KUBECONFIG_FILE FOLDER
    python -m tests.heal._lock_worker slurm - FOLDER      (Slurm's clients as the environment says)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from gpu_cluster.heal.cli import cluster_lock
from gpu_cluster.heal.lock import KubeLease, SlurmLock, me


def main() -> int:
    kind, where, folder = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    if kind == "kube":
        lock: object = KubeLease(Path(where).read_text(encoding="utf-8"), me(folder))
    else:
        from gpu_cluster.workloads.validate.slurm import Shell

        lock = SlurmLock(Shell((), dict(os.environ)), me(folder))
    with cluster_lock(lock, apply=True):
        print(f"held {os.getpid()}", flush=True)
        sys.stdin.read()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
