"""Slurm on Azure (components/azure/orchestration_slurm.py, slurm_config.py): what the offline run
hands Azure and Slurm, held to the references each value is cited from, and the bundled stack's
plan, batch script and rehearsal."""

from __future__ import annotations

import base64
import ipaddress
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from gpu_cluster.components.azure.common import address_plan
from gpu_cluster.components.azure.orchestration_slurm import CONTROLLER_HOST, PARTITION_TAG, controller_ip
from gpu_cluster.components.azure.slurm_config import SlurmLayout, gres_conf, node_conf, slurm_conf
from gpu_cluster.components.engine import OfflineRun
from gpu_cluster.components.spec import parse_spec
from gpu_cluster.components.spec_model import SSH_KEY_PLACEHOLDER
from tests.components.azure.conftest import azure_obj, named

ROOT = Path(__file__).resolve().parents[3]
VMSS = "azure-native:compute:VirtualMachineScaleSet"
VM = "azure-native:compute:VirtualMachine"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB9kZ3VzZXJrZXlmb3J0ZXN0c29ubHk user@host"


def slurm_obj(**over: Any) -> dict[str, Any]:
    return azure_obj(orchestration={"kind": "slurm", "ssh_public_key": KEY}, **over)


@pytest.fixture
def slurm_run(azure_run: Callable[..., OfflineRun]) -> OfflineRun:
    return azure_run(slurm_obj())


def _decoded(b64: str) -> str:
    return base64.b64decode(b64).decode()


def test_the_gpu_nodes_are_one_uniform_single_placement_group_scale_set(slurm_run: OfflineRun) -> None:
    # InfiniBand is shared only inside one Uniform scale set with singlePlacementGroup true
    # (setup-infiniband.md; orchestration-modes.md: Flexible has none; AZURE.md §2.1-2.2).
    (ss,) = slurm_run.of_type(VMSS)
    i = ss.inputs
    assert (i["orchestrationMode"], i["singlePlacementGroup"], i["overprovision"]) == ("Uniform", True, False)
    assert i["sku"] == {"name": "Standard_ND96isr_H100_v5", "tier": "Standard", "capacity": 4}
    assert i["zones"] == ["2"] and i["upgradePolicy"] == {"mode": "Manual"}
    assert i["tags"][PARTITION_TAG] == "gpu"
    profile = i["virtualMachineProfile"]
    # The HPC image (azhpc-images README: microsoft-dsvm ubuntu-hpc 2404).
    assert profile["storageProfile"]["imageReference"] == {
        "publisher": "microsoft-dsvm",
        "offer": "ubuntu-hpc",
        "sku": "2404",
        "version": "latest",
    }
    # One Ethernet NIC, accelerated, no public address: the IB ports are the platform's (AZURE.md §0.2).
    (nic,) = profile["networkProfile"]["networkInterfaceConfigurations"]
    assert nic["enableAcceleratedNetworking"] is True and nic["primary"] is True
    assert all("publicIPAddressConfiguration" not in ip for ip in nic["ipConfigurations"])
    # Keys only (Checkov CKV_AZURE_49).
    linux = profile["osProfile"]["linuxConfiguration"]
    assert linux["disablePasswordAuthentication"] is True
    assert linux["ssh"]["publicKeys"][0]["keyData"] == KEY


def test_a_node_registers_as_a_dynamic_configless_slurmd_with_its_gpus(slurm_run: OfflineRun) -> None:
    (ss,) = slurm_run.of_type(VMSS)
    script = _decoded(ss.inputs["virtualMachineProfile"]["osProfile"]["customData"])
    spec = parse_spec(slurm_obj())
    ctl = controller_ip(address_plan(spec).system)
    # dynamic_nodes.shtml: slurmd -Z --conf "... Gres=gpu:2 Feature=f1"; configless_slurm.shtml:
    # --conf-server host[:port], 6817 by default.
    assert f'/usr/sbin/slurmd -D -Z --conf-server {ctl}:6817 --conf "Gres=gpu:8 Feature=gpu"' in script
    # configless_slurm.shtml Limitations: a ConditionPathExists would keep it from starting.
    assert "ConditionPathExists=\n" in script and "LimitMEMLOCK=infinity" in script
    # Managed Lustre from the file system's MGS, with Storage's options, at the spec's mount point.
    assert "10.0.64.4@tcp:/lustrefs /fsx lustre noatime,flock,_netdev 0 0" in script
    assert "apt-get install -y munge slurmd python3.12 python3.12-venv" in script
    assert "until [ -s /fsx/.gpuc-slurm/munge.key ]" in script


