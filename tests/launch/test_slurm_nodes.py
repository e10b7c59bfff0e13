"""Reading `scontrol show node -o` (drain/resume run for real in tests/slurm/test_drain.py)."""

from __future__ import annotations

import pytest

from gpu_cluster.workloads.launch.slurm_nodes import NodeInfo, SlurmNodeError, parse_show_node

# Captured from slurm-wlm 22.05.8 on the test cluster, after a drain.
DRAINED = (
    "NodeName=n2 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.41 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 NodeHostName=n2 "
    "Port=48791 Version=22.05.8 OS=Linux 6.18.44-fc-v782 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=1000 "
    "AllocMem=0 FreeMem=22942 Sockets=2 Boards=1 State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 "
    "Owner=N/A MCS_label=N/A Partitions=test  BootTime=2026-11-29T22:12:57 "
    "SlurmdStartTime=2026-11-29T22:24:23 LastBusyTime=2026-11-29T22:24:24 CfgTRES=cpu=2,mem=1000M,billing=2 "
    "AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 "
    "ExtSensorsTemp=n/s Reason=busbw=12.3 GB/s < floor=40 [root@2026-11-29T22:24:24]"
)


def test_drained_node_with_reason_holding_blanks_and_equals() -> None:
    info = parse_show_node(DRAINED)
    assert info == NodeInfo(
        name="n2", state="IDLE+DRAIN", addr="127.0.0.1", reason="busbw=12.3 GB/s < floor=40 [root@2026-11-29T22:24:24]"
    )
    assert info.drained and info.draining_or_drained and info.base_state == "IDLE"


def test_draining_node_is_not_yet_drained() -> None:
    info = parse_show_node(DRAINED.replace("State=IDLE+DRAIN", "State=ALLOCATED+DRAIN"))
    assert info.draining_or_drained and not info.drained


def test_idle_node_without_reason() -> None:
    line = DRAINED.replace("State=IDLE+DRAIN", "State=IDLE").split(" Reason=")[0]
    info = parse_show_node(line)
    assert (info.state, info.reason, info.drained) == ("IDLE", "", False)


def test_unreadable_output_is_an_error() -> None:
    with pytest.raises(SlurmNodeError, match="cannot read"):
        parse_show_node("Node n9 not found")


@pytest.mark.parametrize(
    ("state", "base", "drained"),
    [
        # the backfill scheduler adds PLANNED to an idle node it has planned a pending job onto
        # (Slurm 22.05 sinfo(1), NODE STATE CODES): still drained, still idle
        ("IDLE+DRAIN+PLANNED", "IDLE", True),
        ("IDLE+PLANNED+DRAIN", "IDLE", True),
        ("IDLE+PLANNED", "IDLE", False),
        # "*": the node does not respond right now; the base state is what it was
        ("DOWN*+DRAIN", "DOWN", True),
        ("MIXED+DRAIN+MAINTENANCE", "MIXED", False),
    ],
)
def test_flags_are_read_whatever_else_slurm_adds(state: str, base: str, drained: bool) -> None:
    info = parse_show_node(DRAINED.replace("State=IDLE+DRAIN", f"State={state}"))
    assert info.base_state == base
    assert ("DRAIN" in info.flags) == ("DRAIN" in state)
    assert info.drained is drained
    assert info.base_state not in info.flags
