"""The start-up fabric check over sysfs, /dev, /proc and library trees built in tmp_path.

The plugins are real shared objects compiled here (the check loads them with the dynamic
loader), so "loadable" and "has the NCCL entry symbol" are what the loader says.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gpu_cluster.components.catalog import load_catalog, load_fabric_facts
from gpu_cluster.workloads.health import fabric as fabric_check
from gpu_cluster.workloads.health.fabric import FabricCheckFailed, Roots, check

CC = shutil.which("cc") or shutil.which("gcc")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler to build the test plugins with")


def _so(path: Path, source: str, *extra: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    src = path.with_suffix(".c")
    src.write_text(source)
    assert CC is not None
    subprocess.run([CC, "-shared", "-fPIC", "-o", str(path), str(src), *extra], check=True)
    src.unlink()
    return path


def plugin(dirpath: Path, name: str = "libnccl-net.so") -> Path:
    return _so(dirpath / name, "int ncclNetPlugin_v8 = 8;\n")


class Tree:
    """A node's /sys, /dev, /proc and file system, as far as the check reads them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.roots = Roots(sys=root / "sys", dev=root / "dev", proc=root / "proc", files=root / "fs", loader_dirs=())
        (root / "sys" / "class" / "infiniband").mkdir(parents=True)
        (root / "sys" / "class" / "net").mkdir(parents=True)
        (root / "proc" / "net").mkdir(parents=True)
        (root / "proc" / "net" / "unix").write_text("Num       RefCount Protocol Flags    Type St Inode Path\n")

    def efa(self, n: int, with_dev_nodes: int | None = None) -> None:
        drivers = self.root / "sys" / "bus" / "pci" / "drivers"
        (drivers / "efa").mkdir(parents=True, exist_ok=True)
        for i in range(n):
            dev = self.root / "sys" / "devices" / f"0000:{i:02x}:00.0"
            (dev / "infiniband_verbs" / f"uverbs{i}").mkdir(parents=True)
            (dev / "driver").symlink_to(drivers / "efa")
            ib = self.root / "sys" / "class" / "infiniband" / f"rdmap{i}s0"
            ib.mkdir()
            (ib / "device").symlink_to(dev)
            if with_dev_nodes is None or i < with_dev_nodes:
                (self.root / "dev" / "infiniband").mkdir(parents=True, exist_ok=True)
                (self.root / "dev" / "infiniband" / f"uverbs{i}").write_text("")

    def rdma(
        self, names: list[str], link_layer: str, down: tuple[str, ...] = (), rates: dict[str, str] | None = None
    ) -> None:
        for name in names:
            port = self.root / "sys" / "class" / "infiniband" / name / "ports" / "1"
            port.mkdir(parents=True)
            (port / "link_layer").write_text(link_layer + "\n")
            (port / "state").write_text("1: DOWN\n" if name in down else "4: ACTIVE\n")
            (port / "rate").write_text((rates or {}).get(name, "400 Gb/sec (4X NDR)") + "\n")

    def nics(self, names: list[str], down: tuple[str, ...] = ()) -> None:
        for n in names:
            d = self.root / "sys" / "class" / "net" / n
            d.mkdir()
            (d / "operstate").write_text("down\n" if n in down else "up\n")

    def rxdm(self, path: str = "@rxdm_uds_nic_mapping", listening: bool = True) -> None:
        flags = "00010000" if listening else "00000000"
        with open(self.root / "proc" / "net" / "unix", "a") as fh:
            fh.write(f"0000000000000000: 00000002 00000000 {flags} 0001 01 4242 {path}\n")


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


@needs_cc
def test_efa_passes_with_plugin_on_ld_library_path_and_every_device(tree: Tree) -> None:
    lib = plugin(tree.root / "opt" / "ofi-nccl" / "lib")
    tree.efa(4)
    r = check("efa", 4, env={"LD_LIBRARY_PATH": f"/nowhere:{lib.parent}"}, roots=tree.roots, host="n1")
    assert r.ok, r.problems
    assert f"net plugin {lib} (ncclNetPlugin_v8)" in r.found
    assert "4 EFA device(s) usable" in r.message()


@needs_cc
def test_gpu_without_efa_says_efa_is_missing(tree: Tree) -> None:
    lib = plugin(tree.root / "opt" / "ofi-nccl" / "lib")
    r = check("efa", 32, env={"LD_LIBRARY_PATH": str(lib.parent)}, roots=tree.roots, host="gpu-box")
    assert not r.ok
    assert r.problems == [
        f"EFA is missing: no device under {tree.roots.sys}/class/infiniband is bound to the efa "
        "driver (expected 32: no EFA interface attached, or the efa kernel driver not loaded)"
    ]
    assert r.message().startswith("fabric check on gpu-box: efa is not usable")


