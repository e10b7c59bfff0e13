"""Tag -> digest through a registry's own API, against a registry served on 127.0.0.1 that
speaks the Docker Registry HTTP API V2 / OCI distribution protocol: ``HEAD
/v2/<name>/manifests/<tag>`` answered with ``Docker-Content-Digest``, behind the Bearer token
challenge public registries use (anonymous pulls) or a Basic-authenticated token service (a
private registry and the user's ``docker login``). Then ``submit``'s path: the job is rendered
with the digest and carries it for the certificate."""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from gpu_cluster.workloads.launch import validation as vjob
from gpu_cluster.workloads.validate import commands, registry
from tests.launch.test_render_stacks import args as job_args
from tests.launch.test_render_stacks import outputs

REPO_NAME = "deep-learning-containers/pytorch"
TAG = "2.13.0-cu133-amzn2023"
MANIFEST = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []})
DIGEST = "sha256:" + hashlib.sha256(MANIFEST.encode()).hexdigest()


class FakeRegistry(BaseHTTPRequestHandler):
    need_login: tuple[str, str] | None = None
    seen: list[tuple[str, str, str]]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, code: int, headers: dict[str, str], body: bytes = b"") -> None:
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        self.seen.append(("GET", url.path, self.headers.get("Authorization", "")))
        if url.path != "/token":
            self._reply(404, {})
            return
        q = parse_qs(url.query)
        if q.get("service") != ["fake-registry"] or q.get("scope") != [f"repository:{REPO_NAME}:pull"]:
            self._reply(400, {})
            return
        if self.need_login is not None:
            want = "Basic " + base64.b64encode(":".join(self.need_login).encode()).decode()
            if self.headers.get("Authorization") != want:
                self._reply(401, {})
                return
        self._reply(200, {"Content-Type": "application/json"}, json.dumps({"token": "pull-token"}).encode())

    def do_HEAD(self) -> None:
        self.seen.append(("HEAD", self.path, self.headers.get("Authorization", "")))
        host = self.headers["Host"]
        if self.headers.get("Authorization") != "Bearer pull-token":
            challenge = (
                f'Bearer realm="http://{host}/token",service="fake-registry",scope="repository:{REPO_NAME}:pull"'
            )
            self._reply(401, {"WWW-Authenticate": challenge})
            return
        if self.path != f"/v2/{REPO_NAME}/manifests/{TAG}":
            self._reply(404, {})
            return
        assert "application/vnd.oci.image.index.v1+json" in self.headers["Accept"]
        self._reply(200, {"Docker-Content-Digest": DIGEST, "Content-Type": "application/vnd.oci.image.index.v1+json"})


def _serve(need_login: tuple[str, str] | None) -> Iterator[tuple[str, list[tuple[str, str, str]]]]:
    seen: list[tuple[str, str, str]] = []
    handler = type("Reg", (FakeRegistry,), {"need_login": need_login, "seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def public() -> Iterator[tuple[str, list[tuple[str, str, str]]]]:
    yield from _serve(None)


@pytest.fixture
def private() -> Iterator[tuple[str, list[tuple[str, str, str]]]]:
    yield from _serve(("AWS", "ecr-password"))


def test_anonymous_bearer_pull_resolves_the_tag(public: tuple[str, list[tuple[str, str, str]]]) -> None:
    host, seen = public
    assert registry.resolve(f"{host}/{REPO_NAME}:{TAG}", docker_config=Path("/nonexistent")) == DIGEST
    # The protocol as spoken: challenged, token fetched anonymously, then the HEAD with it.
    assert [(m, p.split("?")[0], a) for m, p, a in seen] == [
        ("HEAD", f"/v2/{REPO_NAME}/manifests/{TAG}", ""),
        ("GET", "/token", ""),
        ("HEAD", f"/v2/{REPO_NAME}/manifests/{TAG}", "Bearer pull-token"),
    ]


def test_a_private_registry_takes_the_users_docker_login(
    tmp_path: Path, private: tuple[str, list[tuple[str, str, str]]]
) -> None:
    host, _ = private
    image = f"{host}/{REPO_NAME}:{TAG}"
    with pytest.raises(registry.RegistryError, match=r"refused \(401\) an anonymous pull; docker login"):
        registry.resolve(image, docker_config=tmp_path / "none.json")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"auths": {host: {"auth": base64.b64encode(b"AWS:ecr-password").decode()}}}))
    assert registry.resolve(image, docker_config=config) == DIGEST
    config.write_text(json.dumps({"auths": {host: {"auth": base64.b64encode(b"AWS:wrong").decode()}}}))
    with pytest.raises(registry.RegistryError, match=r"token service refused \(401\); docker login"):
        registry.resolve(image, docker_config=config)


