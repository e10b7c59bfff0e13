"""Cluster rules: the EKS and GKE control planes, their nodes and their secrets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_cluster.policies.core import (
    AWS_EKS_CLUSTER,
    AWS_EKS_NODE_GROUP,
    GCP_GKE_CLUSTER,
    GCP_GKE_NODE_POOL,
    Props,
    RuleContext,
    _get,
    _is_false,
    _is_global,
    _is_open,
    _is_true,
    _items,
    _strings,
    resource_rule,
)


@resource_rule(
    name="eks-endpoint-restricted",
    description="The EKS API endpoint is private, or public only to listed CIDRs none of which is 0.0.0.0/0, "
    "and only to the config's api_access_cidrs",
    enforcement="mandatory",
    ids=("CKV_AWS_39", "CKV_AWS_38", "AVD-AWS-0040", "AVD-AWS-0041"),
    anchor="Checkov CKV_AWS_38/39, Trivy AVD-AWS-0040/0041",
    resource_types=(AWS_EKS_CLUSTER,),
)
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
        problems.append(
            f"the API endpoint is public and open to {', '.join(open_)}: set "
            "vpcConfig.endpointPublicAccess false or list publicAccessCidrs"
        )
    if ctx.api_access_cidrs is not None:
        if not ctx.api_access_cidrs:
            problems.append("the API endpoint is public but the config lists no deployer_cidrs (private only)")
        else:
            extra = [c for c in cidrs if c not in ctx.api_access_cidrs and not _is_open(c)]
            if extra:
                problems.append(
                    f"publicAccessCidrs {extra} are not among the config's deployer_cidrs {list(ctx.api_access_cidrs)}"
                )
    return problems


@resource_rule(
    name="eks-secrets-encrypted",
    description="EKS envelope-encrypts Kubernetes secrets with a KMS key (encryptionConfig resources ['secrets'])",
    enforcement="mandatory",
    ids=("CKV_AWS_58", "AVD-AWS-0039"),
    anchor="Checkov CKV_AWS_58, Trivy AVD-AWS-0039",
    resource_types=(AWS_EKS_CLUSTER,),
)
def check_eks_secrets_encrypted(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type != AWS_EKS_CLUSTER:
        return []
    for cfg in _items(props.get("encryptionConfig")):
        if "secrets" in _strings(cfg.get("resources")) and _get(cfg, "provider", "keyArn"):
            return []
    return ["encryptionConfig does not encrypt 'secrets' with a KMS key (provider.keyArn)"]


@resource_rule(
    name="eks-node-ssh-restricted",
    description="EKS node groups with an SSH key restrict it to source security groups, never the implicit 0.0.0.0/0",
    enforcement="mandatory",
    ids=("CKV_AWS_100",),
    anchor="Checkov CKV_AWS_100",
    resource_types=(AWS_EKS_NODE_GROUP,),
)
def check_eks_node_ssh(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type != AWS_EKS_NODE_GROUP:
        return []
    remote = props.get("remoteAccess")
    if isinstance(remote, Mapping) and remote.get("ec2SshKey") and not _strings(remote.get("sourceSecurityGroupIds")):
        return ["remoteAccess names an SSH key but no sourceSecurityGroupIds: EKS then opens port 22 to 0.0.0.0/0"]
    return []


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


@resource_rule(
    name="gke-control-plane-restricted",
    description="The GKE control plane has a private endpoint or master authorized networks that do not admit "
    "0.0.0.0/0",
    enforcement="mandatory",
    ids=("CKV_GCP_18",),
    anchor="Checkov CKV_GCP_18",
    resource_types=(GCP_GKE_CLUSTER,),
)
def check_gke_control_plane(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type != GCP_GKE_CLUSTER:
        return []
    if _is_true(_get(props, "privateClusterConfig", "enablePrivateEndpoint")):
        return []
    man = props.get("masterAuthorizedNetworksConfig")
    if not isinstance(man, Mapping):
        return [
            "the control plane has a public endpoint and no masterAuthorizedNetworksConfig: any address may reach it"
        ]
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
            problems.append(
                f"authorized networks {extra} are not among the config's deployer_cidrs {list(ctx.api_access_cidrs)}"
            )
    return problems


@resource_rule(
    name="gke-private-nodes",
    description="GKE nodes have internal addresses only (privateClusterConfig.enablePrivateNodes; no pool opts out)",
    enforcement="mandatory",
    ids=("CKV_GCP_64", "CKV_GCP_25"),
    anchor="Checkov CKV_GCP_64/25",
    resource_types=(GCP_GKE_CLUSTER, GCP_GKE_NODE_POOL),
)
def check_gke_private_nodes(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type == GCP_GKE_CLUSTER:
        if not _is_true(_get(props, "privateClusterConfig", "enablePrivateNodes")):
            return ["privateClusterConfig.enablePrivateNodes is not true: nodes get external addresses"]
        return [
            f"nodePools[{i}].networkConfig.enablePrivateNodes is false"
            for i, pool in enumerate(_items(props.get("nodePools")))
            if _is_false(_get(pool, "networkConfig", "enablePrivateNodes"))
        ]
    if resource_type == GCP_GKE_NODE_POOL and _is_false(_get(props, "networkConfig", "enablePrivateNodes")):
        # Unset inherits the cluster's private nodes; only an explicit false opts a pool out.
        return ["networkConfig.enablePrivateNodes is false: this pool's nodes get external addresses"]
    return []


@resource_rule(
    name="gke-shielded-nodes",
    description="GKE nodes are Shielded VMs with secure boot and integrity monitoring",
    enforcement="mandatory",
    ids=("CKV_GCP_71", "CKV_GCP_68", "CKV_GCP_72"),
    anchor="Checkov CKV_GCP_71/68/72",
    resource_types=(GCP_GKE_CLUSTER, GCP_GKE_NODE_POOL),
)
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


@resource_rule(
    name="gke-workload-identity",
    description="GKE runs Workload Identity (a workload pool, GKE_METADATA on every pool) so pods never hold "
    "the node's service account",
    enforcement="mandatory",
    ids=("CKV_GCP_69",),
    anchor="Checkov CKV_GCP_69",
    resource_types=(GCP_GKE_CLUSTER, GCP_GKE_NODE_POOL),
)
def check_gke_workload_identity(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    problems = []
    if resource_type == GCP_GKE_CLUSTER and not _get(props, "workloadIdentityConfig", "workloadPool"):
        problems.append("workloadIdentityConfig.workloadPool is unset: pods would use the node's service account")
    for path, cfg in _gke_node_configs(resource_type, props):
        mode = _get(cfg, "workloadMetadataConfig", "mode")
        if mode is not None and mode != "GKE_METADATA":
            problems.append(f"{path}.workloadMetadataConfig.mode is {mode!r}, must be 'GKE_METADATA'")
    return problems


@resource_rule(
    name="gke-secrets-encrypted",
    description="GKE encrypts Secrets at the application layer with a Cloud KMS key (databaseEncryption); "
    "advisory: Google already encrypts etcd at rest (the GKE counterpart of CKV_AWS_58)",
    enforcement="advisory",
    ids=(),
    anchor="GKE application-layer secrets encryption; counterpart of CKV_AWS_58",
    resource_types=(GCP_GKE_CLUSTER,),
)
def check_gke_secrets_encrypted(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type != GCP_GKE_CLUSTER:
        return []
    enc = props.get("databaseEncryption")
    if isinstance(enc, Mapping) and enc.get("state") == "ENCRYPTED" and enc.get("keyName"):
        return []
    return [
        "databaseEncryption does not encrypt Secrets with a Cloud KMS key (Google encrypts etcd at rest "
        "regardless; application-layer encryption adds a key the project controls)"
    ]
