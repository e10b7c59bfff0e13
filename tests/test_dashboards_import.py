"""``gpu-cluster dashboards import``: against a server on 127.0.0.1 in the shape of Grafana's HTTP API
reference ("Create / Update dashboard", ``POST /api/dashboards/db``: a bearer token, the dashboard
model with ``id: null``, ``overwrite``; ``{"id", "uid", "url", "status": "success", "version"}`` on
success, 401 for a bad token, 412 ``name-exists`` when a dashboard of that uid exists and
``overwrite`` is false), fed the offline plan's outputs of bundled stacks.

The AWS token is minted against a second server on 127.0.0.1 in the shape of Amazon Managed Grafana's
API as botocore's service model ``grafana`` 2020-08-18 (service-2.json) defines it: REST-JSON, the
operations' ``http`` method and ``requestUri``, their input and output shapes, errors as the
``x-amzn-ErrorType`` header and a ``message`` body with the shape's ``httpStatusCode``. boto3 reaches it
through ``AWS_ENDPOINT_URL_GRAFANA``, botocore's per-service endpoint variable; the Grafana stand-in
accepts exactly the keys that server has minted and not deleted."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.components.dashboard import EFA_PANELS, GRAFANA_UID, INFINIBAND_PANELS, PANELS
from gpu_cluster.components.engine import run_offline
from gpu_cluster.components.spec import read_stack_file
from gpu_cluster.dashboards import main

TOKEN = "glsa_test-token"


class Grafana:
    """The dashboards a Grafana org holds, by uid, what each request sent, and the tokens it accepts
    (token to the role of its user)."""

    def __init__(self) -> None:
        self.dashboards: dict[str, dict[str, Any]] = {}
        self.requests: list[dict[str, Any]] = []
        self.auth: list[str | None] = []
        self.tokens: dict[str, str] = {TOKEN: "EDITOR"}
        self.lock = threading.Lock()

    def save(self, auth: str | None, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.requests.append(body)
            self.auth.append(auth)
            role = self.tokens.get((auth or "").removeprefix("Bearer "))
            if role is None:
                return 401, {"message": "Unauthorized"}
            if role not in ("EDITOR", "ADMIN"):
                return 403, {"message": "Access denied"}
            dash = body.get("dashboard")
            if not isinstance(dash, dict) or not dash.get("title"):
                return 400, {"message": "Dashboard title cannot be empty"}
            uid = str(dash.get("uid"))
            old = self.dashboards.get(uid)
            if old is not None and not body.get("overwrite"):
                return 412, {"message": "A dashboard with the same uid already exists", "status": "name-exists"}
            version = (old["version"] + 1) if old else 1
            self.dashboards[uid] = {
                "model": dash,
                "version": version,
                "id": old["id"] if old else len(self.dashboards) + 1,
            }
            slug = dash["title"].lower().replace(" ", "-").replace(":", "")
            return 200, {
                "id": self.dashboards[uid]["id"],
                "uid": uid,
                "url": f"/d/{uid}/{slug}",
                "status": "success",
                "version": version,
                "slug": slug,
            }


@pytest.fixture
def grafana_server() -> Iterator[tuple[Grafana, str]]:
    state = Grafana()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            if self.path != "/api/dashboards/db":
                code, answer = 404, {"message": "Not found"}
            else:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    body = json.loads(raw)
                except ValueError:
                    code, answer = 400, {"message": "bad request data"}
                else:
                    code, answer = state.save(self.headers.get("Authorization"), body)
            data = json.dumps(answer).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


_OUTPUTS: dict[str, Any] = {}


def plan_outputs(stack: str) -> dict[str, Any]:
    if stack not in _OUTPUTS:
        name, raw = read_stack_file(stack)
        _OUTPUTS[stack] = run_offline(name, raw).outputs
    copy: dict[str, Any] = json.loads(json.dumps(_OUTPUTS[stack]))
    return copy


def outputs_file(tmp_path: Path, stack: str, dashboard_url: str | None = None) -> Path:
    """The plan's outputs of ``stack``; with ``dashboard_url``, its Grafana at that address (the stand-in)."""
    outs = plan_outputs(stack)
    if dashboard_url is not None:
        outs["dashboard"]["url"] = dashboard_url
    path = tmp_path / f"{stack}.json"
    path.write_text(json.dumps(outs), encoding="utf-8")
    return path


