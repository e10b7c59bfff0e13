"""The policy pack's rules applied to an offline run: no Pulumi engine, no cloud.

    python -m gpu_cluster.policies.offline STACK [--pack-config PATH|-]

``check_run`` hands every resource the offline engine recorded (``gpu_cluster.components.engine``) to the
same rule functions CrossGuard calls under ``pulumi preview --policy-pack policies``, resource
rules one resource at a time and stack rules over the whole run. The expectations a rule compares
against (the Lustre KMS key, the API CIDRs, pre-placed capacity) come from the stack's
``ClusterSpec``, as the pack's config would give them.

The CLI prints the Policy section for one stack and exits 3 when a mandatory rule is violated
(2 for a bad stack file, as every CLI here). ``--pack-config`` writes the pack config that gives
CrossGuard the same expectations (``pulumi preview --policy-pack policies --policy-pack-config``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterable, Mapping, Sequence, TextIO

from gpu_cluster.components.stack_locate import STACK_HELP
from gpu_cluster.components.engine import OfflineRun, Recorded
from gpu_cluster.components.spec import ClusterSpec
from gpu_cluster.policies.rules import ALL_RULES, Enforcement, ResourceRule, Rule, RuleContext, StackResource, StackRule

EXIT_MANDATORY = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class Violation:
    rule: str
    """The rule's name (the CrossGuard policy name)."""
    enforcement: Enforcement
    ids: tuple[str, ...]
    """Checkov/Trivy IDs the rule mirrors."""
    message: str
    resource_type: str | None = None
    resource_name: str | None = None
    """None for a finding against the stack as a whole."""
    urn: str | None = None

    @property
    def mandatory(self) -> bool:
        return self.enforcement == "mandatory"


def context_from_spec(spec: ClusterSpec) -> RuleContext:
    """What the stack's configuration expects, as the rules read it."""
    kubernetes = spec.orchestration.kind in ("eks", "gke", "aks")
    return RuleContext(
        lustre_kms_key_id=spec.storage.lustre.kms_key_id,
        api_access_cidrs=tuple(spec.orchestration.api_access_cidrs) if kubernetes else None,
        pre_placed=spec.compute.capacity.pre_placed,
        zone=spec.zone,
        instance_type=spec.compute.instance_type,
        exceptions=dict(spec.security.exceptions),
    )


def egress_addresses(resources: list[StackResource]) -> tuple[str, ...]:
    """The public IPs the stack's NAT gateways send from (Azure): the nodes' egress addresses."""
    by_id = {r.id: r for r in resources}
    out = []
    for nat in (r for r in resources if r.type == "azure-native:network:NatGateway"):
        for ref in nat.props.get("publicIpAddresses") or []:
            ip = by_id.get(str((ref or {}).get("id")))
            if ip is not None and ip.props.get("ipAddress"):
                out.append(str(ip.props["ipAddress"]))
    return tuple(out)


def mock_id(res: Recorded) -> str:
    """The id the offline engine gave ``res`` (``gpu_cluster.components.engine._StrictMocks.new_resource``):
    other resources' inputs carry it wherever the program passed ``res.id``."""
    return f"{res.name}-id"


def stack_resources(run: OfflineRun) -> list[StackResource]:
    return [
        StackResource(type=r.type, name=r.name, urn=r.urn, props=r.inputs, protect=r.protect, id=mock_id(r))
        for r in run.resources
        if r.custom
    ]


