"""AKS's AMD path (MI300X): the amdgpu driver installer DaemonSet and AMD's GPU operator with
cert-manager and its DeviceConfig, from Azure/aks-rdma-infiniband (``AKS_RDMA`` in
:mod:`gpu_cluster.components.k8s.aks`, which holds the charts' pins and the shared helpers).
"""

from __future__ import annotations

from typing import Mapping

import pulumi
import pulumi_kubernetes as k8s

from gpu_cluster.components.k8s.aks import (
    AMD_DEVICE_CONFIG_NAME,
    AMD_DEVICE_CONFIG_SPEC,
    AMD_OPERATOR_CHART,
    AMD_OPERATOR_NAMESPACE,
    AMD_OPERATOR_VALUES,
    AMD_OPERATOR_VERSION,
    AMD_REPO,
    CERT_MANAGER_CHART,
    CERT_MANAGER_NAMESPACE,
    CERT_MANAGER_REPO,
    CERT_MANAGER_VERSION,
    Toleration,
    _after,
    _chart,
    _namespace,
    apply_pins,
)


# The amdgpu driver installer (AKS_RDMA configs/amd-driver-installer/{daemonset,configmap}.yaml):
# a privileged DaemonSet in kube-system that adds AMD's apt repository of driver release 30.20.1 to
# the host, installs amdgpu-dkms there and loads the module, then sleeps. The reference writes the
# repository for Ubuntu noble; the host's own codename is read here instead (AKS's Ubuntu SKU is
# 22.04 up to Kubernetes 1.34 and 24.04 from 1.35, upgrade-os-version.md:41 at fb060ab), the same
# line on a noble node. Its image is only the shell that reaches the host (apt-get, wget, gpg, then
# chroot): the reference names plain "ubuntu"; pinned here by the digest of the Ubuntu image the
# GKE installers already use (components/k8s/gke_installers.py PREINSTALL_IMAGE).
AMD_DRIVER_VERSION = "30.20.1"
AMD_DRIVER_INSTALLER = "install-amdgpu-driver"
AMD_DRIVER_IMAGE = "ubuntu:26.04@sha256:513c074113a871b51a8d16ab445c88779d6452d937a164fb5cc479f32668a41d"
# What its pod cannot do without (Checkov's own skip annotation, as components/k8s/gke_installers.py).
AMD_DRIVER_NEEDS = {
    "CKV_K8S_16": "privileged: installs a DKMS package on the host and loads the amdgpu kernel module "
    "(Azure/aks-rdma-infiniband configs/amd-driver-installer runs it privileged)",
    "CKV_K8S_17": "hostPID: the reference installer shares the host's PID namespace",
    "CKV_K8S_19": "hostNetwork: the installer acts on the node, as the reference runs it",
    "CKV_K8S_20": "privilege escalation is implied by privileged",
    "CKV_K8S_23": "root: it writes the host's apt sources and runs apt-get and modprobe through chroot",
    "CKV_K8S_37": "a privileged container holds every capability",
    "CKV_K8S_28": "NET_RAW: a privileged container holds every capability, NET_RAW among them (the reference "
    "installer drops nothing)",
    "CKV_K8S_40": "UID 0, not a high UID: apt-get, dkms and modprobe on the host need root (CKV_K8S_23)",
}


# Microsoft's MI300X driver guide (MicrosoftDocs/azure-compute-docs articles/virtual-machines/linux/
# azure-nd-mi300-series-amd-gpu-driver-linux-installation-guide.md at 85ebb69, "Load the AMDGPU
# driver"): ``modprobe -r hyperv_drm`` and then ``modprobe amdgpu ip_block_mask=0x7f``; the DKMS
# build needs the running kernel's headers (the guide installs linux-headers of its kernel).
AMD_MODPROBE_OPTIONS = "ip_block_mask=0x7f"
# AMD's MI300X system optimization (ROCm/amdgpu-docs docs/system-optimization/mi300x.rst at
# 41afb32, "Disable NUMA auto-balancing": applications "in general, benefit from disabling NUMA
# balancing"; the setting does not survive a reboot, hence "@reboot" there): written on every
# start of the installer's pod, which runs once per node boot.
NUMA_BALANCING = "/proc/sys/kernel/numa_balancing"


# AMD's ROCm apt signing key, pinned by its fingerprint before apt is told to trust it: "CA8B B472
# 7A47 B4D0 9B4E E896 9386 B48A 1A69 3C5C ... James Adrian Edwards (ROCm Release Manager)" as
# `apt-key list` shows it for repo.radeon.com (ROCm/ROCm issue 101), the same key apt names by its
# long id in 2023 ("EXPKEYSIG 9386B48A1A693C5C", ROCm/ROCm issue 2362: renewed, not replaced). A key
# served at the URL that is not this one stops the install before apt trusts it.
ROCM_KEY_URL = "https://repo.radeon.com/rocm/rocm.gpg.key"
ROCM_KEY_FINGERPRINT = "CA8BB4727A47B4D09B4EE8969386B48A1A693C5C"


