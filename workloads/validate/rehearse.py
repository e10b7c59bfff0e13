"""``validate rehearse STACK``: run the stack's rendered job on this machine, under what it declares.

    python -m workloads.validate rehearse STACK [--outputs FILE] [--image REF] [--python PATH]
                                                [--image-python PATH] [--ranks 2]

The job is rendered exactly as ``render`` renders it (one node), then its own entry command runs
here in place of the node, in private mount, network, UTS and PID namespaces:

* the root file system is this machine's under a throw-away overlay (the container's or node's
  writable layer), read-only where the pod declares ``readOnlyRootFilesystem``;
* the declared user and groups (``setpriv --reuid --regid``), with only the declared capabilities
  as the bounding set (a non-root user keeps none effective, as under a container runtime), and
  ``no_new_privs`` where ``allowPrivilegeEscalation: false``;
* the declared volumes as directories with the cloud's ownership: a Lustre claim or mount
  root-owned 0755, an emptyDir 0777, the ConfigMap's files read-only, a hostPath from a stand-in
  node that holds the fabric's net plugin where the catalog says the node has it;
* the declared environment (Kubernetes' downward API and the Indexed Job's index answered as the
  kubelet would for pod 0), the pod's host names in ``/etc/hosts``;
* torch on CPU with gloo (``GPUC_FORCE_CPU=1``); the net plugin part of the fabric check runs under
  the job's environment (``GPUC_REHEARSAL_MARKS``, :mod:`workloads.runtime.device`).

What cannot run here stands in, and says so: the image (this machine's tools; its interpreter is
the project's virtualenv, or the one ``--image-python`` names, e.g. one holding the image's own torch; its user is the Dockerfile's ``USER`` where the catalog builds it), the
node's interpreter where it is older (AL2023: ``python3`` is a real CPython 3.9 from pyenv), the
net plugin (a shared object built here exporting ``ncclNetPlugin_v8``), Slurm's ``srun`` and
``scontrol`` for the one node (shims), and the shared virtualenv a first job would make (pip has
no index here). The rehearsal edits the job in two places only: one node, and ``--ranks`` ranks.

It passes when every rank reached its first collective and recorded it inside the run directory
the job made; otherwise it fails quoting the job's own error. Exit codes: 0 pass, 2 fail, 3 could
not rehearse.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable


from components.catalog import load_catalog, load_fabric_facts
from components.contract import ClusterOutputs
from components.stack_locate import STACK_HELP
from workloads.health.fabric import plugin_names
from workloads.launch import validation as vjob
from workloads.runtime.device import REHEARSAL_MARKS_ENV

EXIT_PASS, EXIT_FAIL, EXIT_COULD_NOT = 0, 2, 3
REPO = Path(__file__).resolve().parents[2]
# Where the image's interpreter and the Slurm shims are put inside the rehearsed root.
STAND_IN_BIN = "/opt/gpuc-rehearsal/bin"
# Node images whose python3 is older than the job needs, by cloud and scheduler: AL2023, the OS of
# the PCS sample AMI, keeps /usr/bin/python3 at 3.9 for its life and ships python3.12 as a package
# (AL2023 user guide, "Python in AL2023", read 2026-12-01), which the PCS user data installs
# (components/aws/orchestration_pcs.py). Other node images: this machine's interpreters.
NODE_PYTHONS: dict[tuple[str, str], dict[str, str]] = {("aws", "slurm"): {"python3": "3.9", "python3.12": "3.12"}}
# The Kubernetes default when a container drops nothing: the runtime's default set, which the
# rehearsal does not model (every bundled pod drops ALL).
LUSTRE_MODE, EMPTYDIR_MODE = 0o755, 0o777


class CouldNotRehearse(RuntimeError):
    """Something the rehearsal cannot stand in for; exit 3."""


@dataclass(frozen=True, slots=True)
class Volume:
    target: str
    """Where the job sees it."""
    source: Path
    """The directory that stands in for it on this machine."""
    kind: str
    """lustre, emptydir, configmap, hostpath."""
    read_only: bool = False


@dataclass(kw_only=True, slots=True)
class Declared:
    """What the rendered job declares, read from the JobSet or the batch script."""

    kind: str
    argv: list[str]
    env: dict[str, str]
    uid: int = 0
    gid: int = 0
    groups: tuple[int, ...] = ()
    caps: tuple[str, ...] = ()
    no_new_privs: bool = False
    read_only_root: bool = False
    workdir: str = "/"
    hostname: str = "node-0"
    hosts: tuple[str, ...] = ()
    volumes: list[Volume] = field(default_factory=list)
    nics: tuple[tuple[str, str], ...] = ()
    """Stand-in network interfaces (name, kernel driver) in the job's /sys/class/net."""
    exports: dict[str, str] = field(default_factory=dict)
    """Variables the batch script exports itself (Slurm)."""
    said: list[str] = field(default_factory=list)
    image: str = ""
    """The container's image (Kubernetes); empty on Slurm."""
    interpreter: Interpreter | None = None
    """Kubernetes: the interpreter that stands in for the image's (``--image-python``, e.g. a
    virtualenv with the image's own torch), asked once; None: this project's."""


