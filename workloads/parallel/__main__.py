"""``python -m workloads.parallel``: model-parallel training (see :mod:`workloads.parallel.run`)."""

from workloads.parallel.run import main
from workloads.runtime.device import exit_process

exit_process(main())