def test_missing_plugin_is_named_with_the_path_searched(tree: Tree) -> None:
    tree.efa(2)
    r = check("efa", 2, env={"LD_LIBRARY_PATH": "/usr/local/cuda/lib64"}, roots=tree.roots)
    assert len(r.problems) == 1
    assert r.problems[0].startswith(
        "net plugin aws-ofi-nccl (looked for libnccl-net.so) not found on LD_LIBRARY_PATH (/usr/local/cuda/lib64)"
    )
    assert "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu" in r.problems[0]


@needs_cc
def test_plugin_installed_but_off_the_loader_path_names_its_directory(tree: Tree) -> None:
    # The EFA installer's place for aws-ofi-nccl (catalog), but LD_LIBRARY_PATH does not name it.
    lib = plugin(tree.roots.files / "opt/amazon/ofi-nccl/lib/x86_64-linux-gnu")
    tree.efa(2)
    r = check("efa", 2, env={}, roots=tree.roots)
    assert r.problems == [
        f"net plugin aws-ofi-nccl (looked for libnccl-net.so) is installed at {lib} but {lib.parent} is not "
        "on LD_LIBRARY_PATH (unset), so NCCL will not load it"
    ]


@needs_cc
def test_plugin_that_cannot_load_names_the_loader_error(tree: Tree) -> None:
    dep = _so(tree.root / "deps" / "libfakefabric.so", "int fi_getinfo(void) { return 0; }\n")
    lib = _so(
        tree.root / "plug" / "libnccl-net.so",
        "extern int fi_getinfo(void); int ncclNetPlugin_v9 = 9; int use(void) { return fi_getinfo(); }\n",
        f"-L{dep.parent}",
        "-lfakefabric",
    )
    dep.unlink()  # the plugin's libfabric is gone: the loader refuses the plugin
    tree.efa(1)
    r = check("efa", 1, env={"LD_LIBRARY_PATH": str(lib.parent)}, roots=tree.roots)
    assert len(r.problems) == 1
    assert r.problems[0].startswith(f"net plugin {lib} cannot be loaded:")
    assert "libfakefabric.so" in r.problems[0]


@needs_cc
def test_library_without_the_entry_symbol_is_not_a_plugin(tree: Tree) -> None:
    lib = _so(tree.root / "plug" / "libnccl-net.so", "int something_else = 1;\n")
    tree.efa(1)
    r = check("efa", 1, env={"LD_LIBRARY_PATH": str(lib.parent)}, roots=tree.roots)
    assert r.problems == [f"net plugin {lib} loads but has no ncclNetPlugin_v* symbol: it is not an NCCL net plugin"]


@needs_cc
def test_nccl_net_plugin_variable_selects_the_suffixed_library(tree: Tree) -> None:
    plugin(tree.root / "plug")  # libnccl-net.so is there, but NCCL_NET_PLUGIN asks for another
    tree.efa(1)
    r = check("efa", 1, env={"LD_LIBRARY_PATH": str(tree.root / "plug"), "NCCL_NET_PLUGIN": "ofi"}, roots=tree.roots)
    assert r.problems and "(NCCL_NET_PLUGIN=ofi: looked for libnccl-net-ofi.so or ofi) not found" in r.problems[0]
    lib = plugin(tree.root / "plug", "libnccl-net-ofi.so")
    r = check("efa", 1, env={"LD_LIBRARY_PATH": str(tree.root / "plug"), "NCCL_NET_PLUGIN": "ofi"}, roots=tree.roots)
    assert r.ok and f"net plugin {lib} (ncclNetPlugin_v8, NCCL_NET_PLUGIN=ofi)" in r.found