# ---------------------------------------------------------------------------------------------
# Reading the job.


def _k8s_expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' own expansion of command and args: ``$(VAR)`` of a declared variable, ``$$``
    to ``$`` (Kubernetes docs, "Define a Command and Arguments for a Container")."""
    out = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), text)
    return out.replace("$$", "$")


def _numeric_user(text: str, where: str) -> tuple[int, int]:
    if text == "root":
        return 0, 0
    uid, _, gid = text.partition(":")
    if not uid.isdigit() or (gid and not gid.isdigit()):
        raise CouldNotRehearse(f"{where}: USER {text} is not root or a numeric uid[:gid]")
    return int(uid), int(gid or uid)


def image_user(image: str) -> tuple[int, int] | None:
    """(uid, gid) an image of the catalog runs as: a published one's recorded user, or the last
    ``USER`` of the Dockerfile the catalog builds (root where it has none); None for others."""
    _, images = load_fabric_facts()
    for img in images.values():
        if img.repository in image:
            return _numeric_user(img.user, f"the catalog's image {img.repository}")
        build = img.build
        if build is not None and build.repository in image:
            users = re.findall(r"^USER\s+(\S+)", (REPO / build.dockerfile).read_text(), re.M)
            return _numeric_user(users[-1], build.dockerfile) if users else (0, 0)
    return None


def stack_configmaps(outs: ClusterOutputs) -> dict[str, dict[str, Any]]:
    """The ConfigMaps the stack itself makes for its jobs (not rendered with the job): the size's NCCL
    topology (components/nccl_topology.py), by name."""
    from components import nccl_topology

    topo = nccl_topology.for_instance(outs.instance_type)
    if topo is None:
        return {}
    return {
        nccl_topology.CONFIGMAP: {
            "metadata": {"name": nccl_topology.CONFIGMAP},
            "data": {nccl_topology.KEY: topo.xml()},
        }
    }


def from_jobset(
    jobset: dict[str, Any],
    configmap: dict[str, Any] | None,
    stage: Path,
    from_stack: dict[str, dict[str, Any]] | None = None,
) -> Declared:
    rjob = jobset["spec"]["replicatedJobs"][0]
    pod = rjob["template"]["spec"]["template"]
    spec = pod["spec"]
    (c,) = [x for x in spec["containers"] if x["name"] == spec["containers"][0]["name"]]
    csec, psec = c.get("securityContext") or {}, spec.get("securityContext") or {}
    hostname = f"{jobset['metadata']['name']}-{rjob['name']}-0-0"
    subdomain = (jobset["spec"].get("network") or {}).get("subdomain") or jobset["metadata"]["name"]
    d = Declared(kind="kubernetes", argv=[], env={}, hostname=hostname, hosts=(f"{hostname}.{subdomain}", hostname))
    fields = {
        "metadata.name": hostname,
        "metadata.namespace": jobset["metadata"].get("namespace", "default"),
        "metadata.annotations['batch.kubernetes.io/job-completion-index']": "0",
        "status.podIP": "127.0.0.1",
        "spec.nodeName": "node-0",
    }
    # What the kubelet and the Job controller give every container of pod 0 of an Indexed Job.
    env = {"HOSTNAME": hostname, "JOB_COMPLETION_INDEX": "0"}
    for e in c.get("env") or []:
        if "value" in e:
            env[e["name"]] = _k8s_expand(str(e["value"]), env)
        else:
            path = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if path not in fields:
                raise CouldNotRehearse(
                    f"env {e['name']}: valueFrom {e.get('valueFrom')} (allowed: {', '.join(fields)})"
                )
            env[e["name"]] = fields[str(path)]
    d.env = env
    d.argv = [_k8s_expand(str(a), env) for a in [*(c.get("command") or []), *(c.get("args") or [])]]
    if not d.argv:
        raise CouldNotRehearse("the container declares no command: the image's entry point is not known here")
    d.image = str(c.get("image") or "")
    user = csec.get("runAsUser", psec.get("runAsUser"))
    group = csec.get("runAsGroup", psec.get("runAsGroup"))
    if user is None:
        found = image_user(str(c["image"]))
        if found:
            user, group = found[0], group if group is not None else found[1]
            d.said.append(f"user {user}:{group}: the user the catalog records for {c['image']} (its Dockerfile's USER)")
        else:
            user = 0
            d.said.append(f"user 0: {c['image']} sets none here (published CUDA/NGC images run as root)")
    d.uid, d.gid = int(user), int(group if group is not None else (0 if user == 0 else user))
    d.groups = tuple(
        int(g) for g in [*(psec.get("supplementalGroups") or []), *([psec["fsGroup"]] if "fsGroup" in psec else [])]
    )
    caps = csec.get("capabilities") or {}
    if "ALL" not in [str(x).upper() for x in caps.get("drop") or []]:
        raise CouldNotRehearse(
            "the container keeps the runtime's default capabilities (no drop: [ALL]), which the rehearsal does not model"
        )
    d.caps = tuple(str(x).lower().removeprefix("cap_") for x in caps.get("add") or [])
    d.no_new_privs = csec.get("allowPrivilegeEscalation") is False
    d.read_only_root = bool(csec.get("readOnlyRootFilesystem"))
    d.workdir = str(c.get("workingDir") or "/")
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    for m in c.get("volumeMounts") or []:
        if m.get("subPath") or m.get("subPathExpr"):
            raise CouldNotRehearse(f"volumeMount {m['name']}: subPath is not rehearsed")
        v = volumes[m["name"]]
        ro = bool(m.get("readOnly"))
        if "persistentVolumeClaim" in v:
            src = stage / "lustre" / v["persistentVolumeClaim"]["claimName"]
            d.volumes.append(Volume(m["mountPath"], src, "lustre", ro))
        elif "emptyDir" in v:
            d.volumes.append(Volume(m["mountPath"], stage / "empty" / m["name"], "emptydir", ro))
        elif "configMap" in v:
            src = stage / "configmap" / v["configMap"]["name"]
            cm = configmap if configmap and configmap["metadata"]["name"] == v["configMap"]["name"] else None
            cm = cm or (from_stack or {}).get(v["configMap"]["name"])
            if cm is None:
                raise CouldNotRehearse(f"volume {m['name']}: ConfigMap {v['configMap']['name']} is not rendered")
            src.mkdir(parents=True, exist_ok=True)
            for k, text in (cm.get("data") or {}).items():
                (src / k).write_text(text)
            for k, b64 in (cm.get("binaryData") or {}).items():
                (src / k).write_bytes(base64.b64decode(b64))
            for f in src.iterdir():
                f.chmod(0o644)
            d.volumes.append(Volume(m["mountPath"], src, "configmap", True))
        elif "hostPath" in v:
            d.volumes.append(Volume(m["mountPath"], stage / "node" / v["hostPath"]["path"].lstrip("/"), "hostpath", ro))
        else:
            raise CouldNotRehearse(
                f"volume {m['name']}: {sorted(v)} (allowed: persistentVolumeClaim, emptyDir, configMap, hostPath)"
            )
    return d


def from_sbatch(script: str, outs: ClusterOutputs, run_dir: str, stage: Path) -> Declared:
    """The batch script as slurmd runs it on the first node: bash, in ``--chdir``, with Slurm's
    job variables. The submitting user is not in the script; it runs as root here (see README)."""
    chdir = re.search(r"^#SBATCH --chdir=(\S+)$", script, re.M)
    if chdir is None:
        raise CouldNotRehearse("the batch script has no #SBATCH --chdir")
    path = stage / "job.sbatch"
    path.write_text(script)
    path.chmod(0o755)
    # What `submit` does on the login node (workloads/validate/slurm.py), then slurmd's start in --chdir.
    run = shlex.quote(chdir.group(1))
    argv = ["/bin/bash", "-c", f"mkdir -p {run} && cd {run} && exec /bin/bash /opt/gpuc-rehearsal/job.sbatch"]
    d = Declared(kind="slurm", argv=argv, env={}, workdir="/")
    d.hostname = "node-0"
    d.hosts = ("node-0",)
    d.exports = {
        m.group(1): shlex.split(m.group(2))[0] if m.group(2) else ""
        for m in re.finditer(r"^export ([A-Z_][A-Z0-9_]*)=(\S*)$", script, re.M)
    }
    d.env = {
        "SLURM_JOB_ID": "1",
        "SLURM_JOBID": "1",
        "SLURM_NNODES": "1",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_JOB_NODELIST": "node-0",
        "SLURM_NODELIST": "node-0",
        "SLURM_JOB_NAME": "gpuc-validate",
        "SLURM_SUBMIT_DIR": chdir.group(1),
        "HOME": "/root",
        "USER": "root",
    }
    d.volumes.append(Volume(outs.mount.mount_point, stage / "lustre" / "fs", "lustre"))
    d.volumes.append(Volume("/opt/gpuc-rehearsal/job.sbatch", path, "script", True))
    d.said.append("user 0: the batch script names no user (Slurm runs it as the submitter)")
    return d


# ---------------------------------------------------------------------------------------------
# Standing in for the node and the image.


def _through_mounts(d: Declared, path: str, root: Path) -> Path | None:
    """Where ``path`` (as the job sees it) lives on this machine: in a declared volume, or in the
    rehearsed root's own layer. None for volumes the job owns (Lustre, emptyDir, ConfigMap)."""
    best = max(
        (v for v in d.volumes if path == v.target or path.startswith(v.target.rstrip("/") + "/")),
        key=lambda v: len(v.target),
        default=None,
    )
    if best is None:
        return root / path.lstrip("/")
    if best.kind != "hostpath":
        return None
    return best.source / os.path.relpath(path, best.target)


