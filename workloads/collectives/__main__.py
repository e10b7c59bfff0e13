"""``python -m gpu_cluster.workloads.collectives``: the benchmark's entry (see :mod:`gpu_cluster.workloads.collectives.bench`)."""

from gpu_cluster.workloads.collectives.bench import main
from gpu_cluster.workloads.runtime.device import exit_process

exit_process(main())
