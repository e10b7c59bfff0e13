"""The mandatory findings each bundled stack has on this branch, and who removes each.

The pack's rules are written to the scanners' bar, not to what the stacks do today; where a stack
does not meet a rule yet, the finding is listed here with the branch that fixes it, and the
tests assert exactly this set. When the fix lands the test fails, and the entry is deleted:
nothing here can hide a new finding, and no rule is weakened to pass.
"""

from __future__ import annotations

PENDING: dict[str, dict[str, str]] = {
    # After main's aws-first-apply (hop limit 1 with Pod Identity, PCS policy scoped) every AWS
    # stack passes every rule. The GKE stacks' open findings:
    "gcp-h100-gke": {
        "flow-logs": "gcp-first-apply: log_config on the GPU subnets (components/gcp/audit.subnet_log_config), "
                     "or the stack's reason if GPU-NIC flow logs are not wanted",
        "k8s-workload-hardening": "gcp-first-apply: the TCPXO installer and NRI device-injector DaemonSets' host "
                                  "access named in checkov.io/skip annotations with its reasons, the pause "
                                  "container hardened",
    },
    "gcp-h200-gke": {
        "flow-logs": "gcp-first-apply: log_config on the gVNIC and RDMA subnets, or the stack's reason",
        "k8s-images-by-digest": "gcp-first-apply: the gIB installer's digest (catalog fabrics.rdma.installer.digest "
                                "is null: no public source for it yet)",
        "k8s-workload-hardening": "gcp-first-apply: the gIB installer DaemonSet's host access named in "
                                  "checkov.io/skip annotations with its reasons, the pause container hardened",
    },
}


def pending(stack: str) -> set[str]:
    return set(PENDING.get(stack, {}))
