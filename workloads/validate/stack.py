"""The software stack a node ran with, recorded next to its figures (the cluster certificate).

Read on the node (first rank of each node, during the main phase): kernel, GPU driver, CUDA or
ROCm, NCCL/RCCL, torch, the EFA installer's version (first line of
/opt/amazon/efa_installed_packages, "# EFA installer version: X"), the container image digest
(GPUC_IMAGE_DIGEST, set by whoever builds the pod or job), the TCPXO receive-datapath image
(GPUC_RXDM_IMAGE, for the launcher to pass from the sidecar's image; a workload cannot see it
otherwise). Read by the judge from the NCCL debug logs (nccl-<host>-<pid>.log): the network
plugin NCCL loaded ("NET/Plugin: Loaded net plugin Libfabric (v11)") and its own version line
("NET/OFI Initializing aws-ofi-nccl 1.17.1"), and the NCCL version it printed.
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Any

import torch

EFA_INSTALLED = Path("/opt/amazon/efa_installed_packages")
_EFA_LINE = re.compile(r"EFA installer version:\s*(\S+)", re.IGNORECASE)
_PLUGIN = re.compile(r"NET/Plugin: Loaded (?:net|coll) plugin (.+?) \(v(\d+)\)")
_OFI = re.compile(r"NET/OFI Initializing (aws-ofi-nccl \S+)")
_NCCL_VERSION = re.compile(r"NCCL INFO NCCL version (\S+)")
_LOG_HOST = re.compile(r"nccl-(.+)-\d+\.log$")


def _driver() -> str | None:
    path = Path("/proc/driver/nvidia/version")
    try:
        m = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)", path.read_text(encoding="utf-8"))
        return m.group(1) if m else None
    except OSError:
        pass
    try:
        return Path("/sys/module/amdgpu/version").read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def efa_installer(path: Path = EFA_INSTALLED) -> str | None:
    try:
        m = _EFA_LINE.search(path.read_text(encoding="utf-8"))
    except OSError:
        return None
    return m.group(1) if m else None


def collect(gate_versions: dict[str, Any] | None = None) -> dict[str, str | None]:
    """This node's stack; ``gate_versions`` are what NVML/amdsmi answered (driver, CUDA driver)."""
    gv = gate_versions or {}
    nccl = None
    if torch.cuda.is_available():
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))  # type: ignore[no-untyped-call]
        except (RuntimeError, AttributeError):
            nccl = None
    hip = getattr(torch.version, "hip", None)
    return {
        "kernel": platform.release(),
        "driver": gv.get("driver") or _driver(),
        "cuda_driver": gv.get("cuda_driver"),
        "cuda_runtime": torch.version.cuda,
        "rocm": hip,
        "rccl" if hip else "nccl": nccl,
        "torch": torch.__version__,
        "efa_installer": efa_installer(),
        "image_digest": os.environ.get("GPUC_IMAGE_DIGEST") or None,
        "tcpxo_rxdm": os.environ.get("GPUC_RXDM_IMAGE") or None,
    }


def from_nccl_logs(paths: list[Path]) -> dict[str, dict[str, str]]:
    """host -> what NCCL's own log says it loaded: plugin, plugin version, NCCL version."""
    out: dict[str, dict[str, str]] = {}
    for p in paths:
        m = _LOG_HOST.search(p.name)
        host = m.group(1) if m else p.stem
        found = out.setdefault(host, {})
        try:
            text = p.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for rx, key in ((_PLUGIN, "net_plugin"), (_OFI, "net_plugin_version"), (_NCCL_VERSION, "nccl_log")):
            hit = rx.search(text)
            if hit and key not in found:
                found[key] = f"{hit.group(1)} (v{hit.group(2)})" if key == "net_plugin" else hit.group(1)
    return {h: v for h, v in out.items() if v}


def node_stacks(main: dict[str, Any] | None, nccl_logs: list[Path]) -> dict[str, dict[str, Any]]:
    """node -> stack, merging what each node recorded with what its NCCL log says."""
    stacks: dict[str, dict[str, Any]] = {n: dict(s) for n, s in ((main or {}).get("stack") or {}).items()}
    for host, seen in from_nccl_logs(nccl_logs).items():
        node = next((n for n in stacks if n == host or host.startswith(n + ".") or n.startswith(host + ".")), host)
        stacks.setdefault(node, {}).update(seen)
    return stacks
