"""The security rules of gpu-cluster, as plain functions over a resource's provider inputs.

One body of code serves two callers:

* the CrossGuard pack (``policies/__main__.py`` via ``policies.crossguard``), where Pulumi's
  engine hands each resource's inputs to a ``ResourceValidationPolicy`` and the whole stack to a
  ``StackValidationPolicy``;
* the offline check (``policies.offline``), which applies the same functions to the resources
  the offline engine recorded (``components.engine.run_offline``).

Both see inputs in the engine's wire form: camelCase keys (``metadataOptions.httpTokens``), as
the providers register them. A resource rule is ``check(resource_type, props, protect, context)
-> list[str]`` and answers ``[]`` for types it does not govern; a stack rule sees every resource
at once, for what one resource cannot show (a bucket without its public access block).

Each rule names the Checkov/Trivy checks it mirrors (``ids``), so a finding here can be looked
up in the scanner a security team already runs. Where a rule deliberately differs from its
anchor, the description says how and why.

Nothing here imports Pulumi: the rules run wherever the offline plan runs.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from collections.abc import Mapping, Sequence
from typing import Any, Callable, Iterable, Iterator, Literal

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

S3_BLOCK_FLAGS = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
EFA_INTERFACE_TYPES = ("efa", "efa-only")
# Pods reach IMDS through the node's network namespace, one hop more than the node itself:
# AWS's EKS guidance sets the hop limit to 2 for that. More than 2 lets IMDS answers travel
# further than any container needs.
MAX_IMDS_HOPS = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleContext:
    """What the stack's configuration expects, for the rules that compare against it.

    Under ``pulumi preview --policy-pack`` it comes from the policy pack config; offline it
    comes from the stack's ``ClusterSpec`` (``policies.offline.context_from_spec``). ``None``
    means "not known": the rule then checks only what holds for every stack.
    """

    lustre_kms_key_id: str | None = None
    """Customer-managed KMS key the config names for the Lustre file system; None: the service key is accepted."""
    api_access_cidrs: tuple[str, ...] | None = None
    """CIDRs allowed to reach a public Kubernetes API endpoint; () means the endpoint must be private."""
    pre_placed: bool | None = None
    """Whether the GPU capacity is handed over already placed (capacity block, reservation)."""
    zone: str | None = None
    """The one zone every GPU node shares."""
    instance_type: str | None = None
    """The GPU instance/machine type; found in the stack's own resources when unset."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> "RuleContext":
        """From a CrossGuard policy config object (camelCase keys, all optional)."""
        cfg = dict(config or {})
        cidrs = cfg.get("apiAccessCidrs")
        pre = cfg.get("prePlaced")
        return cls(
            lustre_kms_key_id=cfg.get("lustreKmsKeyId") or None,
            api_access_cidrs=tuple(str(c) for c in cidrs) if isinstance(cidrs, (list, tuple)) else None,
            pre_placed=bool(pre) if isinstance(pre, bool) else None,
            zone=cfg.get("zone") or None,
            instance_type=cfg.get("instanceType") or None,
        )

    def to_config(self) -> dict[str, Any]:
        """The inverse of ``from_config``: what to pass as the pack's config for one stack."""
        out: dict[str, Any] = {}
        if self.lustre_kms_key_id:
            out["lustreKmsKeyId"] = self.lustre_kms_key_id
        if self.api_access_cidrs is not None:
            out["apiAccessCidrs"] = list(self.api_access_cidrs)
        if self.pre_placed is not None:
            out["prePlaced"] = self.pre_placed
        if self.zone:
            out["zone"] = self.zone
        if self.instance_type:
            out["instanceType"] = self.instance_type
        return out


