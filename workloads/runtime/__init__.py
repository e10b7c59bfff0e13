"""What every job runs on, whichever job it is: the device and process group it binds
(:mod:`~gpu_cluster.workloads.runtime.device`), the node it is on and the test-only faults that make that
node slow or fail (:mod:`~gpu_cluster.workloads.runtime.node`), its flags checked all at once
(:mod:`~gpu_cluster.workloads.runtime.flags`), message sizes as nccl-tests writes them
(:mod:`~gpu_cluster.workloads.runtime.sizes`), files published atomically on shared storage
(:mod:`~gpu_cluster.workloads.runtime.atomic`), and the NCCL settings every job states (:mod:`~gpu_cluster.workloads.runtime.nccl_env`).

The bottom layer of ``workloads``: it imports torch and the shared problem type of
``gpu_cluster.components.problems``, and nothing else of this project.
"""
