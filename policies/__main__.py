"""The gpu-cluster-security CrossGuard pack: ``pulumi preview --policy-pack policies``.

This is the only place the pack is built: ``PolicyPack()`` starts the analyzer's gRPC server and
blocks for good, so nothing may import this file (tests use ``gpu_cluster.policies.crossguard``).

Policies that compare against the stack's configuration (the Lustre KMS key, the API CIDRs,
pre-placed capacity, the zone, the GPU type) read it from the pack's config; write it for one
stack with ``python -m gpu_cluster.policies.offline STACK --pack-config PATH`` and pass
``--policy-pack-config PATH``. Without it those policies check only what holds for every stack.
"""

import sys
from pathlib import Path

# Pulumi runs the pack from this directory; the rules import ``policies`` and ``components``
# (the catalog) from the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402

from gpu_cluster.policies.crossguard import policies  # noqa: E402

PolicyPack(
    name="gpu-cluster-security",
    description="Security and fabric rules for gpu-cluster stacks, each naming the Checkov/Trivy check it mirrors",
    enforcement_level=EnforcementLevel.ADVISORY,
    policies=policies(),
)
