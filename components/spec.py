"""The cluster description: one structured config object becomes a typed, checked ``ClusterSpec``.

A stack file holds the object under the config key ``gpu-cluster:cluster``. ``parse_spec``
checks every field and every rule that ties fields together, collects every problem as
``(config path, reason)`` and raises them together in one ``SpecError``, so a user fixes a
stack file in one pass. Nothing here imports Pulumi: the offline plan, the tests and the
validation job read specs without an engine.

This module is the front door; the work is split by job:

* ``spec_model``    the typed model (``ClusterSpec`` and its parts); only ``parse_spec`` builds one
* ``spec_reader``   ``SpecError`` and the reader that records problems (components/problems.py)
* ``spec_parse``    ``parse_spec`` and the generic rules
* ``spec_security`` the ``security:`` block
* ``stack_file``    stack files (``read_stack_file``, ``load_stack``) and this module's CLI
* ``components/<cloud>/rules.py``  the rules only one cloud has, each beside the page it follows
* ``components/lustre_tiers.py``   the catalog's Lustre tiers (sizes per throughput, with sources)

``python -m gpu_cluster.components.spec STACK`` checks a stack file and prints the parsed spec.
"""

from __future__ import annotations

from gpu_cluster.components.spec_model import (
    CAPACITY_TYPES,
    DEPLOY_TIME_ID,
    MAX_NODES,
    ORCHESTRATORS,
    PRE_PLACED,
    SUPPORTED_CLOUDS,
    Capacity,
    CapacitySpec,
    ClusterSpec,
    ComputeSpec,
    InterconnectSpec,
    LustreSpec,
    NetworkSpec,
    OrchestrationSpec,
    StorageSpec,
)
from gpu_cluster.components.spec_parse import (
    DEPLOYER_PLACEHOLDER,
    MY_ADDRESS_HINT,
    needs_deployer_placeholder,
    parse_spec,
)
from gpu_cluster.components.spec_reader import SpecError
from gpu_cluster.components.stack_file import (
    CONFIG_KEY,
    STACKS_DIR,
    bundled_stacks,
    default_name,
    fail_cli,
    load_stack,
    main,
    read_stack_file,
    stack_name,
    stack_path,
)

__all__ = [
    "CAPACITY_TYPES",
    "CONFIG_KEY",
    "DEPLOYER_PLACEHOLDER",
    "DEPLOY_TIME_ID",
    "MAX_NODES",
    "MY_ADDRESS_HINT",
    "ORCHESTRATORS",
    "PRE_PLACED",
    "STACKS_DIR",
    "SUPPORTED_CLOUDS",
    "Capacity",
    "CapacitySpec",
    "ClusterSpec",
    "ComputeSpec",
    "InterconnectSpec",
    "LustreSpec",
    "NetworkSpec",
    "OrchestrationSpec",
    "SpecError",
    "StorageSpec",
    "bundled_stacks",
    "default_name",
    "fail_cli",
    "load_stack",
    "main",
    "needs_deployer_placeholder",
    "parse_spec",
    "read_stack_file",
    "stack_name",
    "stack_path",
]

if __name__ == "__main__":
    raise SystemExit(main())
