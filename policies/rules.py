"""The security rules of gpu-cluster, as plain functions over a resource's provider inputs.

One body of code serves two callers:

* the CrossGuard pack (``policies/__main__.py`` via ``gpu_cluster.policies.crossguard``), where Pulumi's
  engine hands each resource's inputs to a ``ResourceValidationPolicy`` and the whole stack to a
  ``StackValidationPolicy``;
* the offline check (``gpu_cluster.policies.offline``), which applies the same functions to the resources
  the offline engine recorded (``gpu_cluster.components.engine.run_offline``).

The rules live by domain, each declared beside its check (``gpu_cluster.policies.core.resource_rule`` /
``stack_rule``: name, enforcement, Checkov/Trivy IDs and resource types written once):

* ``gpu_cluster.policies.compute``   instance metadata, disk encryption, public addresses
* ``gpu_cluster.policies.storage``   Lustre keys and protection, bucket public access, access logs, lifecycle
* ``gpu_cluster.policies.network``   open ingress, flow logs, the default security group
* ``gpu_cluster.policies.identity``  IAM resource scoping, KMS key policies and rotation
* ``gpu_cluster.policies.clusters``  EKS and GKE control planes and nodes
* ``gpu_cluster.policies.workloads`` Kubernetes objects: images by digest, pod hardening
* ``gpu_cluster.policies.topology``  advisory fabric rules (EFA groups, placement, MTU)
* ``gpu_cluster.policies.azure``     Azure NSGs, storage accounts, AKS API and node addresses

This module gathers them; the rule types and readers are re-exported for the pack and the tests.
"""

from __future__ import annotations

from collections.abc import Iterable

# Importing a domain module declares its rules (in this order) into gpu_cluster.policies.core.RULES.
from gpu_cluster.policies import compute, storage, network, identity, clusters, workloads, topology, azure, azure_vms  # noqa: F401
from gpu_cluster.policies.core import (
    AWS_LAUNCH_TEMPLATES,
    CONTEXT_CONFIG_SCHEMA,
    RULES,
    Enforcement,
    ResourceRule,
    Rule,
    RuleContext,
    StackResource,
    StackRule,
)

__all__ = [
    "ALL_RULES",
    "AWS_LAUNCH_TEMPLATES",
    "CONTEXT_CONFIG_SCHEMA",
    "Enforcement",
    "RESOURCE_RULES",
    "STACK_RULES",
    "ResourceRule",
    "Rule",
    "RuleContext",
    "StackResource",
    "StackRule",
    "covered_types",
    "rule",
]

RESOURCE_RULES: tuple[ResourceRule, ...] = tuple(r for r in RULES if isinstance(r, ResourceRule))
STACK_RULES: tuple[StackRule, ...] = tuple(r for r in RULES if isinstance(r, StackRule))
ALL_RULES: tuple[Rule, ...] = (*RESOURCE_RULES, *STACK_RULES)

_names = [r.name for r in ALL_RULES]
if len(set(_names)) != len(_names):
    raise RuntimeError(f"duplicate rule names: {sorted({n for n in _names if _names.count(n) > 1})}")


def rule(name: str) -> Rule:
    for r in ALL_RULES:
        if r.name == name:
            return r
    raise KeyError(f"no rule {name!r} (rules: {', '.join(r.name for r in ALL_RULES)})")


def covered_types() -> Iterable[str]:
    return sorted({t for r in RESOURCE_RULES for t in r.resource_types})
