"""The ND v5 NCCL topology written from the catalog's facts, and NCCL_IB_HCA found at start.

The topology's facts are Azure/azhpc-images topology/ndv5-topo.xml's (catalog source azhpc-ndv5-topo);
the expectation below restates them, so a change to the catalog that departs from the published
pairing fails here. The NCCL_IB_HCA lines run for real in bash over a sysfs tree made in tmp_path.
"""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_cluster.components import nccl_topology
from gpu_cluster.components.catalog import CATALOG_PATH, CatalogError
from gpu_cluster.workloads.launch import fabric

# azhpc-images topology/ndv5-topo.xml: NUMA node -> (GPU, HCA) behind each of its four switches.
PUBLISHED = {
    "0": [("0001", "0101"), ("0002", "0102"), ("0003", "0103"), ("0008", "0104")],
    "1": [("0009", "0105"), ("000a", "0106"), ("000b", "0107"), ("000c", "0108")],
}


def test_nd_h100_and_h200_share_the_published_ndv5_pairing_and_mi300x_has_none() -> None:
    h100 = nccl_topology.for_instance("Standard_ND96isr_H100_v5")
    assert h100 is not None and h100 is nccl_topology.for_instance("Standard_ND96isr_H200_v5")
    assert nccl_topology.for_instance("Standard_ND96isr_MI300X_v5") is None
    assert nccl_topology.for_instance("p5.48xlarge") is None
    system = ET.fromstring(h100.xml())
    assert system.tag == "system" and system.get("version") == "1"
    cpus = system.findall("cpu")
    assert [c.get("numaid") for c in cpus] == ["0", "1"]
    assert cpus[0].get("affinity") == "00000000,0000ffff,ffffffff"
    assert cpus[1].get("affinity") == "ffffffff,ffff0000,00000000"
    switches = []
    for cpu in cpus:
        assert (cpu.get("arch"), cpu.get("vendor"), cpu.get("familyid"), cpu.get("modelid")) == (
            "x86_64",
            "GenuineIntel",
            "6",
            "143",
        )
        pairs = []
        for sw in cpu.findall("pci"):
            switches.append(sw.get("busid"))
            assert sw.get("class") == "0x060400"
            gpu, hca = sw.findall("pci")
            assert (gpu.get("class"), hca.get("class")) == ("0x030200", "0x020700")
            for dev in (sw, gpu, hca):
                assert (dev.get("link_speed"), dev.get("link_width")) == ("32.0 GT/s PCIe", "16")
            pairs.append((gpu.get("busid", "")[:4], hca.get("busid", "")[:4]))
        assert pairs == PUBLISHED[cpu.get("numaid", "")]
    assert switches == [f"ffff:ff:0{i}.0" for i in range(1, 9)]


def _doc(edit: Any) -> dict[str, Any]:
    doc = yaml.safe_load(Path(CATALOG_PATH).read_text())
    edit(doc["nccl_topologies"]["ndv5"], doc)
    return dict(doc)


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda t, d: t.update(sources=["nowhere"]), "unknown source id 'nowhere'"),
        (lambda t, d: t.update(sources=[]), "sources: missing"),
        (lambda t, d: t["numa"][1]["pairs"].append(["0001:00:00.0", "0109:00:00.0"]), "a bus id appears twice"),
        (
            lambda t, d: d["nccl_topologies"].update(other={**t}),
            "already has topology",
        ),
    ],
)
def test_a_bad_topology_in_the_catalog_names_its_path(edit: Any, said: str) -> None:
    with pytest.raises(CatalogError, match=said):
        nccl_topology.parse(_doc(edit))


def _sysfs(root: Path, devices: dict[str, str]) -> Path:
    base = root / "infiniband"
    for dev, layer in devices.items():
        port = base / dev / "ports" / "1"
        port.mkdir(parents=True)
        (port / "link_layer").write_text(layer + "\n")
    return base


def _run(base: Path, preset: str | None = None) -> subprocess.CompletedProcess[str]:
    script = "\n".join(["set -eu", *fabric.ib_hca_lines("InfiniBand", str(base)), 'printf "%s" "$NCCL_IB_HCA" > out'])
    env = {"PATH": "/usr/bin:/bin", **({"NCCL_IB_HCA": preset} if preset else {})}
    return subprocess.run(["bash", "-c", script], cwd=base.parent, env=env, capture_output=True, text=True)


def test_nccl_ib_hca_is_the_infiniband_hcas_only_and_never_the_ethernet_vf(tmp_path: Path) -> None:
    # An ND v5 node as the DOCA driver names it: eight InfiniBand HCAs and the accelerated-networking
    # VF with an Ethernet port (mlx5_8 in aks-rdma-infiniband's rdma_test.sh).
    devices = {f"mlx5_{i}": "InfiniBand" for i in range(8)} | {"mlx5_8": "Ethernet"}
    base = _sysfs(tmp_path, devices)
    done = _run(base)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out").read_text() == "=" + ",".join(f"mlx5_{i}" for i in range(8))
    assert "NCCL_IB_HCA==mlx5_0," in done.stdout
    # One the job was given (--env NCCL_IB_HCA=...) is kept as it is.
    done = _run(base, preset="mlx5_3")
    assert done.returncode == 0 and (tmp_path / "out").read_text() == "mlx5_3"


def test_a_node_without_an_infiniband_hca_stops_the_job_saying_where_it_looked(tmp_path: Path) -> None:
    base = _sysfs(tmp_path, {"mlx5_0": "Ethernet"})
    done = _run(base)
    assert done.returncode == 1
    assert "no InfiniBand HCA on" in done.stderr and str(base) in done.stderr
