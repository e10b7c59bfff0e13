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
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from gpu_cluster.components.catalog import CATALOG_PATH, CatalogError, ImageFact

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
class Sidecar:
    """The receive-datapath daemon beside the workload (a native sidecar: it starts first and
    does not keep the Job from completing)."""

    name: str
    image: ImageFact
    """The catalog's rxdm image of the fabric."""
    command: tuple[str, ...]
    mounts: Mapping[str, str]
    """Volume name -> mount path in the sidecar."""
    env: Mapping[str, str]
    capabilities: tuple[Capability, ...]
    devices: tuple[str, ...]
    """Device nodes for the ``devices.gke.io/container.<name>`` annotation (NRI device injector)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FoundDir:
    """A directory the job finds on its node (or in its image) when it starts, where the layout
    differs by OS or installer version (``lib64`` or ``lib``): the first of ``dirs`` holding
    ``marker`` goes first on ``LD_LIBRARY_PATH``; none stops the job naming what it looked for."""

    what: str
    dirs: tuple[str, ...]
    marker: str
    """Shell globs of the file that decides a directory, ``|``-separated alternatives."""
    exports: Mapping[str, str] = field(default_factory=dict)
    """Variable -> a file name in the found directory, exported only where that file is there."""
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectivesPart:
    """What one collectives library (``nccl``, ``rccl``: the instance's ``software.collectives``)
    adds on a fabric for one scheduler: the same InfiniBand wants another environment for NCCL on
    ND H100 v5 than for RCCL on ND MI300X v5, and another on AKS than on the HPC VM image."""

    env: Mapping[str, str] = field(default_factory=dict)
    library_path: tuple[str, ...] = ()
    source: str = ""


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
    collectives: Mapping[str, CollectivesPart] = field(default_factory=dict)
    """Per collectives library, what it adds (``fabrics.<f>.pod.collectives``)."""
    found_at_start: tuple[FoundDir, ...] = ()
    installer_paths: tuple[str, ...] = ()
    """Host paths the fabric's node installer leaves (``fabrics.<f>.installer.provides``; a trailing
    ``/``: a directory that must not be empty): the pod waits for those it mounts before it starts."""
    ib_hca_link_layer: str | None = None
    """``NCCL_IB_HCA`` found at start: exactly the HCAs whose ports report this link layer
    (``fabrics.<f>.pod.ib_hca``); None: left to NCCL."""

    def for_collectives(self, name: str | None) -> PodWiring:
        """This wiring with the part for ``name`` folded in (its env on top, its libraries first)."""
        part = self.collectives.get(name or "")
        if part is None:
            return self
        return replace(self, env={**self.env, **part.env}, library_path=(*part.library_path, *self.library_path))

    def node_waits(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(container paths to wait for, volumes they are on): every path the node's installer
        leaves under a host directory the workload container mounts, at its path in the container
        (a trailing ``/``: a directory that must not be empty)."""
        paths: list[str] = []
        volumes: list[str] = []
        for v in self.volumes:
            mount = self.mounts.get(v.name)
            if not v.host_path or mount is None:
                continue
            base = v.host_path.rstrip("/")
            for p in self.installer_paths:
                if p == base or p.startswith(base + "/"):
                    paths.append(mount.rstrip("/") + p[len(base) :])
                    if v.name not in volumes:
                        volumes.append(v.name)
        return tuple(paths), tuple(volumes)

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
class Discover:
    """What a Slurm job finds on its node when it starts, instead of names fixed in the script."""

    socket_ifname_driver: str | None = None
    """NCCL_SOCKET_IFNAME: the interfaces bound to this kernel driver (``gve``: the gVNICs)."""
    plugin_package: str | None = None
    """The package whose files hold the plugin's environment script (``dpkg -L``)."""
    plugin_root: str | None = None
    """Where the plugin is when the package is not installed; library_path and env_script are under it."""
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmWiring:
    env: Mapping[str, str] = field(default_factory=dict)
    library_path: tuple[str, ...] = ()
    env_script: str | None = None
    discover: Discover | None = None
    source: str = ""
    collectives: Mapping[str, CollectivesPart] = field(default_factory=dict)
    """Per collectives library, what it adds (``fabrics.<f>.slurm.collectives``)."""
    found_at_start: tuple[FoundDir, ...] = ()
    ib_hca_link_layer: str | None = None
    """``NCCL_IB_HCA`` found at start, as :attr:`PodWiring.ib_hca_link_layer` (``fabrics.<f>.slurm.ib_hca``)."""

    def for_collectives(self, name: str | None) -> SlurmWiring:
        """This wiring with the part for ``name`` folded in (its env on top, its libraries first)."""
        part = self.collectives.get(name or "")
        if part is None:
            return self
        return replace(self, env={**self.env, **part.env}, library_path=(*part.library_path, *self.library_path))


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


