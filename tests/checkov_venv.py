"""The Checkov the policy tests run: ``GPUC_CHECKOV``, or the virtualenv of scripts/checkov-venv.sh."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def checkov_exe() -> Path:
    """The ``checkov`` executable; the calling test is skipped when its virtualenv cannot be made."""
    exe = os.environ.get("GPUC_CHECKOV")
    if exe:
        return Path(exe)
    made = subprocess.run(
        ["bash", str(ROOT / "scripts" / "checkov-venv.sh")], capture_output=True, text=True, cwd=ROOT, timeout=900
    )
    if made.returncode != 0:
        pytest.skip(
            f"the Checkov virtualenv could not be created (scripts/checkov-venv.sh exit {made.returncode}): "
            f"{made.stderr.strip().splitlines()[-1:] or ''}"
        )
    return ROOT / made.stdout.strip().splitlines()[-1]
