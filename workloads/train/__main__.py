"""``python -m workloads.train``: data-parallel training (see :mod:`workloads.train.ddp`)."""

from workloads.runtime.device import exit_process
from workloads.train.ddp import main

exit_process(main())
