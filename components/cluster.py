"""GpuCluster: the one component a stack creates. It picks the cloud package and composes
the four pillars (network + interconnect, compute, storage, orchestration) it builds.

Each cloud package exposes ``build(name, spec, opts) -> ClusterOutputs``; the pillar
components it creates carry type tokens ``gpu-cluster:<cloud>:<Pillar>`` with Pillar one of
``PILLARS``, which is how the offline plan groups resources.
"""

from __future__ import annotations

import importlib
from typing import Any, Mapping

import pulumi

from components.spec import ClusterSpec

PILLARS = ("Network", "Interconnect", "Compute", "Storage", "Orchestration")

# The stack outputs every cloud package returns (values may be Outputs). The validation job
# and the launchers read these names; keep them stable.
OUTPUT_KEYS = (
    "cloud",            # aws | gcp
    "region",
    "zone",
    "orchestrator",     # eks | gke | slurm
    "instance_type",
    "nodes",            # GPU nodes in the job's node group
    "gpus_per_node",
    "fabric",           # {"type": efa|tcpx|tcpxo|rdma, "interfaces_per_node": int, "placement": str | None, "mtu": int}
    "mount",            # {"type": "lustre", "mount_point", "dns_name", "mount_name", "mount_command"}
    "bucket",           # checkpoint/output bucket name
    "access",           # how to reach the cluster: {"api_endpoint", "kubeconfig_command"} or {"login", "ssh_command"}
    "node_list_source", # where the validation job gets the node list (a Slurm partition or a node label)
    "validation",       # the validation job the stack rendered: {"kind": "jobset", "name", "namespace", "manifest",
                        # "watch_command", "logs_command", "report"} (created by the stack) or {"kind": "sbatch",
                        # "script", "path", "submit_command", "report"} (to copy to "path" and submit)
)


class GpuCluster(pulumi.ComponentResource):
    """A multi-node GPU training cluster on the spec's cloud."""

    outputs: Mapping[str, Any]

    def __init__(self, name: str, spec: ClusterSpec, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-cluster:index:GpuCluster", name, None, opts)
        cloud = importlib.import_module(f"components.{spec.cloud}.cluster")
        outputs: Mapping[str, Any] = cloud.build(name, spec, pulumi.ResourceOptions(parent=self))
        missing = [k for k in OUTPUT_KEYS if k not in outputs]
        if missing:
            raise RuntimeError(f"components.{spec.cloud}.cluster.build did not return outputs {missing}")
        self.outputs = dict(outputs)
        self.register_outputs(dict(self.outputs))