def rocm_key_lines(fingerprint: str = ROCM_KEY_FINGERPRINT, url: str = ROCM_KEY_URL) -> list[str]:
    """Fetch the ROCm key, check its primary key's fingerprint, then write it dearmored to ``$keyring``."""
    return [
        "key=$(mktemp)",
        f'wget -qO "$key" {url}',
        """fpr=$(gpg --show-keys --with-colons "$key" | awk -F: '$1 == "fpr" {print $10; exit}')""",
        f'if [ "$fpr" != "{fingerprint}" ]; then',
        f'  echo "ROCm apt key at {url} has fingerprint ${{fpr:-none}}, not {fingerprint}: not trusted" >&2',
        "  exit 1",
        "fi",
        'gpg --dearmor < "$key" > "$keyring"',
    ]


def amd_driver_script(version: str = AMD_DRIVER_VERSION) -> str:
    """The installer's steps: the reference's (AKS_RDMA amd-driver-installer) with the host's Ubuntu
    codename, the kernel headers, and Microsoft's load sequence; NUMA balancing off. It skips the
    install where this release's repository is configured, its amdgpu-dkms installed and amdgpu
    loaded (the module's own version is not the release number, so modinfo cannot tell)."""
    return "\n".join(
        [
            "#!/usr/bin/env bash",
            "set -euo pipefail",
            f"version={version}",
            f"echo 0 > {NUMA_BALANCING}",
            'if grep -qs "amdgpu/$version/" /host/etc/apt/sources.list.d/amdgpu.list \\',
            "  && chroot /host dpkg-query -W -f='${Status}' amdgpu-dkms 2>/dev/null | grep -q 'ok installed' \\",
            "  && grep -q '^amdgpu ' /proc/modules; then",
            '  echo "amdgpu driver $version already installed and loaded"; exec sleep infinity',
            "fi",
            "apt-get update -y && apt-get install -y wget gnupg",
            "mkdir -p /host/etc/apt/keyrings",
            "keyring=/host/etc/apt/keyrings/rocm.gpg",
            *rocm_key_lines(),
            'codename=$(. /host/etc/os-release && echo "$VERSION_CODENAME")',
            'echo "deb [arch=amd64 signed-by=/etc/apt/keyrings/rocm.gpg] https://repo.radeon.com/amdgpu/$version/ubuntu '
            '$codename main" > /host/etc/apt/sources.list.d/amdgpu.list',
            'chroot /host bash -c "apt-get update -y && DEBIAN_FRONTEND=noninteractive apt-get install -y '
            'linux-headers-$(uname -r) amdgpu-dkms"',
            "chroot /host modprobe -r hyperv_drm || true",
            f"chroot /host modprobe amdgpu {AMD_MODPROBE_OPTIONS}",
            'echo "amdgpu driver $version installed and loaded"',
            "exec sleep infinity",
        ]
    )


