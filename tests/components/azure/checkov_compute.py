"""Virtual machines, scale sets, NICs and Bastion as azurerm resources, for the Slurm stack's plan.

Same rule as tests/components/azure/checkov_plan.py: each recorded azure-native resource becomes the
azurerm resource that manages the same ARM object, each ARM property the azurerm argument that writes
it, and an ARM property left unset is left out (so Checkov sees azurerm's default). The names are
hashicorp/terraform-provider-azurerm's resource pages (``website/docs/r/<resource>.html.markdown``:
linux_virtual_machine at 053036d, linux_virtual_machine_scale_set at 00fe615; network_interface and
bastion_host read from the same tree), i.e. azurerm 4.x names. The checks Checkov 3.3.30 runs on
these types, and the argument each reads (checkov/terraform/checks/resource/azure/*.py):

* CKV_AZURE_1, CKV_AZURE_49, CKV_AZURE_149: ``disable_password_authentication``;
* CKV_AZURE_178: ``admin_ssh_key[0].public_key``; CKV_AZURE_179: ``provision_vm_agent``;
* CKV_AZURE_50: ``allow_extension_operations`` (the VM only); CKV_AZURE_97:
  ``encryption_at_host_enabled`` (the scale set only; CKV_AZURE_151 is Windows VMs');
* CKV_AZURE_92: ``storage_os_disk``/``storage_data_disk`` with ``vhd_uri`` (unmanaged disks);
* CKV_AZURE_118: ``enable_ip_forwarding`` on a NIC, azurerm 3.x's name (4.x: ``ip_forwarding_enabled``),
  so a NIC carries both when ARM sets it;
* graph checks CKV_AZURE_119 and CKV2_AZURE_39: a NIC joined to an ``azurerm_public_ip`` or with an
  ``ip_configuration.public_ip_address_id``, and the VM's ``boot_diagnostics``.

Only Linux is translated: a VM or scale set without ``linuxConfiguration`` stops the translation
rather than being judged as the wrong type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Values = dict[str, Any]


def _drop_none(d: Values) -> Values:
    return {k: v for k, v in d.items() if v is not None and v != []}


def _block(v: Mapping[str, Any] | None) -> list[Values]:
    return [dict(v)] if v else []


def _linux(os_profile: Mapping[str, Any], what: str) -> Values:
    """The OS profile's Linux arguments, shared by the VM and the scale set."""
    lc = os_profile.get("linuxConfiguration")
    assert lc, f"{what}: no linuxConfiguration; only Linux VMs and scale sets are translated"
    keys = (lc.get("ssh") or {}).get("publicKeys") or []
    user = os_profile.get("adminUsername")
    return _drop_none(
        {
            "admin_username": user,
            # ARM's default is passwords allowed when a password is given (azurerm: "When an
            # admin_password is specified disable_password_authentication must be set to false").
            "disable_password_authentication": lc.get(
                "disablePasswordAuthentication", not os_profile.get("adminPassword")
            ),
            "admin_ssh_key": [
                # The key's path is /home/<username>/.ssh/authorized_keys (the only one the agent takes).
                {
                    "username": str(k.get("path", "")).split("/")[2] if k.get("path") else user,
                    "public_key": k["keyData"],
                }
                for k in keys
                if k.get("keyData")
            ],
            "provision_vm_agent": lc.get("provisionVMAgent"),
            "patch_mode": (lc.get("patchSettings") or {}).get("patchMode"),
            "custom_data": os_profile.get("customData"),
        }
    )


def _security(profile: Mapping[str, Any]) -> Values:
    sec = profile.get("securityProfile") or {}
    uefi = sec.get("uefiSettings") or {}
    return _drop_none(
        {
            "encryption_at_host_enabled": sec.get("encryptionAtHost"),
            "secure_boot_enabled": uefi.get("secureBootEnabled"),
            "vtpm_enabled": uefi.get("vTpmEnabled"),
        }
    )


