"""The catalog's Azure sizes: InfiniBand facts, and RCCL's environment on MI300X (not the ND v5 topology)."""

from __future__ import annotations

import copy

import pytest
import yaml

from gpu_cluster.components.catalog import CATALOG_PATH, CatalogError, load_catalog, parse_catalog


def test_nd_sizes_are_infiniband_with_eight_400g_ports_per_node() -> None:
    cat = load_catalog()
    for name in ("Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5", "Standard_ND96isr_MI300X_v5"):
        it = cat.get(name)
        assert (it.cloud, it.network.fabric, it.network.gpu_nics, it.accelerator.count) == ("azure", "infiniband", 8, 8)
        assert it.network.total_gbps == 3200


def test_mi300x_runs_rccl_without_the_nvidia_topology_file() -> None:
    from gpu_cluster.workloads.launch import fabric

    cat = load_catalog()
    h100 = cat.get("Standard_ND96isr_H100_v5").software
    mi = cat.get("Standard_ND96isr_MI300X_v5").software
    assert (mi.gpu_runtime, mi.collectives) == ("rocm", "rccl")
    assert mi.fabric_env["HSA_NO_SCRATCH_RECLAIM"] == "1"
    # The fabric's own part is what VM and AKS, NCCL and RCCL share; it names no topology file.
    assert h100.fabric_env.items() <= mi.fabric_env.items() and "NCCL_TOPO_FILE" not in h100.fabric_env
    ib = fabric.wiring("infiniband")
    # The HPC VM image's topology file is NCCL's on the VM only (aznhc), never RCCL's.
    assert ib.slurm.for_collectives("nccl").env["NCCL_TOPO_FILE"] == "/opt/microsoft/ndv5-topo.xml"
    assert "NCCL_TOPO_FILE" not in ib.slurm.for_collectives("rccl").env
    # On AKS no pod points at a file its image does not have.
    assert not any("NCCL_TOPO_FILE" in ib.pod.for_collectives(c).env for c in ("nccl", "rccl"))


def test_unsetting_a_name_the_fabric_does_not_set_is_a_catalog_error() -> None:
    with open(CATALOG_PATH, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh)
    bad = copy.deepcopy(doc)
    bad["instances"]["Standard_ND96isr_MI300X_v5"]["software"]["env_unset"] = ["NCCL_NOPE"]  # not the fabric's
    with pytest.raises(CatalogError, match=r"Standard_ND96isr_MI300X_v5.*software\.env_unset"):
        parse_catalog(bad)
