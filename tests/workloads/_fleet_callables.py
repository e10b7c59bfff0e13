"""--callable functions for the fleet tests: each logs its calls and copies its input."""

from __future__ import annotations

import os
import time


def _log(event: str, inp: str) -> None:
    path = os.environ.get("GPUC_TEST_CALL_LOG")
    if path:
        with open(path, "a") as log:  # O_APPEND: one whole line per write, any process
            log.write(f"{event} {os.getpid()} {time.time():.3f} {inp}\n")


def sleepy(inp: str, out: str) -> None:
    """Sleeps the seconds written in the input, then writes the input reversed."""
    _log("start", inp)
    with open(inp) as f:
        text = f.read()
    seconds = float(text.split()[0])
    hang = os.environ.get("GPUC_TEST_HANG_ON")
    if hang and inp.endswith(hang):
        seconds = 3600.0  # until the test kills this worker
    time.sleep(seconds)
    with open(out, "w") as f:
        f.write(text[::-1])
    _log("end", inp)