def _boot_diagnostics(profile: Mapping[str, Any]) -> list[Values]:
    """diagnosticsProfile.bootDiagnostics: the block, with no storage_account_uri for managed storage."""
    boot = (profile.get("diagnosticsProfile") or {}).get("bootDiagnostics") or {}
    if not boot.get("enabled"):
        return []
    return [{"storage_account_uri": boot.get("storageUri")}]


def _os_disk(storage: Mapping[str, Any]) -> list[Values]:
    disk = storage.get("osDisk") or {}
    return _block(
        _drop_none(
            {
                "caching": disk.get("caching"),
                "storage_account_type": (disk.get("managedDisk") or {}).get("storageAccountType"),
                "disk_size_gb": int(disk["diskSizeGB"]) if disk.get("diskSizeGB") is not None else None,
                "disk_encryption_set_id": ((disk.get("managedDisk") or {}).get("diskEncryptionSet") or {}).get("id"),
            }
        )
    )


def _image(storage: Mapping[str, Any]) -> list[Values]:
    image = storage.get("imageReference") or {}
    return _block(_drop_none({k: image.get(k) for k in ("publisher", "offer", "sku", "version")}))


def linux_virtual_machine_scale_set(inputs: Mapping[str, Any]) -> Values:
    profile = inputs.get("virtualMachineProfile") or {}
    os_profile = profile.get("osProfile") or {}
    sku = inputs.get("sku") or {}
    upgrade = inputs.get("upgradePolicy") or {}
    auto = upgrade.get("automaticOSUpgradePolicy") or {}
    storage = profile.get("storageProfile") or {}
    nics = (profile.get("networkProfile") or {}).get("networkInterfaceConfigurations") or []
    values = _drop_none(
        {
            "name": inputs.get("vmScaleSetName") or inputs.get("name"),
            "location": inputs.get("location"),
            "zones": inputs.get("zones"),
            "sku": sku.get("name"),
            "instances": int(sku["capacity"]) if sku.get("capacity") is not None else None,
            "single_placement_group": inputs.get("singlePlacementGroup"),
            "overprovision": inputs.get("overprovision"),
            "upgrade_mode": upgrade.get("mode"),
            "automatic_os_upgrade_policy": _block(
                _drop_none(
                    {
                        "automatic_os_upgrade_enabled": auto.get("enableAutomaticOSUpgrade"),
                        "disable_automatic_rollback": auto.get("disableAutomaticRollback"),
                    }
                )
            ),
            "computer_name_prefix": os_profile.get("computerNamePrefix"),
            # osProfile.allowExtensionOperations is the scale set's extension_operations_enabled.
            "extension_operations_enabled": os_profile.get("allowExtensionOperations"),
            "priority": profile.get("priority"),
            "eviction_policy": profile.get("evictionPolicy"),
            "boot_diagnostics": _boot_diagnostics(profile),
            "os_disk": _os_disk(storage),
            "source_image_reference": _image(storage),
            "network_interface": [
                _drop_none(
                    {
                        "name": n.get("name"),
                        "primary": n.get("primary"),
                        "accelerated_networking_enabled": n.get("enableAcceleratedNetworking"),
                        "ip_forwarding_enabled": n.get("enableIPForwarding"),
                        "network_security_group_id": (n.get("networkSecurityGroup") or {}).get("id"),
                        "ip_configuration": [
                            _drop_none(
                                {
                                    "name": ip.get("name"),
                                    "primary": ip.get("primary"),
                                    "subnet_id": (ip.get("subnet") or {}).get("id"),
                                    "public_ip_address": _block(
                                        _drop_none({"name": (ip.get("publicIPAddressConfiguration") or {}).get("name")})
                                    ),
                                }
                            )
                            for ip in n.get("ipConfigurations") or []
                        ],
                    }
                )
                for n in nics
            ],
            "tags": inputs.get("tags"),
        }
    )
    values.update(_linux(os_profile, "scale set"))
    values.update(_security(profile))
    return values


