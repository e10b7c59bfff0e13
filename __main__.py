"""Pulumi entry point: `pulumi up` on a stack in stacks/ builds the cluster it describes."""

import pulumi

from gpu_cluster.components import program

for key, value in program.build().items():
    pulumi.export(key, value)
