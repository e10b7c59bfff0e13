"""Slurm on Azure, as text: slurm.conf, gres.conf and the cloud-init scripts of the controller and
of the GPU scale set. Pure: no Pulumi; components/azure/orchestration_slurm.py hands the scripts to
the VMs as custom data.

The design (docs/azure.md, "Slurm"): Slurm from the node image's own distribution (Ubuntu 24.04,
whose archive carries Slurm 23.11.4, ``slurmd_23.11.4-1.2ubuntu5``, manpages.ubuntu.com noble
slurmd.8), the same packages on the controller and the nodes, so both ends run one release. The
GPU nodes are *dynamic* nodes (SchedMD/slurm doc/html/dynamic_nodes.shtml at 00280e0: "Starting in
Slurm 22.05, nodes can be dynamically added and removed"; ``slurmd -Z --conf``): a scale-set
instance registers itself under its own host name when it boots, so a replaced instance, whose
name is new, joins without editing slurm.conf. The nodes keep no configuration file: slurmd pulls
slurm.conf and gres.conf from slurmctld (configless, doc/html/configless_slurm.shtml at 0b40045:
``SlurmctldParameters=enable_configless`` and ``slurmd --conf-server``; gres.conf is among the
files shipped). The Munge key is made once by the controller and handed to the nodes through the
Managed Lustre file system every node mounts, readable by root only: no secret in the Pulumi state.
"""

from __future__ import annotations

import base64
import shlex
from dataclasses import dataclass

# The HPC image's admin user; Azure's own Linux quickstarts name it azureuser (any name but root works).
ADMIN_USER = "azureuser"
# slurmctld's port, the default (slurm.conf.5 SlurmctldPort: "The default value is 6817"), as
# configless's --conf-server takes it ("will default to 6817", configless_slurm.shtml).
SLURMCTLD_PORT = 6817
# Where Debian's packages keep Slurm's configuration (its sysconfdir, /etc/slurm: the paths
# manpages.ubuntu.com noble slurm.conf.5 shows). Not re-read beyond the man page.
SLURM_ETC = "/etc/slurm"
# The Munge key's home on every host (munge's default key file, /etc/munge/munge.key, owned by
# munge and readable by it only: dun/munge wiki "Installation Guide").
MUNGE_KEY = "/etc/munge/munge.key"
# The directory on the shared file system that carries the key from the controller to the nodes.
SHARED_DIR = ".gpuc-slurm"
# The nodes' feature: the node set of the GPU partition is the dynamic nodes registering with it
# (dynamic_nodes.shtml "Partition Assignment": Nodeset=ns1 Feature=f1; PartitionName=dyn1 Nodes=ns1).
GPU_FEATURE = "gpu"


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmLayout:
    cluster: str
    """ClusterName: the stack's cluster name, lower-case."""
    controller_host: str
    controller_ip: str
    partition: str
    max_nodes: int
    """MaxNodeCount: the GPU scale set's size (dynamic nodes count against it)."""
    gpus_per_node: int
    mount_point: str
    """Where Managed Lustre is mounted on every host."""
    lustre_mount_options: str
    lustre_fsname: str
    pythons: tuple[str, ...] = ("python3.12", "python3.12-venv")
    """Installed on every host: the job makes its virtualenv with python3.12 (workloads/launch/slurm_env.py
    tries it first), and Ubuntu splits the venv module off into python3.12-venv."""


