"""Old path, kept so that scripts and queued jobs naming it still run: now ``python -m workloads.tasks``."""

from workloads.tasks.shard import main

if __name__ == "__main__":
    from workloads.runtime.device import exit_process

    exit_process(main())
