"""Node image: every path the job's environment names is on the node or in the image it runs.

The paths are the library path entries, the NCCL net and tuner plugins, the files NCCL reads
(topology, tuner and guest configs, the LLCM device directory) and the scripts the job sources. A
path passes when a cited manifest lists it: the catalog's manifest of the container image
(``fabrics.<f>.image.paths``, ``runtime_images.<r>.paths``), of the node image
(``node_images``), or of the installer that puts it on the node (``fabrics.<f>.installer.provides``,
reached through the pod's hostPath mount), or when the job finds it on its node at start (the first
of several candidates, ``lib64`` or ``lib``), which the check says.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from gpu_cluster.components.catalog import CATALOG_PATH
from gpu_cluster.components.liveness import facts
from gpu_cluster.components.liveness.model import Check, FoundAtStart, Job, Plan

# Variables that name a path NCCL or the loader opens (NVIDIA/nccl docs, "Environment Variables";
# the TCPXO profile, tcpxo-env-profile). A value that is not absolute is a library name, looked up
# on the library path.
PATH_VARS = (
    "NCCL_TOPO_FILE",
    "NCCL_TUNER_CONFIG_PATH",
    "NCCL_SHIMNET_GUEST_CONFIG_CHECKER_CONFIG_FILE",
    "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY",
)
PLUGIN_VARS = ("NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN")


@dataclass(frozen=True, slots=True)
class Manifest:
    """Paths a cited manifest of the catalog lists."""

    what: str
    paths: tuple[str, ...]
    source: str

    def lists(self, path: str) -> bool:
        """A listed file, a listed directory, or a directory with a listed file below it."""
        path = path.rstrip("/")
        return any(p.rstrip("/") == path or p.startswith(path + "/") for p in self.paths)


@functools.cache
def _catalog() -> Mapping[str, Any]:
    with open(CATALOG_PATH, encoding="utf-8") as fh:
        doc: Mapping[str, Any] = yaml.safe_load(fh)
    return doc


def _source(ids: Any, where: str) -> str:
    """``components/catalog.yaml <where> (source ids)``: the catalog names each id's page."""
    listed = [ids] if isinstance(ids, str) else [str(i) for i in ids or []]
    return f"components/catalog.yaml {where} ({', '.join(listed)})"


def installer_manifest(fabric: str) -> Manifest | None:
    raw = ((_catalog().get("fabrics") or {}).get(fabric) or {}).get("installer") or {}
    provides = raw.get("provides") or {}
    if not provides:
        return None
    return Manifest(
        what=f"the {fabric} NCCL plugin installer ({raw.get('image', '')})",
        paths=tuple(str(p) for p in provides.get("paths") or ()),
        source=_source(provides.get("source"), f"fabrics.{fabric}.installer.provides"),
    )


def image_manifest(image: str) -> Manifest | None:
    """The catalog's manifest of a container image, by its repository."""
    repo = image.split("@", 1)[0].rsplit(":", 1)[0] if ":" in image.split("/")[-1] else image.split("@", 1)[0]
    doc = _catalog()
    candidates = [(f"fabrics.{n}.image", (f.get("image") or {})) for n, f in (doc.get("fabrics") or {}).items()]
    candidates += [(f"runtime_images.{n}", r or {}) for n, r in (doc.get("runtime_images") or {}).items()]
    for where, raw in candidates:
        paths = raw.get("paths") or {}
        if raw.get("repository") == repo and paths:
            return Manifest(
                what=f"image {repo} ({where})",
                paths=tuple(str(p) for p in paths.get("list") or ()),
                source=_source(paths.get("source"), f"{where}.paths"),
            )
    return None


def node_manifest(plan: Plan) -> Manifest | None:
    for name, raw in (_catalog().get("node_images") or {}).items():
        match = raw.get("match") or {}
        if all(str(plan.outputs.get(k)) == str(v) for k, v in match.items()):
            return Manifest(
                what=f"node image {name}",
                paths=tuple(str(p) for p in raw.get("paths") or ()),
                source=_source(raw.get("sources"), f"node_images.{name}"),
            )
    return None


def node_image_name(plan: Plan) -> str | None:
    """The catalog's name of the plan's node image (``node_images``), None where none matches."""
    for name, raw in (_catalog().get("node_images") or {}).items():
        match = raw.get("match") or {}
        if all(str(plan.outputs.get(k)) == str(v) for k, v in match.items()):
            return str(name)
    return None


