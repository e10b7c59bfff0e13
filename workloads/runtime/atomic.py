"""Publishing files on shared storage so a reader never sees a half-written one.

The recipe is the POSIX one: write under a temporary name in the *same* directory (a rename
is atomic only within one file system), ``fsync`` the file, ``rename`` it over the final
name, then ``fsync`` the directory so the rename itself survives a crash. Lustre, NFS and
local file systems all honour it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def temp_path_for(final: Path, pid: int | None = None) -> Path:
    """Hidden temporary name next to ``final`` that keeps its extension.

    ``out/clip.mp4`` -> ``out/.clip.tmp-<pid>.mp4``: tools such as ffmpeg choose the output
    format from the extension, and the leading dot keeps the file out of ``*.mp4`` globs.
    """
    pid = os.getpid() if pid is None else pid
    return final.with_name(f".{final.stem}.tmp-{pid}{final.suffix}")


def stale_temps_for(final: Path) -> list[Path]:
    """Temporary files that any earlier process left for ``final``."""
    return sorted(final.parent.glob(f".{_glob_escape(final.stem)}.tmp-*{_glob_escape(final.suffix)}"))


def _glob_escape(s: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in s)


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    # Not every file system lets a directory be fsynced; the rename is still atomic there.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def publish(tmp: Path, final: Path) -> None:
    """Make the finished file ``tmp`` appear as ``final`` in one step."""
    fsync_file(tmp)
    os.replace(tmp, final)
    fsync_dir(final.parent)


def publish_dir(tmp: Path, final: Path, marker: str, data: bytes) -> None:
    """Make the finished directory ``tmp`` appear as ``final``, ``marker`` written last.

    A reader takes a directory as complete only once it holds ``marker`` (a checkpoint's
    ``COMPLETE``), so the marker is published inside ``tmp`` before the rename. A ``final``
    already there (a step written again) is removed first: a directory cannot be renamed over
    a non-empty one, so for that moment neither is there and a reader falls back to an older
    complete directory.
    """
    write_bytes_atomic(tmp / marker, data)
    fsync_dir(tmp)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    fsync_dir(final.parent)


def write_bytes_atomic(final: Path, data: bytes) -> None:
    tmp = temp_path_for(final)
    with open(tmp, "wb") as f:
        f.write(data)
    publish(tmp, final)
