"""The mandatory findings each bundled stack has on this branch, and who removes each.

The pack's rules are written to the scanners' bar, not to what the stacks do today; where a stack
does not meet a rule yet, the finding is listed here with the branch that fixes it, and the
tests assert exactly this set. When the fix lands the test fails, and the entry is deleted:
nothing here can hide a new finding, and no rule is weakened to pass.
"""

from __future__ import annotations

PENDING: dict[str, dict[str, str]] = {
    "aws-h100-eks": {
        "imdsv2-required": "aws-first-apply: GPU launch template hop limit 1, EKS Pod Identity for the add-ons",
    },
    "aws-h100-capacity-block": {
        "imdsv2-required": "aws-first-apply: GPU launch template hop limit 1, EKS Pod Identity for the add-ons",
    },
    "aws-h200-slurm": {
        "imdsv2-required": "aws-first-apply: PCS compute and login launch templates hop limit 1",
        "iam-no-wildcard-resource": "aws-first-apply: pcs:RegisterComputeNodeGroupInstance scoped to the cluster ARN",
    },
    "gcp-h100-gke": {
        "flow-logs": "gcp-first-apply: log_config on the GPU subnets (components/gcp/audit.subnet_log_config)",
        "k8s-images-by-digest": "gcp-first-apply: TCPXO installer and pause images by digest",
        "k8s-workload-hardening": "gcp-first-apply: installer DaemonSet hardened or its needs named in "
                                  "checkov.io/skip annotations",
    },
}


def pending(stack: str) -> set[str]:
    return set(PENDING.get(stack, {}))
