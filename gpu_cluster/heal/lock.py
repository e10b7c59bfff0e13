"""One healer per cluster (I9): a lock the cluster itself holds, beside the journal's ``flock``
(which only keeps two heals out of one run folder).

- Kubernetes (EKS, GKE, AKS): a ``coordination.k8s.io/v1`` Lease, ``kube-system/gpu-cluster-heal``
  (Kubernetes API reference, "Lease", kubernetes.io/docs/reference/kubernetes-api/cluster-resources/lease-v1/):
  ``spec.holderIdentity`` names this heal (host, pid, run folder), ``acquireTime`` when it took the
  lease, ``renewTime`` when it last renewed it, ``leaseDurationSeconds`` "a duration that candidates
  for a lease need to wait to force acquire it ... measured against the time of last observed
  renewTime", ``leaseTransitions`` counts changes of holder. Every write is a create (POST, 409
  AlreadyExists when another got there first) or a replace (PUT) carrying the ``resourceVersion``
  that was read, so two candidates that both saw a free or expired lease cannot both win: the
  second PUT is answered 409 Conflict ("API Concepts", resource versions and optimistic
  concurrency, kubernetes.io/docs/reference/using-api/api-concepts/). Released as client-go's
  leader election releases: the holder cleared (k8s.io/client-go tools/leaderelection,
  ``release``).
- Slurm (PCS, Cluster Director): a held batch job named ``gpu-cluster-heal-lock``. ``sbatch
  --hold`` submits a job "in a held state (priority of zero)" (sbatch(1), slurm.schedmd.com/sbatch.html),
  so it never runs and holds no node; its ``--comment`` carries the holder and when it last renewed
  (``scontrol update jobid=N Comment=...``, scontrol(1)); ``squeue --name --states=PENDING
  --format=%i|%k`` lists the candidates (squeue(1): %k is the comment). slurmctld numbers jobs one
  after another (slurm.conf(5), FirstJobId: "incremented by 1 for each subsequent job"), so every
  candidate submits its own job and the live candidate with the lowest job id holds the lock;
  the others cancel theirs and refuse. It lives in the scheduler every healer of the cluster goes
  through, needs no licence or reservation of a node, and is seen by ``squeue``.

A holder renews every third of its duration while heal runs; a holder that stopped renewing for
longer than its duration (killed, frozen, its machine gone) is stale, and the next heal takes
over with a message. Times are compared with the candidate's own clock against the renew time the
holder wrote with its clock: a skew between the two machines shortens or lengthens the wait by
that much.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

LEASE_NAME = "gpu-cluster-heal"
LEASE_NAMESPACE = "kube-system"
SLURM_JOB = "gpu-cluster-heal-lock"
DURATION_S = 60
"""How long a holder that stopped renewing keeps the lock: four times client-go's default
(LeaseDuration 15 s) as heal renews from a thread beside long blocking calls; a killed heal
blocks the next one for at most this long."""


class LockHeld(RuntimeError):
    """Another heal holds the cluster: one line naming it (exit 3)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Holder:
    host: str
    pid: int
    folder: str
    since: float = 0.0
    renewed: float = 0.0
    duration: float = DURATION_S

    def identity(self) -> str:
        return f"host={self.host} pid={self.pid} folder={self.folder}"

    @classmethod
    def parse(cls, identity: str, **kw: Any) -> Holder:
        m = re.match(r"host=(\S*) pid=(\d+) folder=(.*)$", identity or "")
        if m is None:
            return cls(host="?", pid=0, folder=identity or "?", **kw)
        return cls(host=m.group(1), pid=int(m.group(2)), folder=m.group(3), **kw)

    def expired(self, now: float) -> bool:
        return now > self.renewed + self.duration

    def describe(self, now: float) -> str:
        return (
            f"host {self.host}, pid {self.pid}, folder {self.folder}, since {_iso(self.since)} "
            f"(renewed {max(now - self.renewed, 0):.0f} s ago, stale after {self.duration:.0f} s without renewal)"
        )


def now() -> float:
    """The clock a lock reads unless given one (tests replace it, never wall-clock waits)."""
    return time.time()


def me(folder: Path) -> Holder:
    return Holder(host=socket.gethostname(), pid=os.getpid(), folder=str(folder.resolve()))


