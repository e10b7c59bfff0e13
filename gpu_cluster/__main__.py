"""``python -m gpu_cluster``: the same as the ``gpu-cluster`` command."""

from gpu_cluster.cli import main

raise SystemExit(main())
