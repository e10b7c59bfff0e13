"""The mandatory findings each bundled stack has on this branch, and who removes each.

The pack's rules are written to the scanners' bar, not to what the stacks do today; where a stack
does not meet a rule yet, the finding is listed here with the branch that fixes it, and the
tests assert exactly this set. When the fix lands the test fails, and the entry is deleted:
nothing here can hide a new finding, and no rule is weakened to pass.
"""

from __future__ import annotations

PENDING: dict[str, dict[str, str]] = {
    # Every bundled stack passes every mandatory rule: the GKE GPU subnets log their flows (the
    # RoCE-profile subnets are outside the rule, see policies/README.md), the installer and
    # injector DaemonSets name their host access in checkov.io/skip annotations, and the gIB
    # installer's missing digest is a waiver derived from the catalog's null digest.
}


def pending(stack: str) -> set[str]:
    return set(PENDING.get(stack, {}))