def slurm_conf(s: SlurmLayout) -> str:
    """The cluster's slurm.conf (on the controller only; the nodes pull it). Each line's source beside it."""
    nodeset = f"{s.partition}nodes"
    lines = [
        "# Rendered by components/azure/slurm_config.py; slurm.conf(5) of Slurm 23.11 (Ubuntu noble).",
        f"ClusterName={s.cluster}",
        # The controller by host name and address (slurm.conf.5 SlurmctldHost: "hostname[(address)]").
        f"SlurmctldHost={s.controller_host}({s.controller_ip})",
        # Configless: the nodes fetch this file and gres.conf (configless_slurm.shtml, Setup).
        "SlurmctldParameters=enable_configless",
        "AuthType=auth/munge",
        # Dynamic nodes are only supported with cons_tres (dynamic_nodes.shtml, Slurm Configuration),
        # which is also what schedules --gpus-per-node (slurm.conf.5 SelectType cons_tres: GPUs).
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "GresTypes=gpu",
        # "Set to the number of possible nodes that can be active in a system at a time" (dynamic_nodes.shtml).
        f"MaxNodeCount={s.max_nodes}",
        "ProctrackType=proctrack/cgroup",
        "TaskPlugin=task/cgroup,task/affinity",
        # Verbs pins memory: a job keeps slurmd's unlimited memlock instead of the submitting shell's
        # (slurm.conf.5 PropagateResourceLimitsExcept; Slurm FAQ "locked memory (memlock) limit").
        "PropagateResourceLimitsExcept=MEMLOCK",
        # A node that was DOWN returns to service once it registers with a valid configuration
        # (slurm.conf.5 ReturnToService=2), as a reimaged or replaced instance does.
        "ReturnToService=2",
        "SlurmUser=slurm",
        "StateSaveLocation=/var/lib/slurm/slurmctld",
        "SlurmdSpoolDir=/var/lib/slurm/slurmd",
        # The GPU partition is every node that registers with the feature (dynamic_nodes.shtml).
        f"Nodeset={nodeset} Feature={GPU_FEATURE}",
        f"PartitionName={s.partition} Nodes={nodeset} Default=YES MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"


def gres_conf(s: SlurmLayout) -> str:
    """The GPUs by device file, on every node (gres.conf.5 at noble: "If configuring Generic Resources
    without specifying nodes, the first parameter on the line should be Name"; ``File``: the device
    files, one per GPU). Named, not AutoDetect=nvml: whether Ubuntu's slurmd is built with NVML
    was not read, and the device files of an NVIDIA GPU are /dev/nvidia0.. whatever the build."""
    last = s.gpus_per_node - 1
    return f"Name=gpu File=/dev/nvidia[0-{last}]\n"


def node_conf(s: SlurmLayout) -> str:
    """``slurmd --conf`` of a dynamic GPU node: its GPUs and the partition's feature
    (dynamic_nodes.shtml: ``slurmd -Z --conf "RealMemory=80000 Gres=gpu:2 Feature=f1"``)."""
    return f"Gres=gpu:{s.gpus_per_node} Feature={GPU_FEATURE}"


def _lustre_lines(s: SlurmLayout, mgs: str) -> list[str]:
    """Mount Managed Lustre at boot, idempotently, with Storage's options (the HPC image ships the
    client, AZURE.md §1.4; the mount source is ``<mgs>@tcp:/lustrefs``, AZURE.md §3.3)."""
    mp = shlex.quote(s.mount_point)
    fstab = f"{mgs}@tcp:/{s.lustre_fsname} {s.mount_point} lustre {s.lustre_mount_options},_netdev 0 0"
    return [
        f"mkdir -p {mp}",
        f"grep -q ' {s.mount_point} lustre ' /etc/fstab || echo {shlex.quote(fstab)} >> /etc/fstab",
        f"mountpoint -q {mp} || mount {mp}",
        f"chmod 1777 {mp}",
    ]


def _apt(packages: list[str]) -> list[str]:
    return [
        "export DEBIAN_FRONTEND=noninteractive",
        "apt-get update",
        f"apt-get install -y {' '.join(packages)}",
    ]


def _b64(lines: list[str]) -> str:
    return base64.b64encode(("\n".join(["#!/bin/bash", "set -euo pipefail", *lines]) + "\n").encode()).decode()


def controller_script(s: SlurmLayout, mgs: str) -> str:
    """The controller's cloud-init script (base64 custom data): Lustre, Munge with the cluster's key
    (made once, kept on Lustre so a rebuilt controller finds it), slurm.conf and gres.conf, slurmctld."""
    shared = f"{s.mount_point.rstrip('/')}/{SHARED_DIR}"
    q = shlex.quote
    return _b64(
        [
            *_lustre_lines(s, mgs),
            # slurm-client: sbatch and scontrol for the users of this login node.
            *_apt(["munge", "slurmctld", "slurm-client", *s.pythons]),
            f"install -d -m 0700 {q(shared)}",
            f"if [ -s {q(shared + '/munge.key')} ]; then",
            f"  install -o munge -g munge -m 0400 {q(shared + '/munge.key')} {MUNGE_KEY}",
            "else",
            # 1024 random bytes (dun/munge wiki Installation Guide: "dd if=/dev/urandom bs=1 count=1024").
            f"  dd if=/dev/urandom bs=1 count=1024 of={MUNGE_KEY} status=none",
            f"  chown munge:munge {MUNGE_KEY} && chmod 0400 {MUNGE_KEY}",
            f"  install -m 0400 {MUNGE_KEY} {q(shared + '/munge.key')}",
            "fi",
            "systemctl restart munge",
            f"mkdir -p {SLURM_ETC}",
            f"cat > {SLURM_ETC}/slurm.conf <<'GPUC_EOF'",
            slurm_conf(s).rstrip("\n"),
            "GPUC_EOF",
            f"cat > {SLURM_ETC}/gres.conf <<'GPUC_EOF'",
            gres_conf(s).rstrip("\n"),
            "GPUC_EOF",
            "systemctl enable slurmctld",
            "systemctl restart slurmctld",
        ]
    )


def node_script(s: SlurmLayout, mgs: str) -> str:
    """A GPU node's cloud-init script (base64 custom data): Lustre, the cluster's Munge key from it,
    and slurmd as a dynamic, configless node of the controller."""
    shared = f"{s.mount_point.rstrip('/')}/{SHARED_DIR}"
    q = shlex.quote
    server = f"{s.controller_ip}:{SLURMCTLD_PORT}"
    # A drop-in that makes the packaged unit's start line ours, whatever its release wrote: an empty
    # ConditionPathExists= and ExecStart= reset them (systemd.unit, systemd.service), since a
    # configless slurmd has no slurm.conf and "ConditionPathExists=*" would keep it from starting
    # (configless_slurm.shtml, Limitations; Slurm's own etc/slurmd.service.in at 02aa5a1 carries
    # one). Foreground (-D) as a simple service; memlock unlimited as that unit sets it, for verbs.
    exec_start = f'/usr/sbin/slurmd -D -Z --conf-server {server} --conf "{node_conf(s)}"'
    return _b64(
        [
            *_lustre_lines(s, mgs),
            *_apt(["munge", "slurmd", *s.pythons]),
            # The controller writes the key once it has mounted Lustre; wait for it (no timeout: a
            # node without the key cannot join, and `sinfo` on the controller shows it missing).
            f"until [ -s {q(shared + '/munge.key')} ]; do sleep 10; done",
            f"install -o munge -g munge -m 0400 {q(shared + '/munge.key')} {MUNGE_KEY}",
            "systemctl restart munge",
            "mkdir -p /etc/systemd/system/slurmd.service.d",
            "cat > /etc/systemd/system/slurmd.service.d/gpu-cluster.conf <<'GPUC_EOF'",
            "[Unit]",
            "ConditionPathExists=",
            "[Service]",
            "Type=simple",
            "PIDFile=",
            "LimitMEMLOCK=infinity",
            "ExecStart=",
            f"ExecStart={exec_start}",
            "GPUC_EOF",
            "systemctl daemon-reload",
            "systemctl enable slurmd",
            "systemctl restart slurmd",
        ]
    )
