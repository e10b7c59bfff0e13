"""A lease per item on the shared file system: whoever holds it does the item; a dead holder's
lease expires and another worker takes the item over.

Files, in ``<state-dir>/leases/``: ``<key>.<gen>`` for generation ``gen`` of item ``key``'s lease
(the newest generation is the one that counts) and ``<key>.failed`` once the item has failed in
this fleet. A claim creates the next generation with ``O_CREAT | O_EXCL``, which one creator
wins on a local file system, Lustre and NFSv3+; a takeover creates generation ``gen + 1`` only
after generation ``gen`` has expired, so of several workers racing for a dead lease one wins.

A lease is alive while its holder renews it: a heartbeat thread touches every held lease's
mtime every ``ttl / 4``. It has expired when its mtime is older than ``ttl``, measured against
the file system's own clock (the mtime of a file this worker has just touched), so clocks that
differ between nodes do not matter; or, at once, when its holder is a process on this very host
that no longer exists (a rerun after a crash does not wait for the ttl).

What this guarantees: while a holder lives and its heartbeats land, nobody else starts its
item. A holder that is alive but stalled past the ttl (a frozen node that comes back) may
finish the item after another worker took it over: work can happen twice, which is why
publishing refuses to replace an output that exists (:mod:`gpu_cluster.workloads.tasks.outputs`), so the
output still appears once, whole.

A key may name a subfolder (``blocks-<list>/b17``, the block leases of
:mod:`gpu_cluster.workloads.tasks.fleet`): the same rules hold there; the caller creates the folder.

Test hook: ``GPUC_LEASE_HOST`` replaces the host name recorded in this process's leases, so a
test on one machine can make a worker look remote (its death then shows only by expiry).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

LEASE_DIR = "leases"


@dataclass(kw_only=True, frozen=True, slots=True)
class Holder:
    """Who holds a lease; written into the lease file."""

    host: str
    """Host name of the worker (``GPUC_LEASE_HOST`` overrides it, for tests)."""
    pid: int
    """Process id of the worker on that host."""
    rank: int
    """The worker's rank in its job."""
    fleet: str
    """The fleet (torchrun run id, or ``--fleet-id``) the worker belongs to."""


def this_holder(rank: int, fleet: str) -> Holder:
    return Holder(
        host=os.environ.get("GPUC_LEASE_HOST") or socket.gethostname(), pid=os.getpid(), rank=rank, fleet=fleet
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class Leases:
    """This worker's view of the lease directory; renews what it holds in the background."""

    def __init__(self, state_dir: Path, ttl_s: float, me: Holder) -> None:
        self.dir = state_dir / LEASE_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ttl_s = ttl_s
        self.me = me
        self._clock = self.dir / f".clock-{me.host}-{me.pid}"
        self._held: dict[str, Path] = {}
        self._previous: dict[str, list[int]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name="lease-heartbeat", daemon=True)
        self._beat.start()

    # --- the file system's clock and the liveness of others' leases

    def fs_now(self) -> float:
        """The file system's idea of now: the mtime of a file this worker has just touched."""
        self._clock.touch()
        return self._clock.stat().st_mtime

    def expired(self, path: Path, now: float) -> bool:
        try:
            st = path.stat()
        except FileNotFoundError:
            return True  # released while we looked
        try:
            info = json.loads(path.read_text() or "{}")
        except (OSError, ValueError):
            info = {}  # being written: judge by its age alone
        if (
            info.get("host") == self.me.host
            and isinstance(info.get("pid"), int)
            and info["pid"] != self.me.pid
            and not _pid_alive(info["pid"])
        ):
            return True
        return now - st.st_mtime > self.ttl_s

    def _generations(self, key: str) -> int:
        g = 0
        while (self.dir / f"{key}.{g}").exists():
            g += 1
        return g

    # --- claiming, renewing, releasing

    def claim(self, key: str, now: float | None = None, take_over: bool = True) -> Path | None:
        """Take ``key``'s lease, or ``None`` when a live lease holds it or another worker won.
        ``now`` (the file system's clock) is read only when an older lease must be judged;
        ``take_over=False`` takes only a lease nobody holds (``None`` at once for any other)."""
        g = self._generations(key)
        if g and (
            not take_over or not self.expired(self.dir / f"{key}.{g - 1}", self.fs_now() if now is None else now)
        ):
            return None
        path = self.dir / f"{key}.{g}"
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return None
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps({**asdict(self.me), "claimed": time.time(), "generation": g}))
        with self._lock:
            self._held[key] = path
        self._previous[key] = [
            p for k in range(g) if isinstance(p := self._read(self.dir / f"{key}.{k}").get("pid"), int)
        ]
        return path

    def previous_pids(self, key: str) -> list[int]:
        """The processes that held ``key`` before this worker took it over (none for a first
        claim): the owners of any temporary file left for the item."""
        return self._previous.get(key, [])

    @staticmethod
    def _read(path: Path) -> dict[str, object]:
        try:
            info = json.loads(path.read_text() or "{}")
        except (OSError, ValueError):
            return {}
        return info if isinstance(info, dict) else {}

    def still_mine(self, key: str) -> bool:
        """No newer generation exists: nobody has taken the item over."""
        with self._lock:
            path = self._held.get(key)
        return path is not None and not (self.dir / f"{key}.{int(path.suffix[1:]) + 1}").exists()

    def release(self, key: str) -> None:
        """Drop the lease (after the item's output or failure is recorded) with its older generations."""
        with self._lock:
            path = self._held.pop(key, None)
        self._previous.pop(key, None)
        if path is None:
            return
        for g in range(int(path.suffix[1:]), -1, -1):
            (self.dir / f"{key}.{g}").unlink(missing_ok=True)

    def sweep(self, key: str, now: float | None = None) -> None:
        """Remove a dead holder's lease on an item that is already settled (its holder died
        between publishing the output and releasing the lease)."""
        g = self._generations(key)
        if g and self.expired(self.dir / f"{key}.{g - 1}", self.fs_now() if now is None else now):
            for k in range(g - 1, -1, -1):
                (self.dir / f"{key}.{k}").unlink(missing_ok=True)

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.ttl_s / 4):
            with self._lock:
                held = list(self._held.values())
            for path in held:
                try:
                    os.utime(path)
                except FileNotFoundError:
                    pass  # released meanwhile

    # --- failures, settled for the rest of this fleet

    def failed_path(self, key: str) -> Path:
        return self.dir / f"{key}.failed"

    def failed_in_this_fleet(self, key: str) -> bool:
        try:
            return bool(json.loads(self.failed_path(key).read_text()).get("fleet") == self.me.fleet)
        except (OSError, ValueError):
            return False

    def mark_failed(self, key: str, record: dict[str, object]) -> None:
        tmp = self.dir / f".{key}.failed.tmp-{self.me.pid}"
        tmp.write_text(json.dumps({**record, "fleet": self.me.fleet}))
        os.replace(tmp, self.failed_path(key))

    def close(self) -> None:
        self._stop.set()
        self._beat.join(timeout=5)
        self._clock.unlink(missing_ok=True)