class ClusterLock(Protocol):
    where: str
    duration: int

    def acquire(self) -> str:
        """Take the lock; '' or a line to print (a stale holder taken over). Raises LockHeld."""
        ...

    def renew(self) -> str:
        """'' while still ours; why not, once another holds it."""
        ...

    def release(self) -> None: ...


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro(t: float) -> str:
    """A MicroTime: RFC 3339 with microseconds (Kubernetes API reference, MicroTime)."""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _epoch(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    if not value:
        return 0.0
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def refusal(lock: ClusterLock, holder: Holder, now: float) -> LockHeld:
    return LockHeld(
        f"another gpu-cluster heal holds this cluster ({lock.where}): {holder.describe(now)}; "
        "let it finish (or stop it), then rerun"
    )


# ---- Kubernetes: a Lease ------------------------------------------------------------------------


class KubeLease:
    def __init__(
        self,
        kubeconfig: str,
        me: Holder,
        *,
        namespace: str = LEASE_NAMESPACE,
        name: str = LEASE_NAME,
        duration_s: int = DURATION_S,
        clock: Callable[[], float] | None = None,
    ) -> None:
        import yaml
        from kubernetes import client, config

        cfg = client.Configuration()
        cfg.retries = 1
        # A client of its own: the renewing thread never shares a connection pool with the heal.
        self._api = config.new_client_from_config_dict(yaml.safe_load(kubeconfig), client_configuration=cfg)
        self.coord = client.CoordinationV1Api(self._api)
        self.me, self.ns, self.name, self.duration, self.clock = me, namespace, name, duration_s, clock or now
        self.where = f"Lease {namespace}/{name}"

    def _read(self) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            got = self.coord.read_namespaced_lease(self.name, self.ns, _request_timeout=(15, 30))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise self._error("reading", exc) from None
        return dict(self._api.sanitize_for_serialization(got))

    def _error(self, action: str, exc: Any) -> Exception:
        from gpu_cluster.heal.adapters import AdapterError

        return AdapterError(f"{action} {self.where}: HTTP {exc.status} {exc.reason}"[:300])

    def _holder(self, doc: dict[str, Any]) -> Holder | None:
        spec = doc.get("spec") or {}
        if not spec.get("holderIdentity"):
            return None
        return Holder.parse(
            str(spec["holderIdentity"]),
            since=_epoch(spec.get("acquireTime")),
            renewed=_epoch(spec.get("renewTime")),
            duration=float(spec.get("leaseDurationSeconds") or DURATION_S),
        )

    def _spec(self, now: float, since: float, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.me.identity(),
            "leaseDurationSeconds": self.duration,
            "acquireTime": _micro(since),
            "renewTime": _micro(now),
            "leaseTransitions": transitions,
        }

    def acquire(self) -> str:
        from kubernetes.client.exceptions import ApiException

        for _ in range(3):  # lost races re-read and decide again
            now = self.clock()
            doc = self._read()
            if doc is None:
                body = {"metadata": {"name": self.name, "namespace": self.ns}, "spec": self._spec(now, now, 0)}
                try:
                    self.coord.create_namespaced_lease(self.ns, body, _request_timeout=(15, 30))
                    return ""
                except ApiException as exc:
                    if exc.status == 409:
                        continue  # AlreadyExists: another candidate created it first
                    raise self._error("creating", exc) from None
            holder = self._holder(doc)
            if holder is not None and holder.identity() != self.me.identity() and not holder.expired(now):
                raise refusal(self, holder, now)
            spec = doc.get("spec") or {}
            ours = holder is not None and holder.identity() == self.me.identity()
            since = holder.since if holder is not None and ours else now
            body = {
                "metadata": {
                    "name": self.name,
                    "namespace": self.ns,
                    "resourceVersion": doc["metadata"]["resourceVersion"],
                },
                "spec": self._spec(
                    now, since, int(spec.get("leaseTransitions") or 0) + (holder is not None and not ours)
                ),
            }
            try:
                self.coord.replace_namespaced_lease(self.name, self.ns, body, _request_timeout=(15, 30))
            except ApiException as exc:
                if exc.status == 409:
                    continue  # Conflict: changed since it was read
                raise self._error("taking", exc) from None
            if holder is not None and not ours:
                return f"heal: took over {self.where} from a stale holder: {holder.describe(now)}"
            return ""
        doc = self._read()
        holder = self._holder(doc or {})
        raise refusal(self, holder or Holder.parse("?"), self.clock())

    def renew(self) -> str:
        from kubernetes.client.exceptions import ApiException

        now = self.clock()
        doc = self._read()
        holder = self._holder(doc or {})
        if doc is None or holder is None or holder.identity() != self.me.identity():
            return f"{self.where} is no longer ours" + (f": {holder.describe(now)}" if holder else "")
        spec = dict(doc.get("spec") or {})
        spec["renewTime"] = _micro(now)
        body = {
            "metadata": {
                "name": self.name,
                "namespace": self.ns,
                "resourceVersion": doc["metadata"]["resourceVersion"],
            },
            "spec": spec,
        }
        try:
            self.coord.replace_namespaced_lease(self.name, self.ns, body, _request_timeout=(15, 30))
        except ApiException as exc:
            if exc.status == 409:
                return self.renew()  # changed since read: read again, and see whose it is
            raise self._error("renewing", exc) from None
        return ""

    def release(self) -> None:
        from kubernetes.client.exceptions import ApiException

        doc = self._read()
        holder = self._holder(doc or {})
        if doc is None or holder is None or holder.identity() != self.me.identity():
            return  # not ours (taken over): nothing to give back
        spec = dict(doc.get("spec") or {})
        spec.pop("holderIdentity", None)
        body = {
            "metadata": {
                "name": self.name,
                "namespace": self.ns,
                "resourceVersion": doc["metadata"]["resourceVersion"],
            },
            "spec": spec,
        }
        try:
            self.coord.replace_namespaced_lease(self.name, self.ns, body, _request_timeout=(15, 30))
        except ApiException:
            pass  # it lapses after its duration anyway


# ---- Slurm: a held job --------------------------------------------------------------------------


class SlurmLock:
    def __init__(
        self,
        shell: Any,
        me: Holder,
        *,
        partition: str | None = None,
        duration_s: int = DURATION_S,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.shell, self.me, self.partition, self.duration, self.clock = shell, me, partition, duration_s, clock or now
        self.where = f"Slurm job {SLURM_JOB}"
        self.job = ""
        self.since = 0.0

    def _comment(self, since: float, renewed: float) -> str:
        return f"since={since:.0f} renewed={renewed:.0f} ttl={self.duration} {self.me.identity()}"

    def candidates(self) -> list[tuple[int, Holder]]:
        done = self.shell.run(f"squeue --noheader --name={SLURM_JOB} --states=PENDING --format='%i|%k'", check=False)
        out = []
        for line in done.stdout.decode(errors="replace").splitlines():
            job, _, comment = line.strip().partition("|")
            m = re.match(r"since=(\d+) renewed=(\d+) ttl=(\d+) (.*)$", comment)
            if not job.isdigit():
                continue
            if m is None:
                out.append((int(job), Holder.parse(comment)))
                continue
            out.append(
                (
                    int(job),
                    Holder.parse(
                        m.group(4), since=float(m.group(1)), renewed=float(m.group(2)), duration=float(m.group(3))
                    ),
                )
            )
        return sorted(out, key=lambda c: c[0])

    def _cancel(self, job: int | str) -> None:
        self.shell.run(f"scancel {int(job)}", check=False)

    def acquire(self) -> str:
        now = self.clock()
        notes = []
        for job, holder in self.candidates():
            if holder.expired(now):
                self._cancel(job)
                notes.append(f"heal: took over {self.where} from a stale holder (job {job}): {holder.describe(now)}")
            else:
                raise refusal(self, holder, now)
        part = f" --partition={shlex.quote(self.partition)}" if self.partition else ""
        done = self.shell.run(
            f"sbatch --parsable --hold --job-name={SLURM_JOB}{part} --nodes=1 --time=1 "
            f"--comment={shlex.quote(self._comment(now, now))} --output=/dev/null --wrap=true"
        )
        self.job = done.stdout.decode(errors="replace").strip().split(";")[0]
        self.since = now
        first = self.candidates()
        live = [(j, h) for j, h in first if not h.expired(self.clock())]
        if not live or str(live[0][0]) != self.job:
            self._cancel(self.job)
            self.job = ""
            if live:
                raise refusal(self, live[0][1], self.clock())
            raise LockHeld(f"{self.where}: the job heal submitted is not in the queue; rerun")
        return "\n".join(notes)

    def renew(self) -> str:
        if not self.job:
            return "never held"
        if not any(str(j) == self.job for j, _ in self.candidates()):
            return f"{self.where} (job {self.job}) is gone: another heal took it over"
        comment = self._comment(self.since, self.clock())
        self.shell.run(f"scontrol update jobid={int(self.job)} comment={shlex.quote(comment)}")
        return ""

    def release(self) -> None:
        if self.job:
            self._cancel(self.job)
            self.job = ""


# ---- holding it while heal runs -----------------------------------------------------------------


class Renewer:
    """Renews the lock every ``every`` seconds from a thread; :meth:`lost` says why it is no longer
    ours ('' while it is), which the engine checks before each step."""

    def __init__(self, lock: ClusterLock, every: float, clock: Callable[[], float] = time.time) -> None:
        self.lock, self.every, self.clock = lock, every, clock
        self._stop = threading.Event()
        self._why = ""
        self.renewals = 0
        self._thread = threading.Thread(target=self._run, name="heal-lock", daemon=True)

    def _run(self) -> None:
        last_ok = self.clock()
        while not self._stop.wait(self.every):
            try:
                why = self.lock.renew()
            except Exception as exc:  # the API or the login node unreachable for a moment: next period
                if self.clock() - last_ok > self.lock.duration:
                    self._why = f"{self.lock.where} could not be renewed for {self.lock.duration} s: {exc}"[:400]
                    return
                continue
            if why:
                self._why = why
                return
            last_ok = self.clock()
            self.renewals += 1

    def lost(self) -> str:
        return self._why

    def start(self) -> Renewer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


@contextmanager
def hold(lock: ClusterLock, say: Callable[[str], None] = print, every: float | None = None) -> Iterator[Renewer]:
    note = lock.acquire()
    if note:
        say(note)
    renewer = Renewer(lock, every if every is not None else lock.duration / 3).start()
    try:
        yield renewer
    finally:
        renewer.stop()
        lock.release()