def build_plugin(stage: Path) -> Path:
    """A shared object with the symbol NCCL looks up (``ncclNetPlugin_v8``): the stand-in for the
    fabric's net plugin, loadable by the fabric check's dlopen."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise CouldNotRehearse("no C compiler (cc) to build the stand-in net plugin")
    src, out = stage / "plugin.c", stage / "libplugin-stand-in.so"
    src.write_text('const char ncclNetPlugin_v8[] = "gpu-cluster rehearsal stand-in: no transport";\n')
    done = subprocess.run([cc, "-shared", "-fPIC", "-o", str(out), str(src)], capture_output=True, text=True)
    if done.returncode != 0:
        raise CouldNotRehearse(f"building the stand-in net plugin failed: {done.stderr.strip()}")
    return out


def _torch_here() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return "not installed"


@dataclass(frozen=True, slots=True)
class Interpreter:
    python: Path
    prefix: Path
    torch: str


def image_interpreter(python: str | None) -> Interpreter:
    """What stands in for the image's python3: ``python`` (its prefix and torch asked of it), or
    this project's own interpreter."""
    if python is None:
        return Interpreter(Path(sys.prefix) / "bin" / "python", Path(sys.prefix).resolve(), _torch_here())
    probe = (
        "import sys\ntry:\n import torch; t = torch.__version__\nexcept Exception as e:\n t = 'not importable'\n"
        "print(sys.prefix); print(t)"
    )
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CouldNotRehearse(f"--image-python {python}: cannot run it ({exc})") from None
    lines = done.stdout.split("\n")
    if done.returncode != 0 or len(lines) < 2:
        raise CouldNotRehearse(f"--image-python {python}: it did not start ({done.stderr.strip()[-200:]})")
    return Interpreter(Path(python).absolute(), Path(lines[0]).resolve(), lines[1].strip())