def amd_driver_installer(
    name: str, opts: pulumi.ResourceOptions, tolerations: list[Toleration], node_selector: Mapping[str, str]
) -> list[pulumi.Resource]:
    """The amdgpu driver on every node ``node_selector`` picks (the GPU pool), tolerating its taints.
    Ready only once the module is loaded, so ``pulumi up`` (like the reference's rollout wait) and
    the DeviceConfig's device plugin (its driver-init container) come after it."""
    script = k8s.core.v1.ConfigMap(
        f"{name}-amdgpu-driver-script",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=AMD_DRIVER_INSTALLER, namespace="kube-system"),
        data={"install-driver.sh": amd_driver_script()},
        opts=opts,
    )
    match = {"app": AMD_DRIVER_INSTALLER}
    skips = {f"checkov.io/skip{i}": f"{cid}={why}" for i, (cid, why) in enumerate(sorted(AMD_DRIVER_NEEDS.items()), 1)}
    ds = k8s.apps.v1.DaemonSet(
        f"{name}-amdgpu-driver",
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=AMD_DRIVER_INSTALLER, namespace="kube-system", labels=match, annotations=skips
        ),
        spec=k8s.apps.v1.DaemonSetSpecArgs(
            selector=k8s.meta.v1.LabelSelectorArgs(match_labels=match),
            template=k8s.core.v1.PodTemplateSpecArgs(
                metadata=k8s.meta.v1.ObjectMetaArgs(labels=match),
                spec=k8s.core.v1.PodSpecArgs(
                    # The reference also shares the host's IPC namespace; nothing here uses it
                    # (apt-get, modprobe and modinfo through chroot), so it is left out (CKV_K8S_18).
                    host_network=True,
                    host_pid=True,
                    node_selector=dict(node_selector),
                    tolerations=[
                        k8s.core.v1.TolerationArgs(key=t.key, operator="Exists", effect=t.effect) for t in tolerations
                    ],
                    priority_class_name="system-node-critical",
                    automount_service_account_token=False,  # it never calls the Kubernetes API
                    security_context=k8s.core.v1.PodSecurityContextArgs(
                        seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault")
                    ),
                    containers=[
                        k8s.core.v1.ContainerArgs(
                            name=AMD_DRIVER_INSTALLER,
                            image=AMD_DRIVER_IMAGE,
                            image_pull_policy="Always",
                            command=["/tmp/install-driver.sh"],
                            security_context=k8s.core.v1.SecurityContextArgs(privileged=True),
                            resources=k8s.core.v1.ResourceRequirementsArgs(requests={"cpu": "100m"}),
                            # Ready once the module is in the kernel: the path AMD's operator waits on
                            # too (ROCm/gpu-operator v1.4.1 internal/kmmmodule/kmmmodule.go:359).
                            readiness_probe=k8s.core.v1.ProbeArgs(
                                exec_=k8s.core.v1.ExecActionArgs(command=["test", "-d", "/sys/module/amdgpu/drivers"]),
                                period_seconds=10,
                            ),
                            volume_mounts=[
                                k8s.core.v1.VolumeMountArgs(name="host-root", mount_path="/host"),
                                k8s.core.v1.VolumeMountArgs(
                                    name="install-script",
                                    mount_path="/tmp/install-driver.sh",
                                    sub_path="install-driver.sh",
                                ),
                            ],
                        )
                    ],
                    volumes=[
                        k8s.core.v1.VolumeArgs(
                            name="host-root", host_path=k8s.core.v1.HostPathVolumeSourceArgs(path="/", type="")
                        ),
                        k8s.core.v1.VolumeArgs(
                            name="install-script",
                            config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(
                                name=AMD_DRIVER_INSTALLER, default_mode=0o755
                            ),
                        ),
                    ],
                ),
            ),
        ),
        opts=_after(opts, script),
    )
    return [script, ds]


def amd_gpu_operator(
    name: str,
    opts: pulumi.ResourceOptions,
    tolerations: list[Toleration] | None = None,
    after: list[pulumi.Resource] | None = None,
    pins: Mapping[str, str] | None = None,
) -> list[pulumi.Resource]:
    """cert-manager, AMD's GPU operator and its DeviceConfig (device plugin: ``amd.com/gpu``).
    ``tolerations``: the GPU pool's taints, for the DeviceConfig's DaemonSets; ``after``: the driver
    installer, which the reference runs first, and the Network Operator's chart, whose NFD brings the
    NodeFeatureRule CRD AMD's default rule is made of."""
    tolerations = tolerations or []
    cm_ns = _namespace(f"{name}-cert-manager-ns", CERT_MANAGER_NAMESPACE, opts)
    cert_manager = _chart(
        f"{name}-cert-manager",
        chart=CERT_MANAGER_CHART,
        version=CERT_MANAGER_VERSION,
        repo=CERT_MANAGER_REPO,
        namespace=CERT_MANAGER_NAMESPACE,
        values={"crds": {"enabled": True}},
        opts=_after(opts, cm_ns),
    )
    ns = _namespace(f"{name}-amd-gpu-ns", AMD_OPERATOR_NAMESPACE, opts)
    values: dict[str, object] = dict(AMD_OPERATOR_VALUES)
    spec: dict[str, object] = dict(AMD_DEVICE_CONFIG_SPEC)
    if tolerations:
        own = [t.as_value() for t in tolerations]
        spec["devicePlugin"] = {
            **AMD_DEVICE_CONFIG_SPEC["devicePlugin"],
            "devicePluginTolerations": own,
            "nodeLabellerTolerations": own,
        }
        spec["metricsExporter"] = {**AMD_DEVICE_CONFIG_SPEC["metricsExporter"], "tolerations": own}
    chart = _chart(
        f"{name}-amd-gpu-operator",
        chart=AMD_OPERATOR_CHART,
        version=AMD_OPERATOR_VERSION,
        repo=AMD_REPO,
        namespace=AMD_OPERATOR_NAMESPACE,
        values=apply_pins("chart", AMD_OPERATOR_CHART, values, pins or {}),
        opts=_after(opts, ns, cert_manager, *(after or [])),
    )
    config = k8s.apiextensions.CustomResource(
        f"{name}-amd-device-config",
        api_version="amd.com/v1alpha1",
        kind="DeviceConfig",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=AMD_DEVICE_CONFIG_NAME, namespace=AMD_OPERATOR_NAMESPACE),
        spec=apply_pins("DeviceConfig", "", spec, pins or {}),
        opts=_after(opts, chart),
    )
    return [cm_ns, cert_manager, ns, chart, config]
