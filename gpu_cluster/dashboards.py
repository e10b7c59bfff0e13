"""``gpu-cluster dashboards import STACK --url URL``: put the stack's GPU dashboard into its Grafana.

The stack's outputs (``--outputs FILE``, else ``pulumi stack output``, as ``gpu-cluster validate``
reads them) say its cloud, orchestrator and instance type; the dashboard is components/dashboard.py's
Grafana rendering with its GPUs' panels (``GPU_PANELS``: the DCGM exporter's, or AMD's exporter's on
an AMD instance type) and that platform's fabric panels (``FABRIC_PANELS``). GKE and Cluster Director need no
import: ``pulumi up`` creates their Cloud Monitoring dashboard.

The call is Grafana's HTTP API "Create / Update dashboard", ``POST /api/dashboards/db`` with
``{"dashboard": ..., "overwrite": true}`` and ``Authorization: Bearer <token>``; the answer is
``{"id", "uid", "url", "status": "success", "version"}``, and 400, 401, 403 and 412 are its
documented errors (grafana.com/docs/grafana/latest/developers/http_api/dashboard/, "Create / Update
dashboard", read 2026-12-07). The dashboard keeps its fixed ``uid`` (components/dashboard.py
GRAFANA_UID) and ``id: null``, so a rerun overwrites the same dashboard rather than adding one.

The address is the stack's ``dashboard.url`` output (components/contract.py: the Grafana workspace the
stack made) unless ``--url`` gives another.

The token is read from an environment variable, never from a flag, so it stays out of shell history:
``--token-env VAR`` names it, else ``GRAFANA_TOKEN`` is used where set. A Grafana token with the Editor
or Admin role: on Amazon Managed Grafana a workspace service account's token, on Azure Managed Grafana
a Microsoft Entra access token of a user with Grafana Admin, which the stack gives the deployer.

On an AWS stack with neither, the command mints its own token and revokes it (``amg_token``): through
AMG's API (botocore's service model ``grafana`` 2020-08-18, ``service-2.json``), it finds our workspace
service account ``gpu-cluster-dashboards`` (ListWorkspaceServiceAccounts) or creates it with the
``EDITOR`` role (CreateWorkspaceServiceAccount; "Editor role: can view, add, and edit dashboards", the
least of the roles that writes one: Admin adds data sources, users and teams, Viewer "cannot add, edit,
or delete dashboards", docs.aws.amazon.com/grafana/latest/userguide/Grafana-user-roles.html, read
2026-12-07), creates a token that lives ``TOKEN_SECONDS`` (CreateWorkspaceServiceAccountToken;
``secondsToLive`` 1 to 2592000 in the model) and deletes it once the import is over, failed or not
(DeleteWorkspaceServiceAccountToken). The service account is kept for the next run: it holds no key
between runs. On Azure no Entra token is fetched here: Learn documents one for the audience
``https://dashboard.azure.com`` (``az account get-access-token --resource https://dashboard.azure.com``,
or azure-identity's DefaultAzureCredential; learn.microsoft.com/azure/managed-grafana/
how-to-authenticate-data-plane-api, read 2026-12-07), and azure-identity is not a dependency, so the
error says that command.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpu_cluster.components.contract import ClusterOutputs, OutputsError
from gpu_cluster.components.catalog import CatalogError, load_catalog
from gpu_cluster.components.dashboard import AMD_TAGS, FABRIC_PANELS, GPU_PANELS, NODE_LABEL, TITLE, grafana
from gpu_cluster.workloads.validate.commands import CommandError, load

API_PATH = "/api/dashboards/db"
DEFAULT_TOKEN_ENV = "GRAFANA_TOKEN"
# Amazon Managed Grafana (the module docstring): our service account, its role, the roles that may
# write a dashboard, and how long a minted token lives. The name is ours (1 to 128 characters, the
# model's ServiceAccountName); 15 minutes is our choice: an import takes one request, and a token that
# the delete below could not remove dies by itself soon after.
SERVICE_ACCOUNT = "gpu-cluster-dashboards"
SERVICE_ACCOUNT_ROLE = "EDITOR"
WRITE_ROLES = ("EDITOR", "ADMIN")
TOKEN_SECONDS = 900
# Azure Managed Grafana's token audience (the module docstring's Learn page).
AZURE_GRAFANA_AUDIENCE = "https://dashboard.azure.com"
TIMEOUT_S = 60
# Platforms whose dashboard pulumi up creates in Cloud Monitoring (components/gcp/dashboard.py).
CLOUD_MONITORING = ("gcp-gke", "gcp-slurm")
# What each documented error means for the person running the command.
_ERRORS = {
    400: "Grafana refused the dashboard JSON",
    401: "Grafana did not accept the token",
    403: "the token's user may not write dashboards (it needs Editor or Admin)",
    412: "Grafana refused to overwrite the dashboard",
}


class DashboardError(RuntimeError):
    """A problem the user can fix; printed without a traceback, exit 3."""


def platform(outputs: ClusterOutputs) -> str:
    """``<cloud>-<orchestrator>``, the key of components/dashboard.py FABRIC_PANELS."""
    return f"{outputs.cloud}-{outputs.orchestrator}"


def dashboard_for(outputs: ClusterOutputs) -> dict[str, Any]:
    """The Grafana dashboard of this stack: its GPUs' panels (DCGM's, or AMD's exporter's on MI300X)
    and its platform's fabric panels."""
    key = platform(outputs)
    if key in CLOUD_MONITORING:
        raise DashboardError(
            f"stack platform {key!r}: its dashboard is in Cloud Monitoring, created by `pulumi up`; nothing to import"
        )
    if key not in FABRIC_PANELS:
        raise DashboardError(
            f"stack platform {key!r} has no Grafana dashboard (known: {', '.join(sorted(FABRIC_PANELS))})"
        )
    vendor = gpu_vendor(outputs.instance_type)
    return grafana(
        NODE_LABEL["aks"],
        title=f"{outputs.cluster_name}: {TITLE}",
        fabric=FABRIC_PANELS[key],
        gpu=GPU_PANELS[vendor],
        **({"tags": AMD_TAGS} if vendor == "amd" else {}),
    )


