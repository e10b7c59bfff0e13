"""``gpu-cluster plan``: the offline plan of :mod:`gpu_cluster.components.plan`, with the policy pack that
``--policy`` checks it against (:mod:`gpu_cluster.policies.offline`) and the validation job the liveness model
checks (rendered as ``validate render`` renders it: :mod:`gpu_cluster.workloads.validate.commands`)."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Sequence
from typing import Any, TextIO

from gpu_cluster.components import plan
from gpu_cluster.components.engine import OfflineRun
from gpu_cluster.components.liveness import Job
from gpu_cluster.components.spec import ClusterSpec
from gpu_cluster.policies import offline


def check_policy(run: OfflineRun, spec: ClusterSpec, out: TextIO) -> tuple[Any, bool]:
    violations = offline.check_run(run, spec)
    offline.render(violations, out, exceptions=spec.security.exceptions)
    return offline.to_json(violations), any(v.mandatory for v in violations)


@functools.cache
def _bundle() -> Any:
    from gpu_cluster.workloads.launch import bundle

    return bundle.build()


def render_job(run: OfflineRun, spec: ClusterSpec) -> Job | None:
    """The validation job ``validate render`` would write for these outputs, with its defaults,
    as the liveness model reads it."""
    from gpu_cluster.components.contract import read_outputs
    from gpu_cluster.workloads.validate import commands

    outs = read_outputs(run.outputs, f"the offline plan of {spec.name}")
    args = argparse.Namespace(**commands.DEFAULT_RENDER)
    rendered = commands.render_run(outs, args, "liveness", bundle=_bundle())
    job: Job = commands.liveness_job(rendered)
    return job


def main(argv: Sequence[str] | None = None) -> int:
    return plan.main(argv, policy=check_policy, job=render_job)


if __name__ == "__main__":
    # `python -m gpu_cluster.plan STACK` is `gpu-cluster plan STACK` (it printed nothing before).
    raise SystemExit(main())
