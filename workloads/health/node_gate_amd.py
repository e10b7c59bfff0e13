"""The node gate on AMD Instinct GPUs (MI300X), through ``amdsmi``: the same checks in the
same shape as the NVML path where AMD SMI has them.

Written against the AMD SMI Python API reference (rocm.docs.amd.com/projects/amdsmi,
amdsmi-py-api): amdsmi_get_processor_handles, amdsmi_get_gpu_asic_info (``market_name``),
amdsmi_get_gpu_total_ecc_count (``correctable_count``, ``uncorrectable_count``,
``deferred_count``), amdsmi_get_pcie_info (``pcie_static.max_pcie_width``/``max_pcie_speed``,
``pcie_metric.pcie_width``/``pcie_speed`` in MT/s), amdsmi_get_gpu_metrics_info
(``throttle_status``), amdsmi_topo_get_link_type (``type`` against AmdSmiIoLinkType.XGMI) and
amdsmi_get_gpu_driver_info. amdsmi cannot be installed on the machines this was written on
(it needs the amdgpu driver): it is exercised only through a fake in the tests, and field
names may differ between ROCm releases; a field that is missing is reported as not run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from gpu_cluster.workloads.health.probes import FAIL, INFO, PASS, WARN, Check, judge_pcie, not_run


def _try(lib: Any, fn: str, *args: Any) -> tuple[Any, str | None]:
    f = getattr(lib, fn, None)
    if f is None:
        return None, f"{fn} is not in this amdsmi"
    try:
        return f(*args), None
    except Exception as exc:  # noqa: BLE001 - AmdSmiLibraryException and its kin
        return None, f"{fn}: {exc}"


def _handles(lib: Any) -> tuple[list[Any], str | None]:
    hs, why = _try(lib, "amdsmi_get_processor_handles")
    return list(hs or []), why


def node_checks(lib: Any, count: int | None, matches: Callable[[str], bool] | None, model: str) -> list[Check]:
    hs, why = _handles(lib)
    if why:
        return [not_run("gpu.count", "node", why)]
    out = [
        Check(
            name="gpu.count",
            scope="node",
            status=INFO if count is None else PASS if len(hs) == count else FAIL,
            value=len(hs),
            detail=f"{len(hs)} GPUs" + (f", the catalog says {count}" if count else ""),
        )
    ]
    names = []
    for h in hs:
        info, why = _try(lib, "amdsmi_get_gpu_asic_info", h)
        names.append(str(info.get("market_name", "?")) if isinstance(info, dict) else f"? ({why})")
    odd = [f"gpu{i} {n!r}" for i, n in enumerate(names) if matches is not None and not matches(n)]
    out.append(
        Check(
            name="gpu.model",
            scope="node",
            status=INFO if matches is None else FAIL if odd else PASS,
            value=sorted(set(names)),
            detail=f"not {model}: {', '.join(odd)}" if odd else model or "no type",
        )
    )
    drv, why = _try(lib, "amdsmi_get_gpu_driver_info", hs[0]) if hs else (None, "no GPU")
    out.append(
        Check(
            name="versions",
            scope="node",
            status=INFO,
            value={"driver": drv.get("driver_version") if isinstance(drv, dict) else None},
            detail=why or "",
        )
    )
    out.append(not_run("xid.kernel", "node", "XIDs are NVIDIA's; AMD reports RAS errors through ECC counts"))
    return out


def gpu_checks(lib: Any, index: int) -> list[Check]:
    scope = f"gpu{index}"
    hs, why = _handles(lib)
    if why or index >= len(hs):
        return [not_run("ecc.aggregate", scope, why or f"no GPU {index}")]
    h = hs[index]
    out: list[Check] = []
    ecc, why = _try(lib, "amdsmi_get_gpu_total_ecc_count", h)
    if not isinstance(ecc, dict):
        out.append(not_run("ecc.aggregate", scope, why or "no ECC counts"))
    else:
        unc = int(ecc.get("uncorrectable_count", 0))
        deferred = int(ecc.get("deferred_count", 0))
        out.append(
            Check(
                name="ecc.aggregate",
                scope=scope,
                status=FAIL if unc or deferred else PASS,
                value={"uncorrectable": unc, "deferred": deferred, "correctable": int(ecc.get("correctable_count", 0))},
                detail=f"{unc} uncorrectable, {deferred} deferred ECC errors",
            )
        )
    out.append(_xgmi(lib, hs, index, scope))
    return out


def _xgmi(lib: Any, hs: list[Any], index: int, scope: str) -> Check:
    """Every other GPU of an MI300X platform is one xGMI hop away; one that is not, is a link down."""
    xgmi = getattr(getattr(lib, "AmdSmiIoLinkType", None), "XGMI", None)
    if xgmi is None or len(hs) < 2:
        return not_run("xgmi.links", scope, "AmdSmiIoLinkType.XGMI not in this amdsmi" if xgmi is None else "one GPU")
    up, down = 0, []
    for j, other in enumerate(hs):
        if j == index:
            continue
        link, why = _try(lib, "amdsmi_topo_get_link_type", hs[index], other)
        if not isinstance(link, dict):
            return not_run("xgmi.links", scope, why or "no link type")
        if link.get("type") == xgmi and int(link.get("hops", 1)) == 1:
            up += 1
        else:
            down.append(j)
    return Check(
        name="xgmi.links",
        scope=scope,
        status=FAIL if down else PASS,
        value={"up": up, "not_xgmi": down},
        detail=f"no direct xGMI link to GPUs {down}" if down else f"{up} xGMI peers",
    )


class AmdWatch:
    """Samples throttle status and the PCIe link during the GEMM (amdsmi has no XID events)."""

    def __init__(self, lib: Any, index: int, sample_s: float) -> None:
        self.lib, self.index, self.sample_s, self.scope = lib, index, sample_s, f"gpu{index}"
        hs, _ = _handles(lib)
        self.handle = hs[index] if index < len(hs) else None
        self.samples = self.throttled = 0
        self.width = self.speed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"gate-amd-{index}")

    def start(self) -> None:
        self._thread.start()

    def _sample(self) -> None:
        m, _ = _try(self.lib, "amdsmi_get_gpu_metrics_info", self.handle)
        if isinstance(m, dict) and isinstance(m.get("throttle_status"), int):
            self.samples += 1
            self.throttled += 1 if m["throttle_status"] else 0
        p, _ = _try(self.lib, "amdsmi_get_pcie_info", self.handle)
        if isinstance(p, dict):
            metric = p.get("pcie_metric", {})
            self.width = max(self.width, int(metric.get("pcie_width", 0)))
            self.speed = max(self.speed, int(metric.get("pcie_speed", 0)))

    def _run(self) -> None:
        while self.handle is not None:
            self._sample()
            if self._stop.wait(self.sample_s):
                return

    def stop(self) -> list[Check]:
        self._stop.set()
        self._thread.join(timeout=self.sample_s * 10 + 5)
        out = [not_run("xid.run", self.scope, "amdsmi has no XID events")]
        if self.samples == 0:
            out.append(not_run("clocks.throttle", self.scope, "gpu_metrics throttle_status not readable"))
        else:
            out.append(
                Check(
                    name="clocks.throttle",
                    scope=self.scope,
                    status=WARN if self.throttled else PASS,
                    value={"throttled_samples": self.throttled, "samples": self.samples},
                    detail=f"{self.throttled} of {self.samples} samples with throttle_status set",
                )
            )
        p, why = _try(self.lib, "amdsmi_get_pcie_info", self.handle)
        static = p.get("pcie_static", {}) if isinstance(p, dict) else {}
        if not static or not self.width:
            out.append(not_run("pcie.link", self.scope, why or "PCIe info not readable"))
        else:
            # MT/s per PCIe generation: 2.5, 5, 8, 16, 32 GT/s for gen 1..5.
            gen = {2500: 1, 5000: 2, 8000: 3, 16000: 4, 32000: 5, 64000: 6}
            out.append(
                judge_pcie(
                    gen.get(self.speed, 0),
                    gen.get(int(static.get("max_pcie_speed", 0)), 0),
                    self.width,
                    int(static.get("max_pcie_width", 0)),
                    self.scope,
                )
            )
        return out
