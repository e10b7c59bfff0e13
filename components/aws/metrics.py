"""GPU metrics on EKS: an Amazon Managed Service for Prometheus workspace and its AWS managed
collector (a scraper), which pulls the DCGM exporter (components/k8s/metrics.py) and the EFA
exporter (components/aws/efa_exporter.py) on every GPU node.

Sources (docs.aws.amazon.com/prometheus/latest/userguide/AMP-collector-how-to.html, "Set up
managed collectors for Amazon EKS", read 2026-12-07):

* The scraper's source is the EKS cluster with subnets and security groups: it puts one network
  interface in each subnet and scrapes through them, pushing to the workspace through a VPC
  endpoint, never over the internet (AMP-collector.html). The control plane's subnets (two zones)
  and the EFA security group the nodes share are given, so the scraper reaches the exporter's pods.
* Access: with the cluster's authentication mode ``API`` (orchestration_eks.py ``access_config``)
  "any scrapers you create through the Amazon Managed Service for Prometheus API ... will
  automatically have the correct access entry policy created", read-only get/list/watch on nodes,
  pods, services, endpoints and /metrics: the least privilege is the service's own, and no IAM
  role of ours is made (the scraper runs as its service-linked role).
* The configuration allows ``kubernetes_sd_configs`` only and a scrape interval of 30 s or more.
* The workspace is encrypted at rest by the service; ``kms_key_arn`` is optional and left unset
  (AMP-create-workspace.html: "(Optional) To use your own KMS key"), so no key of ours is
  billed or has to allow the service. Retention is the service's (no setting on the workspace in
  pulumi-aws 7.51.1 ``amp.Workspace``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import pulumi
import pulumi_aws as aws
import yaml

from gpu_cluster.components.aws.efa_exporter import scrape_job as efa_scrape_job
from gpu_cluster.components.aws.grafana import AmazonManagedGrafana
from gpu_cluster.components.k8s.metrics import (
    DCGM_EXPORTER_NAMESPACE,
    DCGM_EXPORTER_POD_NAME,
    DCGM_PORT_NAME,
    pushgateway_scrape_job,
)

# The AMP collector's floor (AMP-collector-how-to.html, "Scrape interval").
SCRAPE_INTERVAL = "30s"


def scrape_configuration() -> str:
    """The scraper's Prometheus configuration: the DCGM exporter's pods and the EFA exporter's, each
    series labelled with its node, and the Pushgateway's, whose series keep the node they were pushed
    with."""
    config: dict[str, Any] = {
        "global": {"scrape_interval": SCRAPE_INTERVAL},
        "scrape_configs": [
            {
                "job_name": "dcgm-exporter",
                "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [DCGM_EXPORTER_NAMESPACE]}}],
                "relabel_configs": [
                    {
                        "source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"],
                        "action": "keep",
                        "regex": DCGM_EXPORTER_POD_NAME,
                    },
                    {
                        "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                        "action": "keep",
                        "regex": DCGM_PORT_NAME,
                    },
                    {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
                ],
            },
            # EFA's byte counters from the GPU nodes (components/aws/efa_exporter.py).
            efa_scrape_job(),
            # The validation's figures (components/k8s/metrics.py pushgateway), at the global interval.
            {k: v for k, v in pushgateway_scrape_job().items() if k != "scrape_interval"},
        ],
    }
    return yaml.safe_dump(config, sort_keys=False)


class ManagedPrometheus(pulumi.ComponentResource):
    """The AMP workspace and the scraper that fills it from the cluster."""

    workspace: aws.amp.Workspace
    scraper: aws.amp.Scraper
    grafana: AmazonManagedGrafana | None = None

    def __init__(
        self,
        name: str,
        *,
        cluster_arn: pulumi.Input[str],
        subnet_ids: pulumi.Input[Sequence[pulumi.Input[str]]],
        security_group_id: pulumi.Input[str],
        tags: Mapping[str, str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpu-cluster:metrics:AmazonManagedPrometheus", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.workspace = aws.amp.Workspace(f"{name}-workspace", alias=name, tags=dict(tags), opts=child)
        self.scraper = aws.amp.Scraper(
            f"{name}-scraper",
            alias=name,
            source=aws.amp.ScraperSourceArgs(
                eks=aws.amp.ScraperSourceEksArgs(
                    cluster_arn=cluster_arn, subnet_ids=subnet_ids, security_group_ids=[security_group_id]
                )
            ),
            destination=aws.amp.ScraperDestinationArgs(
                amp=aws.amp.ScraperDestinationAmpArgs(workspace_arn=self.workspace.arn)
            ),
            scrape_configuration=scrape_configuration(),
            tags=dict(tags),
            opts=child,
        )
        self.register_outputs({"workspace": self.workspace.arn})


class EksNetwork(Protocol):
    """What the scraper needs of the cluster's arguments (orchestration_eks.py EksArgs)."""

    @property
    def control_plane_subnet_ids(self) -> Any: ...
    @property
    def security_group_id(self) -> pulumi.Input[str]: ...
    @property
    def tags(self) -> Mapping[str, str]: ...


