"""``python -m gpu_cluster.workloads.parallel``: model-parallel training (see :mod:`gpu_cluster.workloads.parallel.run`)."""

from gpu_cluster.workloads.parallel.run import main
from gpu_cluster.workloads.runtime.device import exit_process

exit_process(main())
