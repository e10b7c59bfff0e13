"""GPU node gate: the GPU's own health counters, DCGM's diagnostic and a sustained GEMM, run
before any collective so a sick node is named before it slows a whole job down.

    python -m gpu_cluster.workloads.health.node_gate [--instance-type T] [--gemm-seconds S] [--dcgm-level 0-4] [--json PATH]

Checks, each ``pass``, ``warn``, ``fail``, ``info`` (a figure with nothing to hold it to) or
``not run`` (with why; never counted as a pass):
  gpu.count, gpu.model          against the catalog's instance type
  ecc.volatile / ecc.aggregate  uncorrectable ECC errors (nvmlDeviceGetTotalEccErrors)
  memory.remap                  row remaps pending or failed (nvmlDeviceGetRemappedRows, Ampere+);
                                pages pending retirement on older GPUs (nvmlDeviceGetRetiredPages*)
  xid.kernel, xid.run           XIDs in the kernel log since boot; NVML XID events during the GEMM
  clocks.throttle               clocks event reasons sampled during the GEMM
  nvlink.links, nvlink.errors   links down; replay, recovery and CRC counters
  pcie.link                     generation and width under load against the maximum
  versions                      driver, CUDA, VBIOS (information)
  dcgm.*                        ``dcgmi diag -r LEVEL -j`` when DCGM is installed
  gemm.sustained                bf16 GEMM for tens of seconds against the catalog's achievable figure

AMD GPUs go through ``amdsmi`` (workloads/health/node_gate_amd.py). In the validation job the gate is
configured from the environment (GPUC_GATE_GEMM_SECONDS, GPUC_GATE_DCGM_LEVEL).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from gpu_cluster.workloads.health import probes as probes
from gpu_cluster.workloads.health.probes import FAIL, INFO, NOT_RUN, PASS, WARN, Check, not_run, worst
from gpu_cluster.workloads.runtime.device import require_gpus
from gpu_cluster.workloads.runtime.node import node_name

# Tiers against a published achievable figure: the catalog's own busbw convention (warn under
# 0.90 x, fail under 0.75 x a measured reference; components/catalog.yaml header).
GEMM_WARN_OF_ACHIEVABLE = 0.90
GEMM_FAIL_OF_ACHIEVABLE = 0.75
DEFAULT_GEMM_SECONDS_GPU = 30.0
DEFAULT_GEMM_SECONDS_CPU = 0.4

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True, slots=True, kw_only=True)
class GateConfig:
    instance_type: str | None = None
    """Catalog type whose GPU count and model the node must have; None: not judged."""
    gemm_seconds: float | None = None
    """Length of the sustained GEMM; None: 30 s on GPU (long enough to leave the boost clocks
    and heat up), 0.4 s on CPU (the path only)."""
    gemm_n: int | None = None
    """Square GEMM size; None: 8192 on GPU, 256 on CPU."""
    dcgm_level: int = 1
    """``dcgmi diag -r`` level (1 quick .. 4 long); 0 does not run it."""
    sample_s: float = 0.5
    """How often the clocks, PCIe link and XID events are read during the GEMM."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Expected:
    model: str
    count: int
    achievable_tflops: float | None
    source: str
    matches: Callable[[str], bool]


def expected_for(instance_type: str | None) -> Expected | None:
    if not instance_type:
        return None
    from gpu_cluster.components.catalog import load_catalog, load_gpu_models

    acc = load_catalog().get(instance_type).accelerator
    gm = load_gpu_models().get(acc.model)
    return Expected(
        model=acc.model,
        count=acc.count,
        achievable_tflops=gm.achievable_bf16_tflops if gm else None,
        source=f"{gm.source.title} <{gm.source.url}>" if gm else "no gpu_models entry",
        matches=gm.matches if gm else (lambda name: acc.model.lower() in name.lower()),
    )


def config_from_env(instance_type: str | None) -> GateConfig:
    """The validation job's gate settings (its flags belong to the CLI being rewritten)."""
    secs = os.environ.get("GPUC_GATE_GEMM_SECONDS")
    level = os.environ.get("GPUC_GATE_DCGM_LEVEL")
    return GateConfig(
        instance_type=instance_type, gemm_seconds=float(secs) if secs else None, dcgm_level=int(level) if level else 1
    )


# ----------------------------------------------------------------------------- sustained GEMM