COLLECTIVES = ("nccl", "rccl")


def _collectives(raw: Any, where: str, sources: set[str]) -> dict[str, CollectivesPart]:
    out: dict[str, CollectivesPart] = {}
    for name, part in (raw or {}).items():
        at = f"{where}.collectives.{name}"
        if name not in COLLECTIVES:
            raise CatalogError(f"{at}: unknown collectives library (allowed: {', '.join(COLLECTIVES)})")
        if not isinstance(part, Mapping) or part.get("source") not in sources:
            raise CatalogError(f"{at}.source: unknown source id {(part or {}).get('source')!r}")
        out[str(name)] = CollectivesPart(
            env=_strs(part.get("env")),
            library_path=tuple(str(d) for d in part.get("library_path") or ()),
            source=str(part["source"]),
        )
    return out


def _found(raw: Any, where: str, sources: set[str]) -> tuple[FoundDir, ...]:
    out = []
    for i, f in enumerate(raw or []):
        at = f"{where}.found_at_start[{i}]"
        if not isinstance(f, Mapping) or not f.get("dirs") or not f.get("marker") or not f.get("what"):
            raise CatalogError(f"{at}: {f!r} (allowed: {{what, dirs: [..], marker, exports?, source}})")
        if f.get("source") not in sources:
            raise CatalogError(f"{at}.source: unknown source id {f.get('source')!r}")
        out.append(
            FoundDir(
                what=str(f["what"]),
                dirs=tuple(str(d) for d in f["dirs"]),
                marker=str(f["marker"]),
                exports=_strs(f.get("exports")),
                source=str(f["source"]),
            )
        )
    return tuple(out)


LINK_LAYERS = ("InfiniBand", "Ethernet")


