"""A Pulumi program of your own that uses GpuCluster as a library.

It deploys through your AWS provider (here one that assumes a deployment role) into a VPC you
already have: the component then creates no VPC, subnet, gateway or route, and every resource it
creates uses your provider. ``pulumi config set example:vpc_id vpc-...`` (and ``node_subnet_id``,
``control_plane_subnet_id``, ``deployer_cidr``, optionally ``role_arn``) before ``pulumi up``.
"""

import pulumi
import pulumi_aws as aws

from gpu_cluster.components.args import GpuClusterArgs
from gpu_cluster.components.cluster import GpuCluster

config = pulumi.Config("example")
role_arn = config.get("role_arn")

# Your provider: every child resource of the cluster uses it (the component makes no aws provider).
deploy = aws.Provider(
    "deploy",
    region="us-east-1",
    assume_roles=[aws.ProviderAssumeRoleArgs(role_arn=role_arn, session_name="gpu-cluster")] if role_arn else None,
)

cluster = GpuCluster(
    "train",
    GpuClusterArgs(
        cloud="aws",
        region="us-east-1",
        zone="us-east-1a",
        compute={"instance_type": "p5.48xlarge", "nodes": 2, "capacity": {"type": "on-demand"}},
        storage={"lustre": {"size_gib": 4800, "throughput_mbps_per_tib": 250}},
        orchestration={
            "kind": "eks",
            "kubernetes_version": "1.35",
            "deployer_cidrs": [config.require("deployer_cidr")],
        },
        network={
            "vpc_id": config.require("vpc_id"),
            "node_subnet_id": config.require("node_subnet_id"),
            "control_plane_subnet_ids": [config.require("control_plane_subnet_id")],
        },
        tags={"team": "ml-platform"},
    ),
    opts=pulumi.ResourceOptions(providers=[deploy]),
)

pulumi.export("cluster_name", cluster.cluster_name)
pulumi.export("kubeconfig", cluster.kubeconfig)
pulumi.export("certificate_authority", cluster.certificate_authority)
pulumi.export("security_group_id", cluster.security_group_id)
pulumi.export("file_system_id", cluster.file_system_id)
# What `python -m gpu_cluster.workloads.validate` reads: `pulumi stack output --json --show-secrets gpu_cluster`.
pulumi.export("gpu_cluster", cluster.stack_outputs)