# The JSON schema of RuleContext.from_config, for the pack's PolicyConfigSchema.
CONTEXT_CONFIG_SCHEMA: Mapping[str, Mapping[str, Any]] = {
    "lustreKmsKeyId": {"type": "string", "description": "KMS key the Lustre file system must use"},
    "apiAccessCidrs": {"type": "array", "items": {"type": "string"},
                       "description": "CIDRs allowed to reach a public Kubernetes API endpoint; [] = private only"},
    "prePlaced": {"type": "boolean", "description": "GPU capacity is already placed (capacity block, reservation)"},
    "zone": {"type": "string", "description": "the one zone all GPU nodes share"},
    "instanceType": {"type": "string", "description": "the GPU instance/machine type (catalog name)"},
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
    """One sentence of what is required, naming the Checkov/Trivy IDs it mirrors."""
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


# ---------------------------------------------------------------------------------------------
# Compute: instance metadata, disks, public addresses.


def check_imdsv2(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type not in (*AWS_LAUNCH_TEMPLATES, AWS_INSTANCE):
        return []
    meta = _get(_launch_template_data(resource_type, props), "metadataOptions")
    meta = meta if isinstance(meta, Mapping) else {}
    if meta.get("httpEndpoint") == "disabled":
        return []  # no metadata service at all: nothing to steal credentials from
    problems = []
    tokens = meta.get("httpTokens")
    if tokens != "required":
        problems.append(f"metadataOptions.httpTokens is {tokens!r}, must be 'required' (IMDSv2 only): "
                        "IMDSv1 answers any SSRF with the node's credentials")
    hops = meta.get("httpPutResponseHopLimit")
    if hops is not None:
        try:
            n = int(hops)
        except (TypeError, ValueError):
            n = -1
        if not 1 <= n <= MAX_IMDS_HOPS:
            problems.append(f"metadataOptions.httpPutResponseHopLimit is {_num(hops)!r}, allowed 1..{MAX_IMDS_HOPS} "
                            "(2 lets pods reach IMDS through the node, more lets answers travel further)")
    return problems


def check_ebs_encrypted(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type in AWS_LAUNCH_TEMPLATES:
        data = _launch_template_data(resource_type, props)
        return [f"blockDeviceMappings[{i}] ({m.get('deviceName', '?')}): ebs.encrypted is "
                f"{_get(m, 'ebs', 'encrypted')!r}, must be true"
                for i, m in enumerate(_items(data.get("blockDeviceMappings")))
                if isinstance(m.get("ebs"), Mapping) and not _is_true(_get(m, "ebs", "encrypted"))]
    if resource_type == AWS_INSTANCE:
        problems = []
        root = props.get("rootBlockDevice")
        if not isinstance(root, Mapping) or not _is_true(root.get("encrypted")):
            problems.append(f"rootBlockDevice.encrypted is {_get(root, 'encrypted')!r}, must be true")
        problems += [f"ebsBlockDevices[{i}] ({d.get('deviceName', '?')}): encrypted is {d.get('encrypted')!r}, "
                     "must be true"
                     for i, d in enumerate(_items(props.get("ebsBlockDevices"))) if not _is_true(d.get("encrypted"))]
        return problems
    if resource_type == AWS_EBS_VOLUME and not _is_true(props.get("encrypted")):
        return [f"encrypted is {props.get('encrypted')!r}, must be true"]
    return []


def check_no_public_ip(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type in AWS_LAUNCH_TEMPLATES:
        data = _launch_template_data(resource_type, props)
        return [f"networkInterfaces[{i}] (device {_num(ni.get('deviceIndex', '?'))}, card "
                f"{_num(ni.get('networkCardIndex', 0))}): associatePublicIpAddress is true"
                for i, ni in enumerate(_items(data.get("networkInterfaces")))
                if _is_true(ni.get("associatePublicIpAddress"))]
    if resource_type == AWS_INSTANCE:
        if _is_true(props.get("associatePublicIpAddress")):
            return ["associatePublicIpAddress is true"]
        return [f"networkInterfaces[{i}]: associatePublicIpAddress is true"
                for i, ni in enumerate(_items(props.get("networkInterfaces")))
                if _is_true(ni.get("associatePublicIpAddress"))]
    if resource_type in GCP_INSTANCE_TEMPLATES:
        problems = []
        for i, ni in enumerate(_items(props.get("networkInterfaces"))):
            for key in ("accessConfigs", "ipv6AccessConfigs"):
                if _items(ni.get(key)):
                    problems.append(f"networkInterfaces[{i}] ({ni.get('network') or ni.get('subnetwork') or '?'}) "
                                    f"has {key}: an external address")
        return problems
    if resource_type == GCP_SLURM_CLUSTER:
        # Cluster Director: only login nodes can be given external addresses.
        if _is_true(_get(props, "orchestrator", "slurm", "loginNodes", "enablePublicIps")):
            return ["orchestrator.slurm.loginNodes.enablePublicIps is true: reach login nodes through IAP instead"]
    return []


# ---------------------------------------------------------------------------------------------
# Storage.


def check_lustre_cmk(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type != AWS_FSX_LUSTRE or not ctx.lustre_kms_key_id:
        return []
    given = props.get("kmsKeyId")
    if given != ctx.lustre_kms_key_id:
        return [f"kmsKeyId is {given!r}, the stack's config names {ctx.lustre_kms_key_id!r}"]
    return []


def check_lustre_protected(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type in (AWS_FSX_LUSTRE, GCP_LUSTRE) and not protect:
        return ["the file system is not protected (protect=True): a stray 'pulumi destroy' or replacement "
                "would delete the training data and checkpoints on it"]
    return []


def check_gcs_public_access(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type != GCP_BUCKET:
        return []
    problems = []
    if props.get("publicAccessPrevention") != "enforced":
        problems.append(f"publicAccessPrevention is {props.get('publicAccessPrevention')!r}, must be 'enforced'")
    if not _is_true(props.get("uniformBucketLevelAccess")):
        problems.append(f"uniformBucketLevelAccess is {props.get('uniformBucketLevelAccess')!r}, must be true "
                        "(object ACLs would bypass the bucket's IAM)")
    return problems


def check_s3_public_access_blocked(resources: Sequence[StackResource], ctx: RuleContext) -> list[StackFinding]:
    blocks = [r for r in resources if r.type == AWS_S3_PUBLIC_ACCESS_BLOCK]
    findings: list[StackFinding] = []
    for bucket in (r for r in resources if r.type in AWS_S3_BUCKETS):
        name = bucket.props.get("bucket")
        mine = [b for b in blocks if _refers_to(b, "bucket", bucket, *( [name] if isinstance(name, str) else []))]
        if not mine:
            findings.append((f"S3 bucket {bucket.name!r} has no BucketPublicAccessBlock", bucket.urn))
            continue
        for b in mine:
            off = [flag for flag in S3_BLOCK_FLAGS if not _is_true(b.props.get(flag))]
            if off:
                findings.append((f"BucketPublicAccessBlock {b.name!r} of bucket {bucket.name!r} leaves "
                                 f"{', '.join(off)} unset or false (all four must be true)", b.urn))
    return findings


# ---------------------------------------------------------------------------------------------
# Network exposure.


def _sg_rule_open(rule: Mapping[str, Any], v4: str = "cidrBlocks", v6: str = "ipv6CidrBlocks") -> list[str]:
    return [c for c in (*_strings(rule.get(v4)), *_strings(rule.get(v6))) if _is_open(c)]


def _port_text(rule: Mapping[str, Any], proto_key: str = "protocol") -> str:
    proto = str(rule.get(proto_key, "?"))
    if proto in ("-1", "all"):
        return "all traffic"
    lo, hi = _num(rule.get("fromPort")), _num(rule.get("toPort"))
    return f"{proto} {lo}" if lo == hi else f"{proto} {lo}-{hi}"


def check_no_open_ingress(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type == AWS_SECURITY_GROUP:
        return [f"ingress[{i}] ({_port_text(r)}) is open to {', '.join(_sg_rule_open(r))}"
                for i, r in enumerate(_items(props.get("ingress"))) if _sg_rule_open(r)]
    if resource_type == AWS_SECURITY_GROUP_RULE:
        if props.get("type") == "ingress" and _sg_rule_open(props):
            return [f"ingress rule ({_port_text(props)}) is open to {', '.join(_sg_rule_open(props))}"]
        return []
    if resource_type == AWS_SG_INGRESS_RULE:
        open_ = _sg_rule_open(props, "cidrIpv4", "cidrIpv6")
        if open_:
            return [f"ingress rule ({_port_text(props, 'ipProtocol')}) is open to {', '.join(open_)}"]
        return []
    if resource_type == GCP_FIREWALL:
        if str(props.get("direction") or "INGRESS").upper() != "INGRESS" or _is_true(props.get("disabled")):
            return []
        if not _items(props.get("allows")):
            return []  # a deny rule open to the world is a good thing
        open_ = [c for c in _strings(props.get("sourceRanges")) if _is_open(c)]
        if open_:
            allowed = ", ".join(f"{a.get('protocol')}:{','.join(_strings(a.get('ports'))) or 'all'}"
                                for a in _items(props.get("allows")))
            return [f"ingress firewall allows {allowed} from {', '.join(open_)}"]
    return []


def check_eks_endpoint(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type != AWS_EKS_CLUSTER:
        return []
    vpc = props.get("vpcConfig")
    vpc = vpc if isinstance(vpc, Mapping) else {}
    if _is_false(vpc.get("endpointPublicAccess")):
        return []
    # The provider's default is a public endpoint open to 0.0.0.0/0.
    cidrs = _strings(vpc.get("publicAccessCidrs")) or ["0.0.0.0/0"]
    problems = []
    open_ = [c for c in cidrs if _is_open(c)]
    if open_:
        problems.append(f"the API endpoint is public and open to {', '.join(open_)}: set "
                        "vpcConfig.endpointPublicAccess false or list publicAccessCidrs")
    if ctx.api_access_cidrs is not None:
        if not ctx.api_access_cidrs:
            problems.append("the API endpoint is public but the config lists no deployer_cidrs (private only)")
        else:
            extra = [c for c in cidrs if c not in ctx.api_access_cidrs and not _is_open(c)]
            if extra:
                problems.append(f"publicAccessCidrs {extra} are not among the config's deployer_cidrs "
                                f"{list(ctx.api_access_cidrs)}")
    return problems


def check_eks_secrets_encrypted(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type != AWS_EKS_CLUSTER:
        return []
    for cfg in _items(props.get("encryptionConfig")):
        if "secrets" in _strings(cfg.get("resources")) and _get(cfg, "provider", "keyArn"):
            return []
    return ["encryptionConfig does not encrypt 'secrets' with a KMS key (provider.keyArn)"]


def check_eks_node_ssh(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type != AWS_EKS_NODE_GROUP:
        return []
    remote = props.get("remoteAccess")
    if isinstance(remote, Mapping) and remote.get("ec2SshKey") and not _strings(remote.get("sourceSecurityGroupIds")):
        return ["remoteAccess names an SSH key but no sourceSecurityGroupIds: EKS then opens port 22 to 0.0.0.0/0"]
    return []


# ---------------------------------------------------------------------------------------------
# GKE.


def _gke_node_configs(resource_type: str, props: Props) -> list[tuple[str, Mapping[str, Any]]]:
    """(path, nodeConfig) for a cluster's default pool, its inline pools, or a NodePool."""
    found: list[tuple[str, Mapping[str, Any]]] = []
    if resource_type == GCP_GKE_NODE_POOL:
        if isinstance(props.get("nodeConfig"), Mapping):
            found.append(("nodeConfig", props["nodeConfig"]))
    elif resource_type == GCP_GKE_CLUSTER:
        if isinstance(props.get("nodeConfig"), Mapping):
            found.append(("nodeConfig", props["nodeConfig"]))
        for i, pool in enumerate(_items(props.get("nodePools"))):
            if isinstance(pool.get("nodeConfig"), Mapping):
                found.append((f"nodePools[{i}].nodeConfig", pool["nodeConfig"]))
    return found


def check_gke_control_plane(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type != GCP_GKE_CLUSTER:
        return []
    if _is_true(_get(props, "privateClusterConfig", "enablePrivateEndpoint")):
        return []
    man = props.get("masterAuthorizedNetworksConfig")
    if not isinstance(man, Mapping):
        return ["the control plane has a public endpoint and no masterAuthorizedNetworksConfig: "
                "any address may reach it"]
    problems = []
    cidrs = [str(b.get("cidrBlock")) for b in _items(man.get("cidrBlocks"))]
    open_ = [c for c in cidrs if _is_open(c)]
    if open_:
        problems.append(f"masterAuthorizedNetworksConfig admits {', '.join(open_)}")
    if _is_true(man.get("gcpPublicCidrsAccessEnabled")):
        problems.append("masterAuthorizedNetworksConfig.gcpPublicCidrsAccessEnabled admits every Google Cloud address")
    if ctx.api_access_cidrs is not None:
        # The cluster's own (private) range is authorised too, for runners inside the VPC; only
        # public ranges beyond the deployers' widen who can reach the API.
        extra = [c for c in cidrs if c not in ctx.api_access_cidrs and not _is_open(c) and _is_global(c)]
        if extra:
            problems.append(f"authorized networks {extra} are not among the config's deployer_cidrs "
                            f"{list(ctx.api_access_cidrs)}")
    return problems


def check_gke_private_nodes(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type == GCP_GKE_CLUSTER:
        if not _is_true(_get(props, "privateClusterConfig", "enablePrivateNodes")):
            return ["privateClusterConfig.enablePrivateNodes is not true: nodes get external addresses"]
        return [f"nodePools[{i}].networkConfig.enablePrivateNodes is false"
                for i, pool in enumerate(_items(props.get("nodePools")))
                if _is_false(_get(pool, "networkConfig", "enablePrivateNodes"))]
    if resource_type == GCP_GKE_NODE_POOL and _is_false(_get(props, "networkConfig", "enablePrivateNodes")):
        # Unset inherits the cluster's private nodes; only an explicit false opts a pool out.
        return ["networkConfig.enablePrivateNodes is false: this pool's nodes get external addresses"]
    return []


def check_gke_shielded_nodes(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    problems = []
    if resource_type == GCP_GKE_CLUSTER and _is_false(props.get("enableShieldedNodes")):
        problems.append("enableShieldedNodes is false")
    for path, cfg in _gke_node_configs(resource_type, props):
        shielded = cfg.get("shieldedInstanceConfig")
        shielded = shielded if isinstance(shielded, Mapping) else {}
        # Secure boot defaults to off in GKE; integrity monitoring defaults to on.
        if not _is_true(shielded.get("enableSecureBoot")):
            problems.append(f"{path}.shieldedInstanceConfig.enableSecureBoot is not true")
        if _is_false(shielded.get("enableIntegrityMonitoring")):
            problems.append(f"{path}.shieldedInstanceConfig.enableIntegrityMonitoring is false")
    if resource_type == GCP_GKE_NODE_POOL and not _gke_node_configs(resource_type, props):
        problems.append("nodeConfig is unset, so secure boot is off (GKE's default)")
    return problems


def check_gke_workload_identity(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    problems = []
    if resource_type == GCP_GKE_CLUSTER and not _get(props, "workloadIdentityConfig", "workloadPool"):
        problems.append("workloadIdentityConfig.workloadPool is unset: pods would use the node's service account")
    for path, cfg in _gke_node_configs(resource_type, props):
        mode = _get(cfg, "workloadMetadataConfig", "mode")
        if mode is not None and mode != "GKE_METADATA":
            problems.append(f"{path}.workloadMetadataConfig.mode is {mode!r}, must be 'GKE_METADATA'")
    return problems


def check_gke_secrets_encrypted(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type != GCP_GKE_CLUSTER:
        return []
    enc = props.get("databaseEncryption")
    if isinstance(enc, Mapping) and enc.get("state") == "ENCRYPTED" and enc.get("keyName"):
        return []
    return ["databaseEncryption does not encrypt Secrets with a Cloud KMS key (Google encrypts etcd at rest "
            "regardless; application-layer encryption adds a key the project controls)"]


# ---------------------------------------------------------------------------------------------
# Topology (advisory): what the fabric needs to run at speed.


def _efa_templates(resources: Sequence[StackResource]) -> list[StackResource]:
    return [r for r in resources if r.type in AWS_LAUNCH_TEMPLATES and _efa_interfaces(r.type, r.props)]


def _is_self_all(rule: Mapping[str, Any], proto_key: str = "protocol") -> bool:
    return str(rule.get(proto_key)) in ("-1", "all")


def check_efa_sg_self(resources: Sequence[StackResource], ctx: RuleContext) -> list[StackFinding]:
    findings: list[StackFinding] = []
    groups = [r for r in resources if r.type == AWS_SECURITY_GROUP]
    for lt in _efa_templates(resources):
        data_prop = "launchTemplateData" if lt.type == AWS_NATIVE_LAUNCH_TEMPLATE else "networkInterfaces"
        attached = [sg for sg in groups if _refers_to(lt, data_prop, sg)]
        if not attached:
            findings.append((f"EFA launch template {lt.name!r}: none of its interfaces' security groups is "
                             "declared in this stack, so its self rules cannot be checked", lt.urn))
            continue
        if not any(_sg_allows_self(sg, resources) == (True, True) for sg in attached):
            missing = {d for sg in attached for d, ok in zip(("ingress", "egress"), _sg_allows_self(sg, resources))
                       if not ok}
            findings.append((f"EFA launch template {lt.name!r}: no attached security group allows all traffic "
                             f"to and from itself ({'/'.join(sorted(missing))} self rule with protocol -1 "
                             "missing); EFA's SRD traffic is dropped without both", lt.urn))
    return findings


def _sg_allows_self(sg: StackResource, resources: Sequence[StackResource]) -> tuple[bool, bool]:
    """(ingress, egress): whether the group lets all protocols in from / out to itself."""
    seen = {"ingress": False, "egress": False}
    for direction in seen:
        for rule in _items(sg.props.get(direction)):
            if _is_self_all(rule) and _is_true(rule.get("self")):
                seen[direction] = True
    for r in resources:
        if r.type == AWS_SECURITY_GROUP_RULE and _refers_to(r, "securityGroupId", sg):
            if r.props.get("type") in seen and _is_self_all(r.props) and (
                    _is_true(r.props.get("self")) or _refers_to(r, "sourceSecurityGroupId", sg)):
                seen[str(r.props["type"])] = True
        elif r.type in (AWS_SG_INGRESS_RULE, AWS_SG_EGRESS_RULE) and _refers_to(r, "securityGroupId", sg):
            if _is_self_all(r.props, "ipProtocol") and _refers_to(r, "referencedSecurityGroupId", sg):
                seen["ingress" if r.type == AWS_SG_INGRESS_RULE else "egress"] = True
    return seen["ingress"], seen["egress"]


def check_efa_placement(resources: Sequence[StackResource], ctx: RuleContext) -> list[StackFinding]:
    findings: list[StackFinding] = []
    efa = _efa_templates(resources)
    if not efa:
        return findings
    clusters = [r for r in resources if r.type == AWS_PLACEMENT_GROUP and r.props.get("strategy") == "cluster"]
    for lt in efa:
        data = _launch_template_data(lt.type, lt.props)
        group = _get(data, "placement", "groupName")
        if ctx.pre_placed:
            if group:
                findings.append((f"EFA launch template {lt.name!r} names placement group {group!r} but the "
                                 "capacity is already placed (capacity block/reservation): launches can fail", lt.urn))
            continue
        if not group:
            findings.append((f"EFA launch template {lt.name!r} has no placement.groupName: nodes may land far apart "
                             "on the network spine", lt.urn))
        elif clusters and not any(_refers_to(lt, "placement" if lt.type == AWS_LAUNCH_TEMPLATE
                                             else "launchTemplateData", pg, pg.props.get("name") or "")
                                  for pg in clusters):
            findings.append((f"EFA launch template {lt.name!r}: placement group {group!r} is not a 'cluster' "
                             "placement group of this stack", lt.urn))
        elif not clusters:
            findings.append((f"EFA launch template {lt.name!r}: the stack declares no 'cluster' placement group",
                             lt.urn))
    if ctx.zone:
        subnets = [r for r in resources if r.type == AWS_SUBNET]
        for lt in efa:
            for sn in subnets:
                zone = sn.props.get("availabilityZone")
                if zone and zone != ctx.zone and _refers_to(lt, "networkInterfaces", sn):
                    findings.append((f"EFA launch template {lt.name!r} uses subnet {sn.name!r} in {zone}, not the "
                                     f"cluster's zone {ctx.zone}: EFA does not cross zones", lt.urn))
    return findings


def _catalog_mtu(resources: Sequence[StackResource], ctx: RuleContext) -> tuple[str, int] | None:
    from components.catalog import CatalogError, load_catalog

    catalog = load_catalog()
    names = [ctx.instance_type] if ctx.instance_type else []
    for r in resources:
        for key in ("machineType", "instanceType", "instanceTypes"):
            names += _walk_strings_at(r.props, key)
    for name in names:
        try:
            it = catalog.get(name.rsplit("/", 1)[-1])
        except CatalogError:
            continue
        return it.name, it.network.mtu
    return None


def _walk_strings_at(value: Any, key: str) -> list[str]:
    """Every string found under ``key`` at any depth."""
    out: list[str] = []
    if isinstance(value, Mapping):
        for k, v in value.items():
            if k == key:
                out += list(_walk_strings(v))
            else:
                out += _walk_strings_at(v, key)
    elif _is_list(value):
        for v in value:
            out += _walk_strings_at(v, key)
    return out


def check_gpu_network_mtu(resources: Sequence[StackResource], ctx: RuleContext) -> list[StackFinding]:
    networks = [r for r in resources if r.type == GCP_NETWORK]
    if not networks:
        return []
    found = _catalog_mtu(resources, ctx)
    if found is None:
        return [("the stack's GPU machine type is not in the catalog (set instanceType in the policy config), "
                 "so network MTUs cannot be checked", None)]
    machine, mtu = found
    findings: list[StackFinding] = []
    for net in networks:
        given = net.props.get("mtu")
        if given is None or int(given) != mtu:
            findings.append((f"network {net.name!r} has MTU {given if given is not None else 'unset (1460)'}, the "
                             f"catalog gives {mtu} for {machine}: smaller frames cut GPU-to-GPU bandwidth", net.urn))
    return findings


# ---------------------------------------------------------------------------------------------
# The rule set.

RESOURCE_RULES: tuple[ResourceRule, ...] = (
    ResourceRule(
        name="imdsv2-required",
        description="Launch templates and instances require IMDSv2 tokens (httpTokens=required) with a response hop "
                    "limit of at most 2 (CKV_AWS_79, AVD-AWS-0028, AVD-AWS-0130; CKV_AWS_341 asks for 1, 2 is "
                    "allowed so pods reach IMDS through the node)",
        enforcement="mandatory", ids=("CKV_AWS_79", "CKV_AWS_341", "AVD-AWS-0028", "AVD-AWS-0130"),
        anchor="Checkov CKV_AWS_79/CKV_AWS_341, Trivy AVD-AWS-0028/0130",
        resource_types=(*AWS_LAUNCH_TEMPLATES, AWS_INSTANCE), check=check_imdsv2),
    ResourceRule(
        name="ebs-encrypted",
        description="Every EBS volume, root and data, in launch templates, instances and standalone volumes is "
                    "encrypted (CKV_AWS_3, CKV_AWS_8, CKV_AWS_189; the key may be the account's default). GCE and "
                    "GKE disks are always encrypted by Google and need no rule",
        enforcement="mandatory", ids=("CKV_AWS_3", "CKV_AWS_8", "CKV_AWS_189"),
        anchor="Checkov CKV_AWS_3/8/189",
        resource_types=(*AWS_LAUNCH_TEMPLATES, AWS_INSTANCE, AWS_EBS_VOLUME), check=check_ebs_encrypted),
    ResourceRule(
        name="lustre-encrypted-cmk",
        description="FSx for Lustre uses the customer-managed KMS key the stack's config names "
                    "(storage.lustre.kms_key_id) (CKV_AWS_190); without one, the FSx service key is accepted",
        enforcement="mandatory", ids=("CKV_AWS_190",), anchor="Checkov CKV_AWS_190",
        resource_types=(AWS_FSX_LUSTRE,), check=check_lustre_cmk),
    ResourceRule(
        name="lustre-protected",
        description="Lustre file systems (FSx for Lustre, Managed Lustre) are protected from deletion "
                    "(protect=True); no scanner check exists, house rule STYLE.md 5",
        enforcement="mandatory", ids=(), anchor="gpu-cluster STYLE.md rule 5 (stateful resources say how they die)",
        resource_types=(AWS_FSX_LUSTRE, GCP_LUSTRE), check=check_lustre_protected),
    ResourceRule(
        name="no-public-ip-nodes",
        description="No node gets a public address: launch template interfaces do not associate a public IP, GCE "
                    "instance templates have no access configs, Cluster Director login nodes no public IPs "
                    "(CKV_GCP_40, CKV_AWS_88, AVD-AWS-0009)",
        enforcement="mandatory", ids=("CKV_GCP_40", "CKV_AWS_88", "AVD-AWS-0009"),
        anchor="Checkov CKV_GCP_40/CKV_AWS_88, Trivy AVD-AWS-0009",
        resource_types=(*AWS_LAUNCH_TEMPLATES, AWS_INSTANCE, *GCP_INSTANCE_TEMPLATES, GCP_SLURM_CLUSTER),
        check=check_no_public_ip),
    ResourceRule(
        name="no-open-ingress",
        description="No security group or firewall rule admits ingress from 0.0.0.0/0 or ::/0 "
                    "(CKV_AWS_24, CKV_AWS_25, CKV_AWS_260, CKV_AWS_277, AVD-AWS-0107, CKV_GCP_2, CKV_GCP_3); egress "
                    "may be open (CKV_AWS_382 is not mirrored: nodes pull images and reach AWS APIs through NAT)",
        enforcement="mandatory",
        ids=("CKV_AWS_24", "CKV_AWS_25", "CKV_AWS_260", "CKV_AWS_277", "AVD-AWS-0107", "CKV_GCP_2", "CKV_GCP_3"),
        anchor="Checkov CKV_AWS_24/25/260/277, CKV_GCP_2/3; Trivy AVD-AWS-0107",
        resource_types=(AWS_SECURITY_GROUP, AWS_SECURITY_GROUP_RULE, AWS_SG_INGRESS_RULE, GCP_FIREWALL),
        check=check_no_open_ingress),
    ResourceRule(
        name="eks-endpoint-restricted",
        description="The EKS API endpoint is private, or public only to listed CIDRs none of which is 0.0.0.0/0, "
                    "and only to the config's api_access_cidrs (CKV_AWS_39, CKV_AWS_38, AVD-AWS-0040, AVD-AWS-0041)",
        enforcement="mandatory", ids=("CKV_AWS_39", "CKV_AWS_38", "AVD-AWS-0040", "AVD-AWS-0041"),
        anchor="Checkov CKV_AWS_38/39, Trivy AVD-AWS-0040/0041",
        resource_types=(AWS_EKS_CLUSTER,), check=check_eks_endpoint),
    ResourceRule(
        name="eks-secrets-encrypted",
        description="EKS envelope-encrypts Kubernetes secrets with a KMS key (encryptionConfig resources "
                    "['secrets']) (CKV_AWS_58, AVD-AWS-0039)",
        enforcement="mandatory", ids=("CKV_AWS_58", "AVD-AWS-0039"), anchor="Checkov CKV_AWS_58, Trivy AVD-AWS-0039",
        resource_types=(AWS_EKS_CLUSTER,), check=check_eks_secrets_encrypted),
    ResourceRule(
        name="eks-node-ssh-restricted",
        description="EKS node groups with an SSH key restrict it to source security groups, never the implicit "
                    "0.0.0.0/0 (CKV_AWS_100)",
        enforcement="mandatory", ids=("CKV_AWS_100",), anchor="Checkov CKV_AWS_100",
        resource_types=(AWS_EKS_NODE_GROUP,), check=check_eks_node_ssh),
    ResourceRule(
        name="gke-control-plane-restricted",
        description="The GKE control plane has a private endpoint or master authorized networks that do not admit "
                    "0.0.0.0/0 (CKV_GCP_18)",
        enforcement="mandatory", ids=("CKV_GCP_18",), anchor="Checkov CKV_GCP_18",
        resource_types=(GCP_GKE_CLUSTER,), check=check_gke_control_plane),
    ResourceRule(
        name="gke-private-nodes",
        description="GKE nodes have internal addresses only (privateClusterConfig.enablePrivateNodes; no pool opts "
                    "out) (CKV_GCP_64, CKV_GCP_25)",
        enforcement="mandatory", ids=("CKV_GCP_64", "CKV_GCP_25"), anchor="Checkov CKV_GCP_64/25",
        resource_types=(GCP_GKE_CLUSTER, GCP_GKE_NODE_POOL), check=check_gke_private_nodes),
    ResourceRule(
        name="gke-shielded-nodes",
        description="GKE nodes are Shielded VMs with secure boot and integrity monitoring "
                    "(CKV_GCP_71, CKV_GCP_68, CKV_GCP_72)",
        enforcement="mandatory", ids=("CKV_GCP_71", "CKV_GCP_68", "CKV_GCP_72"), anchor="Checkov CKV_GCP_71/68/72",
        resource_types=(GCP_GKE_CLUSTER, GCP_GKE_NODE_POOL), check=check_gke_shielded_nodes),
    ResourceRule(
        name="gke-workload-identity",
        description="GKE runs Workload Identity (a workload pool, GKE_METADATA on every pool) so pods never hold "
                    "the node's service account (CKV_GCP_69)",
        enforcement="mandatory", ids=("CKV_GCP_69",), anchor="Checkov CKV_GCP_69",
        resource_types=(GCP_GKE_CLUSTER, GCP_GKE_NODE_POOL), check=check_gke_workload_identity),
    ResourceRule(
        name="gcs-public-access-prevented",
        description="GCS buckets enforce public access prevention and uniform bucket-level access "
                    "(CKV_GCP_114, CKV_GCP_29)",
        enforcement="mandatory", ids=("CKV_GCP_114", "CKV_GCP_29"), anchor="Checkov CKV_GCP_114/29",
        resource_types=(GCP_BUCKET,), check=check_gcs_public_access),
    ResourceRule(
        name="gke-secrets-encrypted",
        description="GKE encrypts Secrets at the application layer with a Cloud KMS key (databaseEncryption); "
                    "advisory: Google already encrypts etcd at rest (the GKE counterpart of CKV_AWS_58)",
        enforcement="advisory", ids=(), anchor="GKE application-layer secrets encryption; counterpart of CKV_AWS_58",
        resource_types=(GCP_GKE_CLUSTER,), check=check_gke_secrets_encrypted),
)

STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        name="s3-public-access-blocked",
        description="Every S3 bucket has a BucketPublicAccessBlock with all four flags true "
                    "(CKV_AWS_53, CKV_AWS_54, CKV_AWS_55, CKV_AWS_56)",
        enforcement="mandatory", ids=("CKV_AWS_53", "CKV_AWS_54", "CKV_AWS_55", "CKV_AWS_56"),
        anchor="Checkov CKV_AWS_53-56", check=check_s3_public_access_blocked),
    StackRule(
        name="efa-sg-self-traffic",
        description="Every EFA launch template carries a security group that allows all traffic in from and out "
                    "to itself (AWS EFA user guide; ParallelCluster's EFA security group check)",
        enforcement="advisory", ids=(), anchor="AWS EFA user guide, 'Prepare an EFA-enabled security group'",
        check=check_efa_sg_self),
    StackRule(
        name="efa-placement",
        description="EFA nodes share one zone and a cluster placement group, unless the capacity is already "
                    "placed (capacity block, reservation), where a placement group must not be named",
        enforcement="advisory", ids=(), anchor="AWS EC2 placement groups and capacity blocks guides",
        check=check_efa_placement),
    StackRule(
        name="gpu-network-mtu",
        description="The stack's VPC networks use the MTU the catalog gives for the GPU machine type "
                    "(components/catalog.yaml)",
        enforcement="advisory", ids=(), anchor="GCP GPU network bandwidth and MTU guidance (catalog source)",
        check=check_gpu_network_mtu),
)

ALL_RULES: tuple[Rule, ...] = (*RESOURCE_RULES, *STACK_RULES)


def rule(name: str) -> Rule:
    for r in ALL_RULES:
        if r.name == name:
            return r
    raise KeyError(f"no rule {name!r} (rules: {', '.join(r.name for r in ALL_RULES)})")


def covered_types() -> Iterable[str]:
    return sorted({t for r in RESOURCE_RULES for t in r.resource_types})
