"""A stand-in for ``pynvml`` with the functions, constants and error type the node gate uses,
each GPU's state set by the test. Error codes are NVML's (nvml.h): NOT_SUPPORTED 3,
INVALID_ARGUMENT 2, TIMEOUT 10."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


class NVMLError(Exception):
    def __init__(self, value: int, text: str = "") -> None:
        super().__init__(text or f"NVML error {value}")
        self.value = value


NOT_SUPPORTED, INVALID_ARGUMENT, TIMEOUT = 3, 2, 10


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    ecc_volatile: int = 0
    ecc_aggregate: int = 0
    remapped: tuple[int, int, int, int] | None = (0, 0, 0, 0)
    """(correctable, uncorrectable, pending, failed); None: not supported (pre-Ampere)."""
    retired_pending: int = 0
    nvlink: list[int] = field(default_factory=lambda: [1] * 18)
    nvlink_errors: dict[tuple[int, int], int] = field(default_factory=dict)
    reasons: int = 0x4  # SW power cap: what a healthy GPU shows at its power limit
    pcie: tuple[int, int, int, int] = (5, 5, 16, 16)
    """(current gen, max gen, current width, max width)."""
    xids: list[int] = field(default_factory=list)
    vbios: str = "96.00.99.00.01"


@dataclass
class _Event:
    eventType: int
    eventData: int


class FakeNvml:
    NVMLError = NVMLError
    NVML_VOLATILE_ECC = 0
    NVML_AGGREGATE_ECC = 1
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
    NVML_NVLINK_MAX_LINKS = 18

    def __init__(self, gpus: list[FakeGpu], driver: str = "550.90.07", cuda: int = 12040) -> None:
        self.gpus, self.driver, self.cuda = gpus, driver, cuda
        self.inited = False

    def nvmlInit(self) -> None:
        self.inited = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeGpu:
        if i >= len(self.gpus):
            raise NVMLError(INVALID_ARGUMENT, "Invalid Argument")
        return self.gpus[i]

    def nvmlDeviceGetName(self, h: FakeGpu) -> str:
        return h.name

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda

    def nvmlDeviceGetVbiosVersion(self, h: FakeGpu) -> str:
        return h.vbios

    def nvmlDeviceGetTotalEccErrors(self, h: FakeGpu, err: int, counter: int) -> int:
        assert err == self.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        return h.ecc_volatile if counter == self.NVML_VOLATILE_ECC else h.ecc_aggregate

    def nvmlDeviceGetRemappedRows(self, h: FakeGpu) -> tuple[int, int, int, int]:
        if h.remapped is None:
            raise NVMLError(NOT_SUPPORTED, "Not Supported")
        return h.remapped

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: FakeGpu) -> int:
        return h.retired_pending

    def nvmlDeviceGetRetiredPages(self, h: FakeGpu, cause: int) -> list[int]:
        return [0x1000] if h.retired_pending else []

    def nvmlDeviceGetNvLinkState(self, h: FakeGpu, link: int) -> int:
        if link >= len(h.nvlink):
            raise NVMLError(INVALID_ARGUMENT, "Invalid Argument")
        return h.nvlink[link]

    def nvmlDeviceGetNvLinkErrorCounter(self, h: FakeGpu, link: int, counter: int) -> int:
        return h.nvlink_errors.get((link, counter), 0)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeGpu) -> int:
        return h.reasons

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: FakeGpu) -> int:
        return h.pcie[0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: FakeGpu) -> int:
        return h.pcie[1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: FakeGpu) -> int:
        return h.pcie[2]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: FakeGpu) -> int:
        return h.pcie[3]

    def nvmlDeviceGetSupportedEventTypes(self, h: FakeGpu) -> int:
        return 0x8 | 0x2

    def nvmlEventSetCreate(self) -> list[FakeGpu]:
        return []

    def nvmlDeviceRegisterEvents(self, h: FakeGpu, types: int, es: list[FakeGpu]) -> None:
        es.append(h)

    def nvmlEventSetWait(self, es: list[FakeGpu], timeout_ms: int) -> Any:
        for h in es:
            if h.xids:
                return _Event(eventType=0x8, eventData=h.xids.pop(0))
        time.sleep(timeout_ms / 1000.0)
        raise NVMLError(TIMEOUT, "Timeout")

    def nvmlEventSetFree(self, es: list[FakeGpu]) -> None:
        es.clear()
