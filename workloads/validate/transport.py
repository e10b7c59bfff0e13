"""Which network transport NCCL/RCCL actually used, read from its debug log.

RCCL logs under NCCL's own "NCCL INFO" prefix with NCCL's transport lines, so one reader serves
both; RCCL's extra lines (its banner, "NET/Plugin: ...") name no network.

With ``NCCL_DEBUG=INFO`` NCCL names the network plugin it loaded ("Using network X") and, per
channel, the path a peer connection takes ("via NET/X/..." across nodes, "via P2P/..." or
"via SHM" inside one). A cluster whose fabric plugin failed to load still works, over TCP
sockets, many times slower: that is the fallback this module exists to catch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

_USING_NETWORK = re.compile(r"NCCL INFO Using network (\S+(?: \S+)?)")
_VIA_NET = re.compile(r"via NET/([A-Za-z0-9_-]+)")
# Only "NET/X : Using ..." says X is in use; "NET/IB : No device found" says the opposite.
# "NET/Plugin: Using internal network plugin." (RCCL, rccl-tests issue 163) names the loader,
# not a network: the internal transports then log their own NET/IB or NET/Socket line.
_NET_INIT = re.compile(r"NCCL INFO NET/(?!Plugin\b)([A-Za-z0-9_-]+)\s*:\s*Using\b")

# One channel over the network, as NCCL logs it when it sets the channel up: "via NET/<network>/
# <device>[(<proxy rank>)][/GDRDMA][(PCI)][/Shared]", "/GDRDMA" exactly when the NIC reads and writes
# GPU memory directly (req.useGdr; NVIDIA/nccl src/transport/net.cc sendSetup and recvSetup, at
# b647562). RCCL keeps the same format and appends " comm %p nRanks %02d" (ROCm/rccl src/transport/
# net.cc recvSetup, at 5ae6000).
_NET_CHANNEL = re.compile(r"via NET/[A-Za-z0-9_-]+(?: [A-Za-z0-9_-]+)?/\d+(?:\(\d+\))?(/GDRDMA)?")

# Names one plugin goes by in different log lines and versions.
ALIASES = {
    "libfabric": "libfabric",
    "aws libfabric": "libfabric",
    "ofi": "libfabric",
    # "via NET/AWS Libfabric/0/GDRDMA" (plugins <= 1.11.0): the channel regex stops at the space.
    "aws": "libfabric",
    "ib": "ib",
    "gib": "gib",
    "fastrak": "fastrak",
    "gpudirecttcpx": "gpudirecttcpx",
    "socket": "socket",
}


def _canon(name: str) -> str:
    key = name.strip().lower()
    if key.startswith("ibext"):  # HPC-X's SHARP plugin: "Using network IBext_v8" is InfiniBand
        return "ib"
    return ALIASES.get(key, key)


@dataclass(slots=True)
class TransportSeen:
    networks: set[str] = field(default_factory=set)
    """Canonical names of the networks NCCL reported using, across all logs."""
    inter_node_paths: set[str] = field(default_factory=set)
    """Canonical names after 'via NET/' in channel set-up lines."""
    net_channels: int = 0
    """Channel set-up lines over the network (each rank logs its own send and receive sides)."""
    gdr_channels: int = 0
    """Of those, the ones marked /GDRDMA (GPUDirect RDMA)."""
    files: int = 0

    @property
    def any(self) -> bool:
        return bool(self.networks or self.inter_node_paths)

    def used(self) -> set[str]:
        return self.networks | self.inter_node_paths


def scan(lines: Iterable[str], seen: TransportSeen | None = None) -> TransportSeen:
    seen = seen or TransportSeen()
    for line in lines:
        if "NCCL INFO" not in line and "via NET/" not in line:
            continue
        for m in _USING_NETWORK.finditer(line):
            seen.networks.add(_canon(m.group(1)))
        for m in _VIA_NET.finditer(line):
            seen.inter_node_paths.add(_canon(m.group(1)))
        for m in _NET_CHANNEL.finditer(line):
            seen.net_channels += 1
            seen.gdr_channels += m.group(1) is not None
        for m in _NET_INIT.finditer(line):
            seen.networks.add(_canon(m.group(1)))
    return seen


def scan_files(paths: Iterable[Path]) -> TransportSeen:
    seen = TransportSeen()
    for p in paths:
        try:
            with open(p, encoding="utf-8", errors="replace") as fh:
                scan(fh, seen)
            seen.files += 1
        except OSError:
            continue
    return seen


def expected_name(expected_transport: str) -> str:
    """The catalog writes 'NET/Libfabric'; compare on the canonical plugin name."""
    return _canon(expected_transport.split("/", 1)[-1])


def judge(expected_transport: str, seen: TransportSeen) -> tuple[bool | None, str]:
    """(ok, message). ok is None when the logs say nothing (no NCCL run, or debug output off)."""
    want = expected_name(expected_transport)
    if not seen.any:
        return None, "no NCCL transport lines found (NCCL_DEBUG=INFO output missing)"
    used = seen.used()
    if want in used and "socket" not in seen.inter_node_paths:
        return True, f"NCCL used {want}"
    if "socket" in used and want not in used:
        return False, f"NCCL fell back to TCP sockets; expected {expected_transport} (the fabric plugin did not load)"
    return False, f"NCCL used {', '.join(sorted(used))}; expected {expected_transport}"


def judge_gdr(seen: TransportSeen) -> tuple[bool | None, str]:
    """(ok, message) on GPUDirect RDMA across the network channels the logs set up. ok is None with
    no network channel in the logs; False when some or all went through host memory instead."""
    n, gdr = seen.net_channels, seen.gdr_channels
    if n == 0:
        return None, "no network channel set-up lines found (NCCL_DEBUG=INFO output missing)"
    if gdr == n:
        return True, f"GPUDirect RDMA on all {n} network channels"
    return False, (
        f"GPUDirect RDMA on {gdr} of {n} network channels: the rest stage every byte through host memory "
        "(the NIC cannot reach GPU memory: on NVIDIA the peer-memory module or DMA-BUF, on AMD the amdgpu "
        "driver's peer-memory client or RCCL's DMA-BUF path; NCCL_NET_GDR_LEVEL can also forbid it)"
    )
