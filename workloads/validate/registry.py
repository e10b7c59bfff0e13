"""Resolve an image tag to the digest its registry serves now, through the registry's own API.

The Docker Registry HTTP API V2 (catalog source ``registry-api-v2``, "Existing Manifests"):
``HEAD /v2/<name>/manifests/<tag>`` with the manifest media types in ``Accept`` answers the
digest in ``Docker-Content-Digest``. A registry that wants a token answers 401 with
``WWW-Authenticate: Bearer realm=...,service=...,scope=...``; the token comes from the realm,
anonymously (public.ecr.aws, nvcr.io, Docker Hub for public images) or with the user's own
credentials: the ``auths`` entry for the registry in ``~/.docker/config.json`` (what ``docker
login`` / ``aws ecr get-login-password | docker login`` wrote). ``Basic`` challenges take the same
credentials. Registries on 127.0.0.1 / localhost are spoken to over plain HTTP, as Docker does.

``submit`` uses it so the job is pinned to what was resolved, and the certificate records it.
"""

from __future__ import annotations

import base64
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

# The manifest types a multi-arch or single image can be served as (OCI image spec, Docker v2.2).
ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}\Z")
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


class RegistryError(RuntimeError):
    """The tag could not be resolved: one line naming the image and what to do."""


@dataclass(frozen=True, slots=True)
class Ref:
    registry: str
    repository: str
    tag: str
    digest: str | None

    def pinned(self, digest: str) -> str:
        host = "" if self.registry == "registry-1.docker.io" else f"{self.registry}/"
        return f"{host}{self.repository}:{self.tag}@{digest}"


def parse(image: str) -> Ref:
    """``[registry/]name[:tag][@digest]`` as Docker reads it: the first part is a registry when it
    has a dot or a port or is ``localhost``; otherwise the image is Docker Hub's."""
    rest, _, digest = image.partition("@")
    first, slash, _ = rest.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, name = first, rest[len(first) + 1 :]
    else:
        registry, name = "registry-1.docker.io", rest if slash else f"library/{rest}"
    name, colon, tag = name.rpartition(":") if ":" in name else (name, "", "latest")
    if not name or (colon and not tag):
        raise RegistryError(f"image {image!r}: not an image reference (allowed: [registry/]name[:tag][@sha256:...])")
    return Ref(registry=registry, repository=name, tag=tag, digest=digest or None)


def _insecure(registry: str) -> bool:
    host = registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry
    return host in ("localhost", "127.0.0.1") or host.startswith("127.")


def docker_credentials(registry: str, config: Path | None = None) -> tuple[str, str] | None:
    """The user's ``docker login`` for ``registry`` (``auths.<registry>.auth``, base64 user:password)."""
    path = config or Path(os.environ.get("DOCKER_CONFIG", Path.home() / ".docker")) / "config.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for key, entry in (doc.get("auths") or {}).items():
        host = urllib.parse.urlsplit(key).netloc if "://" in key else key.split("/", 1)[0]
        if host == registry and isinstance(entry, dict) and entry.get("auth"):
            user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            return user, password
    return None


def _basic(creds: tuple[str, str]) -> str:
    return "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()


def _open(req: urllib.request.Request, timeout: float) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read() if err.fp else b""


def resolve(
    image: str,
    *,
    credentials: tuple[str, str] | None = None,
    docker_config: Path | None = None,
    timeout: float = 30.0,
    pull: bool = False,
) -> str:
    """The digest (``sha256:...``) the registry serves for ``image``'s tag now.

    ``pull``: GET the manifest by its tag, as a pull does, even where ``image`` carries a digest
    (then the tag must still serve it). A pull-through cache fills only from a pull by tag: a
    first pull by digest of an image it has not cached is answered as missing
    (aws/containers-roadmap#2837, open 2026-07-18), so the job's first pull through a mirror is
    this one."""
    ref = parse(image)
    if ref.digest is not None and not pull:
        return ref.digest
    creds = credentials or docker_credentials(ref.registry, docker_config)
    scheme = "http" if _insecure(ref.registry) else "https"
    url = f"{scheme}://{ref.registry}/v2/{ref.repository}/manifests/{urllib.parse.quote(ref.tag)}"
    what = f"image {ref.repository}:{ref.tag} at {ref.registry}"
    try:
        method = "GET" if pull else "HEAD"
        status, headers, _ = _open(urllib.request.Request(url, method=method, headers={"Accept": ACCEPT}), timeout)
        if status == 401:
            auth = _authorization(headers.get("www-authenticate", ""), creds, what, timeout)
            req = urllib.request.Request(url, method=method, headers={"Accept": ACCEPT, "Authorization": auth})
            status, headers, _ = _open(req, timeout)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise RegistryError(
            f"{what}: the registry could not be reached ({reason}); pass --image REF@sha256:..."
        ) from None
    if status in (401, 403):
        raise RegistryError(
            f"{what}: the registry refused ({status}) with "
            + ("your docker login" if creds else "no credentials")
            + f"; log in (docker login {ref.registry}, or for ECR: aws ecr get-login-password | docker login "
            f"--username AWS --password-stdin {ref.registry}) or pass --image REF@sha256:..."
        )
    if status == 404:
        raise RegistryError(f"{what}: no such tag (404); check the tag or pass --image REF@sha256:...")
    if status != 200:
        raise RegistryError(f"{what}: the registry answered {status}; pass --image REF@sha256:...")
    digest = headers.get("docker-content-digest", "")
    if not _DIGEST.match(digest):
        raise RegistryError(f"{what}: the registry gave no Docker-Content-Digest (got {digest!r})")
    if ref.digest is not None and digest != ref.digest:
        raise RegistryError(
            f"{what}: the tag serves {digest}, not the pinned {ref.digest}; re-pin (gpu-cluster pin STACK) "
            "or pass --image REF@sha256:... of what the tag serves"
        )
    return digest


def _authorization(challenge: str, creds: tuple[str, str] | None, what: str, timeout: float) -> str:
    scheme = challenge.split(" ", 1)[0].lower()
    if scheme == "basic":
        if creds is None:
            raise RegistryError(f"{what}: the registry asks for a login and none is stored; docker login first")
        return _basic(creds)
    if scheme != "bearer":
        raise RegistryError(f"{what}: unsupported registry challenge {challenge[:80]!r}")
    params = dict(_CHALLENGE.findall(challenge))
    realm = params.pop("realm", "")
    if not realm:
        raise RegistryError(f"{what}: the registry's Bearer challenge names no realm")
    query = urllib.parse.urlencode({k: v for k, v in params.items() if k in ("service", "scope")})
    headers = {"Authorization": _basic(creds)} if creds else {}
    status, _, body = _open(urllib.request.Request(f"{realm}?{query}", headers=headers), timeout)
    if status != 200:
        raise RegistryError(
            f"{what}: the registry's token service refused ({status})"
            + ("" if creds else " an anonymous pull")
            + "; docker login to the registry or pass --image REF@sha256:..."
        )
    doc = json.loads(body or b"{}")
    token = doc.get("token") or doc.get("access_token")
    if not token:
        raise RegistryError(f"{what}: the registry's token service answered no token")
    return f"Bearer {token}"
