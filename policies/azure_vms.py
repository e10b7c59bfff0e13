"""Azure rules for the VMs a stack owns (Slurm on Azure: the GPU scale set and the controller VM,
components/azure/orchestration_slurm.py): SSH keys only, no public address on a node, and no VM
extension path into the controller.

Each mirrors the Checkov checks named in its ``ids`` (Checkov 3.3.30,
``checkov/terraform/checks/resource/azure``: AzureInstancePassword / VMDisablePasswordAuthentication
(CKV_AZURE_1), AzureScaleSetPassword (CKV_AZURE_49), AzureInstanceExtensions (CKV_AZURE_50),
AzureNetworkInterfacePublicIPAddressId (CKV_AZURE_119)); Checkov itself runs over the plan
translated to azurerm (tests/components/azure/checkov_compute.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpu_cluster.policies.core import Props, RuleContext, _get, _items, resource_rule

AZURE_VM = "azure-native:compute:VirtualMachine"
AZURE_VMSS = "azure-native:compute:VirtualMachineScaleSet"
AZURE_NIC = "azure-native:network:NetworkInterface"


def _os_profile(resource_type: str, props: Props) -> Props:
    raw = props.get("osProfile") if resource_type == AZURE_VM else _get(props, "virtualMachineProfile", "osProfile")
    return raw if isinstance(raw, Mapping) else {}


@resource_rule(
    name="azure-vm-ssh-keys-only",
    description="Linux VMs and scale sets take SSH keys only: password authentication off and a public key given",
    enforcement="mandatory",
    ids=("CKV_AZURE_1", "CKV_AZURE_49"),
    anchor="Checkov CKV_AZURE_1/49",
    resource_types=(AZURE_VM, AZURE_VMSS),
)
def check_ssh_keys_only(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    linux = _os_profile(resource_type, props).get("linuxConfiguration") or {}
    out = []
    if linux.get("disablePasswordAuthentication") is not True:
        out.append(
            f"osProfile.linuxConfiguration.disablePasswordAuthentication is "
            f"{linux.get('disablePasswordAuthentication')!r}, must be True"
        )
    if not _items(_get(linux, "ssh", "publicKeys")):
        out.append("osProfile.linuxConfiguration.ssh.publicKeys is empty: no key can log in")
    return out


@resource_rule(
    name="azure-vm-no-extensions",
    description="A VM the stack configures through cloud-init alone runs no VM extensions (no path for anyone "
    "with extension-write rights to run code as root)",
    enforcement="mandatory",
    ids=("CKV_AZURE_50",),
    anchor="Checkov CKV_AZURE_50",
    resource_types=(AZURE_VM,),
)
def check_no_extensions(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    allowed = _os_profile(resource_type, props).get("allowExtensionOperations")
    return [] if allowed is False else [f"osProfile.allowExtensionOperations is {allowed!r}, must be False"]


@resource_rule(
    name="azure-node-no-public-ip",
    description="No network interface of a node or scale set has a public IP address: nodes are reached "
    "through Azure Bastion (Slurm) or the API server (AKS)",
    enforcement="mandatory",
    ids=("CKV_AZURE_119",),
    anchor="Checkov CKV_AZURE_119",
    resource_types=(AZURE_NIC, AZURE_VMSS),
)
def check_no_public_ip(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    out = []
    if resource_type == AZURE_NIC:
        for i, ipc in enumerate(_items(props.get("ipConfigurations"))):
            if ipc.get("publicIPAddress"):
                out.append(f"ipConfigurations[{i}] ({ipc.get('name')}) has a public IP address")
        return out
    nics = _items(_get(props, "virtualMachineProfile", "networkProfile", "networkInterfaceConfigurations"))
    for n in nics:
        for ipc in _items(n.get("ipConfigurations")):
            if ipc.get("publicIPAddressConfiguration"):
                out.append(f"scale set NIC {n.get('name')} ({ipc.get('name')}) gives each instance a public IP address")
    return out
