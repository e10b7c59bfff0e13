"""Amazon Managed Grafana over the stack's AMP workspace: where a person looks at the GPU dashboard
on EKS and PCS (components/dashboard.py's Grafana rendering, put into the workspace once the stack
is up by ``gpu-cluster dashboards import``, gpu_cluster/dashboards.py: docs/day2.md).

* Permissions are the customer-managed mode (docs.aws.amazon.com/grafana/latest/userguide/
  AMG-manage-permissions.html, read 2026-12-07: "Service-managed permissions for current account",
  "... for organizations", "Customer-managed permissions"): in the service-managed modes AMG makes a
  role of its own and attaches AWS managed policies to it; here the stack makes the one role the
  workspace assumes (trust: the ``grafana.amazonaws.com`` service principal, as pulumi-aws 7.51.1
  ``grafana.Workspace``'s example writes it), with one inline statement.
* That statement is the query actions the AMP data source uses, "aps:QueryMetrics, aps:GetLabels,
  aps:GetSeries, and aps:GetMetricMetadata" (grafana.com/docs/plugins/grafana-amazonprometheus-
  datasource/latest/configure/, "Before you begin", read 2026-12-07), on this stack's AMP workspace
  only: each takes the ``workspace`` resource type (docs.aws.amazon.com/service-authorization/latest/
  reference/list_amazonmanagedserviceforprometheus.html). No List/Describe: the data source is added
  with the workspace's query endpoint (the stack's output), not discovered, so AMG's account-wide
  discovery permissions are not granted.
* Sign-in is IAM Identity Center (``AWS_SSO``; pulumi-aws ``authentication_providers``: ``AWS_SSO``,
  ``SAML`` or both): the account must have Identity Center on, and a user is given the Admin role in
  the workspace after ``pulumi up`` (docs/day2.md). SAML needs an identity provider's metadata,
  which the spec does not carry.
* ``data_sources = ["PROMETHEUS"]`` names the data source the workspace is for.

A Grafana workspace is configuration, not data: not protected; teardown removes it with the stack.

The stack's ``dashboard`` output (components/contract.py) is where ``gpu-cluster dashboards import`` goes:
``url`` the workspace's ``endpoint``, "The URL that users can use to access the Grafana console in the
workspace" (AMG API reference, WorkspaceDescription, docs.aws.amazon.com/grafana/latest/APIReference/
API_WorkspaceDescription.html, read 2026-12-07). The page gives no form; the uses of the API read
(public code that calls DescribeWorkspace; aws/aws-cli ``awscli/examples/grafana/list-workspaces.rst``
at 3096efeb, line 19, an answer as the CLI prints it) show a host name without a scheme,
``g-<id>.grafana-workspace.<region>.amazonaws.com``, so ``https://`` is put in front where no scheme is
there (an address with one is kept); ``id`` the workspace id (``g-`` and ten hex digits, the same
page), which pulumi-aws makes the resource's id (its ``pulumi import ... g-2054c75a02`` example).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_aws as aws

from gpu_cluster.components.aws.common import assume_role_policy

GRAFANA_SERVICE = "grafana.amazonaws.com"
QUERY_ACTIONS = ("aps:GetLabels", "aps:GetMetricMetadata", "aps:GetSeries", "aps:QueryMetrics")


def https(endpoint: str) -> str:
    """The workspace's base address from its ``endpoint``: AMG answers a host name, so https:// is added
    (an endpoint that already carries a scheme is kept as it is)."""
    return endpoint if "://" in endpoint else f"https://{endpoint}"


def query_policy(workspace_arn: str) -> str:
    """The role's only permission: query this AMP workspace."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Sid": "QueryPrometheus", "Effect": "Allow", "Action": list(QUERY_ACTIONS), "Resource": workspace_arn}
            ],
        },
        sort_keys=True,
    )


class AmazonManagedGrafana(pulumi.ComponentResource):
    """The Grafana workspace and the role it queries the AMP workspace with."""

    workspace: aws.grafana.Workspace
    role: aws.iam.Role

    def __init__(
        self,
        name: str,
        *,
        prometheus_arn: pulumi.Input[str],
        tags: Mapping[str, str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpu-cluster:metrics:AmazonManagedGrafana", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.role = aws.iam.Role(
            f"{name}-role", assume_role_policy=assume_role_policy(GRAFANA_SERVICE), tags=dict(tags), opts=child
        )
        aws.iam.RolePolicy(
            f"{name}-query",
            role=self.role.id,
            policy=pulumi.Output.from_input(prometheus_arn).apply(query_policy),
            opts=child,
        )
        self.workspace = aws.grafana.Workspace(
            f"{name}-workspace",
            name=name,
            description="GPU dashboard over the cluster's Amazon Managed Service for Prometheus workspace",
            account_access_type="CURRENT_ACCOUNT",
            authentication_providers=["AWS_SSO"],
            permission_type="CUSTOMER_MANAGED",
            role_arn=self.role.arn,
            data_sources=["PROMETHEUS"],
            tags=dict(tags),
            opts=child,
        )
        self.register_outputs({"workspace": self.workspace.arn, "endpoint": self.workspace.endpoint})

    def dashboard(self) -> dict[str, Any]:
        """The stack's ``dashboard`` output (components/contract.py): this workspace's address and id."""
        return {"kind": "grafana", "url": self.workspace.endpoint.apply(https), "id": self.workspace.id}