def stand_in_node(d: Declared, outs: ClusterOutputs, root: Path, stage: Path, ranks: int) -> None:
    """The node's and image's files the job reaches for: the net plugin in each directory the
    catalog says the fabric installs it, the fabric's environment script, the interpreters."""
    from workloads.launch import fabric as fabric_wiring

    it = load_catalog().get(outs.instance_type)
    sc = load_fabric_facts()[0][it.network.fabric]
    wired = fabric_wiring.wiring(it.network.fabric)
    script = wired.slurm.env_script if d.kind == "slurm" else wired.pod.env_script
    if sc.plugin != "none":
        lib = build_plugin(stage)
        names = plugin_names({**d.exports, **d.env})
        for directory in sc.plugin_dirs:
            for name in names:
                target = name if name.startswith("/") else f"{directory}/{name}"
                where = _through_mounts(d, target, root)
                if where is not None:
                    where.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(lib, where)
        d.said.append(f"net plugin {' or '.join(names)}: a stand-in library in {', '.join(sc.plugin_dirs)}")
    looked_for = wired.slurm.found_at_start if d.kind == "slurm" else wired.pod.found_at_start
    for f in looked_for:
        # What the job looks for at start: the first candidate directory gets the marker's file
        # (the layout the catalog's node image has first: lib64), unless the plugin is already there.
        first = f.dirs[0]
        names = [m.replace("*", "") for m in f.marker.split("|") if m]
        where = _through_mounts(d, f"{first}/{names[0]}", root)
        if where is not None and not any(where.parent.joinpath(n).exists() for n in names):
            where.parent.mkdir(parents=True, exist_ok=True)
            where.write_bytes(b"")
            d.said.append(f"{f.what}: an empty stand-in {first}/{names[0]}, where the job looks first")
    if script:
        where = _through_mounts(d, script, root)
        if where is not None:
            where.parent.mkdir(parents=True, exist_ok=True)
            where.write_text("# rehearsal stand-in for the node's fabric environment script (sets nothing)\n")
            d.said.append(f"{script}: an empty stand-in (the node's own sets NCCL's fabric variables)")
    bin_dir = root / STAND_IN_BIN.lstrip("/")
    bin_dir.mkdir(parents=True, exist_ok=True)
    venv_python = Path(sys.prefix) / "bin" / "python"
    if d.kind == "kubernetes":
        interp = d.interpreter or image_interpreter(None)
        for name in ("python3", "python"):
            # A wrapper, not a link: a virtualenv is found from the path it was started by.
            (bin_dir / name).write_text(f'#!/bin/sh\nexec {shlex.quote(str(interp.python))} "$@"\n')
            (bin_dir / name).chmod(0o755)
        whose = "the interpreter given (--image-python)" if d.interpreter else "this project's interpreter"
        recorded = vjob.image_torch(d.image)
        tested = vjob.image_tested_torch(d.image)
        mine = interp.torch.split("+", 1)[0]
        if recorded is not None and mine == recorded.split("+", 1)[0]:
            proof = f"; the image's own torch {recorded} (the catalog's record)"
        elif recorded is not None and tested is not None and mine == tested:
            proof = f"; the release of the line the image's torch {recorded} is a build of (the catalog's record)"
        else:
            note = vjob.image_torch_note(d.image)
            proof = f"; {note}: not proven here" if note else ""
        d.said.append(f"the image's python3: {whose} {interp.python} (torch {interp.torch} on CPU){proof}")
    else:
        node = NODE_PYTHONS.get((outs.cloud, "slurm"))
        if node:
            # The node's own interpreters: hide this machine's, give the image's versions.
            usr_bin = root / "usr" / "bin"
            usr_bin.mkdir(parents=True, exist_ok=True)
            for p in Path("/usr/bin").glob("python3*"):
                os.mknod(usr_bin / p.name, 0o600 | stat.S_IFCHR, os.makedev(0, 0))  # an overlay whiteout
            for name, version in node.items():
                real = _pyenv(version)
                (usr_bin / name).unlink(missing_ok=True)
                (usr_bin / name).symlink_to(real)
                d.said.append(f"node {name}: CPython {version} ({real})")
        _slurm_shims(bin_dir, d.hostname)
        found = wired.slurm.discover
        if found and found.socket_ifname_driver:
            d.nics = ((f"{found.socket_ifname_driver}0", found.socket_ifname_driver),)
            d.said.append(
                f"the node's NICs: /sys/class/net/{d.nics[0][0]} bound to {found.socket_ifname_driver} (no such NIC here)"
            )
        venv = vjob.venv_path(outs)
        where = next(
            (
                v.source / os.path.relpath(venv, v.target)
                for v in d.volumes
                if v.kind == "lustre" and venv.startswith(v.target.rstrip("/") + "/")
            ),
            None,
        )
        if where is None:
            raise CouldNotRehearse(f"the job's shared virtualenv {venv} is on no mount the job declares")
        (where / "bin").mkdir(parents=True, exist_ok=True)
        shim = where / "bin" / "python"
        shim.write_text(f'#!/bin/sh\nexec {shlex.quote(str(venv_python))} "$@"\n')
        shim.chmod(0o755)
        (where / ".complete").touch()
        d.said.append(f"the shared virtualenv {venv}: made already (pip has no index here), runs {venv_python}")
        d.said.append(
            "srun and scontrol: one-node shims (srun runs its command once; scontrol names node-0 at 127.0.0.1)"
        )
    d.env["PATH"] = f"{STAND_IN_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    d.env["GPUC_FORCE_CPU"] = "1"
    d.env["OMP_NUM_THREADS"] = "1"
    d.said.append(f"torch on CPU with gloo (GPUC_FORCE_CPU=1), {ranks} rank(s) on one node")


