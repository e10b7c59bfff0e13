"""Is this node fit to join a job? The checks that run on one node before and during its
collectives, so a sick node is named before it slows a whole job down.

* :mod:`~gpu_cluster.workloads.health.node_gate` (``python -m gpu_cluster.workloads.health.node_gate``): NVML's health
  counters, DCGM's diagnostic and a sustained GEMM, with :mod:`~gpu_cluster.workloads.health.probes` (the
  NVML/DCGM/kernel-log reads and their judgement) and :mod:`~gpu_cluster.workloads.health.node_gate_amd`
  (the same checks through amdsmi on MI300X);
* :mod:`~gpu_cluster.workloads.health.gpu` (``python -m gpu_cluster.workloads.health.gpu``): per-GPU matmul rate and
  memory bandwidth against the catalog;
* :mod:`~gpu_cluster.workloads.health.fabric` (``python -m gpu_cluster.workloads.health.fabric``): before the first
  collective, is the fabric (EFA, GPU NICs, the NCCL net plugin) where NCCL will look for it;
* :mod:`~gpu_cluster.workloads.health.hang`: the watchdog that names a stuck phase and the ranks that never came.

May import :mod:`gpu_cluster.workloads.runtime` and the catalog (``gpu_cluster.components.catalog``); nothing above it.
"""
