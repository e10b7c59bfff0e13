"""A --callable for the shard_tasks crash test: records every call, writes the input reversed."""

from __future__ import annotations

import os


def run(inp: str, out: str) -> None:
    with open(os.environ["GPUC_TEST_CALL_LOG"], "a") as log:  # O_APPEND: one line per call, any rank
        log.write(inp + "\n")
    with open(inp, "rb") as src, open(out, "wb") as dst:
        dst.write(src.read()[::-1])
