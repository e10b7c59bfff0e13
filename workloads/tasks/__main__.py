"""``python -m workloads.tasks``: one job over many independent inputs (see :mod:`workloads.tasks.shard`)."""

from workloads.runtime.device import exit_process
from workloads.tasks.shard import main

exit_process(main())
