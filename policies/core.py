"""What every rule of the pack shares: the rule types, the stack's expectations, the readers.

A resource rule is ``check(resource_type, props, protect, context) -> list[str]`` and answers
``[]`` for types it does not govern; a stack rule sees every resource at once, for what one
resource cannot show (a bucket without its public access block). Rules are declared where their
check is, with the decorators here (``resource_rule``/``stack_rule``): name, enforcement, the
Checkov/Trivy IDs and the resource types are written once, beside the function that checks them.

Inputs arrive in the engine's wire form: camelCase keys (``metadataOptions.httpTokens``), as the
providers register them. Nothing here imports Pulumi: the rules run wherever the offline plan runs.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Literal

Enforcement = Literal["mandatory", "advisory"]
Props = Mapping[str, Any]

# Type tokens the rules govern: the providers' own tokens, as the engine sees them.
AWS_LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
AWS_NATIVE_LAUNCH_TEMPLATE = "aws-native:ec2:LaunchTemplate"
AWS_INSTANCE = "aws:ec2/instance:Instance"
AWS_EBS_VOLUME = "aws:ebs/volume:Volume"
AWS_SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
AWS_SECURITY_GROUP_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
AWS_SG_INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
AWS_SG_EGRESS_RULE = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
AWS_PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
AWS_SUBNET = "aws:ec2/subnet:Subnet"
AWS_EKS_CLUSTER = "aws:eks/cluster:Cluster"
AWS_EKS_NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
AWS_FSX_LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
AWS_S3_BUCKETS = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
AWS_S3_PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
AWS_LAUNCH_TEMPLATES = (AWS_LAUNCH_TEMPLATE, AWS_NATIVE_LAUNCH_TEMPLATE)

GCP_INSTANCE_TEMPLATES = (
    "gcp:compute/instanceTemplate:InstanceTemplate",
    "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate",
    "gcp:compute/instance:Instance",
)
GCP_SLURM_CLUSTER = "gcp:hypercomputecluster/cluster:Cluster"
GCP_FIREWALL = "gcp:compute/firewall:Firewall"
GCP_NETWORK = "gcp:compute/network:Network"
GCP_GKE_CLUSTER = "gcp:container/cluster:Cluster"
GCP_GKE_NODE_POOL = "gcp:container/nodePool:NodePool"
GCP_BUCKET = "gcp:storage/bucket:Bucket"
GCP_LUSTRE = "gcp:lustre/instance:Instance"
GCP_SUBNETWORK = "gcp:compute/subnetwork:Subnetwork"

AWS_VPC = "aws:ec2/vpc:Vpc"
AWS_FLOW_LOG = "aws:ec2/flowLog:FlowLog"
AWS_DEFAULT_SECURITY_GROUP = "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup"
AWS_S3_BUCKET_LOGGING = ("aws:s3/bucketLogging:BucketLogging", "aws:s3/bucketLoggingV2:BucketLoggingV2")
AWS_S3_LIFECYCLE = (
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
    "aws:s3/bucketLifecycleConfigurationV2:BucketLifecycleConfigurationV2",
)
AWS_S3_VERSIONING = ("aws:s3/bucketVersioning:BucketVersioning", "aws:s3/bucketVersioningV2:BucketVersioningV2")
AWS_KMS_KEY = "aws:kms/key:Key"
AWS_KMS_KEY_POLICY = "aws:kms/keyPolicy:KeyPolicy"
AWS_IAM_POLICY_DOCUMENTS = (
    "aws:iam/policy:Policy",
    "aws:iam/rolePolicy:RolePolicy",
    "aws:iam/userPolicy:UserPolicy",
    "aws:iam/groupPolicy:GroupPolicy",
)
AWS_IAM_ROLE = "aws:iam/role:Role"

S3_BLOCK_FLAGS = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
EFA_INTERFACE_TYPES = ("efa", "efa-only")
# CKV_AWS_341: a hop limit of 1 keeps IMDS answers on the node, so a pod (one hop further, in
# its own network namespace) cannot take the node role's credentials. A stack that needs pods
# to reach IMDS opts out with a reason (``exceptions["imdsv2-required"]``) and may then use 2,
# the most any container needs (EC2 user guide, "Configure the instance metadata options":
# a container one hop further needs a hop limit of 2 to get IMDSv2 answers).
MAX_IMDS_HOPS = 1
MAX_IMDS_HOPS_WITH_EXCEPTION = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleContext:
    """What the stack's configuration expects, for the rules that compare against it.

    Under ``pulumi preview --policy-pack`` it comes from the policy pack config; offline it
    comes from the stack's ``ClusterSpec`` (``gpu_cluster.policies.offline.context_from_spec``). ``None``
    means "not known": the rule then checks only what holds for every stack.
    """

    lustre_kms_key_id: str | None = None
    """Customer-managed KMS key the config names for the Lustre file system; None: the service key is accepted."""
    api_access_cidrs: tuple[str, ...] | None = None
    """CIDRs allowed to reach a public Kubernetes API endpoint; () means the endpoint must be private."""
    egress_addresses: tuple[str, ...] | None = None
    """The cluster's own egress addresses (its NAT gateways' public IPs), which an API's authorized
    ranges must hold so the nodes can join (AKS api-server-authorized-ip-ranges.md:45); None: not
    known here (under ``pulumi preview`` the address exists only once the IP is created)."""
    pre_placed: bool | None = None
    """Whether the GPU capacity is handed over already placed (capacity block, reservation)."""
    zone: str | None = None
    """The one zone every GPU node shares."""
    instance_type: str | None = None
    """The GPU instance/machine type; found in the stack's own resources when unset."""
    exceptions: Mapping[str, str] = field(default_factory=dict)
    """Rule name -> the stack's reason for a deliberate exception (spec ``security.exceptions``).
    Each rule says what its exception relaxes; an exception never silences a rule it does not name."""

    def exception(self, rule: str) -> str | None:
        return self.exceptions.get(rule) or None

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> "RuleContext":
        """From a CrossGuard policy config object (camelCase keys, all optional)."""
        cfg = dict(config or {})
        cidrs = cfg.get("apiAccessCidrs")
        egress = cfg.get("egressAddresses")
        pre = cfg.get("prePlaced")
        exc = cfg.get("exceptions")
        return cls(
            lustre_kms_key_id=cfg.get("lustreKmsKeyId") or None,
            api_access_cidrs=tuple(str(c) for c in cidrs) if isinstance(cidrs, (list, tuple)) else None,
            egress_addresses=tuple(str(a) for a in egress) if isinstance(egress, (list, tuple)) else None,
            pre_placed=bool(pre) if isinstance(pre, bool) else None,
            zone=cfg.get("zone") or None,
            instance_type=cfg.get("instanceType") or None,
            exceptions={str(k): str(v) for k, v in exc.items() if v} if isinstance(exc, Mapping) else {},
        )

    def to_config(self) -> dict[str, Any]:
        """The inverse of ``from_config``: what to pass as the pack's config for one stack."""
        out: dict[str, Any] = {}
        if self.lustre_kms_key_id:
            out["lustreKmsKeyId"] = self.lustre_kms_key_id
        if self.api_access_cidrs is not None:
            out["apiAccessCidrs"] = list(self.api_access_cidrs)
        if self.egress_addresses is not None:
            out["egressAddresses"] = list(self.egress_addresses)
        if self.pre_placed is not None:
            out["prePlaced"] = self.pre_placed
        if self.zone:
            out["zone"] = self.zone
        if self.instance_type:
            out["instanceType"] = self.instance_type
        if self.exceptions:
            out["exceptions"] = dict(self.exceptions)
        return out


