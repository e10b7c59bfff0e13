"""Is this node fit to join a job? The checks that run on one node before and during its
collectives, so a sick node is named before it slows a whole job down.

* :mod:`~workloads.health.node_gate` (``python -m workloads.health.node_gate``): NVML's health
  counters, DCGM's diagnostic and a sustained GEMM, with :mod:`~workloads.health.probes` (the
  NVML/DCGM/kernel-log reads and their judgement) and :mod:`~workloads.health.node_gate_amd`
  (the same checks through amdsmi on MI300X);
* :mod:`~workloads.health.gpu` (``python -m workloads.health.gpu``): per-GPU matmul rate and
  memory bandwidth against the catalog;
* :mod:`~workloads.health.fabric` (``python -m workloads.health.fabric``): before the first
  collective, is the fabric (EFA, GPU NICs, the NCCL net plugin) where NCCL will look for it;
* :mod:`~workloads.health.hang`: the watchdog that names a stuck phase and the ranks that never came.

May import :mod:`workloads.runtime` and the catalog (``components.catalog``); nothing above it.
"""
