"""Model parallelism for the shared GPT, torchtitan's way: build on the meta device, apply the
parallelism (FSDP2, tensor parallel, both on a 2-D mesh, or a pipeline stage), then allocate
and initialise only this rank's shards, so no rank ever holds the whole model.

* :mod:`gpu_cluster.workloads.parallel.materialise`: the meta build, the index-addressed initialisation
  (every element's value depends only on the seed, the parameter's name and the element's
  position, so any shard of any layout starts from exactly the one-process model's values) and
  the per-rank accounting of resident parameter, gradient and optimizer-state bytes.
* :mod:`gpu_cluster.workloads.parallel.plans`: the device meshes and the parallelisms themselves, for the
  GPT and, declared or derived (:class:`~gpu_cluster.workloads.parallel.plans.ShardingPlan`), for a user's model.
* :mod:`gpu_cluster.workloads.parallel.checkpoint`: DCP checkpoints of any split layout, published
  atomically, resumable at another layout.
"""