def installer_planned(plan: Plan, fabric: str) -> bool:
    """A DaemonSet of the plan runs the fabric's installer image (the catalog's repository)."""
    repo = str((((_catalog().get("fabrics") or {}).get(fabric) or {}).get("installer") or {}).get("image", ""))
    if not repo:
        return False
    for r in plan.of("kubernetes:apps/v1:DaemonSet"):
        pod = (((r.inputs.get("spec") or {}).get("template") or {}).get("spec")) or {}
        if any(
            str(c.get("image", "")).startswith(repo)
            for c in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]
        ):
            return True
    return False


@dataclass(frozen=True, slots=True)
class Where:
    """What a path in the container is on the node."""

    host: str | None
    """The host path through a hostPath mount; None: the container's own file system."""
    volume: str = ""
    mount: str = ""
    kind: str = ""
    """hostPath | emptyDir | configMap | persistentVolumeClaim | image."""
    config_map: str = ""
    """configMap: the ConfigMap's name."""
    key: str = ""
    """configMap: the key the path is (the file name under the mount; ``items`` map keys to paths)."""


def resolve(pod: Mapping[str, Any], container: Mapping[str, Any], path: str) -> Where:
    """Where ``path`` (in ``container``) comes from: a volume mount (longest prefix) or the image."""
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    best: tuple[str, Mapping[str, Any]] | None = None
    for m in container.get("volumeMounts") or []:
        mp = str(m.get("mountPath", "")).rstrip("/")
        if (path == mp or path.startswith(mp + "/")) and (best is None or len(mp) > len(best[0])):
            best = (mp, m)
    if best is None:
        return Where(host=None, kind="image")
    mp, m = best
    vol = volumes.get(m.get("name")) or {}
    if "hostPath" in vol:
        rest = path[len(mp) :]
        return Where(
            host=str(vol["hostPath"].get("path", "")).rstrip("/") + rest,
            volume=str(m.get("name")),
            mount=mp,
            kind="hostPath",
        )
    kind = next((k for k in ("emptyDir", "configMap", "persistentVolumeClaim", "csi") if k in vol), "volume")
    if kind == "configMap":
        cm = vol.get("configMap") or {}
        rel = path[len(mp) :].lstrip("/")
        # A ConfigMap volume holds one file per key, named by the key unless items maps it elsewhere.
        key = next((str(i.get("key")) for i in cm.get("items") or [] if str(i.get("path")) == rel), rel)
        return Where(
            host=None, volume=str(m.get("name")), mount=mp, kind=kind, config_map=str(cm.get("name", "")), key=key
        )
    return Where(host=None, volume=str(m.get("name")), mount=mp, kind=kind)


CONFIGMAP = "kubernetes:core/v1:ConfigMap"


def _config_map(plan: Plan, job: Job, where: Where) -> tuple[bool, str, str]:
    """A file on a ConfigMap volume: the job's own (made with it by submit, named after it), or one
    the plan creates in the job's namespace with that key; a pod whose ConfigMap is missing never
    starts (k8s-configmap-volume)."""
    src = facts.cite("k8s-configmap-volume")
    if where.config_map == job.name:
        return True, f"on the job's own ConfigMap {where.config_map}, created with it", src
    ns = next((str((m.get("metadata") or {}).get("namespace") or "default") for m in job.jobsets()), "default")
    for r in plan.of(CONFIGMAP):
        meta = r.inputs.get("metadata") or {}
        if str(meta.get("name")) == where.config_map and str(meta.get("namespace") or "default") == ns:
            if where.key in (r.inputs.get("data") or {}):
                return (
                    True,
                    f"key {where.key} of ConfigMap {ns}/{where.config_map}, which the plan creates ({r.name})",
                    src,
                )
            return False, f"ConfigMap {ns}/{where.config_map} ({r.name}) has no key {where.key}", src
    return False, f"no ConfigMap {ns}/{where.config_map} in the plan: the pod would wait for it and never start", src


