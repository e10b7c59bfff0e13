"""The catalog's fabric facts: the NCCL plugin installer and receive-datapath daemon images (one fact
both sides read: components install the plugin; the launcher adds the daemon's sidecar), what the
job's start-up check verifies per fabric, and the image a fabric's or a GPU runtime's pods run.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml

from gpu_cluster.components.catalog_file import CATALOG_PATH, FABRICS, CatalogError, Fabric, Source, _sources


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageFact:
    image: str
    tag: str
    digest: str | None
    source: str

    @property
    def ref(self) -> str:
        """``image:tag@digest`` when the digest is known (the tag stays for people), else ``image:tag``."""
        return f"{self.image}:{self.tag}@{self.digest}" if self.digest else f"{self.image}:{self.tag}"


@dataclass(frozen=True, slots=True, kw_only=True)
class InstallerFact(ImageFact):
    plugin_version: str
    host_paths: Mapping[str, str]
    install_nccl: bool = False
    """The installer also installs the NCCL its plugin release ships (``--install-nccl``), which then
    comes first on the pods' library path."""


@functools.cache
def _fabric_images() -> Mapping[str, Any]:
    with open(CATALOG_PATH, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh)
    return {"fabrics": dict(doc["fabrics"]), "sources": frozenset(doc["sources"])}


