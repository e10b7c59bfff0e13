from __future__ import annotations

from typing import Any, Mapping

import pytest
from pulumi_policy.proxy import unknown_checking_proxy
from pulumi_policy import (
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    StackValidationArgs,
)

from gpu_cluster.components.engine import Recorded
from tests.policies.sdk_program import Recording, aws_program, azure_program, gcp_program, record


@pytest.fixture(scope="session")
def aws_rec() -> Recording:
    return record(aws_program)


@pytest.fixture(scope="session")
def gcp_rec() -> Recording:
    return record(gcp_program)


@pytest.fixture(scope="session")
def azure_rec() -> Recording:
    return record(azure_program)


def options(protect: bool) -> PolicyResourceOptions:
    return PolicyResourceOptions(
        protect=protect,
        ignore_changes=[],
        delete_before_replace=None,
        aliases=[],
        custom_timeouts=PolicyCustomTimeouts(0, 0, 0),
        additional_secret_outputs=[],
    )


def resource_args(res: Recorded, config: Mapping[str, Any] | None = None) -> ResourceValidationArgs:
    # Props wrapped as the analyzer wraps them (lists become a Sequence proxy, not a list).
    return ResourceValidationArgs(
        res.type, unknown_checking_proxy(res.inputs), res.urn, res.name, options(res.protect), None, config
    )


def stack_args(rec: Recording, names: list[str], config: Mapping[str, Any] | None = None) -> StackValidationArgs:
    """The named resources as CrossGuard hands a stack to a policy: props plus property
    dependencies (URNs), no provider ids."""
    chosen = [rec.get(n) for n in names]
    policy_resources = {
        r.urn: PolicyResource(
            r.type, unknown_checking_proxy(r.inputs), r.urn, r.name, options(r.protect), None, None, [], {}
        )
        for r in chosen
    }
    for r in chosen:
        for prop, urns in rec.property_dependencies.get(r.urn, {}).items():
            policy_resources[r.urn].property_dependencies[prop] = [
                policy_resources[u] for u in urns if u in policy_resources
            ]
    return StackValidationArgs(list(policy_resources.values()), config)


class Reports:
    """A ReportViolation collector."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str | None]] = []

    def __call__(self, message: str, urn: str | None = None) -> None:
        self.items.append((message, urn))

    @property
    def messages(self) -> list[str]:
        return [m for m, _ in self.items]
