"""The node gate's probes: NVML reads and their judgement, DCGM's JSON, the kernel log's XIDs.

Pure functions over a library object (``pynvml`` in a job, a fake in the tests), so every check
has a failing case that runs without a GPU. NVML names and meanings are from the NVML API
reference (docs.nvidia.com/deploy/nvml-api): nvmlDeviceGetTotalEccErrors,
nvmlDeviceGetRemappedRows (Ampere+; "A reset will be required to actually remap the row"),
nvmlDeviceGetRetiredPagesPendingStatus, nvmlClocksEventReasons, nvmlDeviceGetNvLinkState,
nvmlDeviceGetNvLinkErrorCounter, nvmlDeviceGetCurrPcieLinkGeneration/Width and
nvmlDeviceGetMaxPcieLinkGeneration/Width, nvmlEventSetWait (NVML_ERROR_TIMEOUT when nothing came).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

PASS, WARN, FAIL, INFO, NOT_RUN = "pass", "warn", "fail", "info", "not run"
_RANK = {INFO: 0, PASS: 0, NOT_RUN: 0, WARN: 1, FAIL: 2}

# XIDs that take a node out of service: azurehpc-health-checks customTests/azure_gpu_xid.nhc
# (XID_EC, commit 0078044d), from NVIDIA's XID catalogue (docs.nvidia.com/deploy/xid-errors).
CRITICAL_XIDS = frozenset({48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120})

# nvmlClocksEventReasons bits (NVML API reference; the same values as the deprecated
# nvmlClocksThrottleReasons). SW power cap is what a GPU at its power limit does under a
# sustained GEMM, so it is information; aznhc's check_gpu_clock_throttling likewise lets it,
# GPU idle and none pass and warns on the rest.
THROTTLE_FAIL = {0x8: "HW slowdown", 0x40: "HW thermal slowdown", 0x80: "HW power brake slowdown"}
THROTTLE_WARN = {0x20: "SW thermal slowdown"}
THROTTLE_INFO = {
    0x4: "SW power cap",
    0x1: "GPU idle",
    0x2: "applications clocks",
    0x10: "sync boost",
    0x100: "display clocks",
}
NVLINK_COUNTERS = {0: "replay", 1: "recovery", 2: "crc_flit", 3: "crc_data"}
_NVML_ERROR_NOT_SUPPORTED = 3
_NVML_ERROR_INVALID_ARGUMENT = 2
_NVML_ERROR_TIMEOUT = 10
_XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    name: str
    scope: str
    """``node`` or ``gpu<index>``."""
    status: str
    value: Any = None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def not_run(name: str, scope: str, why: str) -> Check:
    return Check(name=name, scope=scope, status=NOT_RUN, detail=why)


def worst(statuses: Sequence[str]) -> str:
    judged = [s for s in statuses if s in (PASS, WARN, FAIL)]
    return max(judged, key=lambda s: _RANK[s]) if judged else NOT_RUN


def _err_code(exc: BaseException) -> int | None:
    v = getattr(exc, "value", None)
    return v if isinstance(v, int) else None


def _try(nvml: Any, fn: str, *args: Any) -> tuple[Any, str | None]:
    """(result, None) or (None, why) when NVML refuses or the binding lacks ``fn``."""
    f = getattr(nvml, fn, None)
    if f is None:
        return None, f"{fn} is not in this NVML binding"
    try:
        return f(*args), None
    except nvml.NVMLError as exc:
        return None, f"{fn}: {exc}"


def _version(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


# ----------------------------------------------------------------------------- NVML, per node


def nvml_node_checks(nvml: Any, count: int | None, matches: Callable[[str], bool] | None, model: str) -> list[Check]:
    out: list[Check] = []
    n, why = _try(nvml, "nvmlDeviceGetCount")
    if why:
        return [not_run("gpu.count", "node", why)]
    if count is None:
        out.append(Check(name="gpu.count", scope="node", status=INFO, value=n, detail="no instance type"))
    else:
        out.append(
            Check(
                name="gpu.count",
                scope="node",
                status=PASS if n == count else FAIL,
                value=n,
                detail=f"{n} GPUs, the catalog says {count}",
            )
        )
    names = []
    for i in range(n):
        h, why = _try(nvml, "nvmlDeviceGetHandleByIndex", i)
        name, why2 = _try(nvml, "nvmlDeviceGetName", h) if h is not None else (None, why)
        names.append(_version(name) if name is not None else f"? ({why2})")
    odd = [f"gpu{i} {nm!r}" for i, nm in enumerate(names) if matches is not None and not matches(nm)]
    if matches is None:
        out.append(
            Check(name="gpu.model", scope="node", status=INFO, value=sorted(set(names)), detail="no instance type")
        )
    else:
        out.append(
            Check(
                name="gpu.model",
                scope="node",
                status=FAIL if odd else PASS,
                value=sorted(set(names)),
                detail=f"not {model}: {', '.join(odd)}" if odd else f"all {model}",
            )
        )
    drv, why = _try(nvml, "nvmlSystemGetDriverVersion")
    cuda, why_c = _try(nvml, "nvmlSystemGetCudaDriverVersion")
    vers = {
        "driver": _version(drv) if drv is not None else None,
        "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None,
    }
    out.append(
        Check(name="versions", scope="node", status=INFO, value=vers, detail="; ".join(w for w in (why, why_c) if w))
    )
    return out


# ----------------------------------------------------------------------------- NVML, per GPU


def _ecc(nvml: Any, h: Any, scope: str) -> list[Check]:
    """Uncorrectable ECC errors. The volatile counter (since the driver last loaded) fails the GPU
    above 0, as Meta's GCM does (gcm/health_checks/checks/check_nvidia_smi.py
    check_ecc_uncorrected_volatile_total, threshold 0, CRITICAL; facebookresearch/gcm at 1b7bde9). The
    aggregate counter is the GPU's lifetime count: it never goes back to 0, so judging it alone would
    flag a GPU forever after one error long since retired. It is recorded (information) and the
    validation's judge holds it to its value in the previous certificate of the same GPU
    (gpu_cluster.workloads.validate.certificate): an increase is a new error; row remapping (memory.remap)
    says whether the memory still needs attention."""
    out = []
    for label, counter in (("volatile", nvml.NVML_VOLATILE_ECC), ("aggregate", nvml.NVML_AGGREGATE_ECC)):
        v, why = _try(nvml, "nvmlDeviceGetTotalEccErrors", h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, counter)
        name = f"ecc.{label}"
        if why:
            out.append(not_run(name, scope, why))
        else:
            status = (FAIL if v else PASS) if label == "volatile" else INFO
            out.append(
                Check(
                    name=name,
                    scope=scope,
                    status=status,
                    value=v,
                    detail=f"{v} uncorrectable ECC errors ({label}"
                    + (
                        ", since the driver loaded)"
                        if label == "volatile"
                        else ", the GPU's lifetime: judged by its change since the previous certificate)"
                    ),
                )
            )
    return out


def _remap(nvml: Any, h: Any, scope: str) -> Check:
    rows, why = _try(nvml, "nvmlDeviceGetRemappedRows", h)
    if rows is not None:
        corr, unc, pending, failed = rows
        bad = [
            w
            for w, flag in (
                ("a row remap is pending (the GPU needs a reset)", pending),
                ("a row remap has failed", failed),
            )
            if flag
        ]
        return Check(
            name="memory.remap",
            scope=scope,
            status=FAIL if bad else PASS,
            value={"correctable": corr, "uncorrectable": unc, "pending": bool(pending), "failed": bool(failed)},
            detail="; ".join(bad) or f"{corr + unc} rows remapped, none pending",
        )
    # Before Ampere: page retirement instead of row remapping.
    pend, why2 = _try(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", h)
    if pend is None:
        return not_run("memory.remap", scope, f"{why}; {why2}")
    pages, _ = _try(nvml, "nvmlDeviceGetRetiredPages", h, nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    return Check(
        name="memory.remap",
        scope=scope,
        status=FAIL if pend else PASS,
        value={"retired_dbe_pages": len(pages or []), "pending": bool(pend)},
        detail="a page retirement is pending (the GPU needs a reset)" if pend else "no retirement pending",
    )


def _nvlink(nvml: Any, h: Any, scope: str) -> list[Check]:
    up: list[int] = []
    down: list[int] = []
    errors: dict[str, int] = {}
    why_state = ""
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(h, link)
        except nvml.NVMLError as exc:
            # Links past the GPU's own count answer "invalid argument" or "not supported".
            if _err_code(exc) not in (_NVML_ERROR_NOT_SUPPORTED, _NVML_ERROR_INVALID_ARGUMENT):
                why_state = f"nvmlDeviceGetNvLinkState({link}): {exc}"
            continue
        (up if state else down).append(link)
    if not up and not down:
        return [
            not_run("nvlink.links", scope, why_state or "no NVLink on this GPU"),
            not_run("nvlink.errors", scope, "no NVLink on this GPU"),
        ]
    links = Check(
        name="nvlink.links",
        scope=scope,
        status=FAIL if down else PASS,
        value={"up": len(up), "down": down},
        detail=f"links down: {down}" if down else f"{len(up)} links up",
    )
    unread = 0
    for link in up:
        for counter, label in NVLINK_COUNTERS.items():
            v, why = _try(nvml, "nvmlDeviceGetNvLinkErrorCounter", h, link, counter)
            if why:
                unread += 1
            elif v:
                errors[f"link{link}.{label}"] = v
    if unread == len(up) * len(NVLINK_COUNTERS):
        errs = not_run("nvlink.errors", scope, "nvmlDeviceGetNvLinkErrorCounter not answered on any link")
    else:
        errs = Check(
            name="nvlink.errors",
            scope=scope,
            status=WARN if errors else PASS,
            value=errors,
            detail=f"error counters since boot: {errors}" if errors else "no replay, recovery or CRC errors",
        )
    return [links, errs]


def nvml_gpu_checks(nvml: Any, index: int) -> list[Check]:
    scope = f"gpu{index}"
    h, why = _try(nvml, "nvmlDeviceGetHandleByIndex", index)
    if why:
        return [not_run(n, scope, why) for n in ("ecc.volatile", "ecc.aggregate", "memory.remap", "nvlink.links")]
    out = _ecc(nvml, h, scope)
    out.append(_remap(nvml, h, scope))
    out.extend(_nvlink(nvml, h, scope))
    vbios, why = _try(nvml, "nvmlDeviceGetVbiosVersion", h)
    out.append(
        Check(
            name="versions",
            scope=scope,
            status=INFO,
            value={"vbios": _version(vbios) if vbios else None},
            detail=why or "",
        )
    )
    return out


def judge_throttle(seen: int, samples: int, bad_samples: int, scope: str) -> Check:
    if samples == 0:
        return not_run("clocks.throttle", scope, "no clocks event reasons could be read during the GEMM")
    names = [n for bit, n in {**THROTTLE_FAIL, **THROTTLE_WARN, **THROTTLE_INFO}.items() if seen & bit]
    status = FAIL if any(seen & b for b in THROTTLE_FAIL) else WARN if any(seen & b for b in THROTTLE_WARN) else PASS
    return Check(
        name="clocks.throttle",
        scope=scope,
        status=status,
        value={"reasons": names, "mask": seen},
        detail=(
            f"{bad_samples} of {samples} samples throttled: {', '.join(names)}"
            if status != PASS
            else f"{samples} samples; seen: {', '.join(names) or 'none'}"
        ),
    )


def judge_pcie(cur_gen: int, max_gen: int, cur_width: int, max_width: int, scope: str) -> Check:
    value = {"gen": cur_gen, "max_gen": max_gen, "width": cur_width, "max_width": max_width}
    if cur_width < max_width:
        return Check(
            name="pcie.link",
            scope=scope,
            status=FAIL,
            value=value,
            detail=f"PCIe x{cur_width} of x{max_width} under load (a degraded link)",
        )
    if cur_gen < max_gen:
        return Check(
            name="pcie.link",
            scope=scope,
            status=WARN,
            value=value,
            detail=f"PCIe gen {cur_gen} of {max_gen} under load",
        )
    return Check(name="pcie.link", scope=scope, status=PASS, value=value, detail=f"gen {cur_gen} x{cur_width}")


def judge_xids(xids: Sequence[int], name: str, scope: str, where: str) -> Check:
    crit = sorted({x for x in xids if x in CRITICAL_XIDS})
    status = FAIL if crit else WARN if xids else PASS
    return Check(
        name=name,
        scope=scope,
        status=status,
        value=sorted(set(xids)),
        detail=f"XIDs {where}: {sorted(set(xids))}" + (f" (critical: {crit})" if crit else "")
        if xids
        else f"no XID {where}",
    )


class NvmlWatch:
    """A thread that, during the GEMM, waits on an NVML event set for XIDs (the wait doubles as
    the sampling interval) and reads the clocks event reasons and the PCIe link."""

    def __init__(self, nvml: Any, index: int, sample_s: float) -> None:
        self.nvml, self.index, self.sample_s = nvml, index, sample_s
        self.scope = f"gpu{index}"
        self.mask = self.samples = self.bad = 0
        self.gen = self.width = 0
        self.xids: list[int] = []
        self.why_events = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"gate-watch-{index}", daemon=True)
        self.handle, _ = _try(nvml, "nvmlDeviceGetHandleByIndex", index)
        self.events: Any = None
        if self.handle is not None:
            supported, why = _try(nvml, "nvmlDeviceGetSupportedEventTypes", self.handle)
            if supported is not None and supported & _XID_EVENT:
                es, why = _try(nvml, "nvmlEventSetCreate")
                if es is not None and _try(nvml, "nvmlDeviceRegisterEvents", self.handle, _XID_EVENT, es)[1] is None:
                    self.events = es
            self.why_events = why or ("" if self.events is not None else "XID events not supported on this GPU")

    def start(self) -> None:
        self._thread.start()

    def _sample(self) -> None:
        nv, h = self.nvml, self.handle
        reasons, _ = _try(nv, "nvmlDeviceGetCurrentClocksEventReasons", h)
        if reasons is None:
            reasons, _ = _try(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", h)
        if reasons is not None:
            self.samples += 1
            self.mask |= int(reasons)
            if any(int(reasons) & b for b in (*THROTTLE_FAIL, *THROTTLE_WARN)):
                self.bad += 1
        g, _ = _try(nv, "nvmlDeviceGetCurrPcieLinkGeneration", h)
        w, _ = _try(nv, "nvmlDeviceGetCurrPcieLinkWidth", h)
        self.gen, self.width = max(self.gen, g or 0), max(self.width, w or 0)

    def _run(self) -> None:
        if self.handle is None:
            return
        while True:
            self._sample()
            if self.events is not None:
                try:
                    data = self.nvml.nvmlEventSetWait(self.events, int(self.sample_s * 1000))
                    if data.eventType & _XID_EVENT:
                        self.xids.append(int(data.eventData))
                except self.nvml.NVMLError as exc:
                    if _err_code(exc) != _NVML_ERROR_TIMEOUT:
                        self.why_events = f"nvmlEventSetWait: {exc}"
                        self.events = None
            if self._stop.wait(0 if self.events is not None else self.sample_s):
                self._sample()
                return

    def stop(self) -> list[Check]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10 * self.sample_s + 5)
        if self.handle is None:
            return [not_run(n, self.scope, "no NVML handle") for n in ("clocks.throttle", "pcie.link", "xid.run")]
        out = [judge_throttle(self.mask, self.samples, self.bad, self.scope)]
        mg, why = _try(self.nvml, "nvmlDeviceGetMaxPcieLinkGeneration", self.handle)
        mw, why2 = _try(self.nvml, "nvmlDeviceGetMaxPcieLinkWidth", self.handle)
        if mg is None or mw is None or not self.width:
            out.append(not_run("pcie.link", self.scope, why or why2 or "current PCIe link not readable"))
        else:
            out.append(judge_pcie(self.gen, mg, self.width, mw, self.scope))
        if self.events is None and not self.xids:
            out.append(not_run("xid.run", self.scope, self.why_events))
        else:
            out.append(judge_xids(self.xids, "xid.run", self.scope, "during the GEMM"))
            _try(self.nvml, "nvmlEventSetFree", self.events)
        return out


# ----------------------------------------------------------------------------- kernel log, DCGM

_KERNEL_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+),")


def judge_kernel_xids(dmesg: str) -> Check:
    found = [(m.group(1), int(m.group(2))) for m in _KERNEL_XID.finditer(dmesg)]
    chk = judge_xids([x for _, x in found], "xid.kernel", "node", "in the kernel log since boot")
    if found:
        return Check(
            name=chk.name,
            scope=chk.scope,
            status=chk.status,
            value=chk.value,
            detail=chk.detail + f"; on {sorted({pci for pci, _ in found})}",
        )
    return chk


def parse_dcgm(doc: Any, level: int) -> list[Check]:
    """``dcgmi diag -j``: {"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name",
    "results": [{"gpu_ids"|"gpu_id"|"entity_id", "status", "warnings", "info"}]}]}], "version"}}
    (NVIDIA/DCGM nvvs/include/NvvsCommon.h; DCGM 4 names the root "DCGM Diagnostic")."""
    root = (doc.get("DCGM GPU Diagnostic") or doc.get("DCGM Diagnostic")) if isinstance(doc, dict) else None
    if not isinstance(root, dict) or not root.get("test_categories"):
        return [not_run("dcgm.diag", "node", f"dcgmi diag -r {level} gave no test results")]
    out = []
    for cat in root["test_categories"]:
        for test in cat.get("tests", []):
            statuses, bad, notes = [], [], []
            for r in test.get("results", []):
                s = str(r.get("status", "")).lower()
                statuses.append(s)
                gpu = r.get("gpu_ids", r.get("gpu_id", r.get("entity_id", "")))
                for w in r.get("warnings", []) or []:
                    notes.append(str(w.get("warning", w) if isinstance(w, dict) else w)[:200])
                if s in ("fail", "warn", "warning"):
                    bad.append(f"gpu {gpu}: {s}")
            status = (
                FAIL
                if "fail" in statuses
                else WARN
                if {"warn", "warning"} & set(statuses)
                else PASS
                if "pass" in statuses
                else NOT_RUN
            )
            name = "dcgm." + re.sub(r"[^a-z0-9]+", "_", str(test.get("name", "?")).lower()).strip("_")
            detail = "; ".join(bad + notes) or (
                "skipped by DCGM" if status == NOT_RUN else f"{len(statuses)} result(s)"
            )
            out.append(
                Check(
                    name=name,
                    scope="node",
                    status=status,
                    value=f"{cat.get('category')} (level {level})",
                    detail=detail[:500],
                )
            )
    out.append(
        Check(
            name="dcgm.diag",
            scope="node",
            status=worst([c.status for c in out]),
            value=str(root.get("version", "")),
            detail=f"dcgmi diag -r {level}: {len(out)} tests",
        )
    )
    return out