@dataclass(slots=True, kw_only=True)
class GemmResult:
    device: str
    name: str
    dtype: str
    n: int
    seconds: float
    calls: int
    window_tflops: list[float]

    @property
    def sustained_tflops(self) -> float:
        """Mean of the later half of the windows: the rate once boost clocks and heat settle."""
        tail = self.window_tflops[len(self.window_tflops) // 2 :]
        return sum(tail) / len(tail) if tail else 0.0

    @property
    def drop(self) -> float:
        """How much slower the last window ran than the first (0.1 = 10 %)."""
        w = self.window_tflops
        return 1.0 - w[-1] / w[0] if len(w) >= 2 and w[0] > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(sustained_tflops=self.sustained_tflops, drop=self.drop)
        return d


def sustained_gemm(device: torch.device, seconds: float, n: int, windows: int = 10) -> GemmResult:
    """Back-to-back ``torch.mm`` until ``seconds`` are spent, timed in ``windows`` slices of
    ``seconds / windows`` each (synchronised at each batch's end, so launch gaps inside a batch
    are hidden by the queue); every slice lasts at least its share of the time."""
    gpu = device.type == "cuda"
    dtype = torch.bfloat16 if gpu else torch.float32
    gen = torch.Generator(device=device).manual_seed(7)
    a = torch.randn(n, n, dtype=dtype, device=device, generator=gen)
    b = torch.randn(n, n, dtype=dtype, device=device, generator=gen)
    c = torch.empty(n, n, dtype=dtype, device=device)

    def sync() -> None:
        if gpu:
            torch.cuda.synchronize(device)

    for _ in range(3):
        torch.mm(a, b, out=c)
    sync()
    # Each window runs until its slice of the time is spent, in batches synchronised at their
    # end; the batch grows from the calls the window has timed so far. A count fixed from one
    # call's time once ran 0.0001 s of a 0.2 s run when that first call happened to be slow.
    slice_s = seconds / windows
    rates: list[float] = []
    calls = 0
    batch = 1
    start = time.perf_counter()
    while len(rates) < windows:
        t = time.perf_counter()
        done = 0
        elapsed = 0.0
        while elapsed < slice_s:
            for _ in range(batch):
                torch.mm(a, b, out=c)
            sync()
            done += batch
            elapsed = time.perf_counter() - t
            per_call = elapsed / done
            # Aim at a quarter of what is left, so the last batch overshoots the slice by little.
            batch = max(1, int((slice_s - elapsed) / 4 / per_call)) if per_call > 0 else batch * 2
        calls += done
        rates.append(2.0 * n**3 * done / elapsed / 1e12)
    name = torch.cuda.get_device_name(device) if gpu else "cpu"
    return GemmResult(
        device=str(device),
        name=name,
        dtype=str(dtype).removeprefix("torch."),
        n=n,
        seconds=time.perf_counter() - start,
        calls=calls,
        window_tflops=rates,
    )


def judge_gemm(res: GemmResult, scope: str, expected: Expected | None) -> Check:
    value = round(res.sustained_tflops, 2)
    if res.device == "cpu":
        return Check(
            name="gemm.sustained",
            scope=scope,
            status=INFO,
            value=value,
            detail=f"CPU fp32 {res.n}^3 for {res.seconds:.1f} s: the path, not a GPU figure",
        )
    if expected is None or expected.achievable_tflops is None:
        why = "no instance type" if expected is None else f"no published achievable figure for {expected.model}"
        return Check(
            name="gemm.sustained",
            scope=scope,
            status=INFO,
            value=value,
            detail=f"{value} TFLOP/s bf16 over {res.seconds:.0f} s, not judged ({why})",
        )
    ach = expected.achievable_tflops
    frac = value / ach
    status = FAIL if frac < GEMM_FAIL_OF_ACHIEVABLE else WARN if frac < GEMM_WARN_OF_ACHIEVABLE else PASS
    return Check(
        name="gemm.sustained",
        scope=scope,
        status=status,
        value=value,
        detail=(
            f"{value} TFLOP/s bf16 {res.n}^3 over {res.seconds:.0f} s = {frac:.0%} of {ach:g} "
            f"achievable (warn < {GEMM_WARN_OF_ACHIEVABLE:.0%}, fail < {GEMM_FAIL_OF_ACHIEVABLE:.0%}); "
            f"last window {res.drop:.0%} slower than the first"
        ),
    )


# ----------------------------------------------------------------------------- DCGM, kernel log


def run_dcgm(
    level: int,
    *,
    which: Callable[[str], str | None] = shutil.which,
    run: Runner = subprocess.run,
    timeout_s: float = 1800.0,
) -> list[Check]:
    if level == 0:
        return [not_run("dcgm.diag", "node", "disabled (dcgm level 0)")]
    exe = which("dcgmi")
    if exe is None:
        return [not_run("dcgm.diag", "node", "DCGM is not installed (no dcgmi on PATH)")]
    try:
        proc = run([exe, "diag", "-r", str(level), "-j"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [not_run("dcgm.diag", "node", f"dcgmi diag -r {level}: {exc}")]
    out = proc.stdout or ""
    try:
        doc = json.loads(out[out.index("{") :])
    except ValueError:
        tail = (proc.stderr or out).strip()[-300:]
        return [not_run("dcgm.diag", "node", f"dcgmi diag -r {level} exited {proc.returncode} without JSON: {tail}")]
    return probes.parse_dcgm(doc, level)


def kernel_xids(*, run: Runner = subprocess.run) -> Check:
    try:
        proc = run(["dmesg"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return not_run("xid.kernel", "node", f"dmesg: {exc}")
    if proc.returncode != 0:
        return not_run("xid.kernel", "node", f"dmesg exited {proc.returncode}: {(proc.stderr or '').strip()[:200]}")
    return probes.judge_kernel_xids(proc.stdout)


# ----------------------------------------------------------------------------- the gate


@dataclass(slots=True, kw_only=True)
class GateReport:
    node: str
    vendor: str
    """nvidia, amd, or none (no management library answered)."""
    checks: list[Check] = field(default_factory=list)
    gemm: list[GemmResult] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return worst([c.status for c in self.checks])

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "vendor": self.vendor,
            "verdict": self.verdict,
            "checks": [c.to_json() for c in self.checks],
            "gemm": [g.to_json() for g in self.gemm],
            "not_run": [f"{c.name} ({c.scope}): {c.detail}" for c in self.checks if c.status == NOT_RUN],
        }


def open_library(nvml: Any | None = None, amdsmi: Any | None = None) -> tuple[str, Any, str]:
    """(vendor, library, why none) from what was injected, else whichever initialises here."""
    if nvml is not None:
        nvml.nvmlInit()
        return "nvidia", nvml, ""
    if amdsmi is not None:
        amdsmi.amdsmi_init()
        return "amd", amdsmi, ""
    whys = []
    try:
        import pynvml  # type: ignore[import-untyped]

        pynvml.nvmlInit()
        return "nvidia", pynvml, ""
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound and friends: this host has no NVML
        whys.append(f"NVML: {exc}")
    try:
        import amdsmi as amd  # type: ignore[import-not-found]

        amd.amdsmi_init()
        return "amd", amd, ""
    except Exception as exc:  # noqa: BLE001 - no amdsmi package, or no amdgpu driver
        whys.append(f"amdsmi: {exc}")
    return "none", None, "; ".join(whys)


def node_checks(
    cfg: GateConfig,
    vendor: str,
    lib: Any,
    why: str,
    *,
    which: Callable[[str], str | None] = shutil.which,
    run: Runner = subprocess.run,
) -> list[Check]:
    """What the node answers once: GPU count and model, versions, the kernel's XIDs, DCGM."""
    exp = expected_for(cfg.instance_type)
    if vendor == "nvidia":
        checks = probes.nvml_node_checks(
            lib, exp.count if exp else None, exp.matches if exp else None, exp.model if exp else ""
        )
        checks.append(kernel_xids(run=run))
        checks.extend(run_dcgm(cfg.dcgm_level, which=which, run=run))
    elif vendor == "amd":
        from gpu_cluster.workloads.health import node_gate_amd

        checks = node_gate_amd.node_checks(
            lib, exp.count if exp else None, exp.matches if exp else None, exp.model if exp else ""
        )
        checks.append(not_run("dcgm.diag", "node", "DCGM is NVIDIA's; not run on AMD"))
    else:
        checks = [
            not_run(name, "node", f"no GPU management library on this host ({why})")
            for name in ("gpu.count", "gpu.model", "versions", "xid.kernel")
        ]
        checks.extend(run_dcgm(cfg.dcgm_level, which=which, run=run))
    return checks


def gpu_checks(
    cfg: GateConfig, vendor: str, lib: Any, why: str, devices: Sequence[torch.device], indices: Sequence[int]
) -> tuple[list[Check], list[GemmResult]]:
    """Per GPU: the counters, then the sustained GEMM with the clocks, link and XIDs watched."""
    exp = expected_for(cfg.instance_type)
    checks: list[Check] = []
    watches: list[Any] = []
    for idx in indices:
        if vendor == "nvidia":
            checks.extend(probes.nvml_gpu_checks(lib, idx))
            watches.append(probes.NvmlWatch(lib, idx, cfg.sample_s))
        elif vendor == "amd":
            from gpu_cluster.workloads.health import node_gate_amd

            checks.extend(node_gate_amd.gpu_checks(lib, idx))
            watches.append(node_gate_amd.AmdWatch(lib, idx, cfg.sample_s))
        else:
            checks.extend(
                not_run(name, f"gpu{idx}", f"no GPU management library ({why})")
                for name in (
                    "ecc.volatile",
                    "ecc.aggregate",
                    "memory.remap",
                    "nvlink.links",
                    "nvlink.errors",
                    "pcie.link",
                    "clocks.throttle",
                    "xid.run",
                )
            )
    if not indices:
        checks.extend(
            not_run(name, "gpu", "no GPU in this process (CPU run)")
            for name in (
                "ecc.volatile",
                "ecc.aggregate",
                "memory.remap",
                "nvlink.links",
                "pcie.link",
                "clocks.throttle",
                "xid.run",
            )
        )
    gemms = []
    for w in watches:
        w.start()
    try:
        for i, dev in enumerate(devices):
            gpu = dev.type == "cuda"
            secs = cfg.gemm_seconds or (DEFAULT_GEMM_SECONDS_GPU if gpu else DEFAULT_GEMM_SECONDS_CPU)
            res = sustained_gemm(dev, secs, cfg.gemm_n or (8192 if gpu else 256))
            gemms.append(res)
            checks.append(judge_gemm(res, f"gpu{indices[i]}" if i < len(indices) else str(dev), exp))
    finally:
        for w in watches:
            checks.extend(w.stop())
    return checks, gemms


def run_gate(
    cfg: GateConfig,
    devices: Sequence[torch.device],
    *,
    indices: Sequence[int] | None = None,
    nvml: Any | None = None,
    amdsmi: Any | None = None,
    whole_node: bool = True,
    which: Callable[[str], str | None] = shutil.which,
    run: Runner = subprocess.run,
) -> GateReport:
    """The gate on this process's GPUs (``indices`` in the management library's numbering)."""
    vendor, lib, why = open_library(nvml, amdsmi)
    rep = GateReport(node=node_name(), vendor=vendor)
    if whole_node:
        rep.checks.extend(node_checks(cfg, vendor, lib, why, which=which, run=run))
    idx = list(indices) if indices is not None else [d.index or 0 for d in devices if d.type == "cuda"]
    c, g = gpu_checks(cfg, vendor, lib, why, devices, idx)
    rep.checks.extend(c)
    rep.gemm.extend(g)
    return rep


def print_report(rep: GateReport, out: Any = sys.stdout) -> None:
    out.write(f"# node gate on {rep.node} ({rep.vendor}): {rep.verdict}\n")
    for c in rep.checks:
        out.write(f"  {c.status:<8} {c.name:<18} {c.scope:<6} {'' if c.value is None else c.value!s:<14} {c.detail}\n")
    for g in rep.gemm:
        out.write(
            f"  gemm {g.device} {g.name}: {g.dtype} {g.n}^3, {g.calls} calls in {g.seconds:.1f} s, "
            f"windows TFLOP/s {', '.join(f'{w:.4g}' for w in g.window_tflops)}\n"
        )
    out.flush()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu-cluster node-gate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--instance-type")
    ap.add_argument("--gemm-seconds", type=float)
    ap.add_argument("--gemm-size", type=int)
    ap.add_argument("--dcgm-level", type=int, choices=(0, 1, 2, 3, 4), default=1)
    ap.add_argument("--json")
    ns = ap.parse_args(argv)
    if ns.instance_type:
        from gpu_cluster.components.catalog import CatalogError, load_catalog

        try:
            load_catalog().get(ns.instance_type)
        except CatalogError as exc:
            print(f"node_gate: --instance-type: {exc}", file=sys.stderr)
            return 2
    if ns.gemm_seconds is not None and not ns.gemm_seconds > 0:
        print("node_gate: --gemm-seconds must be > 0", file=sys.stderr)
        return 2
    cfg = GateConfig(
        instance_type=ns.instance_type, gemm_seconds=ns.gemm_seconds, gemm_n=ns.gemm_size, dcgm_level=ns.dcgm_level
    )
    # The start-up gate first (workloads/health/fabric.py require_gpus): a GPU node showing none stops.
    require_gpus()
    gpu = torch.cuda.is_available() and os.environ.get("GPUC_FORCE_CPU", "") != "1"
    devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())] if gpu else [torch.device("cpu")]
    rep = run_gate(cfg, devices, indices=list(range(len(devices))) if gpu else [])
    print_report(rep)
    if ns.json:
        with open(ns.json, "w", encoding="utf-8") as fh:
            json.dump(rep.to_json(), fh, indent=2)
    return 1 if rep.verdict == FAIL else 0


if __name__ == "__main__":
    sys.exit(main())
