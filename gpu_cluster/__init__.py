"""The ``gpu-cluster`` command: one subcommand per entry point of the toolkit.

The top layer: it may import ``components``, ``policies`` and ``workloads``, and nothing imports
it. Each subcommand's module is imported only when that subcommand runs, so ``gpu-cluster
--help`` loads neither torch nor Pulumi.
"""
