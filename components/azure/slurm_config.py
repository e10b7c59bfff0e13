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

import yaml

from gpu_cluster.components.catalog_file import CATALOG_PATH
from gpu_cluster.components.contract import UNVALIDATED_SLURM_REASON

# The Slurm hosts' image, by its catalog entry: the HPC image at the release the catalog records
# with its NVIDIA driver (node_images.azure-ubuntu-hpc-2404: image, driver).
NODE_IMAGE = "azure-ubuntu-hpc-2404"


def node_image() -> dict[str, str]:
    """The image reference the catalog pins for the Slurm hosts (``node_images.<NODE_IMAGE>.image``)."""
    with open(CATALOG_PATH, encoding="utf-8") as fh:
        raw = yaml.safe_load(fh)["node_images"][NODE_IMAGE]["image"]
    return {k: str(raw[k]) for k in ("publisher", "offer", "sku", "version")}


# The VMs' admin user: our choice, the name Azure's own Linux quickstarts use. Azure refuses some
# names ("Disallowed values": administrator, admin, user, root, ... 32 in all) and more than 64
# characters on Linux (OSProfile.adminUsername, pulumi-azure-native 3.29.0 compute OSProfileArgs
# docstring, from the Compute REST spec); azureuser is not among them (a test reads that list from
# the installed SDK), nor a user the HPC image makes (azhpc-images at 8e9d055 adds none).
ADMIN_USER = "azureuser"
# slurmctld's port, the default (slurm.conf.5 SlurmctldPort: "The default value is 6817"), as
# configless's --conf-server takes it ("will default to 6817", configless_slurm.shtml).
SLURMCTLD_PORT = 6817
# Where Debian's packages keep Slurm's configuration: /etc/slurm since slurm-wlm 20.02.6-1 ("Remove
# llnl from the source package name and from the configuration, lib and log directory names",
# debian/changelog, 2020-11-17; the noble package descends from it), the directory the package's
# own unit checks for slurm.conf (ConditionPathExists=/etc/slurm/slurm.conf in Debian's slurmd and
# slurmctld units, read from slurmd 22.05.8-4+deb12u3 on this project's test host) and the paths
# manpages.ubuntu.com noble slurm.conf.5 shows.
SLURM_ETC = "/etc/slurm"
# The Munge key's home on every host: "${sysconfdir}/munge/munge.key", owned by the user munged
# runs as (dun/munge QUICKSTART at munge-0.5.15, e6e04d3, section 5A "Creating a key").
MUNGE_KEY = "/etc/munge/munge.key"
# The key is made by munge's own tool, run as munge so that the file gets munged's owner and mode
# (QUICKSTART 5A: "sudo -u munge ${sbindir}/mungekey --verbose"; mungekey.8: -c create, -f overwrite
# an existing key), with its default size, 128 bytes (1024 bits: MUNGE_KEY_LEN_DFL_BYTES in
# src/libcommon/munge_defs.h at munge-0.5.15; --bits takes 256-8192). Debian's munge package runs
# the same (`su munge -s /bin/sh -c 'mungekey -c'` in munge.postinst, 0.5.15-2+deb12u1) when no
# key exists, and sets an existing one to munge:munge 0400, the mode the copies get here.
MUNGEKEY = "/usr/sbin/mungekey"
MUNGE_KEY_MODE = "0400"
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


# A dynamic node registers drained (issue 41, I6: a new node takes no work until a check passes it).
# slurmd(8) of the release the nodes run (manpages.ubuntu.com/manpages/noble/man8/slurmd-wlm.8.html,
# slurmd_23.11.4-1.2ubuntu5, read 2026-12-07): ``--conf`` is "Used in conjunction with the -Z option
# ... to override or define additional parameters of a dynamic node using the same syntax and
# parameters used to define nodes in the slurm.conf", and slurm.conf(5)'s node ``State`` takes DRAIN.
# Tried on slurm-wlm 22.05.8 (tests/slurm/test_registration_drain.py): the node registers
# IDLE+DRAIN+DYNAMIC_NORM and a user's job waits; a Reason= in --conf is not kept, and a slurmd
# restarted on a node whose record exists is not drained again. Not tried on 23.11.
REGISTER_DRAINED = "State=DRAIN"
# What the boot script sets as the drain's reason once the node has registered: the mark that
# `validate submit` and heal's release lift after a pass (components/contract.py).
REGISTRATION_REASON = f"{UNVALIDATED_SLURM_REASON}: registered, awaiting gpu-cluster validate submit"
# Where a configless node's client commands find slurm.conf: slurmd caches the files it pulls under
# SlurmdSpoolDir/conf-cache with "a symlink to this location ... in /run/slurm/conf", and user
# commands read "a cached slurm config file (run/slurm/conf/slurm.conf)" (SchedMD/slurm
# doc/html/configless_slurm.shtml at 0b40045, Initial Testing and Notes; a 2025 page, not 23.11's).
CONFIGLESS_CONF = "/run/slurm/conf/slurm.conf"


