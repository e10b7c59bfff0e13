"""Old path, kept so that scripts and queued jobs naming it still run: now ``python -m gpu_cluster.workloads.health.node_gate``."""

from gpu_cluster.workloads.health.node_gate import main

if __name__ == "__main__":
    raise SystemExit(main())
