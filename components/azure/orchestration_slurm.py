"""Orchestration with Slurm on Azure, owned by the stack: a controller VM (also the login node), the
GPU nodes as one Uniform scale set in a single placement group, and Azure Bastion as the way in.

Why the stack's own Slurm and not CycleCloud Workspace for Slurm: docs/azure.md, "Slurm". In short,
every resource here is a typed azure-native resource in the Pulumi state (CCWS creates its compute
nodes from CycleCloud, outside any deployment), so ``pulumi up``/``destroy`` and ``heal`` see the
nodes that run the jobs; the cost is that the stack, not Microsoft, owns the Slurm release
(Ubuntu's, components/azure/slurm_config.py) and its upgrades.

* GPU nodes: VMs share an InfiniBand fabric only inside one scale set in Uniform orchestration with
  ``singlePlacementGroup`` true (setup-infiniband.md at 76e3d22; the orchestration-mode comparison
  gives Flexible no InfiniBand, virtual-machine-scale-sets-orchestration-modes.md at 01e1fb7;
  AZURE.md §2.1-2.2). The orchestration mode is written out: CLI and PowerShell default to Flexible
  since November 2023 (proximity-placement-groups.md at 0c6223e). No IB interface is declared: the
  platform adds the eight NDR ports to every VM of the set (ND H100 v5 summary, AZURE.md §0.2).
* Image: the HPC image, ``microsoft-dsvm:ubuntu-hpc:2404:latest`` (Azure/azhpc-images README at
  8e9d055), which carries the NVIDIA driver, DOCA OFED, NCCL with the ND v5 topology file and the
  Managed Lustre client (azure-hpc-vm-images.md; AZURE.md §1.4). The controller runs it too, so that
  both ends install Slurm and Munge from one archive and mount Lustre with one client.
* Access: no public address on any VM; Azure Bastion (Standard, native-client tunnelling: "Connect
  to VMs using Azure CLI" is Standard and up, learn.microsoft.com/azure/bastion/configuration-settings)
  opens SSH to the controller. SSH keys only (Checkov CKV_AZURE_49 for the scale set, CKV_AZURE_178 /
  CKV_AZURE_149 for the VM).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import pulumi
import pulumi_azure_native as azure

from gpu_cluster.components.azure.common import cluster_tags
from gpu_cluster.components.azure.slurm_config import ADMIN_USER, SlurmLayout, controller_script, node_script
from gpu_cluster.components.azure.storage import FSNAME, MOUNT_OPTIONS
from gpu_cluster.components.spec import ClusterSpec

# The HPC image for ND v5 on Ubuntu 24.04 (azhpc-images README at 8e9d055: ubuntu-hpc 2404); Gen2,
# which the ND H100 v5 size requires ("requires the use of Generation 2 VMs and marketplace images").
IMAGE = {"publisher": "microsoft-dsvm", "offer": "ubuntu-hpc", "sku": "2404", "version": "latest"}
# The controller's size: the CPU size the AKS pools of this toolkit use (orchestration_aks.py
# CPU_POOL_SIZE, 4 vCPU, Ddsv5), enough for slurmctld of at most 100 nodes (rules.py) and a login shell.
CONTROLLER_SIZE = "Standard_D4ds_v5"
CONTROLLER_DISK_GIB = 128
CONTROLLER_HOST = "slurmctl"
# The GPU VMs' host names are this prefix and the instance id in base 36 (a Uniform scale set's
# computerNamePrefix); each registers under its host name as a dynamic node (slurm_config.py).
NODE_PREFIX = "gpu"
# The first address Azure gives out in a subnet: it reserves the first four (x.x.x.0-3) and the
# last (learn.microsoft.com/azure/virtual-network/virtual-networks-faq, "Are there any
# restrictions on using IP addresses within these subnets?"). The controller's is fixed, as the
# nodes' slurmd --conf-server names it.
FIRST_HOST = 4
# Bastion: Standard for `az network bastion tunnel` (configuration-settings: "Connect to VMs using
# Azure CLI", Standard and Premium); its public address is a Standard static one.
BASTION_SKU = "Standard"
TUNNEL_PORT = 50022
"""The local port the printed tunnel command listens on (our choice; any free port)."""
# OS disks: Premium SSD (the size pages: "Premium Storage: Supported", AZURE.md §1.1).
OS_DISK_TYPE = "Premium_LRS"
# Spot scale sets delete evicted VMs (VirtualMachineEvictionPolicyTypes Delete): a deallocated ND VM
# keeps counting against the family's vCPU quota.
SPOT_EVICTION = "Delete"
# The scale set's tag naming its Slurm partition (our own tag, not Azure's).
PARTITION_TAG = "slurm-partition"


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmArgs:
    spec: ClusterSpec
    resource_group: pulumi.Input[str]
    node_subnet: pulumi.Input[str]
    system_subnet: pulumi.Input[str]
    system_prefix: str
    """The system subnet's range: the controller takes its first host address."""
    bastion_subnet: pulumi.Input[str]
    lustre_mgs: pulumi.Input[str]
    lustre: pulumi.Resource
    """The file system: every host mounts it at boot, so the VMs wait for it."""
    ssh_public_key: str


