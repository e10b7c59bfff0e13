"""The liveness mutation suite's catch rates, printed at the end of any run that ran it (issue 44:
the suite reports what it measures in ``make test``, whatever the pytest flags)."""

from __future__ import annotations

import sys
from typing import Any


def pytest_terminal_summary(terminalreporter: Any) -> None:
    suite = sys.modules.get("tests.components.test_liveness_mutations")
    if suite is None:
        return
    lines = suite.catch_rates()
    if lines:
        terminalreporter.write_line("liveness mutations: " + "; ".join(lines))
