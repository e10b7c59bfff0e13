"""``validate rehearse``: the parts of the rehearsal (:mod:`gpu_cluster.workloads.validate.rehearse` is the command)."""
