"""Old path, kept so that scripts and queued jobs naming it still run: now ``python -m workloads.train.data``."""

from workloads.train.data import main

if __name__ == "__main__":
    raise SystemExit(main())
