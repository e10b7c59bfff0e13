"""Old path, kept so that scripts and queued jobs naming it still run: now ``python -m
workloads.tasks.infer``, and the GPT-scoring callable ``workloads.tasks.gpt_scores:run``
(``--callable workloads.batch_infer:run`` still resolves to it)."""

from workloads.tasks.gpt_scores import run
from workloads.tasks.infer import main

__all__ = ["main", "run"]

if __name__ == "__main__":
    from workloads.runtime.device import exit_process

    exit_process(main())