# The JSON schema of RuleContext.from_config, for the pack's PolicyConfigSchema.
CONTEXT_CONFIG_SCHEMA: Mapping[str, Mapping[str, Any]] = {
    "lustreKmsKeyId": {"type": "string", "description": "KMS key the Lustre file system must use"},
    "apiAccessCidrs": {
        "type": "array",
        "items": {"type": "string"},
        "description": "CIDRs allowed to reach a public Kubernetes API endpoint; [] = private only",
    },
    "prePlaced": {"type": "boolean", "description": "GPU capacity is already placed (capacity block, reservation)"},
    "zone": {"type": "string", "description": "the one zone all GPU nodes share"},
    "instanceType": {"type": "string", "description": "the GPU instance/machine type (catalog name)"},
    "exceptions": {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "description": "rule name -> the stack's reason for a deliberate exception",
    },
}


@dataclass(frozen=True, slots=True, kw_only=True)
class StackResource:
    """One resource as a stack rule sees it: the common part of CrossGuard's ``PolicyResource``
    and the offline engine's ``Recorded``."""

    type: str
    name: str
    urn: str
    props: Props
    protect: bool = False
    id: str | None = None
    """The provider id where it is known (offline: the mock engine's id); references in other
    resources' inputs carry it."""
    refs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Top-level input name -> URNs it depends on (CrossGuard's property dependencies)."""


ResourceCheck = Callable[[str, Props, bool, RuleContext], list[str]]
StackFinding = tuple[str, str | None]
"""(message, URN of the resource at fault or None for the stack as a whole)."""
StackCheck = Callable[[Sequence[StackResource], RuleContext], list[StackFinding]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """What every rule carries, resource or stack level."""

    name: str
    """Unique policy name (kebab-case), as CrossGuard reports it."""
    description: str
    """One sentence of what is required and how it differs from its anchors (the IDs are added
    by ``gpu_cluster.policies.crossguard``, not repeated here)."""
    enforcement: Enforcement
    """mandatory blocks an update; advisory only warns."""
    ids: tuple[str, ...]
    """Checkov/Trivy check IDs this rule mirrors (empty where no scanner has one; see anchor)."""
    anchor: str
    """Where the rule comes from, in words (the scanner checks, or the public guidance)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceRule(Rule):
    resource_types: tuple[str, ...]
    """The type tokens ``check`` governs; it answers [] for any other."""
    check: ResourceCheck


@dataclass(frozen=True, slots=True, kw_only=True)
class StackRule(Rule):
    check: StackCheck


RULES: list[Rule] = []
"""Every rule, in the order the domain modules declare them (``gpu_cluster.policies.rules`` imports them all)."""


def resource_rule(
    *,
    name: str,
    description: str,
    enforcement: Enforcement,
    ids: tuple[str, ...],
    anchor: str,
    resource_types: tuple[str, ...],
) -> Callable[[ResourceCheck], ResourceCheck]:
    """Declare the decorated function as a resource rule's check."""

    def declare(check: ResourceCheck) -> ResourceCheck:
        RULES.append(
            ResourceRule(
                name=name,
                description=description,
                enforcement=enforcement,
                ids=ids,
                anchor=anchor,
                resource_types=resource_types,
                check=check,
            )
        )
        return check

    return declare


def stack_rule(
    *, name: str, description: str, enforcement: Enforcement, ids: tuple[str, ...], anchor: str
) -> Callable[[StackCheck], StackCheck]:
    """Declare the decorated function as a stack rule's check."""

    def declare(check: StackCheck) -> StackCheck:
        RULES.append(
            StackRule(name=name, description=description, enforcement=enforcement, ids=ids, anchor=anchor, check=check)
        )
        return check

    return declare


# ---------------------------------------------------------------------------------------------
# Small readers. Inputs arrive as the SDK serialised them: some booleans are strings in one
# provider schema ("true" for a launch template's EBS encryption) and real bools in another.


def _is_list(value: Any) -> bool:
    # CrossGuard wraps lists in a Sequence proxy that is neither list nor tuple.
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _items(value: Any) -> list[Mapping[str, Any]]:
    if isinstance(value, Mapping):
        return [value]
    if _is_list(value):
        return [v for v in value if isinstance(v, Mapping)]
    return []


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if _is_list(value):
        return [v for v in value if isinstance(v, str)]
    return []


def _is_true(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def _is_false(value: Any) -> bool:
    return value is False or (isinstance(value, str) and value.strip().lower() == "false")


def _num(value: Any) -> Any:
    """Numbers as a person wrote them (mocked and JSON inputs turn 2 into 2.0)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _is_open(cidr: str) -> bool:
    """0.0.0.0/0, ::/0, or any other spelling of 'the whole internet' (a /0)."""
    try:
        return ipaddress.ip_network(cidr.strip(), strict=False).prefixlen == 0
    except ValueError:
        return False


def _is_global(cidr: str) -> bool:
    """A range on the public internet (not private, shared, documentation or loopback)."""
    try:
        return ipaddress.ip_network(cidr.strip(), strict=False).is_global
    except ValueError:
        return True  # unreadable: treat as public, so it is reported


def _walk_strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _walk_strings(v)
    elif _is_list(value):
        for v in value:
            yield from _walk_strings(v)


_UNKNOWN = object()
"""What ``_known`` gives for a value CrossGuard does not know yet (a preview's computed input)."""


def _known(props: Props, *path: str) -> Any:
    """``_get(props, *path)``, or ``_UNKNOWN`` where CrossGuard's proxy holds an unknown value.

    During ``pulumi preview`` an input computed from other resources' outputs is unknown, and the
    proxy raises ``pulumi_policy.proxy.UnknownValueError`` when it is read, which would abort
    the whole rule; matched by name so that the rules stay free of Pulumi imports."""
    try:
        return _get(props, *path)
    except Exception as exc:  # noqa: BLE001 (re-raised unless it is the proxy's unknown)
        if type(exc).__name__ == "UnknownValueError":
            return _UNKNOWN
        raise


def _refers_to(res: StackResource, prop: str, target: StackResource, *aliases: str) -> bool:
    """Whether ``res``'s input ``prop`` points at ``target`` (by dependency, id, or an alias value
    such as a bucket's name, which is also its id)."""
    deps = res.refs.get(prop)
    if deps:
        # CrossGuard knows the dependencies; during a preview the ids behind them are unknown,
        # and reading an unknown value would abort the whole policy.
        return target.urn in deps
    keys = {k for k in (target.id, *aliases) if k}
    return bool(keys) and any(s in keys for s in _walk_strings(res.props.get(prop)))


def _launch_template_data(resource_type: str, props: Props) -> Props:
    """The part of a launch template that describes the instance, for both schemas:
    pulumi-aws puts it at the top level, aws-native under ``launchTemplateData``."""
    if resource_type == AWS_NATIVE_LAUNCH_TEMPLATE:
        data = props.get("launchTemplateData")
        return data if isinstance(data, Mapping) else {}
    return props


def _efa_interfaces(resource_type: str, props: Props) -> list[Mapping[str, Any]]:
    data = _launch_template_data(resource_type, props)
    return [ni for ni in _items(data.get("networkInterfaces")) if ni.get("interfaceType") in EFA_INTERFACE_TYPES]
