"""Before the first collective: is this node's fabric where NCCL will look for it?

A missing net plugin, EFA device or GPU NIC does not stop NCCL: it falls back to TCP sockets
and the job runs at a few GB/s. So every rank checks, after its GPU is bound and before the
process group forms, the three things NCCL needs from the node, and fails with a message that
names what is missing:

1. **The net plugin** (all fabrics but native InfiniBand), and the tuner plugin where
   ``NCCL_TUNER_PLUGIN`` names one: NCCL ``dlopen``\\ s
   ``libnccl-net.so``, or ``libnccl-net-<NCCL_NET_PLUGIN>.so`` when that variable is set, and
   looks for an ``ncclNetPlugin_v<N>`` symbol (catalog source ``nccl-net-plugin``). The check
   finds the file on ``LD_LIBRARY_PATH`` or the loader's own directories, loads it, and looks
   for the symbol; a library that is installed in one of the fabric's documented directories
   but off the loader's path is named with that directory.
2. **The fabric's devices**, counted from sysfs (catalog ``startup_check.devices``): EFA devices
   (``/sys/class/infiniband/*`` bound to the ``efa`` driver, whose ``/dev/infiniband/uverbs*``
   node this container can open); GPU NICs by name (TCPX/TCPXO: the interfaces NCCL is told to
   use, present under ``/sys/class/net`` and not down); RoCE or InfiniBand ports
   (``ports/*/link_layer`` Ethernet or InfiniBand, state ACTIVE; an InfiniBand port also at the
   type's rate, as aznhc's ``check_hw_ib`` holds it). The count expected is the instance type's
   (``efa_interfaces``, or ``gpu_nics``).
3. **TCPXO's receive-datapath manager** (RxDM): it serves the Unix socket
   ``rxdm_uds_nic_mapping`` (abstract, or under ``FILE_BASED_UDS_PATH_PREFIX``) last in its
   start-up, so a listening socket means it is ready (catalog source ``tcpxo-rxdm-uds``). The
   check waits for it as long as slurm-gcp's RxDM prolog does.

Every root it reads (``/sys``, ``/dev``, ``/proc``, the environment, the loader's directories)
is a parameter, so tests run it over trees they build. ``python -m gpu_cluster.workloads.health.fabric``
runs it by hand or from a batch script before torchrun.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import socket
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from gpu_cluster.components.catalog import FABRICS, CatalogError, StartupCheck, load_catalog, load_fabric_facts

# NCCL has defined net plugin ABI versions 2..12 so far; accept any version a future one adds.
PLUGIN_ABI_VERSIONS = tuple(range(20, 1, -1))
# __SO_ACCEPTCON in /proc/net/unix's Flags column: the socket is listening.
_SO_ACCEPTCON = 0x10000
RXDM_POLL_S = 2.0  # slurm-gcp's RxDM prolog polls every 2 s


class FabricCheckFailed(RuntimeError):
    """This node lacks part of its fabric: its own fault, not a lost peer's."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Roots:
    """Where the check looks; the defaults are the live system."""

    sys: Path = Path("/sys")
    dev: Path = Path("/dev")
    proc: Path = Path("/proc")
    files: Path = Path("/")
    """Under which the catalog's plugin directories are looked for."""
    loader_dirs: tuple[Path, ...] | None = None
    """The dynamic loader's directories after LD_LIBRARY_PATH; None reads /etc/ld.so.conf."""


@dataclass(slots=True)
class FabricReport:
    fabric: str
    expect: int
    host: str
    problems: list[str] = field(default_factory=list)
    found: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def message(self) -> str:
        if self.ok:
            return f"fabric check on {self.host}: {self.fabric} ok: " + "; ".join(self.found)
        return (
            f"fabric check on {self.host}: {self.fabric} is not usable, NCCL would fall back to sockets: "
            + "; ".join(self.problems)
        )