def _image(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    for key in ("image", "tag", "source"):
        if not raw.get(key):
            raise CatalogError(f"{where}.{key}: missing in {CATALOG_PATH.name}")
    sources = _fabric_images()["sources"]
    for key in ("source", "digest_source", "install_nccl_source"):
        if raw.get(key) is not None and raw[key] not in sources:
            raise CatalogError(f"{where}.{key}: unknown source id {raw[key]!r}")
    digest = raw.get("digest")
    if digest is not None and not re.fullmatch(r"sha256:[0-9a-f]{64}", str(digest)):
        raise CatalogError(
            f"{where}.digest: {digest!r} (allowed: sha256:<64 hex digits>, or null where no source gives one)"
        )
    return {
        "image": str(raw["image"]),
        "tag": str(raw["tag"]),
        "digest": None if digest is None else str(digest),
        "source": str(raw["source"]),
    }


def installer_fact(fabric: str) -> InstallerFact:
    """The catalog's ``fabrics.<fabric>.installer``."""
    raw = (_fabric_images()["fabrics"].get(fabric) or {}).get("installer")
    if not raw:
        raise CatalogError(
            f"fabrics.{fabric}.installer: missing in {CATALOG_PATH.name} (fabrics with one: "
            f"{', '.join(f for f, v in _fabric_images()['fabrics'].items() if v.get('installer'))})"
        )
    where = f"fabrics.{fabric}.installer"
    return InstallerFact(
        **_image(raw, where),
        plugin_version=str(raw["plugin_version"]),
        host_paths={str(k): str(v) for k, v in (raw.get("host_paths") or {}).items()},
        install_nccl=bool(raw.get("install_nccl", False)),
    )


def rxdm_fact(fabric: str) -> ImageFact | None:
    """The catalog's ``fabrics.<fabric>.rxdm`` (the receive-datapath daemon), None where there is none."""
    raw = (_fabric_images()["fabrics"].get(fabric) or {}).get("rxdm")
    return ImageFact(**_image(raw, f"fabrics.{fabric}.rxdm")) if raw else None


# Per fabric: what the job's start-up check verifies (workloads/health/fabric.py) and the image that
# reaches the fabric by construction. Read from the same file, each fact with its sources.
DeviceKind = Literal["efa", "netdev", "roce", "ib"]
DEVICE_KINDS: tuple[DeviceKind, ...] = ("efa", "netdev", "roce", "ib")


@dataclass(frozen=True, slots=True, kw_only=True)
class StartupCheck:
    fabric: Fabric
    plugin: str
    """The collectives' net plugin (``collectives_plugin``); 'none' where NCCL's own transport serves."""
    plugin_dirs: tuple[str, ...]
    """Where the plugin's installers put it: named in the message when it is there but off the loader's path."""
    devices: DeviceKind
    """How the fabric's devices are counted: EFA devices, named network interfaces, RoCE or IB ports."""
    nics_env: str | None
    """For ``netdev``: the NCCL variable that lists the GPU NICs (its catalog value is the default)."""
    rxdm_socket: str | None
    """TCPXO: the receive-datapath manager's Unix socket, listening once the daemon is ready."""
    rxdm_wait_s: float
    fabric_env: Mapping[str, str]
    sources: tuple[Source, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageBuild:
    """An image its user builds and pushes (``--image``), from a Dockerfile in this repository."""

    repository: str
    tag: str
    dockerfile: str
    base: str
    """The base image as ``ref:tag`` (``@digest`` when known)."""
    pins: Mapping[str, str]
    """Versions the Dockerfile must pin (efa_installer, aws_ofi_nccl)."""
    sources: tuple[Source, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class FabricImage:
    """The published image a fabric's pods run when ``--image`` names none."""

    repository: str
    tag: str
    digest: str | None
    """``sha256:...``, or None where the publisher gives tags only: ``submit`` then resolves the tag
    through the registry's API and pins the job to the digest it answers."""
    torch: str
    """The torch release the image carries (the certificate and report say which ran)."""
    nccl: str
    """The NCCL release the image carries."""
    user: str
    """The user the image runs as (``root``: no USER in its final stage)."""
    sources: tuple[Source, ...]
    build: ImageBuild | None = None
    """The documented build-your-own alternative, when there is one."""
    cuda: str = ""
    """The CUDA release the image is built on, as its publisher states it ('' where not recorded)."""
    tested_on: str = ""
    """Where ``torch`` is a pre-release build of a line (NGC's ``2.10.0a0+...``): the release of that
    line whose wheel ``make image-torch`` runs the job's tests on; '' where ``torch`` is a release."""

    @property
    def ref(self) -> str:
        return f"{self.repository}:{self.tag}" + (f"@{self.digest}" if self.digest else "")


def _digest(raw: Any, where: str) -> str | None:
    if raw in (None, "unknown"):
        return None
    if not (isinstance(raw, str) and raw.startswith("sha256:") and len(raw) == 71):
        raise CatalogError(f"{where}: {raw!r} (allowed: sha256:<64 hex> or 'unknown')")
    return raw


def _fabric_sources(raw: Mapping[str, Any], where: str, sources: Mapping[str, Source]) -> tuple[Source, ...]:
    ids = list(raw.get("sources") or [])
    if not ids:
        raise CatalogError(f"{where}.sources: missing")
    for sid in ids:
        if sid not in sources:
            raise CatalogError(f"{where}.sources: unknown source id {sid!r}")
    return tuple(sources[s] for s in ids)


def _fabric_image(img: Mapping[str, Any], iw: str, sources: Mapping[str, Source]) -> FabricImage:
    build = None
    raw_build = img.get("build")
    if isinstance(raw_build, Mapping):
        bw = f"{iw}.build"
        base = raw_build["base"]
        if base.get("source") not in sources:
            raise CatalogError(f"{bw}.base.source: unknown source id {base.get('source')!r}")
        base_digest = _digest(base.get("digest"), f"{bw}.base.digest")
        build = ImageBuild(
            repository=str(raw_build["repository"]),
            tag=str(raw_build["tag"]),
            dockerfile=str(raw_build["dockerfile"]),
            base=f"{base['ref']}:{base['tag']}" + (f"@{base_digest}" if base_digest else ""),
            pins={k: str(raw_build[k]) for k in ("efa_installer", "aws_ofi_nccl") if k in raw_build},
            sources=_fabric_sources(raw_build, bw, sources),
        )
    missing = [k for k in ("repository", "tag", "torch", "nccl", "user") if not img.get(k)]
    if missing:
        raise CatalogError(f"{iw}: missing {', '.join(missing)}")
    return FabricImage(
        repository=str(img["repository"]),
        tag=str(img["tag"]),
        digest=_digest(img.get("digest"), f"{iw}.digest"),
        torch=str(img["torch"]),
        nccl=str(img["nccl"]),
        user=str(img["user"]),
        sources=_fabric_sources(img, iw, sources),
        build=build,
        cuda=str(img.get("cuda") or ""),
        tested_on=str(img.get("tested_on") or ""),
    )


GPU_RUNTIMES = ("cuda", "rocm")


def parse_runtime_images(doc: Mapping[str, Any]) -> dict[str, FabricImage]:
    """``runtime_images``: per GPU runtime, the image a pod runs when ``--image`` names none and
    the fabric's (or the NGC default, CUDA) cannot serve that runtime."""
    sources = _sources(doc)
    out: dict[str, FabricImage] = {}
    for runtime, img in (doc.get("runtime_images") or {}).items():
        where = f"runtime_images.{runtime}"
        if runtime not in GPU_RUNTIMES:
            raise CatalogError(f"{where}: unknown GPU runtime (allowed: {', '.join(GPU_RUNTIMES)})")
        out[str(runtime)] = _fabric_image(img, where, sources)
    return out


@functools.cache
def load_runtime_images(path: Path | None = None) -> dict[str, FabricImage]:
    with open(path or CATALOG_PATH, encoding="utf-8") as fh:
        return parse_runtime_images(yaml.safe_load(fh))


def parse_fabric_facts(doc: Mapping[str, Any]) -> tuple[dict[str, StartupCheck], dict[str, FabricImage]]:
    sources = _sources(doc)
    checks: dict[str, StartupCheck] = {}
    images: dict[str, FabricImage] = {}
    for fname, f in doc["fabrics"].items():
        where = f"fabrics.{fname}"
        if fname not in FABRICS:
            raise CatalogError(f"{where}: unknown fabric (allowed: {', '.join(FABRICS)})")
        sc = f.get("startup_check")
        if not isinstance(sc, Mapping):
            raise CatalogError(f"{where}.startup_check: missing")
        if sc.get("devices") not in DEVICE_KINDS:
            raise CatalogError(
                f"{where}.startup_check.devices: {sc.get('devices')!r} (allowed: {', '.join(DEVICE_KINDS)})"
            )
        if sc["devices"] == "netdev" and not sc.get("nics_env"):
            raise CatalogError(f"{where}.startup_check.nics_env: required when devices is netdev")
        checks[fname] = StartupCheck(
            fabric=fname,
            plugin=str(f["collectives_plugin"]),
            plugin_dirs=tuple(str(d) for d in sc.get("plugin_dirs") or ()),
            devices=sc["devices"],
            nics_env=sc.get("nics_env"),
            rxdm_socket=sc.get("rxdm_socket"),
            rxdm_wait_s=float(sc.get("rxdm_wait_s", 0)),
            fabric_env={str(k): str(v) for k, v in (f.get("env") or {}).items()},
            sources=_fabric_sources(sc, f"{where}.startup_check", sources),
        )
        img = f.get("image")
        if isinstance(img, Mapping):
            images[fname] = _fabric_image(img, f"{where}.image", sources)
    return checks, images


@functools.cache
def load_fabric_facts(path: Path | None = None) -> tuple[dict[str, StartupCheck], dict[str, FabricImage]]:
    """Per fabric, the start-up check's facts and (where the catalog names one) its image."""
    with open(path or CATALOG_PATH, encoding="utf-8") as fh:
        return parse_fabric_facts(yaml.safe_load(fh))
