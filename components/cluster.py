"""GpuCluster: the one component a stack creates. It picks the cloud package and composes
the four pillars (network + interconnect, compute, storage, orchestration) it builds.

Each cloud package exposes ``build(name, spec, opts)``, returning the stack outputs with
exactly the keys of ``components.contract.OUTPUT_KEYS`` (values may be Outputs); the pillar
components it creates carry type tokens ``gpu-cluster:<cloud>:<Pillar>`` with Pillar one of
``PILLARS``, which is how the offline plan groups resources.
"""

from __future__ import annotations

import importlib
from typing import Any, Mapping

import pulumi

from components.contract import OUTPUT_KEYS
from components.spec import ClusterSpec

PILLARS = ("Network", "Interconnect", "Compute", "Storage", "Orchestration")

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
