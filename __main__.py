"""Pulumi entry point: `pulumi up` on a stack in stacks/ builds the cluster it describes."""

import pulumi

from components import program

for key, value in program.build().items():
    pulumi.export(key, value)
