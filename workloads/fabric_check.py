"""Old path, kept so that scripts and queued jobs naming it still run: now ``python -m workloads.health.fabric``."""

from workloads.health.fabric import main

if __name__ == "__main__":
    raise SystemExit(main())