def linux_virtual_machine(inputs: Mapping[str, Any]) -> Values:
    os_profile = inputs.get("osProfile") or {}
    storage = inputs.get("storageProfile") or {}
    zones = inputs.get("zones") or []
    values = _drop_none(
        {
            "name": inputs.get("vmName") or inputs.get("name"),
            "location": inputs.get("location"),
            # azurerm's VM takes one zone (zone), ARM a list of one.
            "zone": zones[0] if zones else None,
            "size": (inputs.get("hardwareProfile") or {}).get("vmSize"),
            "computer_name": os_profile.get("computerName"),
            "allow_extension_operations": os_profile.get("allowExtensionOperations"),
            "priority": inputs.get("priority"),
            "eviction_policy": inputs.get("evictionPolicy"),
            "boot_diagnostics": _boot_diagnostics(inputs),
            "network_interface_ids": [
                n.get("id") for n in (inputs.get("networkProfile") or {}).get("networkInterfaces") or []
            ],
            "os_disk": _os_disk(storage),
            "source_image_reference": _image(storage),
            "tags": inputs.get("tags"),
        }
    )
    values.update(_linux(os_profile, "virtual machine"))
    values.update(_security(inputs))
    return values


def network_interface(inputs: Mapping[str, Any]) -> Values:
    forwarding = inputs.get("enableIPForwarding")
    return _drop_none(
        {
            "name": inputs.get("networkInterfaceName") or inputs.get("name"),
            "location": inputs.get("location"),
            "accelerated_networking_enabled": inputs.get("enableAcceleratedNetworking"),
            "ip_forwarding_enabled": forwarding,
            "enable_ip_forwarding": forwarding,  # the 3.x name, which CKV_AZURE_118 reads
            "ip_configuration": [
                _drop_none(
                    {
                        "name": ip.get("name"),
                        "primary": ip.get("primary"),
                        "subnet_id": (ip.get("subnet") or {}).get("id"),
                        "private_ip_address_allocation": ip.get("privateIPAllocationMethod"),
                        "private_ip_address": ip.get("privateIPAddress"),
                        "public_ip_address_id": (ip.get("publicIPAddress") or {}).get("id"),
                    }
                )
                for ip in inputs.get("ipConfigurations") or []
            ],
            "tags": inputs.get("tags"),
        }
    )


def bastion_host(inputs: Mapping[str, Any]) -> Values:
    copy_paste = inputs.get("disableCopyPaste")
    return _drop_none(
        {
            "name": inputs.get("bastionHostName") or inputs.get("name"),
            "location": inputs.get("location"),
            "sku": (inputs.get("sku") or {}).get("name"),
            "scale_units": inputs.get("scaleUnits"),
            "tunneling_enabled": inputs.get("enableTunneling"),
            "copy_paste_enabled": None if copy_paste is None else not copy_paste,
            "file_copy_enabled": inputs.get("enableFileCopy"),
            "ip_connect_enabled": inputs.get("enableIpConnect"),
            "kerberos_enabled": inputs.get("enableKerberos"),
            "shareable_link_enabled": inputs.get("enableShareableLink"),
            "session_recording_enabled": inputs.get("enableSessionRecording"),
            "ip_configuration": [
                _drop_none(
                    {
                        "name": ip.get("name"),
                        "subnet_id": (ip.get("subnet") or {}).get("id"),
                        "public_ip_address_id": (ip.get("publicIPAddress") or {}).get("id"),
                    }
                )
                for ip in inputs.get("ipConfigurations") or []
            ],
            "tags": inputs.get("tags"),
        }
    )


# azure-native type token -> (azurerm resource type, translation); merged into checkov_plan.SIMPLE.
COMPUTE = {
    "azure-native:compute:VirtualMachineScaleSet": (
        "azurerm_linux_virtual_machine_scale_set",
        linux_virtual_machine_scale_set,
    ),
    "azure-native:compute:VirtualMachine": ("azurerm_linux_virtual_machine", linux_virtual_machine),
    "azure-native:network:NetworkInterface": ("azurerm_network_interface", network_interface),
    "azure-native:network:BastionHost": ("azurerm_bastion_host", bastion_host),
}
