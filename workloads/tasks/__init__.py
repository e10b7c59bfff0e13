"""The task fleet behind ``shard_tasks`` and ``batch_infer``, split by job.

* :mod:`gpu_cluster.workloads.tasks.leases`: items claimed one at a time through a lease file per item on
  the shared file system, renewed while its worker lives and taken over once it expires;
* :mod:`gpu_cluster.workloads.tasks.outputs`: where outputs go (a path, ``s3://`` or ``gs://``) and how
  each is published exactly once and never partially;
* :mod:`gpu_cluster.workloads.tasks.fleet`: the worker loop, static or self-balancing, and its counts.
"""
