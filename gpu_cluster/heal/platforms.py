"""Which scheduler, cloud and revalidation a stack's outputs call for."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from gpu_cluster.heal.adapters import Checker, Cloud, Scheduler


@dataclass(frozen=True, slots=True)
class Built:
    cluster: str
    scheduler: Scheduler
    cloud: Cloud
    checker: Checker
    describe: str


class PlatformError(ValueError):
    """The stack's platform cannot be healed from here; one line with the next step."""


def build(args: argparse.Namespace) -> Built:
    raise PlatformError(f"heal {args.stack}: the cloud and scheduler paths are not wired in this build yet")