def _pyenv(version: str) -> Path:
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for v in sorted(root.glob(f"{version}.*"), reverse=True):
        exe = v / "bin" / f"python{version}"
        if exe.is_file():
            return exe
    raise CouldNotRehearse(f"no CPython {version} here to stand in for the node's (looked in {root}/{version}.*)")


def _slurm_shims(bin_dir: Path, host: str) -> None:
    srun = (
        "#!/bin/bash\n# rehearsal: the one node's step, run once (options dropped)\n"
        'while [ $# -gt 0 ] && [[ "$1" == --* ]]; do shift; done\n'
        'SLURM_PROCID=0 SLURM_NODEID=0 SLURM_LOCALID=0 exec "$@"\n'
    )
    scontrol = (
        "#!/bin/bash\n# rehearsal: the one node\n"
        'case "$1 $2" in\n'
        f'  "show hostnames") echo {host} ;;\n'
        f'  "show node") echo "NodeName={host} Arch=x86_64 NodeAddr=127.0.0.1 NodeHostName={host} State=ALLOCATED" ;;\n'
        '  *) echo "rehearsal scontrol: $* (not rehearsed)" >&2 ;;\n'
        "esac\n"
    )
    for name, text in (("srun", srun), ("scontrol", scontrol)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)


# ---------------------------------------------------------------------------------------------
# Running it.


def _bind_keep(keep: Path, at: Path) -> list[str]:
    """Shell lines that show ``keep`` read-only at ``at``. A bind mount carries the folder's own
    mode, and ``mktemp -d`` makes a clone's folder 0700, which a job running as another user
    cannot enter: such a folder gets a 0755 tmpfs of its own at ``at`` with each entry bound in."""
    q = shlex.quote
    if keep.stat().st_mode & 0o005 == 0o005:
        return [
            f"mkdir -p {q(str(at))}",
            f"mount --bind {q(str(keep))} {q(str(at))}",
            f"mount -o remount,bind,ro {q(str(at))}",
        ]
    lines = [f"mkdir -p {q(str(at))}", f"mount -t tmpfs -o mode=0755 tmpfs {q(str(at))}"]
    for entry in sorted(keep.iterdir()):
        dest = at / entry.name
        make = f"mkdir -p {q(str(dest))}" if entry.is_dir() else f"touch {q(str(dest))}"
        lines += [make, f"mount --bind {q(str(entry))} {q(str(dest))}", f"mount -o remount,bind,ro {q(str(dest))}"]
    return lines