def node_conf(s: SlurmLayout) -> str:
    """``slurmd --conf`` of a dynamic GPU node: its GPUs, the partition's feature (dynamic_nodes.shtml:
    ``slurmd -Z --conf "RealMemory=80000 Gres=gpu:2 Feature=f1"``) and :data:`REGISTER_DRAINED`."""
    return f"Gres=gpu:{s.gpus_per_node} Feature={GPU_FEATURE} {REGISTER_DRAINED}"


def registration_reason_lines(node: str = "$(hostname -s)") -> list[str]:
    """Once the node has registered, the registration drain's reason, set from the node as root
    (scontrol(1) UPDATE NODE ``Reason=``): only on a node that is drained with no reason, which is
    what a fresh registration with :data:`REGISTER_DRAINED` gives; a restarted slurmd of a node in
    service, or a node someone drained, is left as it is."""
    return [
        f'export SLURM_CONF="${{SLURM_CONF:-{CONFIGLESS_CONF}}}"',
        f'node="{node}"',
        'until scontrol show node -o "$node" >/dev/null 2>&1; do sleep 5; done',
        'shown="$(scontrol show node -o "$node")"',
        'if [[ "$shown" =~ State=[A-Z_+]*DRAIN ]] && [[ "$shown" != *" Reason="* ]]; then',
        f'  scontrol update nodename="$node" reason={shlex.quote(REGISTRATION_REASON)}',
        "fi",
    ]


def slurmd_dropin(exec_start: str) -> str:
    """The drop-in over the packaged slurmd unit: only the lines where what a configless dynamic node
    needs differs from a unit the package may carry. The noble package's own unit (slurm-wlm
    23.11.4-1.2ubuntu5) was not read, so the drop-in holds against both units it may be:

    * Slurm's at the release, etc/slurmd.service.in at slurm-23-11-4-1 (SchedMD/slurm 924dce6):
      ``#ConditionPathExists`` commented out, ``Type=notify``, ``ExecStart=slurmd --systemd
      $SLURMD_OPTIONS``, ``LimitMEMLOCK=infinity``;
    * Debian's own, as slurmd 22.05.8-4+deb12u3 installs it: ``ConditionPathExists=/etc/slurm/
      slurm.conf``, ``Type=simple``, ``ExecStart=/usr/sbin/slurmd -D -s $SLURMD_OPTIONS``,
      ``PIDFile=/run/slurmd.pid``, ``LimitMEMLOCK=infinity``.

    So: ``ConditionPathExists=`` empty, which resets it (systemd.unit(5): an empty assignment resets
    a condition list): a configless slurmd has no slurm.conf (configless_slurm.shtml, Limitations);
    ``ExecStart=`` reset and ours: the node's options (``-Z --conf-server --conf``), whose quoted
    ``--conf`` a ``$SLURMD_OPTIONS`` from an environment file would split at its spaces
    (systemd.service(5), "Command lines"); ``Type=simple`` with ``-D`` (foreground), Debian's pair,
    because the upstream unit's ``Type=notify`` waits for a readiness message only ``--systemd``
    sends. ``LimitMEMLOCK=infinity`` (verbs pins memory) is in both units and so not repeated;
    Debian's ``PIDFile`` goes with its ``Type=simple`` as it does there."""
    return (
        "\n".join(
            ["[Unit]", "ConditionPathExists=", "[Service]", "Type=simple", "ExecStart=", f"ExecStart={exec_start}"]
        )
        + "\n"
    )


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
            f"  install -o munge -g munge -m {MUNGE_KEY_MODE} {q(shared + '/munge.key')} {MUNGE_KEY}",
            "else",
            # A fresh key for the cluster (MUNGEKEY above), whatever the package left.
            f"  su munge -s /bin/sh -c '{MUNGEKEY} --create --force'",
            f"  chmod {MUNGE_KEY_MODE} {MUNGE_KEY}",
            f"  install -m {MUNGE_KEY_MODE} {MUNGE_KEY} {q(shared + '/munge.key')}",
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
    exec_start = f'/usr/sbin/slurmd -D -Z --conf-server {server} --conf "{node_conf(s)}"'
    return _b64(
        [
            *_lustre_lines(s, mgs),
            # slurm-client: the scontrol that sets the registration drain's reason.
            *_apt(["munge", "slurmd", "slurm-client", *s.pythons]),
            # The controller writes the key once it has mounted Lustre; wait for it (no timeout: a
            # node without the key cannot join, and `sinfo` on the controller shows it missing).
            f"until [ -s {q(shared + '/munge.key')} ]; do sleep 10; done",
            f"install -o munge -g munge -m {MUNGE_KEY_MODE} {q(shared + '/munge.key')} {MUNGE_KEY}",
            "systemctl restart munge",
            "mkdir -p /etc/systemd/system/slurmd.service.d",
            "cat > /etc/systemd/system/slurmd.service.d/gpu-cluster.conf <<'GPUC_EOF'",
            slurmd_dropin(exec_start).rstrip("\n"),
            "GPUC_EOF",
            "systemctl daemon-reload",
            "systemctl enable slurmd",
            "systemctl restart slurmd",
            *registration_reason_lines(),
        ]
    )
