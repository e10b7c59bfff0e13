"""The rules of ``gpu_cluster.policies.rules`` as CrossGuard policy objects.

Building the ``PolicyPack`` itself is left to ``policies/__main__.py``: its constructor starts a
gRPC server and never returns, so tests and the offline check import this module instead and
call a policy's ``validate`` directly.
"""

from __future__ import annotations

from typing import Any, Mapping

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    PolicyResource,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from gpu_cluster.policies.rules import (
    ALL_RULES,
    CONTEXT_CONFIG_SCHEMA,
    ResourceRule,
    Rule,
    RuleContext,
    StackResource,
    StackRule,
)

_LEVELS = {"mandatory": EnforcementLevel.MANDATORY, "advisory": EnforcementLevel.ADVISORY}


def _schema() -> PolicyConfigSchema:
    return PolicyConfigSchema(properties={k: dict(v) for k, v in CONTEXT_CONFIG_SCHEMA.items()})


def _description(rule: Rule) -> str:
    """The rule's sentence plus the scanner checks it mirrors (written once, on the rule)."""
    return f"{rule.description} ({', '.join(rule.ids)})" if rule.ids else f"{rule.description} ({rule.anchor})"


def _tag(rule: Rule, message: str) -> str:
    ids = f" [{', '.join(rule.ids)}]" if rule.ids else ""
    return f"{message}{ids}"


def resource_policy(rule: ResourceRule) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        if args.resource_type not in rule.resource_types:
            return
        ctx = RuleContext.from_config(args.get_config())
        protect = bool(getattr(args.opts, "protect", False))
        for message in rule.check(args.resource_type, args.props, protect, ctx):
            report(_tag(rule, message), None)

    return ResourceValidationPolicy(
        name=rule.name,
        description=_description(rule),
        validate=validate,
        enforcement_level=_LEVELS[rule.enforcement],
        config_schema=_schema(),
        tags=list(rule.ids) or None,
        remediation_steps=None,
    )


def stack_resource(res: PolicyResource) -> StackResource:
    deps: Mapping[str, Any] = res.property_dependencies or {}
    return StackResource(
        type=res.resource_type,
        name=res.name,
        urn=res.urn,
        props=res.props,
        protect=bool(getattr(res.opts, "protect", False)),
        id=None,
        refs={k: tuple(d.urn for d in v) for k, v in deps.items()},
    )


def stack_policy(rule: StackRule) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report: ReportViolation) -> None:
        ctx = RuleContext.from_config(args.get_config())
        for message, urn in rule.check([stack_resource(r) for r in args.resources], ctx):
            report(_tag(rule, message), urn)

    return StackValidationPolicy(
        name=rule.name,
        description=_description(rule),
        validate=validate,
        enforcement_level=_LEVELS[rule.enforcement],
        config_schema=_schema(),
        tags=list(rule.ids) or None,
    )


def policies() -> list[Policy]:
    """Every rule as a CrossGuard policy, in the order ``gpu_cluster.policies.rules.ALL_RULES`` lists them."""
    out: list[Policy] = []
    for rule in ALL_RULES:
        if isinstance(rule, ResourceRule):
            out.append(resource_policy(rule))
        elif isinstance(rule, StackRule):
            out.append(stack_policy(rule))
    return out
