"""The EKS cluster's name, and with it the control plane's log group (components/aws/control_plane.py).

EKS writes the control plane's logs to the group ``/aws/eks/<cluster-name>/cluster`` and creates it
when it does not exist (EKS user guide "control-plane-logs"). Declaring that group in the stack, with
the stack's retention and key, needs the cluster's name before the cluster exists, and naming a
cluster that Pulumi once auto-named replaces it. So the name is a choice the stack file makes:

* ``orchestration.cluster_name`` set: the cluster takes that name and the stack creates its log
  group first. New stacks set it (the bundled EKS stacks do).
* unset: the cluster keeps Pulumi's generated name, exactly as before, and EKS keeps its own group
  (the plan's ``logs`` caveat says so). No existing cluster changes.
* an existing cluster adopts the group: ``cluster_name`` set to the name it already has (the stack
  output ``cluster_name``) and ``adopt_log_group: true``, which imports EKS's group by its name. The
  same name is expected to be no change (Pulumi keeps a generated name among the resource's inputs);
  that was not confirmed against a source, so docs/aws.md has the user check ``pulumi preview`` first.

Pure: no Pulumi.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from gpu_cluster.components.spec_reader import _Reader, short

# EKS API CreateCluster, name: "can contain only alphanumeric characters (case-sensitive), hyphens,
# and underscores. It must start with an alphanumeric character and can't be longer than 100
# characters" (botocore 1.43.117 data/eks/2017-11-01/service-2.json, shape ClusterName: min 1,
# max 100, pattern ^[0-9A-Za-z][A-Za-z0-9\-_]*).
EKS_CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}\Z")
KEYS = ("cluster_name", "adopt_log_group")


def log_group_name(cluster_name: str) -> str:
    """The group EKS writes the cluster's control plane logs to (components/aws/control_plane.py)."""
    return f"/aws/eks/{cluster_name}/cluster"


def eks_cluster_name(r: _Reader, o: Mapping[str, Any], cloud: str | None, kind: str | None) -> tuple[str | None, bool]:
    """``(cluster_name, adopt_log_group)`` from ``orchestration:``, problems recorded on ``r``."""
    name = r.string(
        o,
        "cluster_name",
        "orchestration",
        pattern=EKS_CLUSTER_NAME,
        hint="1-100 letters, digits, hyphens and underscores, starting with a letter or digit",
    )
    adopt = o.get("adopt_log_group", False)
    if not isinstance(adopt, bool):
        r.bad("orchestration.adopt_log_group", f"expected true or false, got {short(adopt)}")
        adopt = False
    if (cloud, kind) != ("aws", "eks"):
        for key in KEYS:
            if key in o:
                r.bad(f"orchestration.{key}", f"only applies to eks on aws (kind is {kind}, cloud {cloud})")
        return None, False
    if adopt and name is None:
        r.bad(
            "orchestration.adopt_log_group",
            "needs orchestration.cluster_name: the group to adopt is /aws/eks/<cluster name>/cluster (allowed: "
            "true with the name the cluster already has, the stack output cluster_name)",
        )
        adopt = False
    return name, adopt
