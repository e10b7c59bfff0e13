"""What every job runs on, whichever job it is: the device and process group it binds
(:mod:`~workloads.runtime.device`), the node it is on and the test-only faults that make that
node slow or fail (:mod:`~workloads.runtime.node`), its flags checked all at once
(:mod:`~workloads.runtime.flags`), message sizes as nccl-tests writes them
(:mod:`~workloads.runtime.sizes`), files published atomically on shared storage
(:mod:`~workloads.runtime.atomic`), and the NCCL settings every job states (:mod:`~workloads.runtime.nccl_env`).

The bottom layer of ``workloads``: it imports torch and the shared problem type of
``components.problems``, and nothing else of this project.
"""
