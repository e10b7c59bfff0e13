"""Old path, kept so that scripts and queued jobs naming it still run: now ``python -m gpu_cluster.workloads.parallel``."""

from gpu_cluster.workloads.parallel.run import main

if __name__ == "__main__":
    from gpu_cluster.workloads.runtime.device import exit_process

    exit_process(main())