def _setup_script(d: Declared, image: Path, layer: Path) -> str:
    """Bash, run as root inside fresh mount, network, UTS and PID namespaces: the overlay root
    (the stand-in image layer over this machine's /), the volumes, then the job under its user,
    groups and capabilities."""
    q = shlex.quote
    root = layer / "root"
    lines = [
        "set -euo pipefail",
        "ip link set lo up",
        f"hostname {q(d.hostname)}",
        # tmpfs under the writable layer: an overlay's upper directory must not be on an overlay.
        f"mount -t tmpfs tmpfs {q(str(layer))}",
        f"mkdir -p {q(str(layer / 'upper'))} {q(str(layer / 'work'))} {q(str(root))}",
        # The image layer too: overlay refuses a lower layer inside another (this one is under /).
        f"cp -a {q(str(image))} {q(str(layer / 'image'))}",
        f"mount -t overlay overlay -o lowerdir={q(str(layer / 'image'))}:/,upperdir={q(str(layer / 'upper'))},"
        f"workdir={q(str(layer / 'work'))} {q(str(root))}",
    ]
    for v in d.volumes:
        target = root / v.target.lstrip("/")
        lines.append(f"mkdir -p {q(str(target))}" if v.kind != "script" else f"touch {q(str(target))}")
        lines.append(f"mount --bind {q(str(v.source))} {q(str(target))}")
        if v.read_only:
            lines.append(f"mount -o remount,bind,ro {q(str(target))}")
    for fs in ("proc", "sys", "dev"):
        lines.append(f"mount --rbind /{fs} {q(str(root / fs))}")
    if d.nics:
        net = root / "sys" / "class" / "net"
        lines.append(f"mount -t tmpfs tmpfs {q(str(net))}")
        for name, driver in d.nics:
            lines += [
                f"mkdir -p {q(str(net / '.drivers' / driver))} {q(str(net / name / 'device'))}",
                f"ln -s {q('/sys/class/net/.drivers/' + driver)} {q(str(net / name / 'device' / 'driver'))}",
            ]
    if not d.read_only_root and not any(v.target == "/tmp" for v in d.volumes):
        # The writable layer's own /tmp, not this machine's; under a read-only root it stays read-only.
        lines.append(f"mount -t tmpfs -o mode=1777 tmpfs {q(str(root / 'tmp'))}")
        # What stands in for the image's interpreter (this project's virtualenv, and the checkout
        # its editable install points at) stays visible when it lives under this machine's /tmp
        # (a CI clone may): read-only, at the same path.
        keeps = {Path(sys.prefix).resolve(), REPO}
        if d.interpreter is not None:
            interp = d.interpreter
            keeps.add(interp.prefix)
            if not interp.python.parent.is_relative_to(interp.prefix):
                keeps.add(interp.python.parent)  # a wrapper script outside its interpreter's prefix
        for keep in sorted(keeps):
            if keep.is_relative_to("/tmp"):
                lines += _bind_keep(keep, root / keep.relative_to("/"))
    if d.read_only_root:
        lines.append(f"mount -o remount,ro {q(str(root))}")
    caps = ",".join(f"+{c}" for c in d.caps)
    priv = [
        "setpriv",
        f"--reuid={d.uid}",
        f"--regid={d.gid}",
        f"--groups={','.join(map(str, d.groups))}" if d.groups else "--clear-groups",
        "--inh-caps=-all",
        f"--bounding-set=-all{',' + caps if caps else ''}",
        *(["--no-new-privs"] if d.no_new_privs else []),
        "--",
        "env",
        "-i",
        f"--chdir={d.workdir}",
        *[f"{k}={v}" for k, v in d.env.items()],
        *d.argv,
    ]
    lines.append(f"exec chroot {q(str(root))} " + " ".join(q(p) for p in priv))
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class Outcome:
    code: int
    lines: list[str]


