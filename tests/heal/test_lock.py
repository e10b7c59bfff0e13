"""I9, one healer per cluster, on Kubernetes: the coordination.k8s.io/v1 Lease
kube-system/gpu-cluster-heal against the test API server (tests/kubeapi.py, which answers a PUT
whose resourceVersion is stale with 409 Conflict and a second create with 409 AlreadyExists, as the
API server does). A second ``gpu-cluster heal --apply`` from another folder refuses in one line
naming the holder; a holder killed with SIGKILL keeps the cluster until its lease lapses, then the
next heal takes it over and says so; renewing keeps it. No test waits on the wall clock: the locks
read an injected clock, and the renewing thread is waited for by the change it makes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.heal import lock as lockmod
from gpu_cluster.heal.cli import main
from gpu_cluster.heal.lock import KubeLease, LockHeld, Holder, hold
from tests.heal.test_cli import outputs_file
from tests.kubeapi import KubeApiServer

REPO = Path(__file__).resolve().parents[2]
T0 = 1_800_000_000.0


@pytest.fixture
def server() -> Iterator[KubeApiServer]:
    with KubeApiServer() as srv:
        yield srv


def lease(server: KubeApiServer) -> dict[str, Any]:
    st = server.store
    return st.get(st.resource("leases", "coordination.k8s.io"), "kube-system", "gpu-cluster-heal")


def at(t: float) -> Callable[[], float]:
    return lambda: t


def candidate(server: KubeApiServer, folder: str, pid: int, t: float) -> KubeLease:
    return KubeLease(server.kubeconfig(), Holder(host="login-1", pid=pid, folder=folder), clock=at(t))


def wait_for(ok: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    """Wait for a state, never for a time: the timeout only turns a hang into a failure."""
    deadline = time.monotonic() + timeout_s
    while not ok():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_the_lease_names_its_holder_and_a_second_candidate_refuses(server: KubeApiServer) -> None:
    a = candidate(server, "/runs/a", 101, T0)
    assert a.acquire() == ""
    spec = lease(server)["spec"]
    assert spec["holderIdentity"] == "host=login-1 pid=101 folder=/runs/a"
    assert spec["leaseDurationSeconds"] == 60 and spec["leaseTransitions"] == 0
    assert spec["acquireTime"] == spec["renewTime"] == "2027-01-15T08:00:00.000000Z"
    with pytest.raises(LockHeld) as held:
        candidate(server, "/runs/b", 202, T0 + 30).acquire()
    msg = str(held.value)
    assert "Lease kube-system/gpu-cluster-heal" in msg
    assert "host login-1, pid 101, folder /runs/a, since 2027-01-15T08:00:00Z" in msg and "renewed 30 s ago" in msg
    # the same holder asking again (a rerun of the same process) keeps it
    assert a.acquire() == "" and lease(server)["spec"]["leaseTransitions"] == 0


def test_renewing_keeps_it_and_only_an_expired_lease_is_taken_over(server: KubeApiServer) -> None:
    a = candidate(server, "/runs/a", 101, T0)
    a.acquire()
    a.clock = at(T0 + 50)
    assert a.renew() == ""
    assert lease(server)["spec"]["renewTime"] == "2027-01-15T08:00:50.000000Z"
    # past the first renewTime + 60 s, but within the renewed one: still held
    with pytest.raises(LockHeld):
        candidate(server, "/runs/b", 202, T0 + 100).acquire()
    b = candidate(server, "/runs/b", 202, T0 + 111)
    note = b.acquire()
    assert note.startswith(
        "heal: took over Lease kube-system/gpu-cluster-heal from a stale holder: host login-1, pid 101"
    )
    spec = lease(server)["spec"]
    assert spec["holderIdentity"] == "host=login-1 pid=202 folder=/runs/b" and spec["leaseTransitions"] == 1
    # the old holder learns it on its next renewal, and its release leaves the new holder alone
    a.clock = at(T0 + 112)
    assert "no longer ours" in a.renew() and "pid 202" in a.renew()
    a.release()
    assert lease(server)["spec"]["holderIdentity"] == "host=login-1 pid=202 folder=/runs/b"
    b.release()
    assert "holderIdentity" not in lease(server)["spec"]
    # released: the next heal takes it at once, without waiting out a duration
    assert candidate(server, "/runs/c", 303, T0 + 113).acquire() == ""


def test_two_candidates_that_read_the_same_expired_lease_one_wins_by_resource_version(server: KubeApiServer) -> None:
    """Both read the lease while it is free; the first PUT wins, the second carries the
    resourceVersion it read and is answered 409 Conflict, re-reads, and refuses."""
    candidate(server, "/runs/old", 1, T0).acquire()
    a = candidate(server, "/runs/a", 101, T0 + 100)
    b = candidate(server, "/runs/b", 202, T0 + 100)
    seen = b._read()
    first = [True]
    real_read = b._read

    def stale_once() -> dict[str, Any] | None:
        if first[0]:
            first[0] = False
            return seen
        return real_read()

    b._read = stale_once  # type: ignore[method-assign]
    assert a.acquire().startswith("heal: took over")
    with pytest.raises(LockHeld, match="pid 101, folder /runs/a"):
        b.acquire()
    conflicts = [r for r in server.requests if r[0] == "PUT" and r[1].endswith("/leases/gpu-cluster-heal")]
    assert len(conflicts) == 2  # a's, then b's (409)
    assert lease(server)["spec"]["holderIdentity"] == "host=login-1 pid=101 folder=/runs/a"


def test_the_renewer_renews_while_heal_runs_and_says_when_the_lease_was_lost(server: KubeApiServer) -> None:
    renewed = threading.Event()
    server.store.on("leases", lambda st, t, obj: renewed.set(), "MODIFIED")
    clock = [T0]
    a = KubeLease(server.kubeconfig(), Holder(host="login-1", pid=101, folder="/runs/a"), clock=lambda: clock[0])
    with hold(a, say=lambda line: None, every=0.02) as renewer:
        clock[0] = T0 + 20
        assert renewed.wait(20), "no renewal"
        wait_for(lambda: lease(server)["spec"]["renewTime"] == "2027-01-15T08:00:20.000000Z", "the renewed time")
        assert renewer.lost() == ""
        candidate(server, "/runs/b", 202, T0 + 1000).acquire()  # a frozen holder's lease taken over
        wait_for(lambda: renewer.lost() != "", "the renewer to notice")
        assert "no longer ours" in renewer.lost() and "pid 202" in renewer.lost()
    assert lease(server)["spec"]["holderIdentity"] == "host=login-1 pid=202 folder=/runs/b"


# ---- the command: two heals from two folders, a kill, a takeover ------------------------------


def report(path: Path) -> Path:
    nodes = [{"node": f"ip-10-9-9-{i}.ec2.internal", "verdict": "PASS", "reasons": []} for i in range(4)]
    path.write_text(json.dumps({"verdict": "PASS", "nodes": nodes, "measurements": []}), encoding="utf-8")
    return path


def test_a_second_heal_refuses_then_takes_over_a_killed_holder_after_its_lease(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with KubeApiServer() as server:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(server.kubeconfig(), encoding="utf-8")
        outs, rep = outputs_file(tmp_path, server.kubeconfig()), report(tmp_path / "report.json")
        folder_a, folder_b = tmp_path / "run-a", tmp_path / "run-b"
        holder = subprocess.Popen(
            [sys.executable, "-m", "tests.heal._lock_worker", "kube", str(kubeconfig), str(folder_a)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == f"held {holder.pid}"
            argv = ["aws-h100-eks", "--outputs", str(outs), "--report", str(rep), "--out", str(folder_b), "--apply"]

            def heal() -> tuple[int, str, str]:
                code = main(argv)
                got = capsys.readouterr()
                return code, got.out, got.err

            code, _out, err = heal()
            (line,) = [ln for ln in err.splitlines() if ln.startswith("gpu-cluster heal:")]
            assert code == 3 and "Traceback" not in err
            assert (
                f"another gpu-cluster heal holds this cluster (Lease kube-system/gpu-cluster-heal): host "
                f"{socket.gethostname()}, pid {holder.pid}, folder {folder_a.resolve()}, since " in line
            )
            # a dry run changes nothing and takes no lock: it runs beside the holder
            dry = main(argv[:-1])
            assert dry == 0, capsys.readouterr()
            capsys.readouterr()

            holder.send_signal(signal.SIGKILL)
            assert holder.wait(timeout=30) == -signal.SIGKILL
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait()
        spec = lease(server)["spec"]
        assert f"pid={holder.pid} " in spec["holderIdentity"]
        renewed = lockmod._epoch(spec["renewTime"])
        # killed, but its lease has not lapsed: still refused
        monkeypatch.setattr(lockmod, "now", lambda: renewed + 1)
        code, _out, err = heal()
        assert code == 3 and f"pid {holder.pid}" in err
        # past renewTime + leaseDurationSeconds: taken over, with a message naming the old holder
        monkeypatch.setattr(lockmod, "now", lambda: renewed + spec["leaseDurationSeconds"] + 1)
        code, out, err = heal()
        assert code == 0, out + err
        assert (
            f"heal: took over Lease kube-system/gpu-cluster-heal from a stale holder: host {socket.gethostname()}, "
            f"pid {holder.pid}, folder {folder_a.resolve()}" in out
        )
        after = lease(server)["spec"]
        assert "holderIdentity" not in after and after["leaseTransitions"] == 1  # released at the end
        assert os.getpid() != holder.pid


def test_the_engine_takes_no_step_once_the_lock_is_lost(tmp_path: Path) -> None:
    from gpu_cluster.heal.evidence import read_report
    from gpu_cluster.heal.journal import JOURNAL, Journal, read
    from gpu_cluster.heal.states import State
    from tests.heal.world import engine, replacements, write_report

    ev = read_report(write_report(tmp_path))
    with Journal(tmp_path) as j:
        e, _world = engine(tmp_path, j)
        e.guard = lambda: "Lease kube-system/gpu-cluster-heal is no longer ours: host h, pid 7, folder /f"
        out = e.run(ev)
    assert out.code == 2 and "no longer holds the cluster" in out.stopped[0] and "pid 7" in out.stopped[0]
    assert [x.state for x in read(tmp_path / JOURNAL)[0]] == [State.SUSPECT] and replacements(tmp_path) == []