def test_unknown_tag_and_unreachable_registry_say_so(public: tuple[str, list[tuple[str, str, str]]]) -> None:
    host, _ = public
    with pytest.raises(registry.RegistryError, match=rf"image {REPO_NAME}:nope at {host}: no such tag \(404\)"):
        registry.resolve(f"{host}/{REPO_NAME}:nope", docker_config=Path("/nonexistent"))
    with pytest.raises(registry.RegistryError, match="could not be reached"):
        registry.resolve(f"127.0.0.1:1/{REPO_NAME}:{TAG}", docker_config=Path("/nonexistent"))


@pytest.mark.parametrize(
    ("image", "want"),
    [
        ("public.ecr.aws/deep-learning-containers/pytorch:2.13.0-cu133-amzn2023", ("public.ecr.aws", REPO_NAME, TAG)),
        ("nvcr.io/nvidia/pytorch:25.01-py3", ("nvcr.io", "nvidia/pytorch", "25.01-py3")),
        ("localhost:5000/a/b", ("localhost:5000", "a/b", "latest")),
        ("ubuntu:24.04", ("registry-1.docker.io", "library/ubuntu", "24.04")),
    ],
)
def test_references_are_read_as_docker_reads_them(image: str, want: tuple[str, str, str]) -> None:
    ref = registry.parse(image)
    assert (ref.registry, ref.repository, ref.tag) == want and ref.digest is None


def test_submit_renders_the_job_with_the_resolved_digest(
    monkeypatch: pytest.MonkeyPatch, public: tuple[str, list[tuple[str, str, str]]]
) -> None:
    host, _ = public
    monkeypatch.setenv("DOCKER_CONFIG", "/nonexistent")
    outs = outputs("aws-h100-eks")
    said: list[str] = []
    a = argparse.Namespace(**{**vars(job_args()), "image": f"{host}/{REPO_NAME}:{TAG}"})
    pinned = commands.pin_image(outs, a, said.append)
    want = f"{host}/{REPO_NAME}:{TAG}@{DIGEST}"
    assert pinned.image == want and vjob.pinned(want)
    assert said == [f"image {host}/{REPO_NAME}:{TAG} resolved through its registry: {want}"]
    r = commands.render_run(outs, pinned, "20261201t080000z-beef")
    assert r.jobset is not None
    (c,) = r.jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in c["env"]}
    # Every pod runs the digest, and reports it for the certificate's software stack.
    assert c["image"] == want and env["GPUC_IMAGE_DIGEST"] == want


def test_an_image_already_pinned_is_not_looked_up() -> None:
    outs = outputs("aws-h100-eks")
    image = f"127.0.0.1:1/{REPO_NAME}:{TAG}@{DIGEST}"  # port 1: any lookup would fail
    a = argparse.Namespace(**{**vars(job_args()), "image": image})
    assert commands.pin_image(outs, a, print).image == image


def test_render_without_credentials_names_the_tag_and_says_submit_resolves_it(tmp_path: Path) -> None:
    from gpu_cluster.workloads.validate.__main__ import main as validate_main

    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = validate_main(["render", "aws-h100-eks", "--out", str(tmp_path)])
    assert code == 0
    default = vjob.default_image("efa")
    assert f"image {default}: by tag here; submit resolves its digest" in out.getvalue()
    assert f"image: {default}\n" in (tmp_path / "jobset.yaml").read_text()