@needs_cc
def test_the_tuner_plugin_named_must_be_there_and_load(tree: Tree) -> None:
    """NCCL_TUNER_PLUGIN as a path (the EFA Slurm job's), as a file name on the loader's path
    (TCPXO's libnccl-tuner.so) and as a name (libnccl-tuner-<name>.so): each looked for, named."""
    plug = tree.root / "plug"
    plugin(plug)
    tree.efa(1)
    tuner = tree.root / "opt" / "libnccl-ofi-tuner.so"
    env = {"LD_LIBRARY_PATH": str(plug), "NCCL_TUNER_PLUGIN": str(tuner)}
    r = check("efa", 1, env=env, roots=tree.roots)
    assert r.problems == [
        f"tuner plugin NCCL_TUNER_PLUGIN={tuner} (looked for {tuner}) not found on LD_LIBRARY_PATH ({plug}) "
        "nor in the loader's directories"
    ]
    _so(tuner, "int ncclTunerPlugin_v3 = 3;\n")
    r = check("efa", 1, env=env, roots=tree.roots)
    assert r.ok and f"tuner plugin {tuner}" in r.found
    # A bare file name is looked up on LD_LIBRARY_PATH; a name gets NCCL's prefix and suffix.
    _so(plug / "libnccl-tuner.so", "int ncclTunerPlugin_v3 = 3;\n")
    r = check("efa", 1, env={"LD_LIBRARY_PATH": str(plug), "NCCL_TUNER_PLUGIN": "libnccl-tuner.so"}, roots=tree.roots)
    assert r.ok and f"tuner plugin {plug / 'libnccl-tuner.so'}" in r.found
    r = check("efa", 1, env={"LD_LIBRARY_PATH": str(plug), "NCCL_TUNER_PLUGIN": "ofi"}, roots=tree.roots)
    assert r.problems and "(looked for libnccl-tuner-ofi.so or ofi) not found" in r.problems[0]
    # A file that is not a shared library is named with the loader's error.
    (plug / "libnccl-tuner-bad.so").write_text("not an ELF file")
    r = check("efa", 1, env={"LD_LIBRARY_PATH": str(plug), "NCCL_TUNER_PLUGIN": "bad"}, roots=tree.roots)
    assert r.problems and r.problems[0].startswith(
        f"tuner plugin NCCL_TUNER_PLUGIN=bad (looked for libnccl-tuner-bad.so or bad): {plug / 'libnccl-tuner-bad.so'} cannot be loaded: "
    )


@needs_cc
def test_efa_devices_this_container_cannot_open_are_not_counted(tree: Tree) -> None:
    lib = plugin(tree.root / "plug")
    tree.efa(4, with_dev_nodes=1)
    r = check("efa", 4, env={"LD_LIBRARY_PATH": str(lib.parent)}, roots=tree.roots)
    assert len(r.problems) == 1
    assert r.problems[0].startswith("EFA: 1 of 4 expected EFA devices are usable here (4 in sysfs;")
    assert "vpc.amazonaws.com/efa: 4" in r.problems[0]


@needs_cc
def test_tcpxo_names_missing_and_down_nics_and_waits_for_rxdm(tree: Tree) -> None:
    lib = plugin(tree.root / "nvidia" / "lib64")
    env = {"LD_LIBRARY_PATH": str(lib.parent)}
    tree.nics([f"eth{i}" for i in (0, 1, 2, 3, 4, 6, 7, 8)], down=("eth7",))
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    r = check("tcpxo", 8, env=env, roots=tree.roots, sleep=sleep, clock=lambda: now[0], rxdm_wait_s=10)
    assert not r.ok
    assert "GPU NIC(s) eth5 missing from" in r.message()
    assert "GPU NIC(s) eth7 are down" in r.message()
    assert any(
        p.startswith("TCPXO receive-datapath manager (RxDM) not reachable: no listening socket @rxdm_uds_nic_mapping")
        and "after 10 s" in p
        for p in r.problems
    )
    assert now[0] == pytest.approx(10.0)  # it waited the whole time before giving up


@needs_cc
def test_tcpxo_passes_once_rxdm_listens(tree: Tree) -> None:
    lib = plugin(tree.root / "nvidia" / "lib64")
    tree.nics([f"eth{i}" for i in range(9)])
    tree.rxdm("@rxdm_uds_nic_mapping", listening=False)  # a connected socket of that name does not count
    calls = []

    def sleep(s: float) -> None:
        calls.append(s)
        if len(calls) == 2:
            tree.rxdm()  # the daemon finishes its start-up during the wait

    r = check(
        "tcpxo",
        8,
        env={"LD_LIBRARY_PATH": str(lib.parent)},
        roots=tree.roots,
        sleep=sleep,
        clock=lambda: float(len(calls)),
        rxdm_wait_s=60,
    )
    assert r.ok, r.problems
    assert "RxDM listening on rxdm_uds_nic_mapping" in r.found
    assert len(calls) == 2


@needs_cc
def test_tcpxo_file_based_rxdm_socket(tree: Tree) -> None:
    lib = plugin(tree.root / "nvidia" / "lib64")
    tree.nics([f"eth{i}" for i in range(9)])
    tree.rxdm("/run/rxdm/rxdm_uds_nic_mapping")
    env = {"LD_LIBRARY_PATH": str(lib.parent), "FILE_BASED_UDS_PATH_PREFIX": "/run/rxdm"}
    assert check("tcpxo", 8, env=env, roots=tree.roots, rxdm_wait_s=0).ok
    # The abstract name does not satisfy a daemon told to use files, and vice versa.
    env["FILE_BASED_UDS_PATH_PREFIX"] = "/elsewhere"
    r = check("tcpxo", 8, env=env, roots=tree.roots, rxdm_wait_s=0)
    assert any("/elsewhere/rxdm_uds_nic_mapping" in p for p in r.problems)