def check_run(run: OfflineRun, spec: ClusterSpec, rules: Iterable[Rule] = ALL_RULES) -> list[Violation]:
    """Every violation of ``rules`` in the run: resource rules first, in registration order."""
    resources = stack_resources(run)
    ctx = replace(context_from_spec(spec), egress_addresses=egress_addresses(resources))
    by_urn = {r.urn: r for r in resources}
    rules = list(rules)
    found: list[Violation] = []
    for res in resources:
        for rule in rules:
            if isinstance(rule, ResourceRule) and res.type in rule.resource_types:
                found += [
                    Violation(
                        rule=rule.name,
                        enforcement=rule.enforcement,
                        ids=rule.ids,
                        message=m,
                        resource_type=res.type,
                        resource_name=res.name,
                        urn=res.urn,
                    )
                    for m in rule.check(res.type, res.props, res.protect, ctx)
                ]
    for rule in rules:
        if isinstance(rule, StackRule):
            for message, urn in rule.check(resources, ctx):
                at = by_urn.get(urn) if urn else None
                found.append(
                    Violation(
                        rule=rule.name,
                        enforcement=rule.enforcement,
                        ids=rule.ids,
                        message=message,
                        resource_type=at.type if at else None,
                        resource_name=at.name if at else None,
                        urn=urn,
                    )
                )
    return found


def render(
    violations: Sequence[Violation],
    out: TextIO,
    rules: Iterable[Rule] = ALL_RULES,
    exceptions: Mapping[str, str] | None = None,
) -> None:
    """The plan's Policy section: the stack's exceptions, each violated rule with its IDs, then its findings."""
    exceptions = exceptions or {}
    rules = list(rules)
    w = out.write
    mandatory = sum(v.mandatory for v in violations)
    w(f"Policy ({len(rules)} rules: {mandatory} mandatory and {len(violations) - mandatory} advisory findings)\n")
    if not violations:
        w("  every rule holds\n")
    for name, reason in sorted(exceptions.items()):
        w(f"  EXCEPTION {name}: {reason}\n")
    for rule in rules:
        mine = [v for v in violations if v.rule == rule.name]
        if not mine:
            continue
        ids = ", ".join(rule.ids) if rule.ids else rule.anchor
        w(f"  {'FAIL' if rule.enforcement == 'mandatory' else 'WARN'} {rule.name} ({ids})\n")
        for v in mine:
            where = f"{v.resource_type} {v.resource_name}" if v.resource_name else "stack"
            w(f"       {where}: {v.message}\n")
    w("\n")


def to_json(violations: Sequence[Violation]) -> list[dict[str, Any]]:
    return [asdict(v) for v in violations]


def pack_config(spec: ClusterSpec) -> dict[str, dict[str, Any]]:
    """The CrossGuard pack config that gives every policy the stack's expectations."""
    cfg = context_from_spec(spec).to_config()
    return {rule.name: dict(cfg) for rule in ALL_RULES}


def main(argv: Sequence[str] | None = None) -> int:
    from gpu_cluster.components.engine import run_offline
    from gpu_cluster.components.spec import SpecError, default_name, parse_spec, read_stack_file

    ap = argparse.ArgumentParser(prog="python -m gpu_cluster.policies.offline", description=__doc__.split("\n\n")[0])
    ap.add_argument("stack", help=STACK_HELP)
    ap.add_argument("--pack-config", metavar="PATH", help="write the CrossGuard pack config to PATH ('-': stdout)")
    args = ap.parse_args(argv)
    try:
        name, raw = read_stack_file(args.stack)
        spec = parse_spec(raw, default_name=default_name(name))
    except SpecError as err:
        print(f"gpu-cluster: {args.stack}: {err.render()}", file=sys.stderr)
        return 2
    if args.pack_config:
        text = json.dumps(pack_config(spec), indent=2) + "\n"
        if args.pack_config == "-":
            sys.stdout.write(text)
        else:
            with open(args.pack_config, "w", encoding="utf-8") as fh:
                fh.write(text)
        return 0
    violations = check_run(run_offline(name, raw), spec)
    print(f"== {name}")
    render(violations, sys.stdout, exceptions=spec.security.exceptions)
    return EXIT_MANDATORY if any(v.mandatory for v in violations) else 0


if __name__ == "__main__":
    raise SystemExit(main())
