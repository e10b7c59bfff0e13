"""What a job needs to reach its fabric, per fabric and per scheduler: the catalog's
``fabrics.<f>.pod`` and ``fabrics.<f>.slurm`` blocks, typed.

One description serves every launch: the validation job and any user job the launcher
renders, as a JobSet pod or as a Slurm batch script. A pod gets the GKE multi-network
annotations (which pod interface is which Network object), the host volumes and their
mounts, the receive-datapath daemon as a native sidecar (TCPX, TCPXO) with the devices the
NRI injector hands it, the capabilities added back after dropping all (each with its
reason), extra environment, the library directories put first on ``LD_LIBRARY_PATH`` and
the plugin's own environment script. A Slurm job gets environment, library directories and
the script. Every value names its source in the catalog.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from components.catalog import CATALOG_PATH, CatalogError

# Kubernetes capability names (without CAP_), as the container runtime takes them.
_CAPABILITY = frozenset(
    {
        "AUDIT_CONTROL",
        "AUDIT_READ",
        "AUDIT_WRITE",
        "BLOCK_SUSPEND",
        "BPF",
        "CHECKPOINT_RESTORE",
        "CHOWN",
        "DAC_OVERRIDE",
        "DAC_READ_SEARCH",
        "FOWNER",
        "FSETID",
        "IPC_LOCK",
        "IPC_OWNER",
        "KILL",
        "LEASE",
        "LINUX_IMMUTABLE",
        "MAC_ADMIN",
        "MAC_OVERRIDE",
        "MKNOD",
        "NET_ADMIN",
        "NET_BIND_SERVICE",
        "NET_BROADCAST",
        "NET_RAW",
        "PERFMON",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYSLOG",
        "SYS_ADMIN",
        "SYS_BOOT",
        "SYS_CHROOT",
        "SYS_MODULE",
        "SYS_NICE",
        "SYS_PACCT",
        "SYS_PTRACE",
        "SYS_RAWIO",
        "SYS_RESOURCE",
        "SYS_TIME",
        "SYS_TTY_CONFIG",
        "WAKE_ALARM",
    }
)
# Never added back, whatever a catalog entry says: each gives the container the node.
_FORBIDDEN = frozenset({"SYS_ADMIN", "SYS_MODULE", "SYS_PTRACE", "SYS_RAWIO", "NET_RAW"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Capability:
    add: str
    """Capability added back after ``drop: [ALL]``."""
    reason: str
    """Why this fabric needs it, and where that is read."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Volume:
    name: str
    host_path: str | None = None
    """A node directory (the installer's plugin, sysfs); None for a scratch ``emptyDir``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Image:
    image: str
    tag: str
    digest: str | None
    source: str

    @property
    def ref(self) -> str:
        """``repo:tag@digest`` where the digest is known (the tag kept for people), else ``repo:tag``."""
        return f"{self.image}:{self.tag}" + (f"@{self.digest}" if self.digest else "")


@dataclass(frozen=True, slots=True, kw_only=True)
class Sidecar:
    """The receive-datapath daemon beside the workload (a native sidecar: it starts first and
    does not keep the Job from completing)."""

    name: str
    image: Image
    command: tuple[str, ...]
    mounts: Mapping[str, str]
    """Volume name -> mount path in the sidecar."""
    env: Mapping[str, str]
    capabilities: tuple[Capability, ...]
    devices: tuple[str, ...]
    """Device nodes for the ``devices.gke.io/container.<name>`` annotation (NRI device injector)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PodWiring:
    default_interface: str | None = None
    interfaces: Mapping[str, str] = field(default_factory=dict)
    """Pod interface -> GKE Network object name, besides ``default`` on the default interface."""
    volumes: tuple[Volume, ...] = ()
    mounts: Mapping[str, str] = field(default_factory=dict)
    """Volume name -> mount path in the workload container."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Variables for pods only (the fabric's common ones are ``software.fabric_env``)."""
    library_path: tuple[str, ...] = ()
    env_script: str | None = None
    capabilities: tuple[Capability, ...] = ()
    run_as_root: str | None = None
    """Why the workload runs as uid 0 whatever the image's USER (``runAsUser: 0``); None: the image's user."""
    sidecar: Sidecar | None = None
    source: str = ""

    def annotations(self) -> dict[str, str]:
        """The pod's annotations, in the form GKE's examples write them."""
        out: dict[str, str] = {}
        if self.default_interface is not None:
            out["networking.gke.io/default-interface"] = self.default_interface
            entries = [{"interfaceName": self.default_interface, "network": "default"}]
            entries += [{"interfaceName": i, "network": n} for i, n in self.interfaces.items()]
            out["networking.gke.io/interfaces"] = json.dumps(entries)
        if self.sidecar is not None and self.sidecar.devices:
            out[f"devices.gke.io/container.{self.sidecar.name}"] = "".join(
                f"- path: {d}\n" for d in self.sidecar.devices
            )
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmWiring:
    env: Mapping[str, str] = field(default_factory=dict)
    library_path: tuple[str, ...] = ()
    env_script: str | None = None
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class FabricWiring:
    fabric: str
    pod: PodWiring
    slurm: SlurmWiring


NONE = FabricWiring(fabric="none", pod=PodWiring(), slurm=SlurmWiring())


