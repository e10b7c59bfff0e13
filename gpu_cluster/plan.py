"""``gpu-cluster plan``: the offline plan of :mod:`components.plan`, with the policy pack that
``--policy`` checks it against (:mod:`policies.offline`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TextIO

from components import plan
from components.engine import OfflineRun
from components.spec import ClusterSpec
from policies import offline


def check_policy(run: OfflineRun, spec: ClusterSpec, out: TextIO) -> tuple[Any, bool]:
    violations = offline.check_run(run, spec)
    offline.render(violations, out, exceptions=spec.security.exceptions)
    return offline.to_json(violations), any(v.mandatory for v in violations)


def main(argv: Sequence[str] | None = None) -> int:
    return plan.main(argv, policy=check_policy)
