"""Where a fleet's outputs go, and how each one is published exactly once and never partially.

A path (shared file system): the work is written under a hidden temporary name in the final
directory that keeps the extension (``.clip.tmp-<pid>.mp4``: ffmpeg picks the format from it),
fsynced, then published with ``link(tmp, final)``, which fails if ``final`` exists: a second
worker that did the same item (after taking over an expired lease) can never replace or
truncate the first one's output, and no final name ever points at a partial file. Where the
file system has no hard links (EPERM, ENOTSUP), ``rename`` stands in: still atomic, but then
last writer wins, with a whole file either way.

A URI, ``s3://bucket/prefix`` or ``gs://bucket/prefix`` (fsspec with s3fs or gcsfs; credentials
from the usual chains: instance profile, IRSA or Pod Identity on AWS, Workload Identity or the
node's service account on GCP; ``AWS_ENDPOINT_URL_S3`` points s3fs at another S3 endpoint): the
work is written to node-local scratch, then uploaded to the final key with a conditional put
(``fs.put_file(..., mode="create")``: S3 ``If-None-Match: *`` on PutObject and on
CompleteMultipartUpload, GCS ``ifGenerationMatch=0``). Why not a temporary key and a copy:
an object store has no rename, and a copy is a second full write; but an object only ever
becomes visible whole (a single PUT, or a multipart upload at its completion; an aborted
upload leaves no object), so the final key never holds a partial object, and the condition
makes the first completed upload the only one: a duplicate gets 412 Precondition Failed
(FileExistsError) and is discarded, so each output is written exactly once.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

from gpu_cluster.workloads.runtime.atomic import fsync_dir, fsync_file, stale_temps_for, temp_path_for

SCHEMES = ("s3", "gs")


def is_uri(raw: str) -> bool:
    return "://" in raw


def uri_problem(raw: str) -> str | None:
    """Why ``raw`` is not an output URI this fleet can write, or None."""
    scheme, _, rest = raw.partition("://")
    if scheme not in SCHEMES:
        return f"{raw!r}: scheme {scheme!r} is not supported (allowed: s3://, gs://, or a path)"
    bucket = rest.split("/", 1)[0]
    if not bucket:
        return f"{raw!r} names no bucket (expected {scheme}://BUCKET/PREFIX)"
    return None


def item_key(final: str) -> str:
    """A file-name-safe key for one output: the lease name and the scratch folder."""
    return hashlib.sha256(final.encode()).hexdigest()[:32]


class Outputs:
    """The outputs' root (a path or a URI) and the publishing rules for it."""

    def __init__(self, root: str, scratch_dir: Path | None = None) -> None:
        self.root = root.rstrip("/")
        self.remote = is_uri(root)
        self.scratch = (scratch_dir or Path(tempfile.gettempdir())) / "gpuc-shard-tasks"
        self._fs: Any = None

    @property
    def fs(self) -> Any:
        if self._fs is None:
            # Imported on first use: a fleet writing to a file system never needs fsspec.
            import fsspec  # type: ignore[import-untyped]

            self._fs, _ = fsspec.core.url_to_fs(self.root)
        return self._fs

    def reachable_problem(self) -> str | None:
        """Why the bucket cannot be written (checked with the flags), or None."""
        if not self.remote:
            return None
        bucket = self.root.split("://", 1)[1].split("/", 1)[0]
        try:
            ok = self.fs.exists(bucket)
        except Exception as e:  # credentials, endpoint, network: the library's own words
            return f"{self.root}: cannot reach the bucket: {type(e).__name__}: {e}"
        return None if ok else f"{self.root}: bucket {bucket!r} does not exist or is not visible with these credentials"

    def final(self, rel: Path) -> str:
        return f"{self.root}/{rel.as_posix()}" if self.remote else str(Path(self.root) / rel)

    def exists(self, final: str) -> bool:
        if not self.remote:
            return os.path.exists(final)
        self.fs.invalidate_cache(final)
        return bool(self.fs.exists(final))

    def work_path(self, final: str, stale_pids: list[int] | None = None) -> Path:
        """Where the work for ``final`` is written before it is published; stale ones removed:
        those of the processes ``stale_pids`` (the dead or expired holders whose lease on the item
        was taken over: one unlink each), or, when the caller cannot know them (``None``, the
        static schedule), every temporary for ``final`` found by listing its folder (which, in a
        flat folder of ``n`` outputs, reads ``n`` names for each item)."""
        if self.remote:
            place = self.scratch / item_key(final) / final.rsplit("/", 1)[-1]
        else:
            place = Path(final)
        place.parent.mkdir(parents=True, exist_ok=True)
        if stale_pids is None:
            for stale in stale_temps_for(place):
                stale.unlink(missing_ok=True)
        else:
            for pid in stale_pids:
                if pid != os.getpid():
                    temp_path_for(place, pid).unlink(missing_ok=True)
        return temp_path_for(place)

    def publish(self, tmp: Path, final: str) -> bool:
        """Make ``tmp`` the output ``final``; False if ``final`` existed (``tmp`` is discarded)."""
        try:
            if self.remote:
                try:
                    self.fs.put_file(str(tmp), final, mode="create")
                except FileExistsError:
                    return False
                return True
            fsync_file(tmp)
            # The link and the unlink of the temporary name go together: torchrun's SIGTERM to a
            # surviving rank cannot land between them and leave a temporary beside its output.
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
            try:
                try:
                    os.link(tmp, final)
                except FileExistsError:
                    return False
                except OSError as e:
                    if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                        raise
                    os.replace(tmp, final)  # no hard links here: rename, atomic but last writer wins
                tmp.unlink(missing_ok=True)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            fsync_dir(Path(final).parent)
            return True
        finally:
            tmp.unlink(missing_ok=True)
            if self.remote:
                shutil.rmtree(tmp.parent, ignore_errors=True)

    def leftover_keys(self) -> list[str]:
        """The item keys with a scratch folder on this node (remote outputs only; scratch is node-local):
        a worker that publishes removes its folder, so what is here was left by one that was killed."""
        if not self.remote or not self.scratch.is_dir():
            return []
        return sorted(p.name for p in self.scratch.iterdir() if p.is_dir())

    def drop_scratch(self, key: str) -> None:
        shutil.rmtree(self.scratch / key, ignore_errors=True)

    def discard(self, tmp: Path) -> None:
        tmp.unlink(missing_ok=True)
        if self.remote:
            shutil.rmtree(tmp.parent, ignore_errors=True)
