"""``python -m workloads.collectives``: the benchmark's entry (see :mod:`workloads.collectives.bench`)."""

from workloads.collectives.bench import main
from workloads.runtime.device import exit_process

exit_process(main())
