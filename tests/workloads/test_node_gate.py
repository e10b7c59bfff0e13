"""The node gate: every check passes on a healthy fake node and fails (or warns) on its fault,
through the same code the job runs on NVML; DCGM and the kernel log through fake runners."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
import torch

from tests.workloads.fake_nvml import FakeGpu, FakeNvml
from gpu_cluster.workloads.health import probes as gp
from gpu_cluster.workloads.health import node_gate
from gpu_cluster.workloads.health.probes import FAIL, INFO, NOT_RUN, PASS, WARN

CPU = [torch.device("cpu")]
FAST = node_gate.GateConfig(instance_type="p5.48xlarge", gemm_seconds=0.05, gemm_n=64, sample_s=0.01)


def _proc(args: Any, rc: int = 0, out: str = "", err: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(args, rc, out, err)


def quiet_runner(*_a: Any, **_k: Any) -> subprocess.CompletedProcess[str]:
    return _proc(["dmesg"], 0, "[    1.0] Linux version 6.8\n")


def gate(
    gpus: list[FakeGpu], cfg: node_gate.GateConfig = FAST, *, dcgm: str | None = None, runner: Any = None
) -> dict[tuple[str, str], gp.Check]:
    nvml = FakeNvml(gpus)
    which = (lambda exe: "/usr/bin/dcgmi") if dcgm is not None else (lambda exe: None)

    def run(args: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        if args[0].endswith("dcgmi"):
            return _proc(args, 0, dcgm or "")
        return (runner or quiet_runner)(args, **kw)

    rep = node_gate.run_gate(cfg, CPU, indices=list(range(len(gpus))), nvml=nvml, which=which, run=run)
    return {(c.name, c.scope): c for c in rep.checks}


def eight(**override: Any) -> list[FakeGpu]:
    gpus = [FakeGpu() for _ in range(8)]
    for k, v in override.items():
        setattr(gpus[3], k, v)
    return gpus


def test_healthy_node_passes_every_nvml_check() -> None:
    checks = gate(eight())
    for name in ("gpu.count", "gpu.model", "xid.kernel"):
        assert checks[(name, "node")].status == PASS, checks[(name, "node")]
    assert checks[("ecc.aggregate", "gpu3")].status == INFO  # the judge holds it to the last certificate
    for name in (
        "ecc.volatile",
        "memory.remap",
        "nvlink.links",
        "nvlink.errors",
        "clocks.throttle",
        "pcie.link",
        "xid.run",
    ):
        assert checks[(name, "gpu3")].status == PASS, checks[(name, "gpu3")]
    assert checks[("versions", "node")].value == {"driver": "550.90.07", "cuda_driver": "12.4"}
    assert checks[("nvlink.links", "gpu0")].value == {"up": 18, "down": []}
    # DCGM absent is "not run", never a pass.
    assert checks[("dcgm.diag", "node")].status == NOT_RUN
    assert "not installed" in checks[("dcgm.diag", "node")].detail


def test_missing_gpu_fails_the_count() -> None:
    checks = gate([FakeGpu() for _ in range(7)])
    assert checks[("gpu.count", "node")].status == FAIL
    assert checks[("gpu.count", "node")].value == 7


def test_wrong_model_fails() -> None:
    checks = gate(eight(name="NVIDIA H100 PCIe"))
    assert checks[("gpu.model", "node")].status == FAIL
    assert "gpu3 'NVIDIA H100 PCIe'" in checks[("gpu.model", "node")].detail


def test_uncorrectable_ecc_since_the_driver_loaded_fails() -> None:
    checks = gate(eight(ecc_volatile=2))
    assert checks[("ecc.volatile", "gpu3")].status == FAIL
    assert checks[("ecc.volatile", "gpu3")].value == 2
    assert checks[("ecc.volatile", "gpu2")].status == PASS


def test_a_lifetime_ecc_count_is_recorded_for_the_judge_not_judged_alone() -> None:
    # GCM fails on the volatile counter only; an error retired long ago leaves the aggregate above 0.
    checks = gate(eight(ecc_aggregate=2))
    assert checks[("ecc.aggregate", "gpu3")].status == INFO and checks[("ecc.aggregate", "gpu3")].value == 2
    assert checks[("ecc.volatile", "gpu3")].status == PASS
    assert "lifetime" in checks[("ecc.aggregate", "gpu3")].detail


@pytest.mark.parametrize("rows", [(0, 1, 1, 0), (0, 0, 0, 1)])
def test_pending_or_failed_row_remap_fails(rows: tuple[int, int, int, int]) -> None:
    c = gate(eight(remapped=rows))[("memory.remap", "gpu3")]
    assert c.status == FAIL
    assert ("pending" in c.detail) == bool(rows[2]) and ("failed" in c.detail) == bool(rows[3])


def test_pre_ampere_pending_page_retirement_fails() -> None:
    c = gate(eight(remapped=None, retired_pending=1))[("memory.remap", "gpu3")]
    assert c.status == FAIL and c.value == {"retired_dbe_pages": 1, "pending": True}
    ok = gate(eight(remapped=None))[("memory.remap", "gpu3")]
    assert ok.status == PASS


def test_nvlink_down_fails_and_error_counters_warn() -> None:
    links = [1] * 18
    links[5] = 0
    checks = gate(eight(nvlink=links, nvlink_errors={(2, 1): 4}))
    assert checks[("nvlink.links", "gpu3")].status == FAIL
    assert checks[("nvlink.links", "gpu3")].value == {"up": 17, "down": [5]}
    assert checks[("nvlink.errors", "gpu3")].status == WARN
    assert checks[("nvlink.errors", "gpu3")].value == {"link2.recovery": 4}


def test_gpu_without_nvlink_is_not_run() -> None:
    assert gate(eight(nvlink=[]))[("nvlink.links", "gpu3")].status == NOT_RUN


@pytest.mark.parametrize(("mask", "status"), [(0x8, FAIL), (0x40, FAIL), (0x80, FAIL), (0x20, WARN), (0x4 | 0x1, PASS)])
def test_throttle_reasons_during_the_gemm(mask: int, status: str) -> None:
    c = gate(eight(reasons=mask))[("clocks.throttle", "gpu3")]
    assert c.status == status, c
    assert c.value["mask"] == mask


@pytest.mark.parametrize(("pcie", "status"), [((5, 5, 8, 16), FAIL), ((4, 5, 16, 16), WARN), ((4, 4, 16, 16), PASS)])
def test_pcie_link_against_its_maximum(pcie: tuple[int, int, int, int], status: str) -> None:
    assert gate(eight(pcie=pcie))[("pcie.link", "gpu3")].status == status


@pytest.mark.parametrize(("xid", "status"), [(79, FAIL), (13, WARN)])
def test_xid_event_during_the_run(xid: int, status: str) -> None:
    c = gate(eight(xids=[xid]))[("xid.run", "gpu3")]
    assert c.status == status and c.value == [xid]


def test_kernel_log_xids_since_boot() -> None:
    log = (
        "[12.3] NVRM: Xid (PCI:0000:53:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n"
        "[13.0] NVRM: Xid (PCI:0000:64:00): 31, pid=99, Ch 00000010, intr 10000000\n"
    )
    c = gate(eight(), runner=lambda *a, **k: _proc(["dmesg"], 0, log))[("xid.kernel", "node")]
    assert c.status == FAIL and c.value == [31, 79]
    assert "0000:53:00" in c.detail
    denied = gate(
        eight(),
        runner=lambda *a, **k: _proc(["dmesg"], 1, "", "dmesg: read kernel buffer failed: Operation not permitted"),
    )
    assert denied[("xid.kernel", "node")].status == NOT_RUN


DCGM_DOC = {
    "DCGM GPU Diagnostic": {
        "version": "3.3.5",
        "test_categories": [
            {"category": "Deployment", "tests": [{"name": "Denylist", "results": [{"status": "Pass"}]}]},
            {
                "category": "Integration",
                "tests": [
                    {
                        "name": "PCIe",
                        "results": [
                            {"gpu_ids": "0", "status": "Pass"},
                            {
                                "gpu_ids": "3",
                                "status": "Fail",
                                "warnings": [{"warning": "GPU 3 PCIe replay rate too high", "error_id": 37}],
                            },
                        ],
                    }
                ],
            },
            {
                "category": "Hardware",
                "tests": [{"name": "GPU Memory", "results": [{"gpu_ids": "0", "status": "Skip"}]}],
            },
        ],
    }
}


def test_dcgm_failure_is_parsed_into_the_report() -> None:
    checks = gate(eight(), dcgm=json.dumps(DCGM_DOC))
    assert checks[("dcgm.pcie", "node")].status == FAIL
    assert "gpu 3: fail" in checks[("dcgm.pcie", "node")].detail
    assert "replay rate" in checks[("dcgm.pcie", "node")].detail
    assert checks[("dcgm.denylist", "node")].status == PASS
    assert checks[("dcgm.gpu_memory", "node")].status == NOT_RUN
    assert checks[("dcgm.diag", "node")].status == FAIL and checks[("dcgm.diag", "node")].value == "3.3.5"


def test_dcgm_pass_and_dcgm4_root_name() -> None:
    doc = {
        "DCGM Diagnostic": {
            "test_categories": [
                {
                    "category": "Deployment",
                    "tests": [{"name": "software", "results": [{"entity_id": 0, "status": "Pass"}]}],
                }
            ]
        }
    }
    assert gate(eight(), dcgm=json.dumps(doc))[("dcgm.diag", "node")].status == PASS


def test_dcgm_without_json_or_disabled_is_not_run() -> None:
    assert gate(eight(), dcgm="Error: unable to connect to host engine")[("dcgm.diag", "node")].status == NOT_RUN
    off = node_gate.GateConfig(instance_type="p5.48xlarge", gemm_seconds=0.05, gemm_n=64, sample_s=0.01, dcgm_level=0)
    c = gate(eight(), off, dcgm=json.dumps(DCGM_DOC))[("dcgm.diag", "node")]
    assert c.status == NOT_RUN and "disabled" in c.detail


def _gemm(device: str, rates: list[float]) -> node_gate.GemmResult:
    return node_gate.GemmResult(
        device=device, name="x", dtype="bfloat16", n=8192, seconds=30.0, calls=100, window_tflops=rates
    )


def test_gemm_is_judged_against_the_catalogs_achievable_figure() -> None:
    exp = node_gate.expected_for("p5.48xlarge")
    assert exp is not None and exp.achievable_tflops == 794.5 and "ml-engineering" in exp.source
    # 794.5 x 0.90 = 715.05, x 0.75 = 595.9; the later half of the windows decides.
    assert node_gate.judge_gemm(_gemm("cuda:0", [760.0] * 10), "gpu0", exp).status == PASS
    warn = node_gate.judge_gemm(_gemm("cuda:0", [760.0] * 5 + [700.0] * 5), "gpu0", exp)
    assert warn.status == WARN and warn.value == 700.0
    throttled = _gemm("cuda:0", [780.0] * 5 + [500.0] * 5)
    fail = node_gate.judge_gemm(throttled, "gpu0", exp)
    assert fail.status == FAIL and "36% slower" in fail.detail
    # No instance type, or a model without a published figure: reported, not judged.
    assert node_gate.judge_gemm(_gemm("cuda:0", [1.0]), "gpu0", None).status == INFO


def test_sustained_gemm_runs_for_the_time_given_on_cpu() -> None:
    res = node_gate.sustained_gemm(torch.device("cpu"), 0.2, 64, windows=4)
    assert len(res.window_tflops) == 4 and all(r > 0 for r in res.window_tflops)
    # Every window runs until its slice is spent, so the whole run lasts at least the time given,
    # however slow or fast any one call was (a count fixed from one call once ran 0.0001 s of 0.2).
    assert res.seconds >= 0.2 and res.calls >= 4
    assert node_gate.judge_gemm(res, "cpu", node_gate.expected_for("p5.48xlarge")).status == INFO


def test_host_without_nvml_reports_not_run_never_pass() -> None:
    rep = node_gate.run_gate(FAST, CPU, indices=[0], which=lambda e: None, run=quiet_runner)
    if rep.vendor != "none":
        pytest.skip(f"this host has a GPU library ({rep.vendor})")
    assert rep.verdict == NOT_RUN
    names = {c.name for c in rep.checks if c.status == NOT_RUN}
    assert {"gpu.count", "ecc.volatile", "clocks.throttle", "dcgm.diag"} <= names
    assert any("NVML" in line for line in rep.to_json()["not_run"])


def test_one_bad_gpu_fails_the_node_report() -> None:
    rep = node_gate.run_gate(
        FAST, CPU, indices=list(range(8)), nvml=FakeNvml(eight(ecc_volatile=1)), which=lambda e: None, run=quiet_runner
    )
    doc = rep.to_json()
    assert doc["verdict"] == FAIL and doc["vendor"] == "nvidia"
    assert [c["scope"] for c in doc["checks"] if c["status"] == FAIL] == ["gpu3"]


def test_cpu_process_says_the_per_gpu_checks_did_not_run() -> None:
    checks, gemms = node_gate.gpu_checks(FAST, "none", None, "no NVML", CPU, [])
    assert len(gemms) == 1 and gemms[0].device == "cpu"
    skipped = {c.name for c in checks if c.status == NOT_RUN}
    assert {"ecc.volatile", "memory.remap", "nvlink.links", "clocks.throttle", "xid.run"} <= skipped
