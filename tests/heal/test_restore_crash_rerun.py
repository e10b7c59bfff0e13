"""I3's restore is its own journalled intent, and the rerun closes it: heal killed after the
capacity's update landed and before its ``restored`` line (Azure Slurm's scale set, through the
crash worker and stand-in of test_azure_vmss_crash_rerun.py) finds the size right on the rerun,
asks nothing, and writes the ``restored`` line after reading it back, so no restore is left open."""

from __future__ import annotations

from pathlib import Path

from gpu_cluster.heal.journal import JOURNAL, read
from gpu_cluster.heal.states import State
from tests.heal.recorded import Recorded
from tests.heal.test_azure_vmss_crash_rerun import arm, heal, world  # noqa: F401 (fixture)


def test_killed_after_the_restore_landed_the_rerun_closes_its_intent(arm: Recorded, tmp_path: Path) -> None:  # noqa: F811
    vmss, _slurm = world(tmp_path, arm)
    assert heal(tmp_path, arm, "after-patch") == 9
    cut = read(tmp_path / JOURNAL)[0]
    assert cut[-1].event == "restore-intent" and vmss.capacity == 3  # landed, not journalled
    assert heal(tmp_path, arm, "none") == 0
    entries, _ = read(tmp_path / JOURNAL)
    events = [e.event for e in entries]
    assert entries[-1].state is State.HEALTHY and len(arm.made("PATCH")) == 1
    assert events.count("restore-intent") == 1 and events.count("restored") == 1
    closed = entries[events.index("restore-intent") + 1]
    assert closed.event == "restored" and "read back" in closed.detail
