"""The code a validation job runs, carried by the job itself: nothing is copied by hand.

``submit`` packs the ``gpu_cluster.workloads`` package and the part of ``gpu_cluster.components``
it reads (the catalog and its reader) into one gzip'd tar, under the one name the toolkit installs
(``gpu_cluster/``, with an ``__init__.py`` of its own: the command is not shipped). On Slurm the batch script carries it inline and
unpacks it into the run directory on shared storage, where every node's ``torchrun`` finds it
through ``PYTHONPATH``; on Kubernetes a ConfigMap carries it and each pod unpacks it into its
own scratch directory. The archive is reproducible: the same sources give the same bytes, so
a rerun with unchanged code ships an identical bundle (its digest is printed and recorded).

The job's interpreter needs torch, numpy, PyYAML and matplotlib. Kubernetes images carry them
(the validation image); on Slurm the job uses ``--python`` when given, else a virtualenv on
the shared file system that its first step creates once, from :data:`JOB_REQUIREMENTS`.
"""

from __future__ import annotations

import ast
import base64
import functools
import gzip
import hashlib
import io
import tarfile
import threading
from dataclasses import dataclass
from pathlib import Path

# The folder holding workloads/ and components/: the checkout's top (where they are real folders),
# or the installed gpu_cluster package. Paths below are relative to it; in the archive they sit
# under PREFIX, the package they are imported as.
ROOT = Path(__file__).resolve().parents[2]
PREFIX = "gpu_cluster/"
# The bundle's gpu_cluster/__init__.py: the job imports gpu_cluster.workloads, never the command.
INIT = b'"""gpu-cluster\'s job code, unpacked from the validation bundle."""\n'
# What the job imports: the workloads package, and the modules of components it shares with
# the Pulumi side (the catalog with its data, the outputs contract, the problem type) with whatever of
# components those import in turn (the bandwidth model). Nothing that imports Pulumi.
PACKAGES = ("workloads",)
SHARED = (
    "components/catalog.py",
    "components/contract.py",
    "components/validation_time.py",
    "components/problems.py",
    "components/nccl_topology.py",
)
DATA = ("components/__init__.py", "components/catalog.yaml")
# The job's own dependencies, pinned like requirements.txt (a test holds them equal).
JOB_REQUIREMENTS = ("torch==2.13.0", "numpy==2.4.6", "PyYAML==6.0.4", "matplotlib==3.11.2")


@dataclass(frozen=True, slots=True)
class Bundle:
    data: bytes
    """The gzip'd tar."""

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.data).hexdigest()

    @property
    def base64(self) -> str:
        return base64.b64encode(self.data).decode("ascii")


# CPython 3.11 keeps the AST constructor's recursion count per interpreter, not per thread, and
# does not restore it on every error path (python/cpython gh-106905, fixed in later releases):
# two threads parsing at once can raise "SystemError: AST constructor recursion depth mismatch".
# The offline plan renders jobs on Pulumi's worker threads, so each file is parsed once a process,
# under a lock. The lock cannot cover parses outside this module: Python 3.11's traceback module
# parses a source line to place its carets, so a traceback formatted on another thread (a Pulumi
# worker logging a future's exception) can overlap ours. The mismatch says only that the count moved
# under the parse, not that the source is bad, so such a parse is tried again, a bounded number of
# times; any other error, or the same one every time, is raised.
_PARSE_LOCK = threading.Lock()
_PARSE_TRIES = 5


def _parse(text: str) -> ast.Module:
    for attempt in range(_PARSE_TRIES):
        try:
            with _PARSE_LOCK:
                return ast.parse(text)
        except SystemError as e:
            if "recursion depth mismatch" not in str(e) or attempt == _PARSE_TRIES - 1:
                raise
    raise AssertionError("unreachable")


@functools.lru_cache(maxsize=None)
def _component_imports(path: Path, mtime_ns: int) -> tuple[str, ...]:
    """The ``gpu_cluster.components`` modules the file at ``path`` imports (absolute imports,
    lazy ones inside functions too), as module names: ``from P import n`` names ``P`` and
    ``P.n`` (``n`` may be a submodule, ``from gpu_cluster.components import liveness``)."""
    text = path.read_text(encoding="utf-8")
    tree = _parse(text)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return tuple(n for n in found if n.startswith("gpu_cluster.components."))


def _module_file(root: Path, name: str) -> str | None:
    """``gpu_cluster.components.x`` -> ``components/x.py`` or ``components/x/__init__.py`` where
    that file exists under ``root``; None for a name that is not a module (an imported function)."""
    rel = name.removeprefix("gpu_cluster.").replace(".", "/")
    for candidate in (f"{rel}.py", f"{rel}/__init__.py"):
        if (root / candidate).is_file():
            return candidate
    return None


def shared_modules(root: Path = ROOT) -> tuple[str, ...]:
    """The ``components`` modules the job needs: the shared ones, and every one the job's own
    files (``workloads``) or those modules import, transitively, with each package's
    ``__init__.py``. The job's code must be whole without the toolkit installed on the node:
    an import the bundle misses fails there, not here."""
    todo = list(SHARED)
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            todo += [m for n in _component_imports(path, path.stat().st_mtime_ns) if (m := _module_file(root, n))]
    seen: set[str] = set()
    while todo:
        rel = todo.pop()
        if rel in seen:
            continue
        seen.add(rel)
        parent = Path(rel).parent
        while parent.name and parent != Path("components"):  # a subpackage's __init__.py
            todo.append((parent / "__init__.py").as_posix())
            parent = parent.parent
        path = root / rel
        todo += [m for n in _component_imports(path, path.stat().st_mtime_ns) if (m := _module_file(root, n))]
    return tuple(sorted(seen | set(DATA)))


def _files(root: Path) -> list[Path]:
    files: list[Path] = []
    for pkg in PACKAGES:
        files += [
            p
            for p in sorted((root / pkg).rglob("*"))
            if p.is_file() and p.suffix in (".py", ".yaml") and "__pycache__" not in p.parts
        ]
    files += [root / m for m in shared_modules(root)]
    return files


def build(root: Path = ROOT) -> Bundle:
    """Pack the job's code. Fixed mtimes, owners and order: the same sources, the same bytes."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entries = [(PREFIX + "__init__.py", INIT)]
        entries += [(PREFIX + path.relative_to(root).as_posix(), path.read_bytes()) for path in _files(root)]
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    return Bundle(out.getvalue())


def unpack(data: bytes, dest: Path) -> list[str]:
    """Unpack a bundle (the job does this with ``tar``; tests and ``render`` use this)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(dest, filter="data")
        return tar.getnames()