def test_the_controller_is_the_login_node_at_a_fixed_address_reached_through_bastion(
    slurm_run: OfflineRun,
) -> None:
    spec = parse_spec(slurm_obj())
    system = ipaddress.IPv4Network(address_plan(spec).system)
    nic = named(slurm_run, "azure-native:network:NetworkInterface", "-controller-nic")
    (ipc,) = nic.inputs["ipConfigurations"]
    # The first address Azure hands out in a subnet is .4 (x.x.x.0-3 reserved, virtual-networks-faq).
    assert ipc["privateIPAllocationMethod"] == "Static"
    assert ipc["privateIPAddress"] == str(system.network_address + 4)
    assert "publicIPAddress" not in ipc
    (vm,) = slurm_run.of_type(VM)
    assert vm.inputs["osProfile"]["computerName"] == CONTROLLER_HOST
    script = _decoded(vm.inputs["osProfile"]["customData"])
    assert f"SlurmctldHost={CONTROLLER_HOST}({system.network_address + 4})" in script
    assert "systemctl restart slurmctld" in script
    # Bastion: Standard with tunnelling (the CLI path), in AzureBastionSubnet (a /26).
    bastion = named(slurm_run, "azure-native:network:BastionHost", "-bastion")
    assert (bastion.inputs["sku"], bastion.inputs["enableTunneling"]) == ({"name": "Standard"}, True)
    subnet = named(slurm_run, "azure-native:network:Subnet", "-bastion")
    assert subnet.inputs["subnetName"] == "AzureBastionSubnet"
    assert ipaddress.IPv4Network(subnet.inputs["addressPrefix"]).prefixlen == 26
    access = slurm_run.outputs["access"]
    assert access["ssh_command"] == "ssh -p 50022 azureuser@127.0.0.1"
    assert access["tunnel_command"].startswith("az network bastion tunnel --name ")
    assert "--resource-port 22 --port 50022" in access["tunnel_command"]


def test_slurm_conf_carries_what_dynamic_gpu_nodes_need() -> None:
    lay = SlurmLayout(
        cluster="nd",
        controller_host="slurmctl",
        controller_ip="10.0.65.4",
        partition="gpu",
        max_nodes=4,
        gpus_per_node=8,
        mount_point="/fsx",
        lustre_mount_options="noatime,flock",
        lustre_fsname="lustrefs",
    )
    conf = dict(line.split("=", 1) for line in slurm_conf(lay).splitlines() if "=" in line and " " not in line)
    # dynamic_nodes.shtml: MaxNodeCount, cons_tres only; configless_slurm.shtml: enable_configless.
    assert conf["MaxNodeCount"] == "4" and conf["SelectType"] == "select/cons_tres"
    assert conf["SlurmctldParameters"] == "enable_configless" and conf["GresTypes"] == "gpu"
    assert "Nodeset=gpunodes Feature=gpu" in slurm_conf(lay)
    assert "PartitionName=gpu Nodes=gpunodes Default=YES MaxTime=INFINITE State=UP" in slurm_conf(lay)
    # gres.conf(5): a line without NodeName starts with Name; one device file per GPU.
    assert gres_conf(lay) == "Name=gpu File=/dev/nvidia[0-7]\n"
    assert node_conf(lay) == "Gres=gpu:8 Feature=gpu"


def test_the_offline_run_stands_a_placeholder_key_in(azure_run: Callable[..., OfflineRun]) -> None:
    run = azure_run(azure_obj(orchestration={"kind": "slurm"}))
    (ss,) = run.of_type(VMSS)
    keys = ss.inputs["virtualMachineProfile"]["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"]
    assert keys[0]["keyData"] == SSH_KEY_PLACEHOLDER


def _plan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpu_cluster", "plan", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=600,
    )


def test_the_bundled_stack_plans_with_liveness_holding_and_the_policy_pack_passing() -> None:
    done = _plan("stacks/Pulumi.azure-h100-slurm.yaml", "--policy")
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(
        r"liveness\s+holds: 11 checks \(scheduling 2/2, reachability 4/4, node-image 4/4, ordering 1/1\)", done.stdout
    )
    assert "0 mandatory and 0 advisory findings" in done.stdout


def test_the_batch_script_carries_the_azure_infiniband_environment(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gpu_cluster.workloads.validate", "render", "azure-h100-slurm", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    script = (tmp_path / "validate.sbatch").read_text()
    # AZURE.md §2.4 / the catalog's fabrics.infiniband.slurm: the ND v5 topology file the HPC image
    # ships, relaxed ordering, bootstrap over eth0, GDR at any distance.
    for line in (
        "export NCCL_TOPO_FILE=/opt/microsoft/ndv5-topo.xml",
        "export NCCL_IB_PCI_RELAXED_ORDERING=1",
        "export NCCL_SOCKET_IFNAME=eth0",
        "export NCCL_NET_GDR_LEVEL=SYS",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --partition=gpu",
    ):
        assert line in script, line
    # The HCAs found at start: only those whose port is InfiniBand (mlx5_an0 is Ethernet).
    assert "/ports/*/link_layer" in script and 'export NCCL_IB_HCA="=$gpuc_hcas"' in script
