"""The AWS cluster: the five pillars composed in the order their inputs flow.

network -> interconnect (EFA group, placement) -> storage (in the node subnet, open to the
EFA group) -> compute (launch template; on PCS its user data mounts the file system) ->
orchestration (EKS or PCS, launching nodes from that template).

The providers are explicit and take the spec's region, so a stack deploys where its
cluster description says, whatever ``aws:region`` the stack file or the shell carries.
Every pillar component inherits them; invokes inherit them through ``parent``. A provider the
caller gave the component (``opts.providers``) is used instead of ours, for every child; its
region, when it names one, must be the spec's (the ``region`` output fails otherwise).

``existing``: the caller's VPC and subnets (``network.vpc_id``); Network then creates none.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_aws_native as aws_native

from gpu_cluster.components.aws.common import cluster_tags
from gpu_cluster.components.aws.compute import Compute, ComputeArgs
from gpu_cluster.components.aws.image_cache import UPSTREAM as IMAGE_CACHE_UPSTREAM
from gpu_cluster.components.aws.image_cache import ImageCacheArgs, create_image_cache
from gpu_cluster.components.aws.interconnect import Interconnect, InterconnectArgs
from gpu_cluster.components.aws.network import ExistingNetwork, Network, NetworkArgs
from gpu_cluster.components.aws.orchestration_eks import FSX_VOLUME, JOB_NAMESPACE, EksArgs
from gpu_cluster.components.aws.orchestration_eks import Orchestration as EksOrchestration
from gpu_cluster.components.aws.orchestration_pcs import Orchestration as PcsOrchestration
from gpu_cluster.components.aws.orchestration_pcs import PcsArgs, lustre_user_data
from gpu_cluster.components.aws.rules import pcs_size
from gpu_cluster.components.aws.storage import Storage, StorageArgs
from gpu_cluster.components.contract import COMPONENT_FACTS, UNVALIDATED_TAINT_KEY
from gpu_cluster.components.spec import ClusterSpec


def _region_checked(spec: ClusterSpec, providers: list[pulumi.ProviderResource]) -> pulumi.Output[str]:
    """The spec's region, once every caller's provider that names a region agrees with it."""

    def check(regions: list[Any]) -> str:
        for region in regions:
            if region and region != spec.region:
                raise ValueError(
                    f"region: the provider given to the component deploys to {region!r}, the cluster "
                    f"description says {spec.region!r} (allowed: a provider for {spec.region})"
                )
        return spec.region

    given = [p.region for p in providers if isinstance(p, (aws.Provider, aws_native.Provider))]
    return pulumi.Output.all(*given).apply(check)


def build(
    name: str, spec: ClusterSpec, opts: pulumi.ResourceOptions, existing: ExistingNetwork | None = None
) -> dict[str, Any]:
    kind = spec.orchestration.kind
    if kind not in ("eks", "slurm"):
        raise ValueError(f"orchestration.kind: {kind!r} does not run on aws (allowed: eks, slurm)")
    instance = spec.instance
    tags = cluster_tags(spec)

    parent = opts.parent
    providers: list[pulumi.ProviderResource] = []
    callers: list[pulumi.ProviderResource] = []
    for pkg, cls in (("aws", aws.Provider), ("aws-native", aws_native.Provider)):
        if pkg == "aws-native" and kind != "slurm":
            continue
        given = parent.get_provider(f"{pkg}:index:x") if parent is not None else None
        if given is not None:
            callers.append(given)
        else:
            providers.append(cls(f"{name}-{pkg}", region=spec.region, opts=pulumi.ResourceOptions(parent=parent)))
    child = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(providers=providers + callers))

    network = Network(
        f"{name}-network",
        NetworkArgs(
            cidr=spec.network.cidr,
            region=spec.region,
            zone=spec.zone,
            zone_id=spec.zone_id,
            control_plane=kind == "eks",
            control_plane_zone_id=spec.network.control_plane_zone_id,
            tags=tags,
            security=spec.security,
            existing=existing,
        ),
        child,
    )
    interconnect = Interconnect(
        f"{name}-interconnect",
        InterconnectArgs(
            vpc_id=network.vpc_id,
            instance=instance,
            placement=spec.interconnect.placement,
            tags=tags,
        ),
        child,
    )
    lustre = spec.storage.lustre
    storage = Storage(
        f"{name}-storage",
        StorageArgs(
            lustre=lustre,
            bucket_name=spec.storage.bucket_name,
            vpc_id=network.vpc_id,
            subnet_id=network.node_subnet_id,
            node_security_group_id=interconnect.security_group_id,
            tags=tags,
            log_bucket=network.log_bucket.id,
            noncurrent_days=spec.security.checkpoint_noncurrent_days,
        ),
        child,
    )
    # On EKS the FSx CSI driver mounts the file system into pods; on PCS the nodes mount it.
    user_data = (
        lustre_user_data(storage.mount["dns_name"], storage.mount["mount_name"], lustre.mount_point)
        if kind == "slurm"
        else None
    )
    # The group nodes launch into: the stack's own, or the one the reservation was made in (an
    # ODCR in a cluster placement group matches only launches into that group).
    placement_group = interconnect.placement_group_name or spec.compute.capacity.placement_group
    compute = Compute(
        f"{name}-compute",
        ComputeArgs(
            orchestrator=kind,
            region=spec.region,
            capacity=spec.compute.capacity,
            instance_type=spec.compute.instance_type,
            subnet_id=network.node_subnet_id if kind == "slurm" else None,
            kubernetes_version=spec.orchestration.kubernetes_version,
            root_volume_gib=spec.compute.root_volume_gib,
            nics=interconnect.nics,
            security_group_ids=[interconnect.security_group_id],
            placement_group_name=placement_group,
            user_data=user_data,
            tags=tags,
            image=spec.compute.image,
        ),
        child,
    )

    access: dict[str, Any]
    scheduler: dict[str, Any]
    if kind == "eks":
        assert compute.release_version is not None
        eks = EksOrchestration(
            f"{name}-orchestration",
            EksArgs(
                region=spec.region,
                kubernetes_version=spec.orchestration.kubernetes_version,
                api_access_cidrs=spec.orchestration.api_access_cidrs,
                control_plane_subnet_ids=network.control_plane_subnet_ids,
                node_subnet_id=network.node_subnet_id,
                security_group_id=interconnect.security_group_id,
                launch_template_id=compute.launch_template_id,
                launch_template_version=compute.launch_template_version,
                node_role_arn=compute.node_role_arn,
                release_version=compute.release_version,
                instance_type=spec.compute.instance_type,
                nodes=spec.compute.nodes,
                capacity=spec.compute.capacity,
                file_system_id=storage.file_system_id,
                dns_name=storage.mount["dns_name"],
                mount_name=storage.mount["mount_name"],
                size_gib=lustre.size_gib,
                tags=tags,
                cluster_name=spec.orchestration.cluster_name,
                adopt_log_group=spec.orchestration.adopt_log_group,
                log_retention_days=spec.security.log_retention_days,
                in_cluster=spec.orchestration.in_cluster,
                image_pinned=spec.compute.image is not None,
                image_pins=spec.images,
            ),
            child,
        )
        access = {
            "api_endpoint": eks.api_endpoint,
            "kubeconfig_command": eks.kubeconfig_command,
            "kubeconfig": pulumi.Output.secret(eks.kubeconfig),
        }
        node_groups: list[Any] = [g.node_group_name for g in eks.node_groups]
        assert eks.prometheus.grafana is not None  # eks_prometheus makes it
        dashboard = eks.prometheus.grafana.dashboard()
        ca: Any = eks.cluster.certificate_authority.data
        scheduler = {
            "kind": "kubernetes",
            "namespace": JOB_NAMESPACE,
            "lustre_claim": FSX_VOLUME,
            "node_selector": {"node.kubernetes.io/instance-type": spec.compute.instance_type},
            # The GPU groups' one taint: the registration taint only a passed validation removes
            # (components/aws/eks_values.py), which the validation job tolerates.
            "tolerations": [UNVALIDATED_TAINT_KEY],
        }
        if spec.orchestration.pull_through_cache:
            # In the orchestration pillar: the cache is how the scheduler's pods get their image.
            mirror = create_image_cache(
                f"{name}-image-cache",
                ImageCacheArgs(stack_name=spec.name, region=spec.region, node_role_name=compute.node_role_name),
                pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(parent=eks)),
            )
            scheduler["mirrors"] = {IMAGE_CACHE_UPSTREAM: mirror}
    else:
        assert compute.image_id is not None and user_data is not None
        slurm = PcsOrchestration(
            f"{name}-orchestration",
            PcsArgs(
                region=spec.region,
                node_subnet_id=network.node_subnet_id,
                security_group_id=interconnect.security_group_id,
                launch_template_id=compute.launch_template_id,
                launch_template_version=compute.launch_template_version,
                instance_profile_arn=compute.instance_profile_arn,
                node_role_name=compute.node_role_name,
                image_id=compute.image_id,
                user_data=user_data,
                instance_type=spec.compute.instance_type,
                nodes=spec.compute.nodes,
                capacity=spec.compute.capacity,
                login_nodes=spec.orchestration.login_nodes,
                partition=spec.orchestration.partition,
                size=pcs_size(spec),
                ssh_key_name=spec.orchestration.ssh_key_name,
                tags=tags,
                image_pinned=spec.compute.image is not None,
            ),
            child,
        )
        access = {"cluster_id": slurm.cluster_id, "login": slurm.login, "ssh_command": slurm.ssh_command}
        node_groups = [slurm.gpu_group.name]
        assert compute.prometheus is not None  # PCS: Compute makes it (user_data is set above)
        dashboard = compute.prometheus.grafana.dashboard()
        ca = None
        scheduler = {"kind": "slurm", "partition": spec.orchestration.partition}

    return {
        "cloud": "aws",
        "region": _region_checked(spec, callers) if callers else spec.region,
        "zone": spec.zone,
        "orchestrator": kind,
        "cluster_name": spec.name,
        "instance_type": spec.compute.instance_type,
        "nodes": spec.compute.nodes,
        "gpus_per_node": instance.accelerator.count,
        "fabric": {
            "type": "efa",
            "interfaces_per_node": sum(1 for nic in interconnect.nics if nic.is_efa),
            "placement": placement_group,
            "mtu": instance.network.mtu,
            "networks": [],
        },
        "mount": storage.mount,
        "bucket": storage.bucket_name,
        "access": access,
        "scheduler": scheduler,
        # The Amazon Managed Grafana workspace the dashboard is imported into (components/aws/grafana.py).
        "dashboard": dashboard,
        # Not stack outputs: the component's typed attributes (components/cluster.py).
        COMPONENT_FACTS: {
            "network_id": network.vpc_id,
            "node_subnet_id": network.node_subnet_id,
            "security_group_id": interconnect.security_group_id,
            "file_system_id": storage.file_system_id,
            "node_groups": node_groups,
            "certificate_authority": ca,
        },
    }
