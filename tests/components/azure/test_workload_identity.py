"""The checkpoint container reachable from AKS job pods: the references' Workload ID steps, and the
least role on the container alone.

The expectations are written from the references, not from the code: azure-aks-docs
workload-identity-deploy-cluster.md at 968f31b (``az identity federated-credential create --issuer
"${AKS_OIDC_ISSUER}" --subject system:serviceaccount:"${SERVICE_ACCOUNT_NAMESPACE}":
"${SERVICE_ACCOUNT_NAME}" --audience api://AzureADTokenExchange``; the ServiceAccount annotated
``azure.workload.identity/client-id: "${USER_ASSIGNED_CLIENT_ID}"``; the pod labelled
``azure.workload.identity/use: "true"`` with ``serviceAccountName``), workload-identity-overview.md at
0bf4d35 (the label "is required in the pod template spec"), and azure-docs built-in-roles/storage.md
at 9f00316 (Storage Blob Data Contributor, id ba92f5b4-2d11-453d-a403-e96b0029c9fe).
"""

from __future__ import annotations

from typing import Callable

from gpu_cluster.components.azure.mocks import MOCK_CLIENT_ID, MOCK_OIDC_ISSUER, MOCK_PRINCIPAL_ID
from gpu_cluster.components.contract import read_outputs
from gpu_cluster.components.engine import OfflineRun
from tests.components.azure.conftest import named

Run = Callable[..., OfflineRun]

AUDIENCE = "api://AzureADTokenExchange"
BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
USE_LABEL = ("azure.workload.identity/use", "true")
CLIENT_ID_ANNOTATION = "azure.workload.identity/client-id"
IDENTITY = "azure-native:managedidentity:UserAssignedIdentity"


def test_the_credential_trusts_the_clusters_issuer_for_the_jobs_account_only(azure_run: Run) -> None:
    run = azure_run()
    out = read_outputs(run.outputs)
    cred = run.one("azure-native:managedidentity:FederatedIdentityCredential")
    ident = named(run, IDENTITY, "-jobs-identity")
    # On the jobs' identity (the mock names an unnamed identity <logical name>0a1b2c3).
    assert cred.inputs["resourceName"] == f"{ident.name}0a1b2c3"
    # The cluster's own issuer (what the mock answers as its oidcIssuerProfile.issuerURL).
    cluster = run.one("azure-native:containerservice:ManagedCluster")
    assert cluster.inputs["oidcIssuerProfile"]["enabled"] is True
    assert cluster.inputs["securityProfile"]["workloadIdentity"] == {"enabled": True}
    assert cred.inputs["issuer"] == MOCK_OIDC_ISSUER
    assert cred.inputs["audiences"] == [AUDIENCE]
    sched = out.scheduler
    assert cred.inputs["subject"] == f"system:serviceaccount:{sched.namespace}:{sched.service_account}"


def test_the_jobs_identity_holds_blob_data_contributor_on_the_container_alone(azure_run: Run) -> None:
    run = azure_run()
    container = run.one("azure-native:storage:BlobContainer")
    account = run.one("azure-native:storage:StorageAccount")
    role = named(run, "azure-native:authorization:RoleAssignment", "-jobs-checkpoints-role")
    assert role.inputs["roleDefinitionId"].endswith(
        f"/providers/Microsoft.Authorization/roleDefinitions/{BLOB_DATA_CONTRIBUTOR}"
    )
    assert (role.inputs["principalId"], role.inputs["principalType"]) == (MOCK_PRINCIPAL_ID, "ServicePrincipal")
    # The container's resource id: not the account's, the resource group's or the subscription's.
    assert role.inputs["scope"] == f"{container.name}-id"
    # No other role reaches the container or its account, and no role of the jobs reaches further.
    on_storage = [
        r.name
        for r in run.of_type("azure-native:authorization:RoleAssignment")
        if str(r.inputs["scope"]) in (f"{container.name}-id", f"{account.name}-id")
        or r.inputs["roleDefinitionId"].endswith(BLOB_DATA_CONTRIBUTOR)
    ]
    assert on_storage == [role.name]


def test_the_jobs_service_account_names_the_identity_and_the_outputs_tell_the_pods(azure_run: Run) -> None:
    run = azure_run()
    out = read_outputs(run.outputs)
    (sa,) = run.of_type("kubernetes:core/v1:ServiceAccount")
    meta = sa.inputs["metadata"]
    assert (meta["namespace"], meta["name"]) == (out.scheduler.namespace, out.scheduler.service_account)
    assert meta["annotations"] == {CLIENT_ID_ANNOTATION: MOCK_CLIENT_ID}
    assert dict(out.scheduler.pod_labels) == dict([USE_LABEL])
    assert run.outputs["scheduler"]["workload_client_id"] == MOCK_CLIENT_ID
