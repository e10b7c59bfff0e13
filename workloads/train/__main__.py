"""``python -m gpu_cluster.workloads.train``: data-parallel training (see :mod:`gpu_cluster.workloads.train.ddp`)."""

from gpu_cluster.workloads.runtime.device import exit_process
from gpu_cluster.workloads.train.ddp import main

exit_process(main())