def rehearse_declared(
    d: Declared, outs: ClusterOutputs, run_dir: str, stage: Path, ranks: int, timeout_s: float
) -> Outcome:
    marks = f"{run_dir.rstrip('/')}/rehearsal"
    d.env[REHEARSAL_MARKS_ENV] = marks
    image = stage / "image"
    for v in d.volumes:
        v.source.mkdir(parents=True, exist_ok=True) if v.kind != "script" else None
        if v.kind == "lustre":
            os.chown(v.source, 0, 0)
            v.source.chmod(LUSTRE_MODE)
        elif v.kind == "emptydir":
            v.source.chmod(EMPTYDIR_MODE)
    stand_in_node(d, outs, image, stage, ranks)
    (image / "etc").mkdir(parents=True, exist_ok=True)
    (image / "etc" / "hosts").write_text("127.0.0.1 localhost\n" + "".join(f"127.0.0.1 {h}\n" for h in d.hosts))
    # The image's interpreter is under /root here (pyenv): the image layer opens it to any user.
    (image / "root").mkdir(exist_ok=True)
    (image / "root").chmod(0o711)
    job = stage / "job.sh"
    job.write_text(_setup_script(d, image, stage / "layer"))
    (stage / "layer").mkdir(exist_ok=True)
    log = stage / "job.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--net",
                "--uts",
                "--pid",
                "--fork",
                "--mount-proc",
                "bash",
                str(job),
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        reached = _wait(proc, lambda: _marks(d, marks), lambda: bool(_marks(d, marks, "failed")), ranks, timeout_s)
    text = log.read_text(errors="replace")
    failed = [json.loads(p.read_text())["failed"] for p in _marks(d, marks, "failed")]
    if failed:
        reached = []
    return _judge(reached, proc.returncode, text, ranks, run_dir, d, failed[0] if failed else None)


def _marks(d: Declared, marks: str, kind: str = "first-collective") -> list[Path]:
    """The rank records (``first-collective`` or ``failed``) on the Lustre stand-in (the run
    directory is under the mount)."""
    for v in d.volumes:
        if v.kind == "lustre" and marks.startswith(v.target.rstrip("/") + "/"):
            return sorted((v.source / os.path.relpath(marks, v.target)).glob(f"{kind}-rank*.json"))
    return []


def _wait(
    proc: subprocess.Popen[bytes],
    marks: Callable[[], list[Path]],
    failed: Callable[[], bool],
    ranks: int,
    timeout_s: float,
) -> list[Path]:
    """Until every rank recorded its first collective or one recorded why it could not (then the
    job is ended there), or the job ended on its own, or ``timeout_s`` passed (a hang: the job is
    ended and fails)."""
    deadline = time.monotonic() + timeout_s
    found: list[Path] = []
    while proc.poll() is None and time.monotonic() < deadline:
        found = marks()
        if len(found) >= ranks or failed():
            break
        time.sleep(0.2)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return found or marks()


_NOISE = re.compile(r"^(\*+|Setting OMP_NUM_THREADS.*|\s*)$")


def _judge(
    reached: list[Path], rc: int | None, log: str, ranks: int, run_dir: str, d: Declared, failed: str | None = None
) -> Outcome:
    said = [f"stand-in: {s}" for s in d.said]
    if len(reached) >= ranks:
        ranks_seen = [json.loads(p.read_text()) for p in reached]
        return Outcome(
            EXIT_PASS,
            [
                *said,
                f"rehearsal passed: {len(reached)} rank(s) reached their first collective as uid "
                f"{ranks_seen[0]['uid']} and wrote {run_dir}",
            ],
        )
    errors = [ln for ln in log.splitlines() if not _NOISE.match(ln)]
    cause = failed or _cause(errors)
    how = f"exit {rc}" if rc is not None and rc >= 0 else "ended by the rehearsal"
    return Outcome(
        EXIT_FAIL,
        [
            *said,
            f"rehearsal failed: the job stopped before its first collective ({how}): {cause}",
            *errors[-15:],
        ],
    )


_CAUSES = re.compile(
    r"(Permission denied|Read-only file system|no interpreter >= |FabricCheckFailed|fabric check on|"
    r"No such file or directory|not found|Error|error:)"
)


def _cause(lines: list[str]) -> str:
    """The job's own first line that says why, quoted."""
    for ln in lines:
        if _CAUSES.search(ln) and "rehearsal scontrol" not in ln and "fabric check failed on a node above" not in ln:
            return ln.strip()
    return lines[-1].strip() if lines else "(the job printed nothing)"


# ---------------------------------------------------------------------------------------------
# The command.


def _render(outs: ClusterOutputs, args: argparse.Namespace, run_id: str) -> tuple[Any, list[str]]:
    from workloads.validate import commands

    said: list[str] = []
    ns = argparse.Namespace(
        python=args.python,
        image=args.image,
        env=[],
        run_arg=["--iters", "1", "--warmup", "0"],
        cpu=False,
        procs_per_node=None,
        time_limit=60,
        rdzv_port=29500,
        no_drain=True,
        shared=False,
        budget=None,
    )
    if outs.scheduler.kind == "kubernetes" and not args.image:
        try:
            vjob.default_image(outs.fabric.type, gpu_runtime=vjob.gpu_runtime_of(outs.instance_type))
        except RuntimeError as exc:
            # Not pulled here either way: render with the catalog's own reference, and say so.
            ref = load_fabric_facts()[1][outs.fabric.type].ref
            said.append(f"image {ref}: not pulled here ({exc})")
            ns.image = ref
    return commands.render_run(outs, ns, run_id), said