def _import(stack: str, url: str, outputs: Path, *extra: str) -> int:
    return main(["import", stack, "--url", url, "--outputs", str(outputs), *extra])


def test_import_twice_overwrites_the_one_dashboard_rerun(
    grafana_server: tuple[Grafana, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, url = grafana_server
    monkeypatch.setenv("GRAFANA_TOKEN", TOKEN)
    outputs = outputs_file(tmp_path, "azure-h100-slurm")
    assert _import("azure-h100-slurm", url, outputs) == 0
    assert _import("azure-h100-slurm", url, outputs) == 0
    assert list(state.dashboards) == [GRAFANA_UID]
    assert state.dashboards[GRAFANA_UID]["version"] == 2
    for body in state.requests:
        assert body["overwrite"] is True and body["dashboard"]["id"] is None
    # Azure Slurm: the GPU panels, then the InfiniBand ones its node exporter feeds, then the
    # validation's section.
    model = state.dashboards[GRAFANA_UID]["model"]
    exprs = [p["targets"][0]["expr"] for p in model["panels"]]
    fabric = exprs[len(PANELS) : len(PANELS) + len(INFINIBAND_PANELS)]
    assert fabric == [p.promql("node") for p in INFINIBAND_PANELS]
    assert all("gpu_cluster_validation_" in e for e in exprs[len(PANELS) + len(INFINIBAND_PANELS) :])
    assert model["title"].startswith(json.loads(outputs.read_text())["cluster_name"] + ": ")


def test_eks_gets_the_efa_panels_of_its_exporter_daemonset(
    grafana_server: tuple[Grafana, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EKS runs the EFA exporter DaemonSet (components/aws/efa_exporter.py): its dashboard is the GPU
    panels, then PCS's EFA panels, then the validation's."""
    state, url = grafana_server
    monkeypatch.setenv("GRAFANA_TOKEN", TOKEN)
    assert _import("aws-h100-eks", url, outputs_file(tmp_path, "aws-h100-eks")) == 0
    model = state.dashboards[GRAFANA_UID]["model"]
    titles = [p["title"] for p in model["panels"]]
    gpu_and_fabric = [p.title for p in (*PANELS, *EFA_PANELS)]
    assert EFA_PANELS and titles[: len(gpu_and_fabric)] == gpu_and_fabric
    rest = titles[len(gpu_and_fabric) :]
    assert rest and all(t.startswith("Validation:") for t in rest)


def test_a_bad_token_is_named_and_nothing_is_saved(
    grafana_server: tuple[Grafana, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state, url = grafana_server
    monkeypatch.setenv("MY_TOKEN", "wrong")
    assert _import("aws-h100-eks", url, outputs_file(tmp_path, "aws-h100-eks"), "--token-env", "MY_TOKEN") == 3
    err = capsys.readouterr().err
    assert "HTTP 401" in err and "did not accept the token" in err
    assert state.dashboards == {} and len(state.requests) == 1


def test_refusals_name_the_bad_value_before_any_request(
    grafana_server: tuple[Grafana, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state, url = grafana_server
    outputs = outputs_file(tmp_path, "aws-h100-eks")
    monkeypatch.delenv("GRAFANA_TOKEN", raising=False)
    # Azure: no token is fetched here; the error says how to get one.
    assert _import("azure-h100-slurm", url, outputs_file(tmp_path, "azure-h100-slurm")) == 3
    err = capsys.readouterr().err
    assert "set GRAFANA_TOKEN" in err and "az account get-access-token --resource https://dashboard.azure.com" in err
    monkeypatch.setenv("GRAFANA_TOKEN", TOKEN)
    for bad, why in (
        ("http://grafana.example.com", "in clear"),
        ("ftp://127.0.0.1", "https://<host>"),
        (url + "/?x=1", "no query"),
    ):
        assert _import("aws-h100-eks", bad, outputs) == 3
        err = capsys.readouterr().err
        assert repr(bad) in err and why in err, err
    gke = outputs_file(tmp_path, "gcp-h100-gke")
    assert _import("gcp-h100-gke", url, gke) == 3
    assert "'gcp-gke'" in capsys.readouterr().err
    assert state.requests == []


def test_an_unreachable_grafana_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("GRAFANA_TOKEN", TOKEN)
    url = f"http://127.0.0.1:{port}"
    assert _import("aws-h100-eks", url, outputs_file(tmp_path, "aws-h100-eks")) == 3
    assert f"{url}: cannot reach Grafana" in capsys.readouterr().err


# ---- the address from the stack, the AWS token minted and revoked ----------------------------------


def test_the_plan_exports_each_grafana_address_and_workspace() -> None:
    eks = plan_outputs("aws-h100-eks")["dashboard"]
    assert eks["kind"] == "grafana" and eks["id"]
    assert re.fullmatch(r"https://g-[\w-]+\.grafana-workspace\.us-east-1\.amazonaws\.com", eks["url"]), eks
    aks = plan_outputs("azure-h100-slurm")["dashboard"]
    assert aks["kind"] == "grafana" and aks["id"]
    assert re.fullmatch(r"https://[\w-]+\.\w+\.grafana\.azure\.com", aks["url"]), aks
    assert plan_outputs("gcp-h100-gke")["dashboard"]["kind"] == "cloud-monitoring"


def test_the_url_defaults_to_the_stacks_dashboard(
    grafana_server: tuple[Grafana, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state, url = grafana_server
    monkeypatch.setenv("GRAFANA_TOKEN", TOKEN)
    outputs = outputs_file(tmp_path, "azure-h100-slurm", dashboard_url=url)
    assert main(["import", "azure-h100-slurm", "--outputs", str(outputs)]) == 0
    assert list(state.dashboards) == [GRAFANA_UID]
    assert capsys.readouterr().out.startswith(f"dashboard {GRAFANA_UID} version 1: {url}/d/")
    # A stack last updated before the output existed: --url is asked for, nothing is sent.
    old = plan_outputs("azure-h100-slurm")
    del old["dashboard"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert main(["import", "azure-h100-slurm", "--outputs", str(tmp_path / "old.json")]) == 3
    assert "give --url" in capsys.readouterr().err and len(state.requests) == 1
    # The stack's address is judged as --url is.
    plain = outputs_file(tmp_path, "azure-h100-slurm", dashboard_url="http://grafana.example.com")
    assert main(["import", "azure-h100-slurm", "--outputs", str(plain)]) == 3
    assert "the stack's dashboard.url 'http://grafana.example.com': the token would travel in clear" in (
        capsys.readouterr().err
    )


class Amg:
    """Amazon Managed Grafana's service accounts and tokens of one workspace, what each call sent, and
    the operations to refuse with AccessDeniedException."""

    def __init__(self, workspace: str, grafana: Grafana) -> None:
        self.workspace = workspace
        self.grafana = grafana
        self.accounts: dict[str, dict[str, Any]] = {}
        self.tokens: dict[str, dict[str, Any]] = {}
        """Live tokens: id to ``{account, name, key, secondsToLive}``."""
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.minted: list[str] = []
        """Every key handed out, in order."""
        self.deny: set[str] = set()
        self.lock = threading.Lock()

    def handle(self, method: str, path: str, auth: str, body: dict[str, Any]) -> tuple[int, dict[str, Any], str]:
        routes = (
            ("GET", r"/workspaces/([^/]+)/serviceaccounts", "ListWorkspaceServiceAccounts"),
            ("POST", r"/workspaces/([^/]+)/serviceaccounts", "CreateWorkspaceServiceAccount"),
            ("POST", r"/workspaces/([^/]+)/serviceaccounts/([^/]+)/tokens", "CreateWorkspaceServiceAccountToken"),
            (
                "DELETE",
                r"/workspaces/([^/]+)/serviceaccounts/([^/]+)/tokens/([^/]+)",
                "DeleteWorkspaceServiceAccountToken",
            ),
        )
        route = path.split("?")[0]
        for verb, pattern, op in routes:
            m = re.fullmatch(pattern, route)
            if verb == method and m:
                break
        else:
            return 404, {"message": f"no route {method} {route}"}, "UnknownOperationException"
        with self.lock:
            self.calls.append((op, body))
            # SigV4 signed for the service's signing name (the model's metadata.signingName).
            if "/grafana/aws4_request" not in auth:
                return 403, {"message": "not signed for grafana"}, "AccessDeniedException"
            if op in self.deny:
                return 403, {"message": f"not authorized to perform: grafana:{op}"}, "AccessDeniedException"
            ws = m.group(1)
            if ws != self.workspace:
                return (
                    404,
                    {"message": "no workspace", "resourceId": ws, "resourceType": "WORKSPACE"},
                    ("ResourceNotFoundException"),
                )
            if op == "ListWorkspaceServiceAccounts":
                return 200, {"serviceAccounts": list(self.accounts.values()), "workspaceId": ws}, ""
            if op == "CreateWorkspaceServiceAccount":
                if not 1 <= len(body.get("name", "")) <= 128 or body.get("grafanaRole") not in (
                    "ADMIN",
                    "EDITOR",
                    "VIEWER",
                ):
                    return 400, {"message": "invalid", "reason": "OTHER"}, "ValidationException"
                if any(a["name"] == body["name"] for a in self.accounts.values()):
                    return (
                        409,
                        {"message": "exists", "resourceId": body["name"], "resourceType": "SERVICE_ACCOUNT"},
                        ("ConflictException"),
                    )
                sid = str(len(self.accounts) + 2)
                self.accounts[sid] = {
                    "id": sid,
                    "name": body["name"],
                    "isDisabled": "false",
                    "grafanaRole": body["grafanaRole"],
                }
                return 200, {**{k: self.accounts[sid][k] for k in ("id", "name", "grafanaRole")}, "workspaceId": ws}, ""
            sid = m.group(2)
            if sid not in self.accounts:
                return (
                    404,
                    {"message": "no account", "resourceId": sid, "resourceType": "SERVICE_ACCOUNT"},
                    ("ResourceNotFoundException"),
                )
            if op == "CreateWorkspaceServiceAccountToken":
                if not 1 <= int(body.get("secondsToLive", 0)) <= 2592000:
                    return 400, {"message": "secondsToLive", "reason": "OTHER"}, "ValidationException"
                tid = str(len(self.calls))
                key = f"glsa_minted_{tid}"
                self.tokens[tid] = {
                    "account": sid,
                    "name": body["name"],
                    "key": key,
                    "secondsToLive": body["secondsToLive"],
                }
                self.grafana.tokens[key] = self.accounts[sid]["grafanaRole"]
                self.minted.append(key)
                token = {"id": tid, "name": body["name"], "key": key}
                return 200, {"serviceAccountToken": token, "serviceAccountId": sid, "workspaceId": ws}, ""
            tid = m.group(3)
            gone = self.tokens.pop(tid, None)
            if gone is None:
                return (
                    404,
                    {"message": "no token", "resourceId": tid, "resourceType": "TOKEN"},
                    "ResourceNotFoundException",
                )
            self.grafana.tokens.pop(gone["key"], None)
            return 200, {"tokenId": tid, "serviceAccountId": sid, "workspaceId": ws}, ""


@pytest.fixture
def amg(grafana_server: tuple[Grafana, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Amg]:
    state = Amg(plan_outputs("aws-h100-eks")["dashboard"]["id"], grafana_server[0])

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
            body = json.loads(raw) if raw else {}
            code, answer, error = state.handle(self.command, self.path, self.headers.get("Authorization", ""), body)
            data = json.dumps(answer).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            if error:
                self.send_header("x-amzn-ErrorType", error)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _serve  # noqa: N815 (http.server's names)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.delenv("GRAFANA_TOKEN", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL_GRAFANA", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def test_aws_mints_an_editor_token_and_deletes_it_rerun(
    grafana_server: tuple[Grafana, str], amg: Amg, tmp_path: Path
) -> None:
    state, url = grafana_server
    outputs = outputs_file(tmp_path, "aws-h100-eks", dashboard_url=url)
    assert main(["import", "aws-h100-eks", "--outputs", str(outputs)]) == 0
    assert main(["import", "aws-h100-eks", "--outputs", str(outputs)]) == 0
    assert state.dashboards[GRAFANA_UID]["version"] == 2
    # One service account of ours, Editor, made once and reused by the rerun.
    assert [(a["name"], a["grafanaRole"]) for a in amg.accounts.values()] == [("gpu-cluster-dashboards", "EDITOR")]
    ops = [op for op, _ in amg.calls]
    assert ops.count("CreateWorkspaceServiceAccount") == 1 and ops.count("CreateWorkspaceServiceAccountToken") == 2
    made = [body for op, body in amg.calls if op == "CreateWorkspaceServiceAccountToken"]
    assert all(b["secondsToLive"] == 900 for b in made) and made[0]["name"] != made[1]["name"]
    # Grafana was called with each minted key, and each was deleted after: none is live.
    assert len(set(amg.minted)) == 2 and state.auth == [f"Bearer {k}" for k in amg.minted], (state.auth, amg.minted)
    assert amg.tokens == {} and state.tokens == {TOKEN: "EDITOR"}
    assert ops.count("DeleteWorkspaceServiceAccountToken") == 2


def test_the_minted_token_is_deleted_when_the_import_fails(
    grafana_server: tuple[Grafana, str], amg: Amg, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = f"http://127.0.0.1:{port}"
    outputs = outputs_file(tmp_path, "aws-h100-eks", dashboard_url=dead)
    assert main(["import", "aws-h100-eks", "--outputs", str(outputs)]) == 3
    assert f"{dead}: cannot reach Grafana" in capsys.readouterr().err
    ops = [op for op, _ in amg.calls]
    assert ops[-2:] == ["CreateWorkspaceServiceAccountToken", "DeleteWorkspaceServiceAccountToken"], ops
    assert amg.tokens == {}


def test_a_refused_token_names_the_permission_and_workspace(
    grafana_server: tuple[Grafana, str], amg: Amg, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, url = grafana_server
    amg.deny.add("CreateWorkspaceServiceAccountToken")
    outputs = outputs_file(tmp_path, "aws-h100-eks", dashboard_url=url)
    assert main(["import", "aws-h100-eks", "--outputs", str(outputs)]) == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert (
        f"refused CreateWorkspaceServiceAccountToken on workspace {amg.workspace}: "
        "the caller needs grafana:CreateWorkspaceServiceAccountToken on it"
    ) in err, err
    assert state.requests == [] and amg.tokens == {}


def test_a_viewer_service_account_of_ours_is_named_not_used(
    grafana_server: tuple[Grafana, str], amg: Amg, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, url = grafana_server
    amg.accounts["9"] = {"id": "9", "name": "gpu-cluster-dashboards", "isDisabled": "false", "grafanaRole": "VIEWER"}
    outputs = outputs_file(tmp_path, "aws-h100-eks", dashboard_url=url)
    assert main(["import", "aws-h100-eks", "--outputs", str(outputs)]) == 3
    assert "has role VIEWER, which cannot write dashboards" in capsys.readouterr().err
    assert [op for op, _ in amg.calls] == ["ListWorkspaceServiceAccounts"] and state.requests == []


def test_token_env_given_means_no_minting(
    grafana_server: tuple[Grafana, str], amg: Amg, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, url = grafana_server
    outputs = outputs_file(tmp_path, "aws-h100-eks", dashboard_url=url)
    assert main(["import", "aws-h100-eks", "--outputs", str(outputs), "--token-env", "MY_TOKEN"]) == 3
    assert "set MY_TOKEN" in capsys.readouterr().err and amg.calls == []


def test_mi300x_gets_amds_panels_and_the_infiniband_ones(
    grafana_server: tuple[Grafana, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The MI300X AKS stack's dashboard charts AMD's exporter (the agent scrapes it there,
    components/k8s/metrics.py), not DCGM series it has none of; its fabric panels are AKS's."""
    from gpu_cluster.components.dashboard import AKS_INFINIBAND_PANELS, AMD_PANELS

    state, url = grafana_server
    monkeypatch.setenv("GRAFANA_TOKEN", TOKEN)
    assert _import("azure-mi300x-aks", url, outputs_file(tmp_path, "azure-mi300x-aks")) == 0
    model = state.dashboards[GRAFANA_UID]["model"]
    exprs = [p["targets"][0]["expr"] for p in model["panels"]]
    gpu = len(AMD_PANELS)
    assert exprs[:gpu] == [p.promql("node") for p in AMD_PANELS]
    assert exprs[gpu : gpu + len(AKS_INFINIBAND_PANELS)] == [p.promql("node") for p in AKS_INFINIBAND_PANELS]
    assert not any("DCGM_" in e for e in exprs)
    assert "dcgm" not in model["tags"]
    # The NVIDIA AKS stack keeps the DCGM panels.
    assert _import("azure-h100-aks", url, outputs_file(tmp_path, "azure-h100-aks")) == 0
    exprs = [p["targets"][0]["expr"] for p in state.dashboards[GRAFANA_UID]["model"]["panels"]]
    assert exprs[: len(PANELS)] == [p.promql("node") for p in PANELS]
