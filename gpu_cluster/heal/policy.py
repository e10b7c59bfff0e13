"""The safety limits heal holds itself to, each with the practice it follows.

- Dry run unless ``--apply`` (the cluster-health-scanner's ``DRY_RUN``, SELFHEAL.md K1).
- At most ``max_per_hour`` replacements asked of the cloud in any rolling hour, default 2 (draino's
  ``--max-node-replacement-per-hour=2``, DataDog/draino PR 20, SELFHEAL.md U9), and one at a time
  (Google Distributed Cloud repairs one node of a pool at a time, at most max(3, 10 %) an hour:
  cloud.google.com/anthos/clusters/docs/on-prem/1.10/how-to/node-auto-repair, SELFHEAL.md U10).
- Stop everything, with the reason, when more nodes FAIL than ``max(1, floor(fraction x nodes))``,
  fraction 0.2 by default (ECS managed instances drain at most 20 % of a group, and one when the
  group is under nine, SELFHEAL.md U11; EKS's node repair stops over its own
  ``maxUnhealthyNodeThreshold*``, E3): that many at once is the fabric, the image or the judge,
  not the nodes.
- At most 3 replacements per slot in 24 hours, then ESCALATED (AKS auto-repair tries at most three
  repair actions per node, SELFHEAL.md A1); the 24 hours make a replaced node that fails again
  the next day count against the same slot, so a replacement loop (SELFHEAL.md section 2) ends.
- No replacement starts when the reservation or capacity block ends before the replacement and
  its revalidation are expected to finish (gpu_cluster.components.validation_time.replace_estimate and
  revalidate_estimate); the incident is ABANDONED and the node stays out of service.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_MAX_PER_HOUR = 2
DEFAULT_MAX_OUT = 2
"""I7: nodes heal may hold out of service at once, across reports and runs of one journal (the same
small number as the hourly rate; Google Distributed Cloud repairs one node of a pool at a time,
SELFHEAL.md U10, and ECS drains one instance of a group under nine, U11)."""
DEFAULT_MAX_UNHEALTHY = 0.2
MAX_ATTEMPTS = 3
ATTEMPT_WINDOW_S = 24 * 3600.0
RATE_WINDOW_S = 3600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    apply: bool = False
    max_per_hour: int = DEFAULT_MAX_PER_HOUR
    max_unhealthy: float = DEFAULT_MAX_UNHEALTHY
    """Fraction of the nodes that may FAIL at once (at least one node is always allowed)."""
    max_attempts: int = MAX_ATTEMPTS
    join_timeout_s: float = 1800.0
    """How long a new instance may take to register (ParallelCluster's node_replacement_timeout,
    1800 s: aws/aws-parallelcluster-node clustermgtd.py DEFAULTS, SELFHEAL.md P3)."""
    evict_timeout_s: float = 3600.0
    """How long eviction may wait on PodDisruptionBudgets (GKE auto-repair drains for up to an
    hour, SELFHEAL.md G1); past it the incident stops (RETRY), pods are never deleted by force."""
    max_out: int = DEFAULT_MAX_OUT
    """--max-out-of-service: nodes heal holds out of service at once (quarantined, being replaced,
    escalated or abandoned and still marked), whatever report opened their incidents (I7)."""
    replace_busy: bool = False
    """--replace-busy: past evict_timeout_s, replace a node that still runs work (I5 holds unless
    the user asks for this by name)."""
    window_end: float | None = None
    """--window-end: when the capacity ends, where the cloud cannot say (epoch seconds)."""

    def allowed_unhealthy(self, nodes: int) -> int:
        return max(1, math.floor(self.max_unhealthy * nodes))


def problems(limits: Limits) -> list[tuple[str, str]]:
    """Every bad limit at once, as ``(flag, reason)``."""
    out = []
    if limits.max_per_hour < 0:
        out.append(("--max-per-hour", f"{limits.max_per_hour} (allowed: 0 or more; 0 replaces nothing)"))
    if limits.max_out < 1:
        out.append(("--max-out-of-service", f"{limits.max_out} (allowed: 1 or more)"))
    if not 0.0 < limits.max_unhealthy <= 1.0 or math.isnan(limits.max_unhealthy):
        out.append(("--max-unhealthy", f"{limits.max_unhealthy} (allowed: a fraction in (0, 1])"))
    for flag, value in (("--join-timeout", limits.join_timeout_s), ("--evict-timeout", limits.evict_timeout_s)):
        if not (value > 0 and math.isfinite(value)):
            out.append((flag, f"{value} (allowed: a finite number of seconds > 0)"))
    return out


def stop_all_reason(failed: list[str], nodes: int, limits: Limits) -> str | None:
    """Why nothing may be done when too many nodes FAIL at once, or None."""
    allowed = limits.allowed_unhealthy(nodes)
    if len(failed) <= allowed:
        return None
    return (
        f"{len(failed)} of {nodes} nodes FAIL ({', '.join(failed[:8])}{' ...' if len(failed) > 8 else ''}), more than "
        f"the {allowed} heal replaces at once (--max-unhealthy {limits.max_unhealthy:g}): so many at once is the "
        "fabric, the image or the judge, not the nodes; read the report, then rerun with --max-unhealthy if it is "
        "the nodes"
    )
