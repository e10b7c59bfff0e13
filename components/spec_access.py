"""The keys a stack's login path takes: Azure Slurm's OpenSSH public key (the controller's and the
nodes' ``azureuser``, components/azure/orchestration_slurm.py), required for ``pulumi up`` and stood
in by a placeholder in the offline plan."""

from __future__ import annotations

from typing import Any, Mapping

from gpu_cluster.components.spec_model import SSH_KEY, SSH_KEY_PLACEHOLDER
from gpu_cluster.components.spec_reader import _Reader


def ssh_public_key(
    r: _Reader, o: Mapping[str, Any], cloud: str | None, kind: str | None, placeholder: bool
) -> str | None:
    key = r.string(o, "ssh_public_key", "orchestration", pattern=SSH_KEY, hint="an OpenSSH public key line")
    if (cloud, kind) != ("azure", "slurm"):
        if key is not None:
            r.bad("orchestration.ssh_public_key", "only applies to slurm on azure (the controller's and nodes' key)")
        return None
    if key is None and "ssh_public_key" not in o:
        if placeholder:
            return SSH_KEY_PLACEHOLDER
        r.bad("orchestration.ssh_public_key", "required for slurm on azure (allowed: an OpenSSH public key line)")
    return key
