"""What stands in for what cannot run here, and says so: the node (its interpreters, the fabric's
net plugin, Slurm's ``srun`` and ``scontrol`` for one node) and the image (its interpreter).
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from gpu_cluster.components.catalog import load_catalog, load_fabric_facts
from gpu_cluster.components.contract import ClusterOutputs
from gpu_cluster.workloads.health.fabric import plugin_names
from gpu_cluster.workloads.launch import validation as vjob
from gpu_cluster.workloads.validate.rehearsal.job import CouldNotRehearse, Declared, Interpreter


# Where the image's interpreter and the Slurm shims are put inside the rehearsed root.
STAND_IN_BIN = "/opt/gpuc-rehearsal/bin"
# Node images whose python3 is older than the job needs, by cloud and scheduler: AL2023, the OS of
# the PCS sample AMI, keeps /usr/bin/python3 at 3.9 for its life and ships python3.12 as a package
# (AL2023 user guide, "Python in AL2023", read 2026-12-01), which the PCS user data installs
# (components/aws/orchestration_pcs.py). Other node images: this machine's interpreters.
NODE_PYTHONS: dict[tuple[str, str], dict[str, str]] = {("aws", "slurm"): {"python3": "3.9", "python3.12": "3.12"}}


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
    from gpu_cluster.workloads.launch import fabric as fabric_wiring

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