def plugin_names(env: Mapping[str, str], rocm: bool = False) -> list[str]:
    """The library names NCCL (RCCL) tries, in order."""
    stem = "librccl-net" if rocm else "libnccl-net"
    chosen = env.get("NCCL_NET_PLUGIN", "").strip()
    if not chosen:
        return [f"{stem}.so"]
    if "/" in chosen or chosen.endswith(".so"):
        return [chosen]
    return [f"{stem}-{chosen}.so", chosen]


def _ld_conf_dirs(conf: Path = Path("/etc/ld.so.conf")) -> tuple[Path, ...]:
    dirs: list[Path] = []

    def read(p: Path) -> None:
        try:
            lines = p.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return
        for line in lines:
            line = line.split("#", 1)[0].strip()
            if line.startswith("include "):
                for inc in sorted(p.parent.glob(line.split(None, 1)[1].removeprefix("/etc/"))):
                    read(inc)
            elif line:
                dirs.append(Path(line))

    read(conf)
    return (*dirs, Path("/lib"), Path("/usr/lib"), Path("/lib64"), Path("/usr/lib64"))


def tuner_names(env: Mapping[str, str], rocm: bool = False) -> list[str]:
    """The tuner library names NCCL tries for ``NCCL_TUNER_PLUGIN``: a path as given, else
    ``libnccl-tuner-<name>.so`` then the name itself (NVIDIA/nccl plugins/tuner/example/README.md:
    the variable "specifies the plugin name, or an absolute path"; the example builds
    ``libnccl-tuner-example.so``). Empty when the variable is unset."""
    chosen = env.get("NCCL_TUNER_PLUGIN", "").strip()
    if not chosen:
        return []
    if "/" in chosen or chosen.endswith(".so"):
        return [chosen]
    return [f"{'librccl' if rocm else 'libnccl'}-tuner-{chosen}.so", chosen]


