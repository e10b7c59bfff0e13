"""A loopback HTTP server that answers with recorded responses, keyed by method and path, and keeps
every request (method, path with its query, JSON body): the house pattern of
tests/preflight/gcp_recorded.py, with POST, PUT and PATCH for the calls that act."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any

Answer = tuple[int, Any] | Callable[[dict[str, Any]], tuple[int, Any]]


class Recorded:
    def __init__(self, not_found: Callable[[str], Any]) -> None:
        self.answers: dict[tuple[str, str], Answer] = {}
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _serve(self) -> None:
                split = urllib.parse.urlsplit(self.path)
                size = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(size) if size else b""
                req = {
                    "method": self.command,
                    "path": split.path,
                    "query": dict(urllib.parse.parse_qsl(split.query)),
                    "body": json.loads(raw) if raw else None,
                    "headers": dict(self.headers),
                }
                outer.requests.append(req)
                answer = outer.answers.get((self.command, split.path))
                if answer is None:
                    status, body = 404, not_found(split.path)
                elif callable(answer):
                    status, body = answer(req)
                else:
                    status, body = answer
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, method: str, path: str, body: Any, status: int = 200) -> None:
        self.answers[(method, path)] = (status, body)

    def answer_with(self, method: str, path: str, fn: Callable[[dict[str, Any]], tuple[int, Any]]) -> None:
        self.answers[(method, path)] = fn

    def made(self, method: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["method"] == method]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