def gpu_vendor(instance_type: str) -> str:
    """Who makes the stack's GPUs (the catalog's ``accelerator.vendor``): which exporter's panels it gets."""
    try:
        return load_catalog().get(instance_type).accelerator.vendor
    except CatalogError as e:
        raise DashboardError(f"the stack's instance_type: {e}") from None


def check_url(url: str, source: str = "--url") -> str:
    """The Grafana base URL, without a trailing slash; https, or http to this machine only."""
    parts = urllib.parse.urlsplit(url)
    local = parts.hostname in ("127.0.0.1", "localhost", "::1")
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise DashboardError(f"{source} {url!r}: give the workspace's address, https://<host>")
    if parts.scheme == "http" and not local:
        raise DashboardError(f"{source} {url!r}: the token would travel in clear; use https://")
    if parts.query or parts.fragment:
        raise DashboardError(f"{source} {url!r}: the base address only, no query or fragment")
    return url.rstrip("/")


def post(base: str, token: str, dashboard: dict[str, Any]) -> dict[str, Any]:
    """``POST /api/dashboards/db`` with overwrite; Grafana's answer (with ``base``, the address it was sent
    to), or an error naming what failed."""
    body = json.dumps({"dashboard": dashboard, "overwrite": True, "message": "gpu-cluster dashboards import"})
    req = urllib.request.Request(
        base + API_PATH,
        data=body.encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json", "Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:  # noqa: S310 (scheme checked by check_url)
            answer = json.loads(resp.read().decode() or "{}")
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        why = _ERRORS.get(exc.code, "Grafana answered an error")
        raise DashboardError(f"{base}{API_PATH}: HTTP {exc.code}, {why}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise DashboardError(f"{base}: cannot reach Grafana ({reason})") from None
    except ValueError:
        raise DashboardError(f"{base}{API_PATH}: the answer is not JSON; is --url the Grafana workspace?") from None
    if not isinstance(answer, dict) or answer.get("status") != "success" or answer.get("uid") != dashboard["uid"]:
        raise DashboardError(f"{base}{API_PATH}: unexpected answer {answer!r}")
    return {**answer, "base": base}


def _refused(exc: Any, workspace_id: str) -> DashboardError:
    """One line for an AMG API error; a refusal names the IAM action the caller lacks: the actions
    are the operations' names under ``grafana:`` (Service Authorization Reference, "Actions, resources,
    and condition keys for Amazon Managed Grafana", list_grafana.html, read 2026-12-07:
    CreateWorkspaceServiceAccount, CreateWorkspaceServiceAccountToken,
    DeleteWorkspaceServiceAccountToken; ListWorkspaceServiceAccounts with them in AWS's managed policy
    AmazonSageMakerHyperPodObservabilityAdminAccess, statement GrafanaServiceAccountAccess)."""
    op = getattr(exc, "operation_name", "") or "the call"
    error = exc.response.get("Error", {}) if hasattr(exc, "response") else {}
    code, message = error.get("Code", ""), error.get("Message", str(exc))
    if code in ("AccessDeniedException", "AccessDenied"):
        return DashboardError(
            f"Amazon Managed Grafana refused {op} on workspace {workspace_id}: the caller needs grafana:{op} "
            f"on it (set --token-env to a token of your own instead): {message}"
        )
    if code == "ResourceNotFoundException":
        return DashboardError(
            f"Amazon Managed Grafana: {op}: workspace {workspace_id} not found ({message}); is the stack up?"
        )
    return DashboardError(f"Amazon Managed Grafana: {op} on workspace {workspace_id}: {code or 'error'}: {message}")


def _service_account(client: Any, workspace_id: str) -> str:
    """Our service account's id: the one named SERVICE_ACCOUNT, else a new one with SERVICE_ACCOUNT_ROLE."""
    from botocore.exceptions import ClientError

    for _ in range(2):
        for page in client.get_paginator("list_workspace_service_accounts").paginate(workspaceId=workspace_id):
            for account in page.get("serviceAccounts", []):
                if account.get("name") != SERVICE_ACCOUNT:
                    continue
                if str(account.get("isDisabled")).lower() == "true":
                    raise DashboardError(
                        f"workspace {workspace_id}: service account {SERVICE_ACCOUNT} is disabled; enable it in the AMG console"
                    )
                if account.get("grafanaRole") not in WRITE_ROLES:
                    raise DashboardError(
                        f"workspace {workspace_id}: service account {SERVICE_ACCOUNT} has role "
                        f"{account.get('grafanaRole')}, which cannot write dashboards (needs {' or '.join(WRITE_ROLES)})"
                    )
                return str(account["id"])
        try:
            made = client.create_workspace_service_account(
                workspaceId=workspace_id, name=SERVICE_ACCOUNT, grafanaRole=SERVICE_ACCOUNT_ROLE
            )
        except ClientError as exc:
            # Another import made it between our list and our create: list again.
            if exc.response.get("Error", {}).get("Code") == "ConflictException":
                continue
            raise
        return str(made["id"])
    raise DashboardError(f"workspace {workspace_id}: service account {SERVICE_ACCOUNT} conflicts but is not listed")


@contextmanager
def amg_token(workspace_id: str, region: str) -> Iterator[str]:
    """A Grafana token of our service account on this AMG workspace, deleted when the block ends."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        client = boto3.client("grafana", region_name=region)
        account = _service_account(client, workspace_id)
        made = client.create_workspace_service_account_token(
            workspaceId=workspace_id,
            serviceAccountId=account,
            name=f"gpu-cluster-import-{uuid.uuid4().hex[:12]}",
            secondsToLive=TOKEN_SECONDS,
        )
    except ClientError as exc:
        raise _refused(exc, workspace_id) from None
    except BotoCoreError as exc:
        raise DashboardError(f"Amazon Managed Grafana, workspace {workspace_id}: {exc}") from None
    token = made["serviceAccountToken"]
    try:
        yield str(token["key"])
    finally:
        try:
            client.delete_workspace_service_account_token(
                workspaceId=workspace_id, serviceAccountId=account, tokenId=token["id"]
            )
        except (ClientError, BotoCoreError) as exc:
            print(
                f"gpu-cluster dashboards: token {token['id']} of {SERVICE_ACCOUNT} on {workspace_id} was not deleted "
                f"({exc}); it expires {TOKEN_SECONDS} s after it was made",
                file=sys.stderr,
            )


def run(stack: str, url: str | None, outputs_file: Path | None, token_env: str | None) -> dict[str, Any]:
    if url is not None:
        check_url(url)
    try:
        outputs = load(stack, outputs_file, allow_plan=False).outputs
    except (CommandError, OutputsError) as exc:
        raise DashboardError(str(exc)) from None
    dashboard = dashboard_for(outputs)
    stack_dash = outputs.dashboard
    if url is None:
        if stack_dash is None or not stack_dash.url:
            raise DashboardError(
                "the stack's outputs have no dashboard.url (last updated before gpu-cluster exported it): "
                "give --url https://<workspace endpoint>, or run pulumi up"
            )
        base = check_url(stack_dash.url, "the stack's dashboard.url")
    else:
        base = check_url(url)
    env = token_env or DEFAULT_TOKEN_ENV
    token = os.environ.get(env, "").strip()
    if token:
        return post(base, token, dashboard)
    if token_env is None and outputs.cloud == "aws":
        if stack_dash is None or not stack_dash.id:
            raise DashboardError(
                f"no token: set {env}, or run pulumi up so the stack exports its Grafana workspace id (dashboard.id)"
            )
        with amg_token(stack_dash.id, outputs.region) as minted:
            return post(base, minted, dashboard)
    if outputs.cloud == "azure":
        raise DashboardError(
            f"no token: set {env} to a Microsoft Entra token for Azure Managed Grafana, "
            f"{env}=$(az account get-access-token --resource {AZURE_GRAFANA_AUDIENCE} --query accessToken -o tsv)"
        )
    raise DashboardError(f"no token: set {env} to a Grafana token with Editor or Admin (see --help)")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpu-cluster dashboards", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="verb", required=True)
    imp = sub.add_parser("import", help="create or overwrite the stack's GPU dashboard in its Grafana")
    imp.add_argument("stack", help="the stack whose outputs say its platform")
    imp.add_argument(
        "--url", help="the Grafana workspace's address, https://<host> (default: the stack's dashboard.url)"
    )
    imp.add_argument("--outputs", type=Path, help="JSON from `pulumi stack output --json --show-secrets`")
    imp.add_argument(
        "--token-env",
        help=f"the variable holding the Grafana token (default {DEFAULT_TOKEN_ENV}; unset on AWS: a token is minted and revoked)",
    )
    args = p.parse_args(argv)
    try:
        answer = run(args.stack, args.url, args.outputs, args.token_env)
    except DashboardError as exc:
        print(f"gpu-cluster dashboards: {exc}", file=sys.stderr)
        return 3
    print(f"dashboard {answer['uid']} version {answer.get('version')}: {answer['base']}{answer.get('url', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
