"""What an Azure validation pod runs with on AKS, per ND v5 size, against the AKS references.

The reference values below are read from the references' files (cited per table) and written
here as the expectation, so the test fails when the catalog drifts from them. What the catalog
leaves out on purpose (mpirun's OMPI_* switches, UCX_* under torchrun, SHARP without its plugin, the
topology file only ai-infra's own image has) is listed in OMITTED with the reason the catalog's
comment gives.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import pytest

from gpu_cluster.components.catalog import load_catalog
from gpu_cluster.components.contract import ClusterOutputs, read_outputs
from gpu_cluster.components.engine import run_offline
from gpu_cluster.components.spec import read_stack_file
from gpu_cluster.workloads.launch import validation as vjob
from gpu_cluster.workloads.validate import commands

# Azure/ai-infrastructure-on-azure infrastructure_validations/aks/NCCL/helm/nccl-test/values.yaml
# at a01b073, lines 38-68 (the chart's defaults are for H100/H200, line 29).
AI_INFRA_AKS_NCCL = {
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    "NCCL_SOCKET_IFNAME": "eth0",
    "NCCL_IB_PCI_RELAXED_ORDERING": "1",
    "NCCL_IB_QPS_PER_CONNECTION": "4",
    "NCCL_IGNORE_CPU_AFFINITY": "1",
    "NCCL_P2P_NET_CHUNKSIZE": "524288",
    "NCCL_PXN_DISABLE": "1",
    "NCCL_MIN_NCHANNELS": "32",
}
# Azure/aks-rdma-infiniband at 700dabb, its NCCL MPIJob: templates/mpi-job.yaml lines 51-53 and
# 96-107 (the ND v5 topology from ConfigMap nvidia-topology, mounted at /opt/nvidia-topology),
# values.yaml line 33 (NCCL_NET_GDR_LEVEL SYS).
AKS_RDMA_NCCL = {
    "NCCL_NET_GDR_LEVEL": "SYS",
    "NCCL_TOPO_FILE": "/opt/nvidia-topology/topo.xml",
}
# Azure/aks-rdma-infiniband tests/scenarios/k8s at 700dabb: values.yaml lines 33-34,
# templates/rccl-mpi-job.yaml lines 51-58, rccl/mpi-job.yaml line 34.
AKS_RDMA_RCCL = {
    "NCCL_NET_GDR_LEVEL": "SYS",
    "NCCL_IB_DISABLE": "0",
    "NCCL_SOCKET_IFNAME": "eth0",
    "RCCL_MSCCL_ENABLE": "0",
}
AKS_RDMA_RCCL_LIBRARY = "/opt/rocm/lib"  # rccl-mpi-job.yaml: -x LD_LIBRARY_PATH=/opt/rocm/lib
OMITTED = {
    "OMPI_ALLOW_RUN_AS_ROOT": "mpirun's; the job starts with torchrun",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "mpirun's",
    "UCX_TLS": "UCX carries MPI's traffic; torchrun's NCCL uses its own verbs transport",
    "UCX_NET_DEVICES": "the same",
    "NCCL_COLLNET_ENABLE": "CollNet needs the NCCL-SHARP plugin, which the job does not load",
    "SHARP_SMX_UCX_INTERFACE": "SHARP's, the same",
    "SHARP_COLL_ENABLE_SAT": "SHARP's, the same",
    "SHARP_COLL_LOG_LEVEL": "SHARP's, the same",
    "SHARP_COLL_ENABLE_PCI_RELAXED_ORDERING": "SHARP's, the same",
}
SKUS = {
    "Standard_ND96isr_H100_v5": ("azure-h100-aks", {**AI_INFRA_AKS_NCCL, **AKS_RDMA_NCCL}),
    # No bundled H200 stack: the H100 stack's outputs with the H200 size (one pool, same fabric,
    # the same topology file: azhpc-images setup_sku_customizations.sh line 33).
    "Standard_ND96isr_H200_v5": ("azure-h100-aks", {**AI_INFRA_AKS_NCCL, **AKS_RDMA_NCCL}),
    "Standard_ND96isr_MI300X_v5": ("azure-mi300x-aks", AKS_RDMA_RCCL),
}
_OUTS: dict[str, ClusterOutputs] = {}


def _outputs(stack: str, sku: str) -> ClusterOutputs:
    if stack not in _OUTS:
        name, raw = read_stack_file(stack)
        _OUTS[stack] = read_outputs(run_offline(name, raw).outputs)
    return dataclasses.replace(_OUTS[stack], instance_type=sku)


def _args(**over: Any) -> argparse.Namespace:
    base: dict[str, Any] = dict(
        python=None,
        image=None,
        env=[],
        run_arg=[],
        cpu=False,
        procs_per_node=None,
        time_limit=60,
        rdzv_port=29500,
        no_drain=False,
        shared=False,
    )
    return argparse.Namespace(**{**base, **over})


def _container(outs: ClusterOutputs) -> dict[str, Any]:
    r = commands.render_run(outs, _args(), "20261201t070000z-ab12")
    assert r.jobset is not None
    pod = r.jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    return dict(c)


@pytest.mark.parametrize("sku", sorted(SKUS))
def test_aks_pod_env_is_the_aks_references(sku: str) -> None:
    stack, reference = SKUS[sku]
    c = _container(_outputs(stack, sku))
    env = {e["name"]: e.get("value") for e in c["env"]}
    missing = {k: v for k, v in reference.items() if env.get(k) != v}
    assert missing == {}, f"{sku}: the pod lacks the AKS reference's {missing}"
    assert not set(OMITTED) & set(env)
    # The HPC VM image's names and files never reach an AKS pod (AZURE.md 2.3: mlx5_ib* on the VM).
    assert not [k for k, v in env.items() if "mlx5_ib" in str(v) or "/opt/microsoft" in str(v)]
    script = c["command"][2]
    # NCCL_IB_HCA is found at start on every ND size: the InfiniBand HCAs only (the AKS RDMA test's
    # selection), never the accelerated-networking VF's Ethernet port; one the job is given wins.
    assert 'if [ -z "$${NCCL_IB_HCA:-}" ]' in script
    assert "/sys/class/infiniband/*" in script and "NCCL_IB_HCA" not in env
    if sku.endswith("MI300X_v5"):
        assert f"export LD_LIBRARY_PATH={AKS_RDMA_RCCL_LIBRARY}" in script
        assert env["HSA_NO_SCRATCH_RECLAIM"] == "1"  # aznhc's RCCL test: the ROCm runtime's
        assert "NCCL_TOPO_FILE" not in env  # no topology file is published for MI300X
    else:
        assert "RCCL_MSCCL_ENABLE" not in env and "/opt/rocm" not in script
        # The topology's ConfigMap is mounted where NCCL_TOPO_FILE points.
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        pod = commands.render_run(_outputs(stack, sku), _args(), "20261201t070000z-ab12").jobset
        assert pod is not None
        volumes = pod["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["volumes"]
        assert {"name": mounts["/opt/nvidia-topology"], "configMap": {"name": "nvidia-topology"}} in volumes


@pytest.mark.parametrize("sku", sorted(SKUS))
def test_aks_pod_asks_the_vendors_gpu_and_one_rdma_ib_per_hca(sku: str) -> None:
    stack, _ = SKUS[sku]
    c = _container(_outputs(stack, sku))
    it = load_catalog().get(sku)
    want = "amd.com/gpu" if it.accelerator.vendor == "amd" else "nvidia.com/gpu"
    for side in ("limits", "requests"):
        got = c["resources"].get(side, {})
        assert got.get(want) == "8" and got.get("rdma/ib") == "8", (side, got)
        assert not ({"nvidia.com/gpu", "amd.com/gpu"} - {want}) & set(got)


def test_mi300x_pod_runs_amds_rocm_pytorch_by_digest_and_the_nvidia_sizes_ngc() -> None:
    mi = _container(_outputs("azure-mi300x-aks", "Standard_ND96isr_MI300X_v5"))
    # AMD's install page for ROCm 7.2.4 links this digest for the tag (catalog rocm-pytorch-install).
    assert mi["image"] == (
        "docker.io/rocm/pytorch:rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.9.1"
        "@sha256:7fe531fa185af260352fe7fbb3fa64ad749abe72adf0600a648c4692801b125a"
    )
    assert vjob.pinned(mi["image"])
    h100 = _container(_outputs("azure-h100-aks", "Standard_ND96isr_H100_v5"))
    assert h100["image"] == vjob.DEFAULT_IMAGE and "rocm" not in h100["image"]


def test_vm_slurm_env_keeps_the_hpc_images_names() -> None:
    from gpu_cluster.workloads.launch import fabric

    ib = fabric.wiring("infiniband")
    # aznhc customTests/azure_nccl_allreduce.nhc at 0e0a1ac: the HPC image's topology file and eth0 UCX.
    vm = ib.slurm.for_collectives("nccl").env
    assert vm["NCCL_TOPO_FILE"] == "/opt/microsoft/ndv5-topo.xml" and vm["UCX_NET_DEVICES"] == "eth0"
    assert not [v for v in ib.slurm.for_collectives("rccl").env.values() if "mlx5_0" in v]


def test_a_bad_collectives_part_or_runtime_image_names_its_path() -> None:
    import copy

    import yaml

    from gpu_cluster.components.catalog import CATALOG_PATH, CatalogError, parse_runtime_images
    from gpu_cluster.workloads.launch import fabric

    with open(CATALOG_PATH, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh)
    bad = copy.deepcopy(doc)
    bad["fabrics"]["infiniband"]["pod"]["collectives"]["gloo"] = {"env": {}, "source": "azure-nhc"}
    with pytest.raises(CatalogError, match=r"fabrics\.infiniband\.pod\.collectives\.gloo: .*allowed: nccl, rccl"):
        fabric.parse(bad)
    bad = copy.deepcopy(doc)
    bad["fabrics"]["infiniband"]["slurm"]["collectives"]["rccl"]["source"] = "nowhere"
    with pytest.raises(CatalogError, match=r"fabrics\.infiniband\.slurm\.collectives\.rccl\.source: .*'nowhere'"):
        fabric.parse(bad)
    bad = copy.deepcopy(doc)
    bad["runtime_images"]["rocm"]["digest"] = "sha256:abc"
    with pytest.raises(CatalogError, match=r"runtime_images\.rocm\.digest: 'sha256:abc'"):
        parse_runtime_images(bad)
    bad["runtime_images"] = {"metal": doc["runtime_images"]["rocm"]}
    with pytest.raises(CatalogError, match=r"runtime_images\.metal: .*allowed: cuda, rocm"):
        parse_runtime_images(bad)