def _caps(raw: Any, where: str) -> tuple[Capability, ...]:
    out = []
    for i, c in enumerate(raw or []):
        name, reason = c.get("add"), c.get("reason")
        if name not in _CAPABILITY or name in _FORBIDDEN:
            raise CatalogError(
                f"{where}.capabilities[{i}].add: {name!r} (allowed: a capability other than "
                f"{', '.join(sorted(_FORBIDDEN))})"
            )
        if not reason:
            raise CatalogError(f"{where}.capabilities[{i}].reason: missing (say why the fabric needs {name})")
        out.append(Capability(add=str(name), reason=str(reason)))
    return tuple(out)


def _root_reason(raw: Any, where: str) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or not raw.get("reason"):
        raise CatalogError(f"{where}: {raw!r} (allowed: {{reason: why the workload must be uid 0}})")
    return str(raw["reason"])


def _strs(raw: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (raw or {}).items()}


def parse(doc: Mapping[str, Any]) -> dict[str, FabricWiring]:
    """Every fabric's wiring from a catalog document; a bad entry names its path."""
    sources = set(doc.get("sources") or {})
    out: dict[str, FabricWiring] = {}
    for fname, f in (doc.get("fabrics") or {}).items():
        where = f"fabrics.{fname}"
        pod_raw, slurm_raw = f.get("pod") or {}, f.get("slurm") or {}
        for block, raw in (("pod", pod_raw), ("slurm", slurm_raw)):
            if raw and raw.get("source") not in sources:
                raise CatalogError(f"{where}.{block}.source: unknown source id {raw.get('source')!r}")
        volumes = tuple(
            Volume(name=str(n), host_path=v.get("host_path")) for n, v in (pod_raw.get("volumes") or {}).items()
        )
        names = {v.name for v in volumes}
        sidecar = None
        if pod_raw.get("sidecar"):
            sc, rx = pod_raw["sidecar"], f.get("rxdm")
            if not rx or rx.get("source") not in sources:
                raise CatalogError(f"{where}.rxdm: missing or without a known source (the sidecar's image)")
            sidecar = Sidecar(
                name=str(sc["name"]),
                image=Image(
                    image=str(rx["image"]), tag=str(rx["tag"]), digest=rx.get("digest"), source=str(rx["source"])
                ),
                command=tuple(str(c) for c in sc["command"]),
                mounts=_strs(sc.get("mounts")),
                env=_strs(sc.get("env")),
                capabilities=_caps(sc.get("capabilities"), f"{where}.pod.sidecar"),
                devices=tuple(str(d) for d in sc.get("devices") or ()),
            )
        pod = PodWiring(
            default_interface=(pod_raw.get("interfaces") or {}).get("default"),
            interfaces=_strs((pod_raw.get("interfaces") or {}).get("attach")),
            volumes=volumes,
            mounts=_strs(pod_raw.get("mounts")),
            env=_strs(pod_raw.get("env")),
            library_path=tuple(str(d) for d in pod_raw.get("library_path") or ()),
            env_script=pod_raw.get("env_script"),
            capabilities=_caps(pod_raw.get("capabilities"), f"{where}.pod"),
            run_as_root=_root_reason(pod_raw.get("run_as_root"), f"{where}.pod.run_as_root"),
            sidecar=sidecar,
            source=str(pod_raw.get("source", "")),
        )
        for owner, mounts in (("pod.mounts", pod.mounts), ("pod.sidecar.mounts", sidecar.mounts if sidecar else {})):
            for vol in mounts:
                if vol not in names:
                    raise CatalogError(
                        f"{where}.{owner}[{vol!r}]: no such volume (allowed: {', '.join(sorted(names))})"
                    )
        slurm = SlurmWiring(
            env=_strs(slurm_raw.get("env")),
            library_path=tuple(str(d) for d in slurm_raw.get("library_path") or ()),
            env_script=slurm_raw.get("env_script"),
            source=str(slurm_raw.get("source", "")),
        )
        out[str(fname)] = FabricWiring(fabric=str(fname), pod=pod, slurm=slurm)
    return out


@functools.cache
def _all() -> dict[str, FabricWiring]:
    with open(CATALOG_PATH, encoding="utf-8") as fh:
        return parse(yaml.safe_load(fh))


def wiring(fabric: str | None) -> FabricWiring:
    """The catalog's wiring for a fabric (``None``: a CPU test cluster, nothing to wire)."""
    if fabric is None:
        return NONE
    try:
        return _all()[fabric]
    except KeyError:
        raise CatalogError(f"fabric {fabric!r} is not in the catalog (allowed: {', '.join(sorted(_all()))})") from None


def shell_lines(*, library_path: tuple[str, ...], env_script: str | None, reexport: Mapping[str, str]) -> list[str]:
    """Bash that puts the fabric's libraries first and sources the plugin's environment script.
    The variables the launcher set are exported again after the script, so the catalog's and
    the launcher's values (NCCL_DEBUG, NCCL_DEBUG_FILE) win over the script's defaults."""
    import shlex

    q = shlex.quote
    lines: list[str] = []
    if library_path:
        dirs = ":".join(library_path)
        lines.append(f'export LD_LIBRARY_PATH={q(dirs)}"${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"')
    if env_script:
        lines += [
            f"if [ ! -r {q(env_script)} ]; then",
            f"  echo {q(f'fabric environment script {env_script} is missing: is the plugin installed on this node?')} >&2",
            "  exit 1",
            "fi",
            # set_nccl_env.sh is the plugin's; it is not written for set -u.
            f"set +u; source {q(env_script)}; set -u",
            *[f"export {k}={q(v)}" for k, v in reexport.items()],
        ]
    return lines