def controller_ip(system_prefix: str) -> str:
    return str(ipaddress.IPv4Network(system_prefix).network_address + FIRST_HOST)


def layout(spec: ClusterSpec, system_prefix: str) -> SlurmLayout:
    return SlurmLayout(
        cluster=spec.name.lower(),
        controller_host=CONTROLLER_HOST,
        controller_ip=controller_ip(system_prefix),
        partition=spec.orchestration.partition,
        max_nodes=spec.compute.nodes,
        gpus_per_node=spec.instance.accelerator.count,
        mount_point=spec.storage.lustre.mount_point,
        lustre_mount_options=MOUNT_OPTIONS,
        lustre_fsname=FSNAME,
    )


def _linux(key: str) -> azure.compute.LinuxConfigurationArgs:
    return azure.compute.LinuxConfigurationArgs(
        disable_password_authentication=True,
        ssh=azure.compute.SshConfigurationArgs(
            public_keys=[azure.compute.SshPublicKeyArgs(path=f"/home/{ADMIN_USER}/.ssh/authorized_keys", key_data=key)]
        ),
    )


def _image() -> azure.compute.ImageReferenceArgs:
    return azure.compute.ImageReferenceArgs(**IMAGE)


class SlurmOrchestration(pulumi.ComponentResource):
    controller: azure.compute.VirtualMachine
    controller_nic: azure.network.NetworkInterface
    gpu_nodes: azure.compute.VirtualMachineScaleSet
    bastion: azure.network.BastionHost
    tunnel_command: pulumi.Output[str]
    ssh_command: str

    def __init__(self, name: str, args: SlurmArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-cluster:azure:SlurmOrchestration", name, None, opts)
        spec = args.spec
        tags = cluster_tags(spec)
        lay = layout(spec, args.system_prefix)
        after = pulumi.ResourceOptions(parent=self, depends_on=[args.lustre])
        self.controller_nic = azure.network.NetworkInterface(
            f"{name}-controller-nic",
            resource_group_name=args.resource_group,
            location=spec.region,
            ip_configurations=[
                azure.network.NetworkInterfaceIPConfigurationArgs(
                    name="ipconfig",
                    primary=True,
                    subnet=azure.network.SubnetArgs(id=args.system_subnet),
                    private_ip_allocation_method="Static",
                    private_ip_address=lay.controller_ip,
                )
            ],
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.controller = azure.compute.VirtualMachine(
            f"{name}-controller",
            resource_group_name=args.resource_group,
            location=spec.region,
            zones=[spec.zone],
            hardware_profile=azure.compute.HardwareProfileArgs(vm_size=CONTROLLER_SIZE),
            os_profile=azure.compute.OSProfileArgs(
                computer_name=CONTROLLER_HOST,
                admin_username=ADMIN_USER,
                linux_configuration=_linux(args.ssh_public_key),
                custom_data=pulumi.Output.from_input(args.lustre_mgs).apply(lambda m: controller_script(lay, str(m))),
                # No extension operations (Checkov CKV_AZURE_50): the stack installs none (cloud-init's
                # custom data does the setup), and "this may only be set to False when no extensions are
                # present on the virtual machine" (OSProfile.allowExtensionOperations, learn.microsoft.com/
                # dotnet/api/microsoft.azure.management.compute.models.osprofile.allowextensionoperations).
                # So nobody with extension write on the VM runs code as root on the login node through
                # ARM; the cost is that no extension (e.g. a policy-deployed Azure Monitor Agent) can be
                # added to it without turning this back on.
                allow_extension_operations=False,
            ),
            storage_profile=azure.compute.StorageProfileArgs(
                image_reference=_image(),
                os_disk=azure.compute.OSDiskArgs(
                    create_option="FromImage",
                    disk_size_gb=CONTROLLER_DISK_GIB,
                    managed_disk=azure.compute.ManagedDiskParametersArgs(storage_account_type=OS_DISK_TYPE),
                    delete_option="Delete",
                ),
            ),
            network_profile=azure.compute.NetworkProfileArgs(
                network_interfaces=[
                    azure.compute.NetworkInterfaceReferenceArgs(id=self.controller_nic.id, primary=True)
                ]
            ),
            tags=tags,
            opts=after,
        )
        self.gpu_nodes = self._create_gpu_nodes(name, spec, args, lay, tags, after)
        self.bastion = self._create_bastion(name, spec, args, tags)
        self.tunnel_command = pulumi.Output.format(
            "az network bastion tunnel --name {0} --resource-group {1} --target-resource-id {2} "
            "--resource-port 22 --port {3}",
            self.bastion.name,
            args.resource_group,
            self.controller.id,
            TUNNEL_PORT,
        )
        # Runs commands (validate submit, heal) while the tunnel command runs in another shell.
        self.ssh_command = f"ssh -p {TUNNEL_PORT} {ADMIN_USER}@127.0.0.1"
        self.register_outputs({"controller": self.controller.id, "gpu_nodes": self.gpu_nodes.id})

    def _create_gpu_nodes(
        self,
        name: str,
        spec: ClusterSpec,
        args: SlurmArgs,
        lay: SlurmLayout,
        tags: dict[str, str],
        opts: pulumi.ResourceOptions,
    ) -> azure.compute.VirtualMachineScaleSet:
        spot = spec.compute.capacity.type == "spot"
        return azure.compute.VirtualMachineScaleSet(
            f"{name}-gpu",
            resource_group_name=args.resource_group,
            location=spec.region,
            zones=[spec.zone],
            # InfiniBand: Uniform, one placement group (module notes; AZURE.md §2.2). Both are
            # create-time only: the mode cannot change, and a single placement group can only go false.
            orchestration_mode=azure.compute.OrchestrationMode.UNIFORM,
            single_placement_group=True,
            # No extra VMs at deployment: overprovisioning would start (and bill, and run cloud-init on)
            # ND VMs it then deletes (virtual-machine-scale-sets-placement-groups.md; AZURE.md §2.2).
            overprovision=False,
            # Nodes change only when asked (heal reimages or replaces one instance at a time).
            upgrade_policy=azure.compute.UpgradePolicyArgs(mode=azure.compute.UpgradeMode.MANUAL),
            # sku.capacity is a number in the SDK (AZURE.md §7).
            sku=azure.compute.SkuArgs(name=spec.compute.instance_type, tier="Standard", capacity=spec.compute.nodes),
            virtual_machine_profile=azure.compute.VirtualMachineScaleSetVMProfileArgs(
                os_profile=azure.compute.VirtualMachineScaleSetOSProfileArgs(
                    computer_name_prefix=NODE_PREFIX,
                    admin_username=ADMIN_USER,
                    linux_configuration=_linux(args.ssh_public_key),
                    custom_data=pulumi.Output.from_input(args.lustre_mgs).apply(lambda m: node_script(lay, str(m))),
                ),
                storage_profile=azure.compute.VirtualMachineScaleSetStorageProfileArgs(
                    image_reference=_image(),
                    os_disk=azure.compute.VirtualMachineScaleSetOSDiskArgs(
                        create_option="FromImage",
                        disk_size_gb=spec.compute.root_volume_gib,
                        managed_disk=azure.compute.VirtualMachineScaleSetManagedDiskParametersArgs(
                            storage_account_type=OS_DISK_TYPE
                        ),
                    ),
                ),
                network_profile=azure.compute.VirtualMachineScaleSetNetworkProfileArgs(
                    network_interface_configurations=[
                        # The Ethernet NIC only, accelerated, no public address (AZURE.md §2.2).
                        azure.compute.VirtualMachineScaleSetNetworkConfigurationArgs(
                            name="eth0",
                            primary=True,
                            enable_accelerated_networking=True,
                            ip_configurations=[
                                azure.compute.VirtualMachineScaleSetIPConfigurationArgs(
                                    name="ipconfig",
                                    primary=True,
                                    subnet=azure.compute.ApiEntityReferenceArgs(id=args.node_subnet),
                                )
                            ],
                        )
                    ]
                ),
                # No securityProfile.encryptionAtHost: as for the AKS GPU pool (orchestration_aks.py), the
                # ND size pages list no such support and it is create-time only; Checkov's CKV_AZURE_97 is
                # excepted with that reason (policies/checkov-azure-exceptions.yaml).
                priority="Spot" if spot else None,
                eviction_policy=SPOT_EVICTION if spot else None,
            ),
            # The partition the nodes join (read back by the liveness model, components/liveness/pools.py).
            tags={**tags, PARTITION_TAG: spec.orchestration.partition},
            opts=opts,
        )

    def _create_bastion(
        self, name: str, spec: ClusterSpec, args: SlurmArgs, tags: dict[str, str]
    ) -> azure.network.BastionHost:
        ip = azure.network.PublicIPAddress(
            f"{name}-bastion-ip",
            resource_group_name=args.resource_group,
            location=spec.region,
            sku=azure.network.PublicIPAddressSkuArgs(name="Standard"),
            public_ip_allocation_method="Static",
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        return azure.network.BastionHost(
            f"{name}-bastion",
            resource_group_name=args.resource_group,
            location=spec.region,
            sku=azure.network.SkuArgs(name=BASTION_SKU),
            enable_tunneling=True,
            ip_configurations=[
                azure.network.BastionHostIPConfigurationArgs(
                    name="bastion",
                    subnet=azure.network.SubResourceArgs(id=args.bastion_subnet),
                    public_ip_address=azure.network.SubResourceArgs(id=ip.id),
                )
            ],
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