def _ib_hca(raw: Any, where: str, sources: set[str]) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or raw.get("link_layer") not in LINK_LAYERS:
        raise CatalogError(f"{where}: {raw!r} (allowed: {{link_layer: {' or '.join(LINK_LAYERS)}, source}})")
    if raw.get("source") not in sources:
        raise CatalogError(f"{where}.source: unknown source id {raw.get('source')!r}")
    return str(raw["link_layer"])


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
                image=ImageFact(
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
            collectives=_collectives(pod_raw.get("collectives"), f"{where}.pod", sources),
            found_at_start=_found(pod_raw.get("found_at_start"), f"{where}.pod", sources),
            installer_paths=tuple(
                str(p) for p in ((f.get("installer") or {}).get("provides") or {}).get("paths") or ()
            ),
            ib_hca_link_layer=_ib_hca(pod_raw.get("ib_hca"), f"{where}.pod.ib_hca", sources),
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
            discover=Discover(**slurm_raw["discover"]) if slurm_raw.get("discover") else None,
            source=str(slurm_raw.get("source", "")),
            collectives=_collectives(slurm_raw.get("collectives"), f"{where}.slurm", sources),
            found_at_start=_found(slurm_raw.get("found_at_start"), f"{where}.slurm", sources),
            ib_hca_link_layer=_ib_hca(slurm_raw.get("ib_hca"), f"{where}.slurm.ib_hca", sources),
        )
        found = slurm.discover
        if found and found.plugin_root:
            off = [
                p
                for p in (*slurm.library_path, slurm.env_script or "")
                if p and not p.startswith(found.plugin_root + "/")
            ]
            if off:
                raise CatalogError(
                    f"{where}.slurm: {', '.join(off)} not under discover.plugin_root {found.plugin_root}"
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


def discover_lines(d: Discover, env_script: str | None) -> list[str]:
    """Bash that finds the plugin's root (``$gpuc_plugin_root``) on this node: ``$GPUC_PLUGIN_ROOT``
    when the user sets it, else from the package's files, else ``plugin_root``; it must hold the
    environment script. A missing one stops the job naming what was looked for."""
    import shlex

    q = shlex.quote
    root = d.plugin_root or ""
    rel = env_script[len(root) :] if env_script and root and env_script.startswith(root + "/") else ""
    looked = ["\\$GPUC_PLUGIN_ROOT"]
    lines = ['gpuc_plugin_root="${GPUC_PLUGIN_ROOT:-}"']
    if d.plugin_package and rel:
        looked.append(f"the files of package {d.plugin_package} (dpkg -L)")
        lines += [
            'if [ -z "$gpuc_plugin_root" ] && command -v dpkg >/dev/null; then',
            f"  gpuc_hit=$(dpkg -L {q(d.plugin_package)} 2>/dev/null | grep -m1 -F -e {q(rel)}) || true",
            f'  case "$gpuc_hit" in *{q(rel)}) gpuc_plugin_root=${{gpuc_hit%{q(rel)}}} ;; esac',
            "fi",
        ]
    if root:
        looked.append(root)
        lines.append(f'if [ -z "$gpuc_plugin_root" ] && [ -e {q(root + rel)} ]; then gpuc_plugin_root={q(root)}; fi')
    what = f" (each with {rel.lstrip('/')})" if rel else ""
    lines += [
        f'if [ -z "$gpuc_plugin_root" ] || [ ! -r "$gpuc_plugin_root"{q(rel)} ]; then',
        f'  echo "fabric plugin not found on $(hostname): looked for {", ".join(looked)}{what}" >&2',
        "  exit 1",
        "fi",
    ]
    return lines


def nic_lines(d: Discover) -> list[str]:
    """Bash that sets NCCL_SOCKET_IFNAME to this node's interfaces bound to ``socket_ifname_driver``;
    none stops the job naming the driver and where it looked."""
    import shlex

    q = shlex.quote
    drv = str(d.socket_ifname_driver)
    return [
        'gpuc_nics=""',
        "for gpuc_dev in /sys/class/net/*; do",
        f'  if [ "$(basename "$(readlink -f "$gpuc_dev/device/driver" 2>/dev/null)")" = {q(drv)} ]; then',
        '    gpuc_nics="${gpuc_nics:+$gpuc_nics,}${gpuc_dev##*/}"',
        "  fi",
        "done",
        'if [ -z "$gpuc_nics" ]; then',
        f'  echo "no network interface bound to the {drv} driver on $(hostname): looked in /sys/class/net/*/device/driver" >&2',
        "  exit 1",
        "fi",
        "export NCCL_SOCKET_IFNAME=$gpuc_nics",
        'echo "fabric on $(hostname): NCCL_SOCKET_IFNAME=$NCCL_SOCKET_IFNAME${gpuc_plugin_root:+, plugin in $gpuc_plugin_root}"',
    ]


def found_lines(found: tuple[FoundDir, ...]) -> list[str]:
    """Bash that finds each directory (the first of its candidates holding its marker), adds it
    to ``$gpuc_found_libs`` and exports what it names; a directory with no candidate stops the job
    with one line naming what it looked for, and where."""
    import shlex

    q = shlex.quote
    lines = ['gpuc_found_libs=""']
    for f in found:
        globs = [m for m in f.marker.split("|") if m]
        looked = f"{' or '.join(globs)} in {', '.join(f.dirs)}"
        lines += [
            'gpuc_dir=""',
            f"for gpuc_cand in {' '.join(q(d) for d in f.dirs)}; do",
            # Unquoted globs: the marker may name a versioned file (libfabric.so*).
            f"  for gpuc_hit in {' '.join(chr(34) + '$gpuc_cand' + chr(34) + '/' + g for g in globs)}; do",
            '    if [ -e "$gpuc_hit" ]; then gpuc_dir=$gpuc_cand; break 2; fi',
            "  done",
            "done",
            'if [ -z "$gpuc_dir" ]; then',
            f'  echo {q(f"{f.what} not found on ")}"$(hostname)"{q(f": looked for {looked}")} >&2',
            "  exit 1",
            "fi",
            'gpuc_found_libs="${gpuc_found_libs:+$gpuc_found_libs:}$gpuc_dir"',
            *[
                f'if [ -e "$gpuc_dir"/{q(name)} ]; then export {var}="$gpuc_dir"/{q(name)}; fi'
                for var, name in f.exports.items()
            ],
        ]
    lines.append(f'echo "found on $(hostname): {"; ".join(f.what for f in found)} in $gpuc_found_libs"')
    return lines


IB_CLASS = "/sys/class/infiniband"


def ib_hca_lines(link_layer: str, root: str = IB_CLASS) -> list[str]:
    """Bash that sets NCCL_IB_HCA to exactly (``=``) the HCAs of this node whose ports report
    ``link_layer`` (sysfs: /sys/class/infiniband/<dev>/ports/<n>/link_layer), unless the job was
    given one: on an ND VM the accelerated-networking VF is an mlx5 device too, with an Ethernet
    port, which NCCL would otherwise try (the AKS reference's RDMA test keeps InfiniBand ones only).
    None stops the job naming where it looked."""
    import shlex

    q = shlex.quote
    return [
        'if [ -z "${NCCL_IB_HCA:-}" ]; then',
        '  gpuc_hcas=""',
        f"  for gpuc_hca in {q(root)}/*; do",
        '    for gpuc_port in "$gpuc_hca"/ports/*/link_layer; do',
        f'      if [ "$(cat "$gpuc_port" 2>/dev/null)" = {q(link_layer)} ]; then',
        '        gpuc_hcas="${gpuc_hcas:+$gpuc_hcas,}${gpuc_hca##*/}"; break',
        "      fi",
        "    done",
        "  done",
        '  if [ -z "$gpuc_hcas" ]; then',
        f'    echo "no {link_layer} HCA on $(hostname): no {root}/*/ports/*/link_layer reads {link_layer}" >&2',
        "    exit 1",
        "  fi",
        '  export NCCL_IB_HCA="=$gpuc_hcas"',
        "fi",
        'echo "fabric on $(hostname): NCCL_IB_HCA=$NCCL_IB_HCA"',
    ]


def shell_lines(
    *,
    library_path: tuple[str, ...],
    env_script: str | None,
    reexport: Mapping[str, str],
    discover: Discover | None = None,
    found: tuple[FoundDir, ...] = (),
    ib_hca: str | None = None,
) -> list[str]:
    """Bash that puts the fabric's libraries first and sources the plugin's environment script.
    The variables the launcher set are exported again after the script, so the catalog's and
    the launcher's values (NCCL_DEBUG, NCCL_DEBUG_FILE) win over the script's defaults. With
    ``discover``, the plugin's root and the NIC names are found on the node when the job starts."""
    import shlex

    q = shlex.quote
    lines: list[str] = []
    root = discover.plugin_root if discover else None

    def at(path: str) -> str:
        # A path under the discovered root, as bash: "$gpuc_plugin_root"/rest.
        return f'"$gpuc_plugin_root"{q(path[len(root) :])}' if root and path.startswith(root + "/") else q(path)

    if discover is not None and root:
        lines += discover_lines(discover, env_script)
    if found:
        lines += found_lines(found)
    if library_path or found:
        dirs = ":".join([*(['"$gpuc_found_libs"'] if found else []), *(at(d) for d in library_path)])
        lines.append(f'export LD_LIBRARY_PATH={dirs}"${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"')
    if env_script:
        lines += [
            f"if [ ! -r {at(env_script)} ]; then",
            f'  echo "fabric environment script "{at(env_script)}" is missing: is the plugin installed on this node?" >&2'
            if at(env_script) != q(env_script)
            else f"  echo {q(f'fabric environment script {env_script} is missing: is the plugin installed on this node?')} >&2",
            "  exit 1",
            "fi",
            # set_nccl_env.sh is the plugin's; it is not written for set -u.
            f"set +u; source {at(env_script)}; set -u",
            *[f"export {k}={q(v)}" for k, v in reexport.items()],
        ]
    if discover is not None and discover.socket_ifname_driver and "NCCL_SOCKET_IFNAME" not in reexport:
        # After the plugin's script, as cluster-toolkit's run-nccl-tests.sh sets it (ct-a3ultra-slurm);
        # a NCCL_SOCKET_IFNAME the job was given (--env) wins.
        lines += nic_lines(discover)
    if ib_hca is not None and "NCCL_IB_HCA" not in reexport:
        lines += ib_hca_lines(ib_hca)
    return lines
