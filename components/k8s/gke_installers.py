"""GKE node-level installers for the GPU fabrics: the NCCL net plugin (TCPX, TCPXO, gIB) and the
NRI device injector TCPX/TCPXO workloads need to get GPU devices into the receive-datapath sidecar.

What each DaemonSet holds follows Google's manifests, container-engine-accelerators at 992db81
(gpudirect-tcpx/nccl-tcpx-installer.yaml, gpudirect-tcpxo/nccl-tcpxo-installer.yaml,
gpudirect-rdma/nccl-rdma-installer.yaml, nri_device_injector/nri-device-injector.yaml), which
cluster-toolkit's GKE examples at 1047080 apply too (examples/gke-a3-megagpu/*.yaml.tftpl,
examples/gke-a3-ultragpu/nccl-installer.yaml.tftpl, examples/gke-a4/nccl-installer.yaml.tftpl):

* the host's ``/var/lib`` is mounted where the installer writes (``/var/lib/<fabric>``), and the
  host's ``/home/kubernetes/bin`` at ``/usr/local``, so the copy into ``/usr/local/nvidia/lib64``
  lands in ``/home/kubernetes/bin/nvidia/lib64``, the directory GKE mounts into GPU pods;
* gIB copies its ``lib64`` there too and its whole tree into ``/home/kubernetes/bin/gib``, which
  workload pods mount at ``/usr/local/gib`` (the catalog's ``installer.host_paths``);
* TCPXO first runs a pre-installation step in the host's namespaces (``nsenter`` into PID 1, so
  the pod has ``hostPID``): accept TCP on INPUT, load ``import-helper``, and expose every
  aperture device (PCI id ``1ae0:0084``) under ``/dev/aperture_devices`` for the sidecar.

Images and versions are catalog facts (``fabrics.<fabric>.installer``), every one pulled by digest
(CKV_K8S_43): the catalog's, with its tag kept beside it, where a published reference gives one;
else the stack's ``orchestration.installer_image`` (components/gcp/rules.py), which ``pulumi up``
requires and without which the offline plan plans no installer (:func:`installer_ref`).
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi
import pulumi_kubernetes as k8s

from gpu_cluster.components.catalog import installer_fact
from gpu_cluster.components.image_pins import pinned

# Pinned by digest upstream (every installer manifest of container-engine-accelerators at 992db81).
PAUSE_IMAGE = "gke.gcr.io/pause:3.8@sha256:880e63f94b145e46f1b1082bb71b85e21f16b99b180b9996407d61240ceb9830"
# The TCPXO pre-installation image: upstream names plain "ubuntu"; pinned to the tag and digest
# NVIDIA/aicr docs/user/container-images.md at 005da13 records for the same manifest.
PREINSTALL_IMAGE = "ubuntu:26.04@sha256:513c074113a871b51a8d16ab445c88779d6452d937a164fb5cc479f32668a41d"
# Pinned by the digest Google's own manifests pin (nri_device_injector/nri-device-injector.yaml at
# 992db81; cluster-toolkit examples/gke-a3-megagpu/nri-device-injector.yaml at 1047080), which give
# no tag beside it. NVIDIA/aicr's image inventory (docs/user/container-images.md, read 2026-12-01)
# lists gcr.io/gke-release/nri-device-injector:1.0.25-gke.6 with another digest (7704e2bd...): a
# different build, not this one's tag, so no tag is written beside this digest.
NRI_INJECTOR_IMAGE = (
    "gcr.io/gke-release/nri-device-injector@sha256:6e79483d52abdc28454bf186320b10a56b0f117a10e8d65d5c74dbb821a76970"
)
NAMESPACE = "kube-system"
HOST_BIN = "/home/kubernetes/bin"
APERTURE_PCI_ID = "1ae0:0084"


def _tcpxo_preinstall_script() -> str:
    # The steps of upstream's pre-installation container, written as a plain POSIX loop.
    return "\n".join(
        [
            "set -e",
            "/sbin/iptables -I INPUT -p tcp -m tcp -j ACCEPT",
            "modprobe import-helper",
            "mkdir -p /dev/aperture_devices",
            f"for bdf in $(lspci -nn -D | grep '{APERTURE_PCI_ID}' | awk '{{print $1}}'); do",
            "  target=/dev/aperture_devices/$bdf",
            "  mkdir -p $target",
            "  umount -R $target 2>/dev/null || true",
            "  mount --bind $(readlink -f /sys/bus/pci/devices/$bdf) $target",
            "done",
            "chmod -R a+r /dev/aperture_devices/",
            "chmod a+rw /dev/aperture_devices/*/resource* 2>/dev/null || true",
        ]
    )


def _install_script(fabric: str) -> str:
    # --install-nccl where the catalog says the plugin's release brings its NCCL (every fabric here:
    # fabrics.<f>.installer.install_nccl, each with its source).
    install = "/scripts/container_entry.sh install" + (" --install-nccl" if installer_fact(fabric).install_nccl else "")
    if fabric == "rdma":
        lib64, gib = f"/usr/local{HOST_BIN}/nvidia/lib64", f"/usr/local{HOST_BIN}/gib"
        return "\n".join(
            [
                "set -ex",
                install,
                f"cp -r /var/lib/gib/lib64/. {lib64}",
                f"cp -r /var/lib/gib/. {gib}",
            ]
        )
    return "\n".join(
        [
            "set -ex",
            "chmod 755 /scripts/container_entry.sh",
            install,
            "mkdir -p /usr/local/nvidia/lib64",
            f"cp -r /var/lib/{fabric}/lib64/. /usr/local/nvidia/lib64",
        ]
    )


def _host(name: str, path: str, kind: str | None = None) -> k8s.core.v1.VolumeArgs:
    return k8s.core.v1.VolumeArgs(name=name, host_path=k8s.core.v1.HostPathVolumeSourceArgs(path=path, type=kind))


def _affinity(accelerator: str) -> k8s.core.v1.AffinityArgs:
    return k8s.core.v1.AffinityArgs(
        node_affinity=k8s.core.v1.NodeAffinityArgs(
            required_during_scheduling_ignored_during_execution=k8s.core.v1.NodeSelectorArgs(
                node_selector_terms=[
                    k8s.core.v1.NodeSelectorTermArgs(
                        match_expressions=[
                            k8s.core.v1.NodeSelectorRequirementArgs(
                                key="cloud.google.com/gke-accelerator", operator="In", values=[accelerator]
                            )
                        ]
                    )
                ]
            )
        )
    )


# What a node daemon that installs into the host, or hands devices out, cannot do without; each
# is waived for that DaemonSet alone with its reason, in Checkov's own annotation (checkov.io/
# skip<N>: <id>=<reason>, Checkov docs "Suppressing and skipping policies"), which the pack's
# k8s-workload-hardening rule reads too. The annotations sit on the DaemonSet's own metadata:
# Checkov's Kubernetes runner reads skips from the object it reports (the DaemonSet), not from its
# pod template, so on the template the checks were FAILED instead of SKIPPED. Everything else is
# hardened.
INSTALLER_NEEDS = {
    "CKV_K8S_16": "privileged: writes the NCCL plugin into host paths and (TCPXO) loads a kernel module and "
    "binds host devices through nsenter, as upstream's installer does",
    "CKV_K8S_17": "hostPID: nsenter into the host's PID 1 namespaces for the pre-installation step (upstream)",
    "CKV_K8S_19": "hostNetwork: the installer acts on the node, not in a pod network (upstream)",
    "CKV_K8S_20": "privilege escalation is implied by privileged",
    "CKV_K8S_23": "root: host paths under /home/kubernetes/bin and /var/lib are root-owned",
    "CKV_K8S_37": "a privileged container holds every capability",
    "CKV_K8S_28": "NET_RAW: a privileged container holds every capability, NET_RAW among them; dropping it "
    "would not bind a privileged container (upstream drops nothing)",
    "CKV_K8S_40": "UID 0, not a high UID: it writes root-owned host paths (CKV_K8S_23), as upstream runs it",
}
# The NRI device injector (container-engine-accelerators nri_device_injector/nri-device-injector.yaml
# at 992db81: privileged, hostNetwork, hostPID, /dev and /var/run/nri from the host) is a plugin of
# the node's container runtime: it adds the devices a pod's annotation names to that container.
INJECTOR_NEEDS = {
    "CKV_K8S_16": "privileged: it edits other containers' device lists through the runtime's NRI socket and "
    "opens the host's /dev to hand those devices over (upstream runs it privileged)",
    "CKV_K8S_17": "hostPID: NRI plugins act on the host's containers and processes, as upstream runs it",
    "CKV_K8S_19": "hostNetwork: a node agent with no Service and no pod-network traffic, as upstream runs it",
    "CKV_K8S_20": "privilege escalation is implied by privileged",
    "CKV_K8S_23": "root: the NRI socket /var/run/nri and the host's /dev are root-owned",
    "CKV_K8S_37": "a privileged container holds every capability",
    "CKV_K8S_28": "NET_RAW: a privileged container holds every capability, NET_RAW among them (upstream drops nothing)",
    "CKV_K8S_40": "UID 0, not a high UID: the NRI socket and the host's /dev are root-owned (CKV_K8S_23)",
}


def _skips(needs: dict[str, str]) -> dict[str, str]:
    return {f"checkov.io/skip{i}": f"{cid}={why}" for i, (cid, why) in enumerate(sorted(needs.items()), start=1)}


# The pause image runs as 65535:65535 (kubernetes/kubernetes build/pause/Dockerfile, USER
# 65535:65535): it needs nothing, so it gets nothing.
PAUSE_SECURITY = k8s.core.v1.SecurityContextArgs(
    allow_privilege_escalation=False,
    run_as_non_root=True,
    run_as_user=65535,
    run_as_group=65535,
    read_only_root_filesystem=True,
    capabilities=k8s.core.v1.CapabilitiesArgs(drop=["ALL"]),
)
POD_SECURITY = k8s.core.v1.PodSecurityContextArgs(seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault"))


def _daemonset(
    name: str,
    ds_name: str,
    labels: dict[str, str],
    spec: k8s.core.v1.PodSpecArgs,
    opts: pulumi.ResourceOptions,
    needs: dict[str, str],
) -> k8s.apps.v1.DaemonSet:
    match = {"k8s-app": ds_name}
    return k8s.apps.v1.DaemonSet(
        f"{name}-{ds_name}",
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=ds_name, namespace=NAMESPACE, labels={**labels, **match}, annotations=_skips(needs)
        ),
        spec=k8s.apps.v1.DaemonSetSpecArgs(
            selector=k8s.meta.v1.LabelSelectorArgs(match_labels=match),
            update_strategy=k8s.apps.v1.DaemonSetUpdateStrategyArgs(type="RollingUpdate"),
            template=k8s.core.v1.PodTemplateSpecArgs(metadata=k8s.meta.v1.ObjectMetaArgs(labels=match), spec=spec),
        ),
        opts=opts,
    )


def installer_ref(fabric: str, supplied: str | None, pins: Mapping[str, str] | None = None) -> str | None:
    """The installer image by digest: the stack's where it names one, else the catalog's where it
    has a published digest, else the stack's pin of the catalog's tag (``images``), else None (no
    installer can be planned by tag)."""
    fact = installer_fact(fabric)
    if supplied or fact.digest:
        return supplied or fact.ref
    ref = pinned(f"{fact.image}:{fact.tag}", pins or {})
    return ref if "@" in ref else None


def nccl_installer(
    name: str, fabric: str, accelerator: str, labels: dict[str, str], opts: pulumi.ResourceOptions, image: str
) -> k8s.apps.v1.DaemonSet:
    """DaemonSet that puts the fabric's NCCL net plugin where GPU pods load it from; ``image`` is
    the installer by digest (:func:`installer_ref`)."""
    fact = installer_fact(fabric)
    ds_name = "nccl-rdma-installer" if fabric == "rdma" else f"nccl-{fabric}-installer"
    privileged = k8s.core.v1.SecurityContextArgs(privileged=True)
    cpu = k8s.core.v1.ResourceRequirementsArgs(requests={"cpu": "150m"})
    if fabric == "rdma":
        volumes = [
            _host("library-dir-host", f"{HOST_BIN}/nvidia/lib64", "DirectoryOrCreate"),
            _host("gib", f"{HOST_BIN}/gib"),
        ]
        mounts = [
            k8s.core.v1.VolumeMountArgs(name="library-dir-host", mount_path=f"/usr/local{HOST_BIN}/nvidia/lib64"),
            k8s.core.v1.VolumeMountArgs(name="gib", mount_path=f"/usr/local{HOST_BIN}/gib"),
        ]
    else:
        volumes = [
            _host("var-lib", "/var/lib"),
            _host(fabric, f"/var/lib/{fabric}"),
            _host("library-dir-host", HOST_BIN),
        ]
        mounts = [
            k8s.core.v1.VolumeMountArgs(name="var-lib", mount_path="/var/lib"),
            k8s.core.v1.VolumeMountArgs(name="library-dir-host", mount_path="/usr/local"),
        ]
    init = []
    if fabric == "tcpxo":
        init.append(
            k8s.core.v1.ContainerArgs(
                name="pre-installation",
                image=PREINSTALL_IMAGE,
                security_context=privileged,
                command=["nsenter", "-at", "1", "--", "sh", "-c", _tcpxo_preinstall_script()],
            )
        )
    init.append(
        k8s.core.v1.ContainerArgs(
            name=ds_name,
            image=image,
            resources=cpu,
            security_context=privileged,
            volume_mounts=mounts,
            command=["/bin/sh", "-c"],
            args=[_install_script(fabric)],
        )
    )
    spec = k8s.core.v1.PodSpecArgs(
        priority_class_name="system-node-critical",
        affinity=_affinity(accelerator),
        tolerations=[k8s.core.v1.TolerationArgs(operator="Exists")],
        host_network=True,
        host_pid=True,
        automount_service_account_token=False,  # it never calls the Kubernetes API
        security_context=POD_SECURITY,
        volumes=volumes,
        init_containers=init,
        containers=[k8s.core.v1.ContainerArgs(name="pause", image=PAUSE_IMAGE, security_context=PAUSE_SECURITY)],
    )
    return _daemonset(
        name,
        ds_name,
        {**labels, "gpu-cluster/plugin-version": fact.plugin_version},
        spec,
        opts,
        needs=INSTALLER_NEEDS,
    )


def nri_device_injector(
    name: str, accelerator: str, labels: dict[str, str], opts: pulumi.ResourceOptions
) -> k8s.apps.v1.DaemonSet:
    """The NRI device injector: hands the devices a pod's ``devices.gke.io/container.<name>``
    annotation lists (GPUs, /dev/aperture_devices) to that container, the TCPX(O) sidecar."""
    spec = k8s.core.v1.PodSpecArgs(
        priority_class_name="system-node-critical",
        affinity=_affinity(accelerator),
        tolerations=[k8s.core.v1.TolerationArgs(operator="Exists")],
        host_network=True,
        host_pid=True,
        automount_service_account_token=False,  # it talks to the runtime's NRI socket, not the API
        security_context=POD_SECURITY,
        volumes=[_host("nri", "/var/run/nri"), _host("dev", "/dev")],
        containers=[
            k8s.core.v1.ContainerArgs(
                name="device-injector",
                image=NRI_INJECTOR_IMAGE,
                resources=k8s.core.v1.ResourceRequirementsArgs(requests={"cpu": "150m"}),
                security_context=k8s.core.v1.SecurityContextArgs(privileged=True),
                volume_mounts=[
                    k8s.core.v1.VolumeMountArgs(name="dev", mount_path="/dev"),
                    k8s.core.v1.VolumeMountArgs(name="nri", mount_path="/var/run/nri"),
                ],
            )
        ],
    )
    return _daemonset(name, "device-injector", labels, spec, opts, needs=INJECTOR_NEEDS)


# Fabrics whose workloads run the receive-datapath sidecar and so need the injector
# (cluster-toolkit modules/compute/gke-node-pool/gpu_direct.tf installs it for a3-highgpu-8g
# and a3-megagpu-8g only).
NEEDS_DEVICE_INJECTOR = ("tcpx", "tcpxo")