def rehearse(outs: ClusterOutputs, args: argparse.Namespace, break_job: Callable[[Any], None] | None = None) -> Outcome:
    """Render ``outs``'s job for one node and rehearse it; ``break_job`` may change the render
    (the tests plant their breaks through it)."""
    if os.geteuid() != 0:
        raise CouldNotRehearse("the rehearsal needs root here (mount, network and PID namespaces, setpriv)")
    for tool in ("unshare", "setpriv", "chroot", "ip"):
        if shutil.which(tool) is None:
            raise CouldNotRehearse(f"{tool} is not installed (util-linux, coreutils, iproute2)")
    one = replace(outs, nodes=1)
    run_id = vjob.new_run_id()
    rendered, said = _render(one, args, run_id)
    if break_job is not None:
        break_job(rendered)
    if args.stage_dir:
        Path(args.stage_dir).mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix="gpuc-rehearse-", dir=args.stage_dir))
    try:
        if rendered.jobset is not None:
            jobset = rendered.jobset
            d = from_jobset(jobset, rendered.configmap, stage, stack_configmaps(outs))
        else:
            d = from_sbatch(rendered.files["validate.sbatch"], one, rendered.run_dir, stage)
        d.said[:0] = said
        from workloads.launch.fabric import wiring

        link_layer = wiring(outs.fabric.type).pod.ib_hca_link_layer if d.kind == "kubernetes" else None
        if link_layer and "NCCL_IB_HCA" not in d.env:
            # This machine has no HCA whose port reads InfiniBand: the job is given the variable its
            # start-up discovery would set, which then skips it (workloads/launch/fabric.py
            # ib_hca_lines; the discovery itself is tested in tests/launch/test_nccl_topology.py).
            d.env["NCCL_IB_HCA"] = "=mlx5_0"
            d.said.append(
                f"stand-in: NCCL_IB_HCA==mlx5_0 (no HCA here whose port reads {link_layer}; discovery skipped)"
            )
        if getattr(args, "image_python", None):
            if d.kind != "kubernetes":
                raise CouldNotRehearse("--image-python stands in for a container image's interpreter (Kubernetes)")
            d.interpreter = image_interpreter(args.image_python)
        d.argv = [_fewer_ranks(a, args.ranks) for a in d.argv]
        if d.kind == "slurm":
            script = stage / "job.sbatch"
            script.write_text(_fewer_ranks(script.read_text(), args.ranks))
        return rehearse_declared(d, one, rendered.run_dir, stage, args.ranks, args.timeout)
    finally:
        if not args.keep:
            subprocess.run(["rm", "-rf", "--one-file-system", str(stage)], check=False)


def _fewer_ranks(text: str, ranks: int) -> str:
    """The rehearsal's one edit of the job's command: ``ranks`` ranks instead of one per GPU."""
    return re.sub(r"--nproc-per-node=\d+", f"--nproc-per-node={ranks}", text)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "rehearse", help="run the stack's rendered job here, under what it declares, to its first collective"
    )
    p.add_argument("stack", help=STACK_HELP)
    p.add_argument("--outputs", type=Path, help="JSON from `pulumi stack output --json --show-secrets`")
    p.add_argument("--image", help="Kubernetes: the image to render (not pulled here)")
    p.add_argument("--python", help="Slurm: the job's interpreter (as for render/submit --python)")
    p.add_argument(
        "--image-python",
        help="Kubernetes: the interpreter that stands in for the image's, e.g. a virtualenv holding the "
        "image's own torch (default: this project's; the report says which torch ran)",
    )
    p.add_argument("--ranks", type=int, choices=(1, 2), default=2, help="ranks on the one node (default 2)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds the job may take to its first collective")
    p.add_argument("--keep", action="store_true", help="keep the stand-in tree and the job's log")
    p.add_argument("--stage-dir", help="where the stand-in tree is made (default: the system's temp dir)")


def run(args: argparse.Namespace, say: Callable[[str], None] = print) -> int:
    from components.contract import OutputsError
    from workloads.launch.common import LaunchSpecError
    from workloads.validate import commands

    try:
        loaded = commands.load(args.stack, args.outputs, allow_plan=True)
        say(f"outputs: {loaded.source}")
        # The whole job, as render writes it, must be able to run on the cluster before one node of
        # it is rehearsed here: a rehearsal that passes says nothing about a pod that stays Pending.
        full, _ = _render(loaded.outputs, args, vjob.new_run_id())
        if not commands.ready_to_run(loaded, full, args.stack, say):
            say(f"not rehearsed: {args.stack} is not ready (liveness does not hold)")
            return EXIT_FAIL
        outcome = rehearse(loaded.outputs, args)
    except (CouldNotRehearse, OutputsError, commands.CommandError, LaunchSpecError) as exc:
        print(f"validate rehearse: could not rehearse {args.stack}: {exc}", file=sys.stderr)
        return EXIT_COULD_NOT
    for line in outcome.lines:
        say(line)
    return outcome.code
