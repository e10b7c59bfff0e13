"""The checkpoint container, reachable from AKS jobs: a user-assigned identity the jobs act as
(Microsoft Entra Workload ID), trusted for one Kubernetes service account through a federated
credential on the cluster's OIDC issuer, and allowed on that one container only.

The steps are azure-aks-docs workload-identity-deploy-cluster.md at 968f31b ("Create a managed
identity", "Create a Kubernetes service account", "Create the federated identity credential",
"Deploy your application"): ``az identity federated-credential create --issuer "${AKS_OIDC_ISSUER}"
--subject system:serviceaccount:"${SERVICE_ACCOUNT_NAMESPACE}":"${SERVICE_ACCOUNT_NAME}" --audience
api://AzureADTokenExchange``; the service account annotated ``azure.workload.identity/client-id``
with the identity's client id; the pods labelled ``azure.workload.identity/use: "true"`` and naming
the account in ``serviceAccountName``. workload-identity-overview.md at 0bf4d35 ("Pod labels"):
"Only pods with this label are mutated by the azure-workload-identity mutating admission webhook to
inject the Azure specific environment variables and the projected service account token volume",
required "in the pod template spec". The cluster has the OIDC issuer and workload identity on
(orchestration_aks.py).

The role is the least one that reads and writes blobs: Storage Blob Data Contributor (azure-docs
articles/role-based-access-control/built-in-roles/storage.md at 9f00316: "Read, write, and delete
Azure Storage containers and blobs", id ba92f5b4-2d11-453d-a403-e96b0029c9fe), assigned at the
container's scope, not the account's. Storage Blob Data Owner would add POSIX ACLs, Storage Account
Contributor the account's keys (same page); neither is needed to write checkpoints.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_azure_native as azure
import pulumi_kubernetes as k8s

from gpu_cluster.components.azure.common import cluster_tags
from gpu_cluster.components.spec import ClusterSpec

STORAGE_BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
# workload-identity-deploy-cluster.md at 968f31b, "Create the federated identity credential".
TOKEN_AUDIENCE = "api://AzureADTokenExchange"
CLIENT_ID_ANNOTATION = "azure.workload.identity/client-id"
# workload-identity-overview.md at 0bf4d35, "Pod labels": required, recommended value "true".
POD_LABELS: Mapping[str, str] = {"azure.workload.identity/use": "true"}
JOBS_SERVICE_ACCOUNT = "gpu-cluster-jobs"
"""The Kubernetes account the validation and training pods run as, in the jobs' namespace."""


def federated_subject(namespace: str, service_account: str = JOBS_SERVICE_ACCOUNT) -> str:
    """The token subject the credential trusts: that one account, in that one namespace."""
    return f"system:serviceaccount:{namespace}:{service_account}"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobIdentityArgs:
    spec: ClusterSpec
    resource_group: pulumi.Input[str]
    issuer: pulumi.Input[str]
    """The cluster's OIDC issuer URL (oidcIssuerProfile.issuerURL)."""
    container_id: pulumi.Input[str]
    """The checkpoint container's resource ID: the role's scope."""
    subscription_id: pulumi.Input[str]
    namespace: str


class JobIdentity(pulumi.ComponentResource):
    identity: azure.managedidentity.UserAssignedIdentity
    credential: azure.managedidentity.FederatedIdentityCredential
    role: azure.authorization.RoleAssignment

    def __init__(self, name: str, args: JobIdentityArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-cluster:azure:JobIdentity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.identity = azure.managedidentity.UserAssignedIdentity(
            f"{name}-identity",
            resource_group_name=args.resource_group,
            location=args.spec.region,
            tags=cluster_tags(args.spec),
            opts=child,
        )
        self.credential = azure.managedidentity.FederatedIdentityCredential(
            f"{name}-federated",
            resource_group_name=args.resource_group,
            resource_name_=self.identity.name,
            issuer=args.issuer,
            subject=federated_subject(args.namespace),
            audiences=[TOKEN_AUDIENCE],
            opts=child,
        )
        self.role = azure.authorization.RoleAssignment(
            f"{name}-checkpoints-role",
            principal_id=self.identity.principal_id,
            principal_type="ServicePrincipal",
            role_definition_id=pulumi.Output.format(
                "/subscriptions/{0}/providers/Microsoft.Authorization/roleDefinitions/{1}",
                args.subscription_id,
                STORAGE_BLOB_DATA_CONTRIBUTOR,
            ),
            scope=args.container_id,
            opts=child,
        )
        self.register_outputs({"client_id": self.identity.client_id})


def job_service_account(
    name: str, *, namespace: pulumi.Input[str], client_id: pulumi.Input[str], opts: pulumi.ResourceOptions
) -> k8s.core.v1.ServiceAccount:
    """The Kubernetes account the jobs run as, bound to the identity by its client id."""
    return k8s.core.v1.ServiceAccount(
        f"{name}-jobs-sa",
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=JOBS_SERVICE_ACCOUNT,
            namespace=namespace,
            annotations={CLIENT_ID_ANNOTATION: client_id},
        ),
        # The jobs never call the Kubernetes API: the webhook projects its own token for Entra ID.
        automount_service_account_token=False,
        opts=opts,
    )