def eks_prometheus(
    name: str, cluster_arn: pulumi.Input[str], args: EksNetwork, parent: pulumi.Resource
) -> ManagedPrometheus:
    """The workspace and scraper of an EKS cluster: its control plane's subnets (two zones) and the
    security group its nodes share; and the Amazon Managed Grafana workspace that queries it
    (components/aws/grafana.py), kept on the returned component as ``grafana``."""
    prometheus = ManagedPrometheus(
        name,
        cluster_arn=cluster_arn,
        subnet_ids=args.control_plane_subnet_ids,
        security_group_id=args.security_group_id,
        tags=args.tags,
        opts=pulumi.ResourceOptions(parent=parent),
    )
    prometheus.grafana = AmazonManagedGrafana(
        f"{name.removesuffix('-prometheus')}-grafana",
        prometheus_arn=prometheus.workspace.arn,
        tags=args.tags,
        opts=pulumi.ResourceOptions(parent=parent),
    )
    return prometheus


REMOTE_WRITE_ACTIONS = ("aps:RemoteWrite",)


def remote_write_policy(workspace_arn: str) -> str:
    """The GPU nodes' only right in AMP: write to this workspace. AWS's managed policy for the same
    (AmazonPrometheusRemoteWriteAccess, AWS managed policy reference, read 2026-12-07) grants
    ``aps:RemoteWrite`` on ``*``; the PCS recipe's PrometheusWritePolicy (aws-hpc-recipes
    recipes/pcs/observability_for_pcs/assets/observability-stack.yaml at 009a29a) holds it to its
    workspace and adds the query actions, which the collector does not use."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "RemoteWrite",
                    "Effect": "Allow",
                    "Action": list(REMOTE_WRITE_ACTIONS),
                    "Resource": workspace_arn,
                }
            ],
        },
        sort_keys=True,
    )


class PcsPrometheus(pulumi.ComponentResource):
    """PCS: the AMP workspace the GPU nodes' collectors write to (components/aws/slurm_metrics.py), the
    Amazon Managed Grafana that queries it, and, once the nodes' role exists, its right to write."""

    workspace: aws.amp.Workspace
    grafana: AmazonManagedGrafana

    def __init__(self, name: str, *, tags: Mapping[str, str], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-cluster:metrics:PcsPrometheus", name, None, opts)
        self._name = name
        self.workspace = aws.amp.Workspace(
            f"{name}-workspace", alias=name, tags=dict(tags), opts=pulumi.ResourceOptions(parent=self)
        )
        self.grafana = AmazonManagedGrafana(
            f"{name.removesuffix('-prometheus')}-grafana",
            prometheus_arn=self.workspace.arn,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"workspace": self.workspace.arn})

    def grant_remote_write(self, role_name: pulumi.Input[str]) -> aws.iam.RolePolicy:
        return aws.iam.RolePolicy(
            f"{self._name}-remote-write",
            role=role_name,
            policy=self.workspace.arn.apply(remote_write_policy),
            opts=pulumi.ResourceOptions(parent=self),
        )