def _find(names: list[str], env: Mapping[str, str], roots: Roots) -> Path | None:
    ld_path = [Path(d) for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    system = roots.loader_dirs if roots.loader_dirs is not None else _ld_conf_dirs()
    searched = [*ld_path, *system]
    for name in names:
        if name.startswith("/"):
            hit = Path(name) if Path(name).is_file() else None
        else:
            hit = next((d / name for d in searched if (d / name).is_file()), None)
        if hit:
            return hit
    return None


def check_tuner(env: Mapping[str, str], roots: Roots, rocm: bool = False) -> tuple[str | None, str | None]:
    """(problem, found): the tuner plugin ``NCCL_TUNER_PLUGIN`` names is there and loads. NCCL
    runs on without a tuner it cannot load, with its own tuning: a silent loss worth naming."""
    names = tuner_names(env, rocm)
    if not names:
        return None, None
    label = f"tuner plugin NCCL_TUNER_PLUGIN={env['NCCL_TUNER_PLUGIN'].strip()} (looked for {' or '.join(names)})"
    hit = _find(names, env, roots)
    if hit is None:
        return (
            f"{label} not found on LD_LIBRARY_PATH ({env.get('LD_LIBRARY_PATH', '') or 'unset'}) nor in the "
            "loader's directories"
        ), None
    try:
        ctypes.CDLL(str(hit))
    except OSError as exc:
        return f"{label}: {hit} cannot be loaded: {exc}", None
    return None, f"tuner plugin {hit}"


def check_plugin(
    sc: StartupCheck, env: Mapping[str, str], roots: Roots, rocm: bool = False
) -> tuple[str | None, str | None]:
    """(problem, found): the plugin file NCCL would load, loaded, with its entry symbol."""
    names = plugin_names(env, rocm)
    hit = _find(names, env, roots)
    chosen = env.get("NCCL_NET_PLUGIN", "").strip()
    label = f"{sc.plugin} ({'NCCL_NET_PLUGIN=' + chosen + ': ' if chosen else ''}looked for {' or '.join(names)})"
    if hit is None:
        elsewhere = [
            roots.files / d.lstrip("/") / n
            for d in sc.plugin_dirs
            for n in names
            if (roots.files / d.lstrip("/") / n).is_file()
        ]
        if elsewhere:
            return (
                f"net plugin {label} is installed at {elsewhere[0]} but {elsewhere[0].parent} is not on "
                f"LD_LIBRARY_PATH ({env.get('LD_LIBRARY_PATH', '') or 'unset'}), so NCCL will not load it"
            ), None
        where = ", ".join(sc.plugin_dirs) or "any directory"
        return (
            f"net plugin {label} not found on LD_LIBRARY_PATH ({env.get('LD_LIBRARY_PATH', '') or 'unset'}) "
            f"nor in the loader's directories, nor in {where}"
        ), None
    try:
        lib = ctypes.CDLL(str(hit))
    except OSError as exc:
        return f"net plugin {hit} cannot be loaded: {exc}", None
    versions = [v for v in PLUGIN_ABI_VERSIONS if hasattr(lib, f"ncclNetPlugin_v{v}")]
    if not versions:
        return f"net plugin {hit} loads but has no ncclNetPlugin_v* symbol: it is not an NCCL net plugin", None
    return None, f"net plugin {hit} (ncclNetPlugin_v{versions[0]}{', NCCL_NET_PLUGIN=' + chosen if chosen else ''})"


def _read(p: Path) -> str:
    try:
        return p.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def _ib_devices(roots: Roots) -> list[Path]:
    d = roots.sys / "class" / "infiniband"
    return sorted(d.iterdir()) if d.is_dir() else []


def check_efa(expect: int, roots: Roots) -> tuple[str | None, str]:
    efa = [d for d in _ib_devices(roots) if (d / "device" / "driver").resolve().name == "efa"]
    usable = []
    for d in efa:
        verbs = d / "device" / "infiniband_verbs"
        nodes = sorted(v.name for v in verbs.iterdir()) if verbs.is_dir() else []
        if any((roots.dev / "infiniband" / n).exists() for n in nodes):
            usable.append(d.name)
    found = f"{len(usable)} EFA device(s) usable ({', '.join(usable[:4])}{', ...' if len(usable) > 4 else ''})"
    if not efa:
        return (
            f"EFA is missing: no device under {roots.sys}/class/infiniband is bound to the efa driver "
            f"(expected {expect}: no EFA interface attached, or the efa kernel driver not loaded)"
        ), found
    if len(usable) < expect:
        return (
            f"EFA: {len(usable)} of {expect} expected EFA devices are usable here ({len(efa)} in sysfs; "
            f"the others have no {roots.dev}/infiniband/uverbs* node: request vpc.amazonaws.com/efa: {expect} "
            f"or attach {expect} EFA interfaces)"
        ), found
    return None, found


def _rate_gbps(text: str) -> float | None:
    """A port's data rate from sysfs ``rate`` ("400 Gb/sec (4X NDR)", linux-sysfs-ib), in Gb/s."""
    try:
        return float(text.split()[0])
    except (IndexError, ValueError):
        return None


def check_rdma_ports(
    expect: int, link_layer: str, roots: Roots, rate_gbps: float | None = None
) -> tuple[str | None, str]:
    """Devices with an ACTIVE port of ``link_layer``, at least ``expect``; with ``rate_gbps``, every
    such port also runs at that rate (aznhc's check_hw_ib: "check_hw_ib 400 mlx5_ib0:1" for each HCA
    of ND v5, azurehpc-health-checks conf/nd96isr_h100_v5.conf at 0e0a1ac): a port that trained
    down (NDR at HDR) carries NCCL at a fraction of the fabric."""
    kind = "RoCE" if link_layer == "Ethernet" else "InfiniBand"
    devs = []
    active = []
    slow = []
    for d in _ib_devices(roots):
        ports = sorted((d / "ports").iterdir()) if (d / "ports").is_dir() else []
        mine = [p for p in ports if _read(p / "link_layer") == link_layer]
        if mine:
            devs.append(d.name)
            up = [p for p in mine if _read(p / "state").endswith("ACTIVE")]
            if up:
                active.append(d.name)
            for p in up:
                got = _rate_gbps(_read(p / "rate"))
                if rate_gbps is not None and got is not None and got < rate_gbps:
                    slow.append(f"{d.name} port {p.name} at {_read(p / 'rate')}")
    found = f"{len(active)} active {kind} device(s) ({', '.join(active)})"
    problems = []
    if len(active) < expect:
        inactive = sorted(set(devs) - set(active))
        problems.append(
            f"{kind}: {len(active)} of {expect} expected devices with an ACTIVE port under "
            f"{roots.sys}/class/infiniband" + (f" (not active: {', '.join(inactive)})" if inactive else "")
        )
    if slow:
        problems.append(f"{kind}: {', '.join(slow)}, below the {rate_gbps:g} Gb/sec each port of this type runs at")
    return ("; ".join(problems) or None), found


def check_nics(sc: StartupCheck, expect: int, env: Mapping[str, str], roots: Roots) -> tuple[str | None, str]:
    assert sc.nics_env is not None
    listed = env.get(sc.nics_env) or sc.fabric_env.get(sc.nics_env, "")
    names = [n for n in listed.split(",") if n]
    missing, down, up = [], [], []
    for n in names:
        d = roots.sys / "class" / "net" / n
        if not d.exists():
            missing.append(n)
        elif _read(d / "operstate") == "down":
            down.append(n)
        else:
            up.append(n)
    found = f"{len(up)} GPU NIC(s) ({', '.join(up)})"
    problems = []
    if len(names) < expect:
        problems.append(f"{sc.nics_env}={listed!r} names {len(names)} GPU NICs, the instance has {expect}")
    if missing:
        problems.append(
            f"GPU NIC(s) {', '.join(missing)} missing from {roots.sys}/class/net (the pod's "
            f"networking.gke.io/interfaces annotation or the node's GPU VPCs)"
        )
    if down:
        problems.append(f"GPU NIC(s) {', '.join(down)} are down")
    return ("; ".join(problems) or None), found


def rxdm_listening(name: str, env: Mapping[str, str], roots: Roots) -> bool:
    prefix = env.get("FILE_BASED_UDS_PATH_PREFIX", "")
    want = {f"{prefix.rstrip('/')}/{name}"} if prefix else {f"@{name}"}
    for line in _read(roots.proc / "net" / "unix").splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 8 and cols[7] in want:
            try:
                if int(cols[3], 16) & _SO_ACCEPTCON:
                    return True
            except ValueError:
                continue
    if prefix:
        try:
            return stat.S_ISSOCK(os.stat(f"{prefix.rstrip('/')}/{name}").st_mode)
        except OSError:
            return False
    return False


def check_rxdm(
    sc: StartupCheck,
    env: Mapping[str, str],
    roots: Roots,
    wait_s: float,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> tuple[str | None, str]:
    assert sc.rxdm_socket is not None
    deadline = clock() + wait_s
    while True:
        if rxdm_listening(sc.rxdm_socket, env, roots):
            return None, f"RxDM listening on {sc.rxdm_socket}"
        if clock() >= deadline:
            break
        sleep(min(RXDM_POLL_S, max(0.0, deadline - clock())))
    where = (
        f"{env['FILE_BASED_UDS_PATH_PREFIX']}/{sc.rxdm_socket}"
        if env.get("FILE_BASED_UDS_PATH_PREFIX")
        else f"@{sc.rxdm_socket} in {roots.proc}/net/unix"
    )
    return (
        f"TCPXO receive-datapath manager (RxDM) not reachable: no listening socket {where} after {wait_s:.0f} s "
        "(GKE: the pod's tcpxo-daemon sidecar; Slurm: the RxDM prolog)"
    ), ""


def check(
    fabric: str,
    expect: int,
    *,
    rate_gbps: float | None = None,
    env: Mapping[str, str] | None = None,
    roots: Roots | None = None,
    rocm: bool = False,
    rxdm_wait_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    host: str | None = None,
) -> FabricReport:
    """Every problem with this node's ``fabric``, given the count of devices its type has."""
    checks, _ = load_fabric_facts()
    if fabric not in checks:
        raise CatalogError(f"fabric {fabric!r} (allowed: {', '.join(checks)})")
    sc = checks[fabric]
    env = os.environ if env is None else env
    roots = roots or Roots()
    report = FabricReport(fabric=fabric, expect=expect, host=host or socket.gethostname())

    def take(result: tuple[str | None, str | None]) -> None:
        problem, found = result
        if problem:
            report.problems.append(problem)
        if found:
            report.found.append(found)

    if sc.plugin != "none":
        take(check_plugin(sc, env, roots, rocm))
    take(check_tuner(env, roots, rocm))
    if sc.devices == "efa":
        take(check_efa(expect, roots))
    elif sc.devices == "netdev":
        take(check_nics(sc, expect, env, roots))
    else:
        take(check_rdma_ports(expect, "Ethernet" if sc.devices == "roce" else "InfiniBand", roots, rate_gbps))
    if sc.rxdm_socket:
        take(check_rxdm(sc, env, roots, sc.rxdm_wait_s if rxdm_wait_s is None else rxdm_wait_s, sleep, clock))
    return report


def expectation(instance_type: str) -> tuple[str, int]:
    """(fabric, devices expected) for a catalog instance type."""
    it = load_catalog().get(instance_type)
    net = it.network
    return net.fabric, (net.efa_interfaces if net.fabric == "efa" else net.gpu_nics)


def port_rate(instance_type: str) -> float | None:
    """The data rate each InfiniBand port of the type runs at: the catalog's fabric bandwidth over
    its HCAs (ND v5: 3200 Gb/s over 8, 400 Gb/s NDR; the size pages); None on other fabrics."""
    net = load_catalog().get(instance_type).network
    return net.total_gbps / net.gpu_nics if net.fabric == "infiniband" and net.gpu_nics else None


def require(
    instance_type: str,
    *,
    env: Mapping[str, str] | None = None,
    roots: Roots | None = None,
    rocm: bool = False,
    rxdm_wait_s: float | None = None,
) -> FabricReport:
    """Raise :class:`FabricCheckFailed` naming what is missing; the report when all is there."""
    fabric, expect = expectation(instance_type)
    report = check(
        fabric, expect, rate_gbps=port_rate(instance_type), env=env, roots=roots, rocm=rocm, rxdm_wait_s=rxdm_wait_s
    )
    if not report.ok:
        raise FabricCheckFailed(report.message())
    return report


def require_plugin(
    instance_type: str, *, env: Mapping[str, str] | None = None, roots: Roots | None = None
) -> str | None:
    """The net plugin part of the check alone (the rehearsal: no fabric devices on that machine).
    Raise :class:`FabricCheckFailed` naming what is missing; what was found, or None on a fabric
    without a plugin (native InfiniBand)."""
    fabric, _ = expectation(instance_type)
    sc = load_fabric_facts()[0][fabric]
    if sc.plugin == "none":
        return None
    problem, found = check_plugin(sc, os.environ if env is None else env, roots or Roots())
    if problem:
        raise FabricCheckFailed(f"fabric check on {socket.gethostname()}: {fabric} is not usable: {problem}")
    return found


# ----------------------------------------------------------------------------- start-up gate

# Set by the launcher on a GPU job (workloads/launch/validation.py): the GPUs each node must show.
EXPECT_GPUS_ENV = "GPUC_EXPECT_GPUS"
# The NVIDIA kernel module's version line, readable in a container when the module is loaded
# ("NVRM version: NVIDIA UNIX ... Kernel Module  580.126.20  ...").
NVIDIA_PROC_VERSION = "/proc/driver/nvidia/version"
# The amdgpu module's version where it is loaded (a DKMS build sets it; the in-tree module may not).
AMDGPU_VERSION = "/sys/module/amdgpu/version"


def driver_found(path: str = NVIDIA_PROC_VERSION) -> str | None:
    """The GPU kernel driver's version as the node reports it, or None where none is loaded."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return None
    words = text.split()
    for i, w in enumerate(words):
        if w == "Module" and i + 1 < len(words) and words[i + 1][:1].isdigit():
            return words[i + 1]
    return next((w for w in words if w[:1].isdigit() and "." in w), None)


def start_up_refusal(
    expected: int, visible: int, *, driver: str | None, cuda: str | None, torch_version: str, hip: str | None = None
) -> str | None:
    """Why a job that expects ``expected`` GPUs per node must stop here, or None when it may go
    on: a node whose GPUs torch cannot open would otherwise run the whole job on CPU and gloo.
    The line names the driver and the CUDA (or ROCm) found, and the floor NVIDIA's minor version
    compatibility sets (components/liveness/driver.py CUDA_MIN_DRIVER, Table 1)."""
    if expected <= 0 or visible > 0:
        return None
    from gpu_cluster.components.liveness.driver import CUDA_MIN_DRIVER

    if hip:
        found = f"amdgpu {driver}" if driver else f"no amdgpu driver loaded ({AMDGPU_VERSION} absent)"
        built = f"ROCm {hip}"
    else:
        found = f"driver {driver}" if driver else f"no NVIDIA driver loaded ({NVIDIA_PROC_VERSION} absent)"
        built = f"CUDA {cuda}" if cuda else "no CUDA (a CPU build of torch)"
    line = f"start-up gate: {expected} GPU(s) expected on this node, torch {torch_version} sees none: {found}, {built}"
    if cuda and driver and not hip:
        major = int(cuda.split(".", 1)[0])
        floor = CUDA_MIN_DRIVER.get(major)
        if floor is not None and int(driver.split(".", 1)[0]) < floor:
            line += f"; CUDA {major}.x needs a driver >= {floor}, this node's is older"
    return line + "; stopping (exit 3) instead of running on CPU"


def require_gpus(
    *, visible: int, cuda: str | None, hip: str | None, torch_version: str, env: Mapping[str, str] | None = None
) -> None:
    """The start-up gate in a job: exit 3 with its one line where the launcher said GPUs are
    expected (``GPUC_EXPECT_GPUS``), ``GPUC_FORCE_CPU`` is not set and torch sees none
    (``visible``, with the CUDA or ROCm it was built for)."""
    env = os.environ if env is None else env
    raw = env.get(EXPECT_GPUS_ENV, "")
    if not raw or env.get("GPUC_FORCE_CPU", "") == "1":
        return
    try:
        expected = int(raw)
    except ValueError:
        print(f"start-up gate: {EXPECT_GPUS_ENV}={raw!r} is not a GPU count (allowed: an integer)", file=sys.stderr)
        raise SystemExit(3) from None
    why = start_up_refusal(
        expected,
        visible,
        driver=driver_found(AMDGPU_VERSION if hip else NVIDIA_PROC_VERSION),
        cuda=cuda,
        torch_version=torch_version,
        hip=hip,
    )
    if why:
        print(why, file=sys.stderr, flush=True)
        raise SystemExit(3)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m gpu_cluster.workloads.health.fabric", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--instance-type", help="catalog instance type: sets --fabric and --expect")
    p.add_argument("--fabric", choices=FABRICS)
    p.add_argument("--expect", type=int, help="EFA devices (efa) or GPU NICs (others) this node must have")
    p.add_argument("--rxdm-wait-s", type=float, help="TCPXO: how long to wait for RxDM (default: the catalog's)")
    a = p.parse_args(argv)
    if a.instance_type:
        try:
            fabric, expect = expectation(a.instance_type)
        except CatalogError as exc:
            p.error(f"--instance-type: {exc}")
        fabric, expect = a.fabric or fabric, expect if a.expect is None else a.expect
    elif a.fabric and a.expect is not None:
        fabric, expect = a.fabric, a.expect
    else:
        p.error("give --instance-type, or both --fabric and --expect")
    if expect < 0:
        p.error(f"--expect: {expect} (allowed: 0 or more)")
    report = check(fabric, expect, rxdm_wait_s=a.rxdm_wait_s)
    print(report.message(), file=sys.stdout if report.ok else sys.stderr, flush=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
