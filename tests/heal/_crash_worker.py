"""Run heal on the rehearsal's file-backed cluster and die hard (``os._exit``, as a SIGKILL
leaves things: no finally, no flush) after the N-th journal line, or right after the cloud call
returns and before its journal line (``cloud``), or right after a check ends and its node is
drained again with the incident's mark, before the line that says what the check found
(``check``). Used by test_crash_rerun.py.

    python -m tests.heal._crash_worker RUN_DIR [N | cloud | check | none] [FAULTS_JSON]

FAULTS_JSON: the local cluster's faults (default ``{"local-3": ["slow"]}``); ``{}`` makes the
report's finding a fluke that the second look clears.
"""

from __future__ import annotations

import json
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
        faults = json.loads(sys.argv[3]) if len(sys.argv) > 3 else None
        e, _world = engine(run_dir, j, faults=faults)
        if when == "check":
            real_close = local.LocalScheduler.close_check

            def close_then_die(self: local.LocalScheduler, *a: object, **k: object) -> None:
                real_close(self, *a, **k)  # type: ignore[arg-type]
                os._exit(9)

            local.LocalScheduler.close_check = close_then_die  # type: ignore[method-assign]
        if when == "cloud":
            real = local.LocalCloud.replace

            def replace_then_die(self: local.LocalCloud, *a: object, **k: object) -> object:
                real(self, *a, **k)  # type: ignore[arg-type]
                os._exit(9)

            local.LocalCloud.replace = replace_then_die  # type: ignore[assignment,method-assign]
        return e.run(read_report(run_dir / "report.json")).code


if __name__ == "__main__":
    raise SystemExit(main())
