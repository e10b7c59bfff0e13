"""The GPU pools' registration taint as the in-cluster layer sees it (issue 41, I6).

A GPU node registers with ``gpu-cluster.io/unvalidated=true:NoSchedule``
(components/contract.py) and takes no work until a validation passes it. Everything that must land
on that node before the validation (the driver, the device plugins, the node agents, the
validation job and heal's check pods) tolerates it; the user's pods do not. NoSchedule, not
NoExecute: a pod already running on the node is never evicted by it ("Taints and Tolerations",
kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/, read 2026-12-07).

A chart's tolerations value is a list, and Helm replaces a default list whole with the one given
(maps are merged, lists are not: helm/helm issue 3486, the maintainers' answer), so where a chart's default is replaced the
default is given again with ours after it (:func:`with_toleration`). The defaults come from the
liveness model's chart facts (components/liveness/facts.py CHARTS), each with its values.yaml line:
one copy, and the plan's liveness check reads the same list back from the rendered values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpu_cluster.components.contract import UNVALIDATED_TAINT_EFFECT, UNVALIDATED_TAINT_KEY


def toleration() -> dict[str, str]:
    """What a pod carries to land on a GPU node before its validation passed."""
    return {"key": UNVALIDATED_TAINT_KEY, "operator": "Exists", "effect": UNVALIDATED_TAINT_EFFECT}


def with_toleration(defaults: Iterable[Mapping[str, str]]) -> list[dict[str, str]]:
    """A chart's default tolerations, then ours (a list value replaces the default whole)."""
    return [*(dict(t) for t in defaults), toleration()]


def chart_defaults(chart: str, operand: str) -> tuple[Mapping[str, str], ...]:
    """The default tolerations of one operand of a chart, as the liveness facts cite them."""
    from gpu_cluster.components.liveness.facts import CHARTS

    (found,) = [o for o in CHARTS[chart].operands if o.name == operand]
    return found.tolerations
