"""The NCCL settings every job states itself (no torch here: the launcher renders them into job
scripts on machines without it)."""

from __future__ import annotations

NCCL_ERROR_HANDLING = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}
"""What ProcessGroupNCCL does when a collective outlives the group's timeout, stated rather than
left to whoever starts the process. torch 2.13.0 (``torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp``
as shipped in the wheel, ``enum ErrorHandlingMode``; pytorch.org/docs/stable/torch_nccl_environment_variables,
read 2026-12-01): 0 no handling, 1 abort the communicators and tear the process down, 2 abort only,
3 tear the process down without aborting the communicators, "by default, it is set to 3"; but
torchrun sets 1 in its workers when the variable is unset (``torch/distributed/elastic/agent/server/
local_elastic_agent.py``, torch 2.13.0). We set 3: ``ncclCommAbort`` can itself hang on a node whose
GPU hung (the header's own note on SkipCleanUp), and by the group's timeout our watchdog
(:class:`gpu_cluster.workloads.health.hang.Watchdog`, capped under it) has already written what each rank was
doing. The timeout itself is the one :func:`gpu_cluster.workloads.runtime.device.setup` passes to
``init_process_group``."""