def named_paths(job: Job) -> list[tuple[str, str]]:
    """(what names it, path or library name) for every path the job's environment names."""
    out: list[tuple[str, str]] = [("LD_LIBRARY_PATH entry", p) for p in job.library_path]
    out += [("sourced script", p) for p in job.sourced]
    for var in PATH_VARS:
        if job.env.get(var):
            out.append((var, job.env[var].rstrip("/")))
    net = job.env.get("NCCL_NET_PLUGIN")
    if net:
        # NCCL dlopens libnccl-net-<name>.so (nccl-net-plugin); a path or a .so is taken as it is.
        out.append(("NCCL_NET_PLUGIN", net if net.startswith("/") or net.endswith(".so") else f"libnccl-net-{net}.so"))
    tuner = job.env.get("NCCL_TUNER_PLUGIN")
    if tuner:
        out.append(
            (
                "NCCL_TUNER_PLUGIN",
                tuner if tuner.startswith("/") or tuner.endswith(".so") else f"libnccl-tuner-{tuner}.so",
            )
        )
    return out


def path_fix(job: Job, pod: Mapping[str, Any], container: Mapping[str, Any], path: str) -> str:
    """What to change for a path that is not there, by what the path is in the pod."""
    if job.scheduler == "slurm":
        return (
            f"install {path} on the nodes (the node image or the stack's user data), or use a path the node image lists"
        )
    where = resolve(pod, container, path)
    if where.kind == "configMap":
        return (
            f"create ConfigMap {where.config_map} with key {where.key} in the job's namespace before the job "
            "(or mount one that has it)"
        )
    if where.kind == "hostPath":
        return (
            f"plan what puts {where.host} on the GPU nodes (the fabric's installer DaemonSet), or mount the "
            "host directory it is in"
        )
    return "use an image whose cited manifest lists it, or find it at start (lib64 or lib)"


def _found(job: Job, path: str) -> FoundAtStart | None:
    """The job's found-at-start item that ``path`` is (or is under), or whose marker names it."""
    for f in job.found_at_start:
        if path.startswith("/"):
            if any(path == c or path.startswith(c.rstrip("/") + "/") for c in f.candidates if c.startswith("/")):
                return f
        elif f.marker and path in f.marker.split("|"):
            return f
    return None


def checks(plan: Plan, job: Job | None) -> list[Check]:
    if job is None:
        return []
    out: list[Check] = []
    fabric = str((plan.outputs.get("fabric") or {}).get("type", ""))
    installer = installer_manifest(fabric)
    node = node_manifest(plan)
    pods = job.pods()
    container: Mapping[str, Any] = {}
    pod: Mapping[str, Any] = {}
    if pods:
        pod = pods[0][1]
        container = (pod.get("containers") or [{}])[0]
    image = image_manifest(job.image) if job.image else None
    obj = f"{'JobSet' if job.scheduler == 'kubernetes' else 'batch script'} {job.name}"
    found_names = [f for f in job.found_at_start]
    lib_dirs = list(job.library_path)
    for what, path in named_paths(job):
        check = f"{what} {path} on the {'node or image' if job.scheduler == 'kubernetes' else 'node'}"
        if not path.startswith("/"):
            # A library name: on one of the library path's directories, or found at start.
            f = _found(job, path)
            if f is not None:
                out.append(_found_check(obj, check, f, node if job.scheduler == "slurm" else image))
                continue
            hit = next(
                (d for d in lib_dirs if _listed(plan, job, pod, container, f"{d}/{path}", installer, image, node)[0]),
                None,
            )
            if hit:
                ok, why, src = _listed(plan, job, pod, container, f"{hit}/{path}", installer, image, node)
                out.append(
                    Check(
                        kind="node-image", object=obj, check=check, holds=True, why=f"{hit}/{path}: {why}", source=src
                    )
                )
            else:
                out.append(
                    Check(
                        kind="node-image",
                        object=obj,
                        check=check,
                        holds=False,
                        why=f"{path} is in no manifest of the library path's directories ({', '.join(lib_dirs) or 'none'}) and the job does not look for it at start",
                        source="components/catalog.yaml",
                        fix="list it in the image's or installer's manifest (with its source), or find it at start",
                    )
                )
            continue
        f = _found(job, path)
        if f is not None:
            out.append(_found_check(obj, check, f, node if job.scheduler == "slurm" else image))
            continue
        ok, why, src = _listed(plan, job, pod, container, path, installer, image, node)
        out.append(
            Check(
                kind="node-image",
                object=obj,
                check=check,
                holds=ok,
                why=why,
                source=src,
                fix="" if ok else path_fix(job, pod, container, path),
            )
        )
    for f in found_names:
        if not any(_found(job, p) is f for _, p in named_paths(job)):
            out.append(_found_check(obj, f"{f.what}", f, node if job.scheduler == "slurm" else image))
    return out


