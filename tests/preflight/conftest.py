"""Shared fixtures of the preflight tests: stack files written from a dict, and a tiny local
HTTP server that answers as the deployer's "what is my address" service."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

# A global address (the spec refuses private and documentation ranges for deployers).
DEPLOYER_NET = "8.8.8.0/24"
DEPLOYER_ADDR = "8.8.8.8"


@pytest.fixture
def write_stack(tmp_path: Path) -> Callable[..., str]:
    def write(cluster: dict[str, Any], config: dict[str, Any] | None = None) -> str:
        path = tmp_path / "Pulumi.preflight-test.yaml"
        path.write_text(
            yaml.safe_dump({"config": {**(config or {}), "gpu-cluster:cluster": cluster}}), encoding="utf-8"
        )
        return str(path)

    return write


class _Answer(http.server.BaseHTTPRequestHandler):
    body = DEPLOYER_ADDR

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        data = (type(self).body + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def checkip() -> Iterator[Callable[[str], str]]:
    """``checkip(address)`` -> the URL of a loopback server answering ``address``."""
    servers: list[http.server.HTTPServer] = []

    def start(address: str) -> str:
        handler = type("Answer", (_Answer,), {"body": address})
        srv = http.server.HTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()