@needs_cc
def test_tcpx_reads_the_nics_nccl_is_told_to_use(tree: Tree) -> None:
    lib = plugin(tree.root / "nvidia" / "lib64")
    tree.nics(["eth0", "enp6s0", "enp12s0"])
    env = {"LD_LIBRARY_PATH": str(lib.parent), "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": "enp6s0,enp12s0"}
    r = check("tcpx", 4, env=env, roots=tree.roots)
    assert r.problems == ["NCCL_GPUDIRECTTCPX_SOCKET_IFNAME='enp6s0,enp12s0' names 2 GPU NICs, the instance has 4"]
    # Unset, the catalog's list (eth1..eth4) is what NCCL gets from the launcher.
    r = check("tcpx", 4, env={"LD_LIBRARY_PATH": str(lib.parent)}, roots=tree.roots)
    assert any("GPU NIC(s) eth1, eth2, eth3, eth4 missing" in p for p in r.problems)


@needs_cc
def test_gib_needs_active_roce_ports(tree: Tree) -> None:
    lib = plugin(tree.root / "gib" / "lib64")
    env = {"LD_LIBRARY_PATH": str(lib.parent)}
    tree.rdma([f"mlx5_{i}" for i in range(8)], "Ethernet", down=("mlx5_3",))
    r = check("rdma", 8, env=env, roots=tree.roots)
    assert r.problems == [
        f"RoCE: 7 of 8 expected devices with an ACTIVE port under {tree.roots.sys}/class/infiniband "
        "(not active: mlx5_3)"
    ]


def test_infiniband_counts_ib_ports_only_and_needs_no_plugin(tree: Tree) -> None:
    tree.rdma([f"mlx5_ib{i}" for i in range(8)], "InfiniBand")
    tree.rdma(["mlx5_an0"], "Ethernet")  # accelerated networking, not the GPU fabric
    r = check("infiniband", 8, env={}, roots=tree.roots)
    assert r.ok, r.problems
    r = check("infiniband", 9, env={}, roots=tree.roots)
    assert r.problems == [
        f"InfiniBand: 8 of 9 expected devices with an ACTIVE port under {tree.roots.sys}/class/infiniband"
    ]


def test_an_infiniband_port_below_the_types_rate_is_named(tree: Tree) -> None:
    # aznhc's check_hw_ib 400 mlx5_ibN:1 on ND v5 (azurehpc-health-checks conf/nd96isr_h100_v5.conf):
    # a port that trained down to HDR carries NCCL at half the rate.
    tree.rdma([f"mlx5_{i}" for i in range(8)], "InfiniBand", rates={"mlx5_5": "200 Gb/sec (4X HDR)"})
    assert fabric_check.port_rate("Standard_ND96isr_H100_v5") == 400
    r = check("infiniband", 8, rate_gbps=400, env={}, roots=tree.roots)
    assert r.problems == [
        "InfiniBand: mlx5_5 port 1 at 200 Gb/sec (4X HDR), below the 400 Gb/sec each port of this type runs at"
    ]
    assert check("infiniband", 8, env={}, roots=tree.roots).ok  # no rate asked: the count alone
    with pytest.raises(FabricCheckFailed, match="mlx5_5 port 1 at 200 Gb/sec"):
        fabric_check.require("Standard_ND96isr_H100_v5", env={}, roots=tree.roots)


def test_require_raises_with_the_instance_types_count(tree: Tree) -> None:
    with pytest.raises(FabricCheckFailed, match=r"EFA is missing: .* \(expected 32:"):
        fabric_check.require("p5.48xlarge", env={}, roots=tree.roots)
    assert fabric_check.expectation("p5en.48xlarge") == ("efa", 16)
    assert fabric_check.expectation("a3-megagpu-8g") == ("tcpxo", 8)


def test_every_catalog_fabric_has_a_check_and_every_type_an_expectation() -> None:
    checks, _ = load_fabric_facts()
    cat = load_catalog()
    for name, it in cat.instances.items():
        fabric, expect = fabric_check.expectation(name)
        assert fabric in checks
        assert expect > 0, name
        if checks[fabric].devices == "netdev":
            nics = checks[fabric].fabric_env[str(checks[fabric].nics_env)].split(",")
            assert len(nics) == expect, f"{name}: the catalog's NIC list and gpu_nics disagree"


def test_cli_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        fabric_check.main(["--fabric", "efa"])
    assert exc.value.code == 2
    assert "give --instance-type, or both --fabric and --expect" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        fabric_check.main(["--instance-type", "p9.mega"])
    assert "--instance-type: instance type 'p9.mega' is not in the catalog" in capsys.readouterr().err
