"""``gpu-cluster dashboards import STACK --url URL``: put the stack's GPU dashboard into its Grafana.

The stack's outputs (``--outputs FILE``, else ``pulumi stack output``, as ``gpu-cluster validate``
reads them) say its cloud and orchestrator; the dashboard is components/dashboard.py's Grafana
rendering with that platform's fabric panels (``FABRIC_PANELS``). GKE and Cluster Director need no
import: ``pulumi up`` creates their Cloud Monitoring dashboard.

The call is Grafana's HTTP API "Create / Update dashboard", ``POST /api/dashboards/db`` with
``{"dashboard": ..., "overwrite": true}`` and ``Authorization: Bearer <token>``; the answer is
``{"id", "uid", "url", "status": "success", "version"}``, and 400, 401, 403 and 412 are its
documented errors (grafana.com/docs/grafana/latest/developers/http_api/dashboard/, "Create / Update
dashboard", read 2026-12-07). The dashboard keeps its fixed ``uid`` (components/dashboard.py
GRAFANA_UID) and ``id: null``, so a rerun overwrites the same dashboard rather than adding one.

The token is read from an environment variable (``GRAFANA_TOKEN`` unless ``--token-env`` names
another), never from a flag, so it stays out of shell history: a Grafana service-account token
with the Editor or Admin role (Amazon Managed Grafana: a workspace service account's token; Azure
Managed Grafana: a Microsoft Entra access token of a user with Grafana Admin, which the stack gives
the deployer).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpu_cluster.components.contract import ClusterOutputs, OutputsError
from gpu_cluster.components.dashboard import FABRIC_PANELS, NODE_LABEL, TITLE, grafana
from gpu_cluster.workloads.validate.commands import CommandError, load

API_PATH = "/api/dashboards/db"
DEFAULT_TOKEN_ENV = "GRAFANA_TOKEN"
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
    """The Grafana dashboard of this stack: the GPU panels and its platform's fabric panels."""
    key = platform(outputs)
    if key in CLOUD_MONITORING:
        raise DashboardError(
            f"stack platform {key!r}: its dashboard is in Cloud Monitoring, created by `pulumi up`; nothing to import"
        )
    if key not in FABRIC_PANELS:
        raise DashboardError(
            f"stack platform {key!r} has no Grafana dashboard (known: {', '.join(sorted(FABRIC_PANELS))})"
        )
    return grafana(NODE_LABEL["aks"], title=f"{outputs.cluster_name}: {TITLE}", fabric=FABRIC_PANELS[key])


def check_url(url: str) -> str:
    """The Grafana base URL, without a trailing slash; https, or http to this machine only."""
    parts = urllib.parse.urlsplit(url)
    local = parts.hostname in ("127.0.0.1", "localhost", "::1")
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise DashboardError(f"--url {url!r}: give the workspace's address, https://<host>")
    if parts.scheme == "http" and not local:
        raise DashboardError(f"--url {url!r}: the token would travel in clear; use https://")
    if parts.query or parts.fragment:
        raise DashboardError(f"--url {url!r}: the base address only, no query or fragment")
    return url.rstrip("/")


def post(base: str, token: str, dashboard: dict[str, Any]) -> dict[str, Any]:
    """``POST /api/dashboards/db`` with overwrite; Grafana's answer, or an error naming what failed."""
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
        raise DashboardError(f"--url {base}: cannot reach Grafana ({reason})") from None
    except ValueError:
        raise DashboardError(f"{base}{API_PATH}: the answer is not JSON; is --url the Grafana workspace?") from None
    if not isinstance(answer, dict) or answer.get("status") != "success" or answer.get("uid") != dashboard["uid"]:
        raise DashboardError(f"{base}{API_PATH}: unexpected answer {answer!r}")
    return answer


def run(stack: str, url: str, outputs_file: Path | None, token_env: str) -> dict[str, Any]:
    base = check_url(url)
    token = os.environ.get(token_env, "").strip()
    if not token:
        raise DashboardError(f"no token: set {token_env} to a Grafana token with Editor or Admin (see --help)")
    try:
        outputs = load(stack, outputs_file, allow_plan=False).outputs
    except (CommandError, OutputsError) as exc:
        raise DashboardError(str(exc)) from None
    return post(base, token, dashboard_for(outputs))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpu-cluster dashboards", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="verb", required=True)
    imp = sub.add_parser("import", help="create or overwrite the stack's GPU dashboard in its Grafana")
    imp.add_argument("stack", help="the stack whose outputs say its platform")
    imp.add_argument("--url", required=True, help="the Grafana workspace's address, https://<host>")
    imp.add_argument("--outputs", type=Path, help="JSON from `pulumi stack output --json --show-secrets`")
    imp.add_argument("--token-env", default=DEFAULT_TOKEN_ENV, help="the variable holding the Grafana token")
    args = p.parse_args(argv)
    try:
        answer = run(args.stack, args.url, args.outputs, args.token_env)
    except DashboardError as exc:
        print(f"gpu-cluster dashboards: {exc}", file=sys.stderr)
        return 3
    print(f"dashboard {answer['uid']} version {answer.get('version')}: {args.url.rstrip('/')}{answer.get('url', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
