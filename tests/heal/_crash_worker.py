"""Run heal on the rehearsal's file-backed cluster and die hard (``os._exit``, as a SIGKILL
leaves things: no finally, no flush) after the N-th journal line, or right after the cloud call
returns and before its journal line (``cloud``). Used by test_crash_rerun.py.

    python -m tests.heal._crash_worker RUN_DIR [N | cloud | none]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from gpu_cluster.heal import local
from gpu_cluster.heal.evidence import read_report
from gpu_cluster.heal.journal import Journal
from tests.heal.world import engine


def main() -> int:
    run_dir, when = Path(sys.argv[1]), sys.argv[2]
    lines = [0]

    def echo(_line: str) -> None:
        lines[0] += 1
        if when.isdigit() and lines[0] == int(when):
            os._exit(9)

    with Journal(run_dir, echo=echo) as j:
        e, _world = engine(run_dir, j)
        if when == "cloud":
            real = local.LocalCloud.replace

            def replace_then_die(self: local.LocalCloud, *a: object, **k: object) -> object:
                real(self, *a, **k)  # type: ignore[arg-type]
                os._exit(9)

            local.LocalCloud.replace = replace_then_die  # type: ignore[assignment,method-assign]
        return e.run(read_report(run_dir / "report.json")).code


if __name__ == "__main__":
    raise SystemExit(main())