def _found_check(obj: str, check: str, f: FoundAtStart, manifest: Manifest | None = None) -> Check:
    """A path the job finds at start holds only on evidence: a cited manifest of the node image
    (Slurm) or the container image that lists one of the directories searched. A manifest that lists
    none of them contradicts the search (it fails); with no manifest the check holds unverified."""
    how = f"the first of {', '.join(f.candidates)}" + (f" holding {f.marker.replace('|', ' or ')}" if f.marker else "")
    tail = (
        " (left unset where none has it)"
        if f.optional
        else " (the job stops naming what it looked for where none has it)"
    )
    source = "the rendered job's start-up lines (workloads/launch/fabric.py found_lines)"
    if manifest is None:
        return Check(
            kind="node-image",
            object=obj,
            check=check,
            holds=True,
            why=f"found at start: {how}{tail}; unverified: no cited manifest of the image says any of them exists",
            source=source,
            unverified=True,
        )
    listed = [c for c in f.candidates if manifest.lists(c)]
    if listed:
        return Check(
            kind="node-image",
            object=obj,
            check=check,
            holds=True,
            why=f"found at start: {how}{tail}; {manifest.what} has {listed[0]}",
            source=f"{source}; {manifest.source}",
        )
    if f.optional:
        return Check(
            kind="node-image",
            object=obj,
            check=check,
            holds=True,
            why=f"found at start: {how}{tail}; {manifest.what} lists none of them, so it stays unset",
            source=f"{source}; {manifest.source}",
        )
    return Check(
        kind="node-image",
        object=obj,
        check=check,
        holds=False,
        why=f"the job searches {', '.join(f.candidates)}, and {manifest.what} lists none of them "
        f"(it lists {', '.join(manifest.paths[:8])}): the job stops at start on every node",
        source=f"{source}; {manifest.source}",
        fix=f"search where {manifest.what} puts it ({', '.join(manifest.paths[:4])}), or cite a manifest that "
        "lists the directories searched",
    )


def _listed(
    plan: Plan,
    job: Job,
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    path: str,
    installer: Manifest | None,
    image: Manifest | None,
    node: Manifest | None,
) -> tuple[bool, str, str]:
    if job.scheduler == "slurm":
        if node is not None and node.lists(path):
            return True, f"listed for {node.what}", node.source
        return (
            False,
            f"{path} is in no cited manifest of the nodes' image"
            + (f" ({node.what} lists {', '.join(node.paths)})" if node else ""),
            node.source if node else "components/catalog.yaml node_images",
        )
    where = resolve(pod, container, path)
    if where.kind == "hostPath" and where.host:
        host = where.host
        via = f"host {host} (hostPath {where.volume})"
        if installer is not None and installer.lists(host):
            fabric = str((plan.outputs.get("fabric") or {}).get("type", ""))
            if installer_planned(plan, fabric):
                return True, f"{via}: listed for {installer.what}, a DaemonSet of the plan", installer.source
            if plan.deferred.get("installer"):
                return (
                    True,
                    f"{via}: listed for {installer.what}, which this offline plan leaves to `pulumi up` "
                    f"({plan.deferred['installer']})",
                    installer.source,
                )
            return False, f"{via}: listed for {installer.what}, and no DaemonSet of the plan runs it", installer.source
        if plan.orchestrator == "gke" and host in facts.GKE_DRIVER.paths:
            return True, f"{via}: {facts.GKE_DRIVER.by}", facts.GKE_DRIVER.source
        if any(host == p or host.startswith(p + "/") for p in facts.KERNEL_PATHS.paths):
            return True, f"{via}: {facts.KERNEL_PATHS.by}", facts.KERNEL_PATHS.source
        return (
            False,
            f"{via} is in no cited manifest of what the stack installs on the node",
            installer.source if installer else "components/catalog.yaml fabrics.<fabric>.installer.provides",
        )
    if where.kind == "configMap":
        return _config_map(plan, job, where)
    if where.kind != "image":
        return True, f"on the pod's {where.kind} volume {where.volume} (the job's own)", "the rendered job"
    if image is not None and image.lists(path):
        return True, f"listed for {image.what}", image.source
    return (
        False,
        f"{path} is in the image {job.image} and no cited manifest of that image lists it",
        image.source if image else "components/catalog.yaml",
    )
