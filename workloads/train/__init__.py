"""The data-parallel trainer behind ``python -m gpu_cluster.workloads.train``, split by job.

* :mod:`gpu_cluster.workloads.train.plugins` resolves ``--model`` / ``--dataset`` / ``--loss`` specs
  (``MODULE:FACTORY``) into the user's objects, with the bundled GPT and token shards as defaults;
* :mod:`gpu_cluster.workloads.train.config` parses and checks the flags;
* :mod:`gpu_cluster.workloads.train.checkpoint` writes DCP checkpoints atomically and loads them, exactly at
  the same world size and resharded at another;
* :mod:`gpu_cluster.workloads.train.loop` runs the steps and measures them.
"""
