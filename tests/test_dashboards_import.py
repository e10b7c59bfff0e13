"""``gpu-cluster dashboards import``: against a server on 127.0.0.1 in the shape of Grafana's HTTP API
reference ("Create / Update dashboard", ``POST /api/dashboards/db``: a bearer token, the dashboard
model with ``id: null``, ``overwrite``; ``{"id", "uid", "url", "status": "success", "version"}`` on
success, 401 for a bad token, 412 ``name-exists`` when a dashboard of that uid exists and
``overwrite`` is false), fed the offline plan's outputs of bundled stacks."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.components.dashboard import GRAFANA_UID, INFINIBAND_PANELS, PANELS
from gpu_cluster.components.engine import run_offline
from gpu_cluster.components.spec import read_stack_file
from gpu_cluster.dashboards import main

TOKEN = "glsa_test-token"


class Grafana:
    """The dashboards a Grafana org holds, by uid, and what each request sent."""

    def __init__(self) -> None:
        self.dashboards: dict[str, dict[str, Any]] = {}
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def save(self, auth: str | None, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.requests.append(body)
            if auth != f"Bearer {TOKEN}":
                return 401, {"message": "Unauthorized"}
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


def outputs_file(tmp_path: Path, stack: str) -> Path:
    if stack not in _OUTPUTS:
        name, raw = read_stack_file(stack)
        _OUTPUTS[stack] = run_offline(name, raw).outputs
    path = tmp_path / f"{stack}.json"
    path.write_text(json.dumps(_OUTPUTS[stack]), encoding="utf-8")
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


def test_eks_gets_no_fabric_panel(
    grafana_server: tuple[Grafana, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, url = grafana_server
    monkeypatch.setenv("GRAFANA_TOKEN", TOKEN)
    assert _import("aws-h100-eks", url, outputs_file(tmp_path, "aws-h100-eks")) == 0
    model = state.dashboards[GRAFANA_UID]["model"]
    titles = [p["title"] for p in model["panels"]]
    assert titles[: len(PANELS)] == [p.title for p in PANELS]
    assert titles[len(PANELS) :] and all(t.startswith("Validation:") for t in titles[len(PANELS) :])


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
    assert _import("aws-h100-eks", url, outputs) == 3
    assert "set GRAFANA_TOKEN" in capsys.readouterr().err
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
    assert f"--url {url}: cannot reach Grafana" in capsys.readouterr().err
