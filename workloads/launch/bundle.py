"""The code a validation job runs, carried by the job itself: nothing is copied by hand.

``submit`` packs the ``workloads`` package and the part of ``components`` it reads (the
catalog and its reader) into one gzip'd tar. On Slurm the batch script carries it inline and
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

ROOT = Path(__file__).resolve().parents[2]
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
# under a lock.
_PARSE_LOCK = threading.Lock()


@functools.lru_cache(maxsize=None)
def _component_imports(path: Path, mtime_ns: int) -> tuple[str, ...]:
    """The ``components`` modules the file at ``path`` imports (absolute imports), as paths."""
    text = path.read_text(encoding="utf-8")
    with _PARSE_LOCK:
        tree = ast.parse(text)
    found: list[str] = []
    for node in ast.walk(tree):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module]
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
            else []
        )
        found += [n.replace(".", "/") + ".py" for n in names if n.startswith("gpu_cluster.components.")]
    return tuple(found)


def shared_modules(root: Path = ROOT) -> tuple[str, ...]:
    """The shared modules and the ``components`` modules they import, transitively."""
    todo, seen = list(SHARED), set()
    while todo:
        rel = todo.pop()
        if rel in seen:
            continue
        seen.add(rel)
        path = root / rel
        todo += _component_imports(path, path.stat().st_mtime_ns)
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
        for path in _files(root):
            data = path.read_bytes()
            info = tarfile.TarInfo(path.relative_to(root).as_posix())
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
