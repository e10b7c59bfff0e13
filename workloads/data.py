"""Old path, kept so that scripts and queued jobs naming it still run: now ``python -m gpu_cluster.workloads.train.data``."""

from gpu_cluster.workloads.train.data import main

if __name__ == "__main__":
    raise SystemExit(main())
