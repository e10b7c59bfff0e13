"""``gpu-cluster validate submit`` that dies hard (``os._exit``, as a SIGKILL leaves things) right
after its N-th state change on the Slurm side: ``scontrol create reservation`` or ``scontrol update``
(1: the reservation made, 2: the taken node's mark, 3: its resume). Used by
test_registration_drain.py's kill and rerun test.

    python -m tests.slurm._admit_kill_worker N SUBMIT-ARGS...
"""

from __future__ import annotations

import os
import sys
from typing import Any

from gpu_cluster.workloads.validate import slurm
from gpu_cluster.workloads.validate.__main__ import main

KILLED = 137


def _dying_after(n: int) -> Any:
    real = slurm.Shell.run
    seen = [0]

    def run(self: slurm.Shell, command: str, **kw: Any) -> Any:
        done = real(self, command, **kw)
        if command.startswith(("scontrol create reservation", "scontrol update")):
            seen[0] += 1
            if seen[0] == n:
                print(f"killed after state change {n}: {command[:120]}", flush=True)
                os._exit(KILLED)
        return done

    return run


if __name__ == "__main__":
    slurm.Shell.run = _dying_after(int(sys.argv[1]))  # type: ignore[method-assign]
    sys.exit(main(sys.argv[2:]))
