"""``python -m gpu_cluster.workloads.tasks``: one job over many independent inputs (see :mod:`gpu_cluster.workloads.tasks.shard`)."""

from gpu_cluster.workloads.runtime.device import exit_process
from gpu_cluster.workloads.tasks.shard import main

exit_process(main())
