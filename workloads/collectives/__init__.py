"""The collectives benchmark: nccl-tests' definitions (ops, buffer layouts, bus-bandwidth
factors, timing, table) in plain torch, so one run reads like a published nccl-tests log.

* :mod:`~gpu_cluster.workloads.collectives.ops`: one entry per collective, what nccl-tests' ``testColl`` holds;
* :mod:`~gpu_cluster.workloads.collectives.table`: the rows, columns and summary as nccl-tests prints them;
* :mod:`~gpu_cluster.workloads.collectives.measure`: one row measured (warm-up, host timer, exact check);
* :mod:`~gpu_cluster.workloads.collectives.bench`: the sweep and its flags (``python -m gpu_cluster.workloads.collectives``).

May import :mod:`gpu_cluster.workloads.runtime` and the hang watchdog of :mod:`gpu_cluster.workloads.health`; never
``launch`` or ``validate``, which sit above it.
"""
