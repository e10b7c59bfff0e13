"""``python -m gpu_cluster.heal``: the same as ``gpu-cluster heal``."""

from gpu_cluster.heal.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
