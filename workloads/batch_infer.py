"""Old path, kept so that scripts and queued jobs naming it still run: now ``python -m
gpu_cluster.workloads.tasks.infer``, and the GPT-scoring callable ``gpu_cluster.workloads.tasks.gpt_scores:run``
(``--callable gpu_cluster.workloads.batch_infer:run`` still resolves to it)."""

from gpu_cluster.workloads.tasks.gpt_scores import run
from gpu_cluster.workloads.tasks.infer import main

__all__ = ["main", "run"]

if __name__ == "__main__":
    from gpu_cluster.workloads.runtime.device import exit_process

    exit_process(main())
