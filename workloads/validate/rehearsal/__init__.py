"""``validate rehearse``: the parts of the rehearsal (:mod:`workloads.validate.rehearse` is the command)."""
