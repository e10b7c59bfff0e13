"""The data-parallel trainer behind ``python -m workloads.train``, split by job.

* :mod:`workloads.train.plugins` resolves ``--model`` / ``--dataset`` / ``--loss`` specs
  (``MODULE:FACTORY``) into the user's objects, with the bundled GPT and token shards as defaults;
* :mod:`workloads.train.config` parses and checks the flags;
* :mod:`workloads.train.checkpoint` writes DCP checkpoints atomically and loads them, exactly at
  the same world size and resharded at another;
* :mod:`workloads.train.loop` runs the steps and measures them.
"""
