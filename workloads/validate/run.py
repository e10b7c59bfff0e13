"""The in-job phases of the validation run: every rank of the job runs this under torchrun.

Phase ``main``: per-GPU health, single-node collectives (each node in its own group, all
nodes at once: NVLink/xGMI only), multi-node collectives over the whole job, and, when the
multi-node figure falls short or a node lags, pairwise tests that name the bad node.
Phase ``fabric``: the multi-node collectives again; the launcher runs it with NVLink P2P and
shared memory disabled (NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1, NCCL_NVLS_ENABLE=0), which
NCCL reads once per process, so it must be its own launch.
Phase ``pairs``: the pairwise search alone, run after ``main`` when ``main`` left no results
(a collective hung inside the backend and the watchdog ended every rank); it does nothing when
``main`` finished. Each pair's labels name the pair, so if a pair hangs too, the watchdog's
message says which two nodes were measuring.
Phase ``storage``: every rank writes and reads the shared file system at once, then a
distributed checkpoint is saved and loaded there (:mod:`gpu_cluster.workloads.validate.storage`).

Every rank records its state in ``status/<phase>-<node>-r<rank>.json`` before and after the
phase, and on error says whether a peer was lost or it failed itself; rank 0 writes the
phase's results to ``phase-<phase>.json``. The judge reads only those files.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from gpu_cluster.workloads.collectives import bench as collectives

from gpu_cluster.workloads.runtime import device

from gpu_cluster.workloads.health import gpu as gpu_health

from gpu_cluster.workloads.health import hang

from gpu_cluster.workloads.health import node_gate
from gpu_cluster.workloads.runtime.device import memory_cap
from gpu_cluster.workloads.health.fabric import FabricCheckFailed
from gpu_cluster.workloads.runtime.node import maybe_fail, node_name, wedge_here
from gpu_cluster.workloads.validate import pairs
from gpu_cluster.workloads.validate.run_config import RunConfig
from gpu_cluster.workloads.validate import stack as node_stack

PEER_LOST_MARKERS = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "NCCL communicator was aborted",
    "remote process exited",
    "Socket Timeout",
    "timed out",
    "did not arrive",
    "failed on rank",
    "Connection was likely closed",
    "Failed to recv",
    "Failed to send",
    "wait timeout",
    # gloo: "Timed out waiting 4000ms for send operation to complete" (a peer stopped).
    "Timed out waiting",
)


def _peer_lost(exc: BaseException, text: str) -> bool:
    """An error raised by a communication call because another rank went away, as opposed to
    this rank failing on its own: the judge blames the other node for the first kind."""
    comm_errors = tuple(
        t
        for t in (
            getattr(dist, "DistNetworkError", None),
            getattr(dist, "DistBackendError", None),
            getattr(dist, "DistStoreError", None),
            hang.CollectiveTimeout,
        )
        if isinstance(t, type)
    )
    return isinstance(exc, comm_errors) or any(m in text for m in PEER_LOST_MARKERS)


def storage_sizes(cfg: RunConfig, backend: str, ranks: int) -> tuple[int, int]:
    """(bytes per rank to stream, checkpoint bytes per rank) for the storage phase."""
    mib, gib = 1 << 20, 1 << 30

    def fit(seconds: float, lo: int, hi: int, default: int) -> int:
        if cfg.storage_expect_gbps is None:
            return default
        want = int(cfg.storage_expect_gbps * 1e9 * seconds / max(1, ranks))
        return max(lo, min(hi, want // mib * mib))

    gpu = backend != "gloo"
    stream = cfg.storage_bytes or (fit(30.0, 64 * mib, 4 * gib, gib) if gpu else 32 * mib)
    ckpt = cfg.ckpt_bytes or (fit(20.0, 16 * mib, gib, 256 * mib) if gpu else 8 * mib)
    return stream, ckpt


def _sizes(cfg: RunConfig, backend: str, device_bytes: int | None = None) -> tuple[int, int, int, int]:
    from gpu_cluster.components.bandwidth import FLOOR_MESSAGE_BYTES

    gpu = backend != "gloo"
    lo = cfg.sweep_min_bytes or (1 << 20 if gpu else 1 << 16)
    single = cfg.single_max_bytes or (FLOOR_MESSAGE_BYTES if gpu else 4 << 20)
    multi = cfg.multi_max_bytes or (FLOOR_MESSAGE_BYTES if gpu else 4 << 20)
    pair = cfg.pair_bytes or (FLOOR_MESSAGE_BYTES if gpu else 4 << 20)
    if device_bytes:
        cap = memory_cap(device_bytes, check=True)
        single, multi, pair = min(single, cap), min(multi, cap), min(pair, cap)
    return lo, single, multi, pair


def sweep_start(lo: int, hi: int, factor: int) -> int:
    """The smallest size, at most ``lo``, from which x``factor`` steps land exactly on ``hi``: the
    sweep must reach the size the floor is stated at (1 MiB x 4^k skips 8 GiB)."""
    start = hi
    while start // factor >= 1 and start > lo:
        start //= factor
    return start


def _atomic_json(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)


HEARTBEAT_S = 1.0
# A rank's way to the measurements, each state written as it is reached: a rank that stops
# between two says where (no device, never joined, died measuring). They beat while running.
RUNNING_STATES = ("started", "device-ready", "fabric-ready", "joined")


class Status:
    """This rank's line in the run directory: what the judge reads if the rank dies.

    While the phase runs, a thread rewrites the line every HEARTBEAT_S with the time
    (collectives and store waits release the GIL, so it beats while the main thread is
    blocked). A rank that dies stops beating; a rank left waiting on it beats on until the
    job ends it. The judge blames the rank whose beat stopped first.
    """

    def __init__(self, cfg: RunConfig, node: str, rank: int) -> None:
        self.path = cfg.out_dir / "status" / f"{cfg.label}-{node}-r{rank}.json"
        self.doc: dict[str, Any] = {
            "phase": cfg.label,
            "node": node,
            "rank": rank,
            "host": platform.node(),
            "pid": os.getpid(),
            "started_at": time.time(),
        }
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.calls: Callable[[], dict[str, Any]] | None = None
        """The watchdog's count of collective calls entered and completed, kept in every beat:
        what tells the rank that stopped from the ranks that waited on it."""

    def _keep_calls(self) -> None:
        if self.calls is not None:
            self.doc["calls"] = self.calls()

    def set(self, state: str, **extra: Any) -> None:
        with self._lock:
            self.doc.update(state=state, at=time.time(), beat=time.time(), **extra)
            self._keep_calls()
            self.doc.setdefault("stages", {})[state] = self.doc["at"]
            _atomic_json(self.path, self.doc)
        if state in RUNNING_STATES and self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="validate-heartbeat", daemon=True)
            self._thread.start()
        elif state not in RUNNING_STATES:
            self._stop.set()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with self._lock:
                if self.doc.get("state") not in RUNNING_STATES:
                    return
                self.doc["beat"] = time.time()
                self._keep_calls()
                _atomic_json(self.path, self.doc)


def _versions() -> dict[str, str]:
    v = {"torch": torch.__version__, "python": platform.python_version()}
    if torch.cuda.is_available():
        v["cuda"] = str(torch.version.cuda or torch.version.hip or "")
        v["gpu"] = torch.cuda.get_device_name(0)
        try:
            v["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))  # type: ignore[no-untyped-call]
        except (RuntimeError, AttributeError):
            pass
    return v


def _coll_cfg(
    lo: int, hi: int, cfg: RunConfig, op: str, timeout_s: float | None = None
) -> collectives.CollectivesConfig:
    factor = 4 if hi > lo * 64 else 2
    return collectives.CollectivesConfig(
        ops=(op,),
        min_bytes=sweep_start(lo, hi, factor),
        max_bytes=hi,
        factor=factor,
        iters=cfg.iters,
        warmup=cfg.warmup,
        check=True,
        timeout_s=timeout_s or cfg.timeout_s,
    )


def run_phase(cfg: RunConfig) -> int:
    node = node_name()
    os.environ["GPUC_PHASE"] = cfg.phase  # what the test hooks (gpu_cluster.workloads.runtime.node) key on
    if cfg.phase == "pairs" and not cfg.pair_job:
        if (cfg.out_dir / "phase-main.json").exists():
            # The main phase finished, and ran the search itself when it was wanted.
            print("validate[pairs]: not needed: the main phase finished", flush=True)
            return 0
        why = pairs.not_started(cfg.out_dir, _env_world_size())
        if why:
            # A node that never started is the finding; pairing it would only wait for it again.
            if int(os.environ.get("RANK", "0") or 0) == 0:
                _atomic_json(cfg.out_dir / "phase-pairs.json", {"phase": "pairs", "skipped": why})
            print(f"validate[pairs]: not run: {why}", flush=True)
            return 0
    # Written before the device is touched and before the group forms, so a node that never
    # gets a GPU, or never joins, is the one its own status names.
    status = Status(cfg, node, int(os.environ.get("RANK", "0") or 0))
    status.set("started")

    # When another node fails, the scheduler ends this one too (srun --kill-on-bad-exit,
    # torchrun ending the workers of a failed rendezvous, even while
    # this one still waits to join): record that it was ended, not that it failed.
    def ended(signum: int, _frame: Any) -> None:
        status.set(
            "error",
            error=f"ended by signal {signal.Signals(signum).name} (another rank or node failed first)",
            missing_ranks=[],
            peer_lost=True,
        )
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, ended)
    # The pairs phase is nothing but pairs: each call gets the pair's own limit.
    # Its deadlines stay under the timeout of the groups it watches (the pairs' own groups in the
    # pairs phase, the default group otherwise), so it speaks before the backend tears us down.
    # It watches the process group's own setup too: NCCL's communicator is made eagerly there
    # (device_id), and a bad NIC or a wedged GPU can hold it forever.
    limit = cfg.pair_timeout_s if cfg.phase == "pairs" else cfg.timeout_s
    watchdog = hang.Watchdog(
        rank=int(os.environ.get("RANK", "0") or 0),
        limit_s=limit + hang.grace_s(limit),
        group_timeout_s=hang.group_timeout_s(limit),
        on_expire=lambda message: status.set(
            "error", error=message, missing_ranks=[], peer_lost=not watchdog.expired_local
        ),
    )
    status.calls = watchdog.progress

    def on_stage(state: str) -> None:
        if state == "device-init":
            # Not a state of the status file (still "started"): only the watchdog's bound. A rank
            # stuck here is stuck on its own GPU or driver, and local says so to the judge.
            watchdog.begin("the device's context creation (CUDA/ROCm init, set_device)", local=True)
            return
        status.set(state)
        if state == "device-ready":
            watchdog.begin("the fabric check and the process group's setup (init_process_group)")
        elif state == "fabric-ready":
            watchdog.begin("the process group's setup (init_process_group: rendezvous, NCCL communicator init)")
        if state in ("device-ready", "fabric-ready"):
            wedge_here("init")  # test hook: a no-op unless GPUC_INJECT_WEDGE_NODE names this node
        elif state == "joined":
            watchdog.end()

    try:
        # The group's own timeout comes last, after the arrival check and the watchdog have spoken.
        rt = device.setup(
            timeout_s=hang.group_timeout_s(cfg.timeout_s),
            on_stage=on_stage,
            instance_type=cfg.instance_type,
        )
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - recorded for the judge, then exit 1
        watchdog.close()
        stage = status.doc.get("state")
        text = f"{type(exc).__name__}: {exc}"
        # Failing before the device was bound, or lacking the fabric once it is, is this node's own
        # fault; failing while joining is waiting for a node that never came.
        fabric = isinstance(exc, FabricCheckFailed)
        where = "device setup" if stage == "started" else "fabric check" if fabric else "joining the group"
        status.set(
            "error",
            error=f"{where}: {text}"[:2000],
            missing_ranks=[],
            peer_lost=not (stage == "started" or fabric),
            fabric_missing=fabric,
        )
        print(f"validate[{cfg.phase}] rank {status.doc['rank']} on {node}: {text.splitlines()[0][:300]}", flush=True)
        return 1
    try:
        maybe_fail(cfg.phase)
        result = _phase(cfg, rt, node, watchdog)
    except Exception as exc:  # noqa: BLE001 - every failure is recorded for the judge, then re-raised as exit 1
        text = f"{type(exc).__name__}: {exc}"
        missing = hang.missing_ranks(text) or []
        status.set("error", error=text[:2000], missing_ranks=missing, peer_lost=_peer_lost(exc, text))
        print(f"validate[{cfg.label}] rank {rt.rank} on {node}: {text.splitlines()[0][:300]}", flush=True)
        return 1
    finally:
        watchdog.close()
    if rt.rank == 0:
        # The phase's wall time on this rank, from before the device was touched: what the
        # validation-time model (gpu_cluster.components.validation_time) is held against.
        result["wall_s"] = round(time.time() - float(status.doc["started_at"]), 2)
        _atomic_json(cfg.out_dir / f"phase-{cfg.label}.json", result)
        if cfg.pair_job:
            # How the figure leaves a pod: submit reads it from the pair job's log (Kubernetes).
            from gpu_cluster.workloads.validate.pair_jobs import RESULT

            row = next(iter((result.get("pairs") or {}).get("first") or []), None)
            value = row[2] if row is not None and len(row) == 3 else None
            print(RESULT + json.dumps({"pair": cfg.pair_job, "value": value}), flush=True)
    status.set("finished")
    device.teardown()
    return 0


def _env_world_size() -> int:
    raw = os.environ.get("WORLD_SIZE", "1").strip()
    return int(raw) if raw.isdigit() else 1


def _side_timeout_s(cfg: RunConfig) -> float:
    """The side group's bound. In the pairs phase every rank waits there for the slowest pair of
    a round, whose calls (warm-up, timed loop, check) each get the pair's own limit."""
    if cfg.phase != "pairs":
        return cfg.timeout_s
    return max(cfg.timeout_s, cfg.pair_timeout_s * (cfg.iters + cfg.warmup + 4) + hang.grace_s(cfg.pair_timeout_s))


def _phase(cfg: RunConfig, rt: device.Runtime, node: str, watchdog: hang.Watchdog) -> dict[str, Any]:
    with watchdog.phase("new_group: the phase's gloo side group"):
        side = dist.new_group(backend="gloo", timeout=_dt.timedelta(seconds=_side_timeout_s(cfg)))
    ids: list[Any] = [None] * rt.world_size
    dist.all_gather_object(ids, (node, rt.rank), group=side)
    nodes: dict[str, list[int]] = {}
    for n, r in ids:
        nodes.setdefault(n, []).append(r)
    mem: list[Any] = [None] * rt.world_size
    own = torch.cuda.get_device_properties(rt.device).total_memory if rt.device.type == "cuda" else None
    dist.all_gather_object(mem, own, group=side)
    # Every rank must sweep the same sizes: the smallest device decides, as in nccl-tests.
    lo, single_hi, multi_hi, pair_bytes = _sizes(cfg, rt.backend, min((m for m in mem if m), default=None))
    result: dict[str, Any] = {
        "phase": cfg.phase,
        "world_size": rt.world_size,
        "backend": rt.backend,
        "nodes": {n: {"ranks": rs} for n, rs in nodes.items()},
        "versions": _versions(),
        "instance_type": cfg.instance_type,
    }
    if rt.rank == 0:
        print(f"validate[{cfg.phase}]: {len(nodes)} node(s), {rt.world_size} rank(s), backend {rt.backend}", flush=True)
    if cfg.phase == "storage":
        from gpu_cluster.workloads.validate import storage

        stream, ckpt = storage_sizes(cfg, rt.backend, rt.world_size)
        result["storage"] = storage.measure(
            cfg.out_dir,
            storage.StorageConfig(file_bytes=stream, ckpt_bytes=ckpt),
            rank=rt.rank,
            world=rt.world_size,
            node=node,
            ranks_by_node=nodes,
            side=side,
            device=rt.device,
        )
        result["storage"]["expect_gbps"] = cfg.storage_expect_gbps
        if rt.rank == 0:
            st = result["storage"]
            print(
                f"validate[storage]: write {st['write_gbps']:.3g} GB/s, read {st['read_gbps']:.3g} GB/s, "
                f"checkpoint save {st['checkpoint']['save_gbps']:.3g} / load {st['checkpoint']['load_gbps']:.3g} GB/s",
                flush=True,
            )
        return result
    if cfg.phase == "pairs":
        # The main phase hung inside a collective (its watchdog ended every rank before the search
        # could run): the search runs alone, each pair under its own timeout.
        if len(nodes) >= 2:
            result["pairs"] = pairs.run_pairs(cfg, rt, nodes, pair_bytes, side, watchdog, _coll_cfg)
        return result
    if cfg.phase == "main":
        result["gate"], result["stack"] = _node_gate(cfg, rt, node, nodes, side, watchdog)
        figures = _measure_health(rt, node, side, watchdog)
        health: list[Any] = [None] * rt.world_size
        dist.all_gather_object(health, figures.to_json(), group=side)
        result["health"] = health
        result["single_node"] = _single_node(cfg, rt, node, nodes, lo, single_hi, side, watchdog)
        if rt.rank == 0:
            print(f"validate[main]: health and single-node collectives done on {len(nodes)} node(s)", flush=True)
    multi: dict[str, Any] = {}
    for op in _multi_ops(cfg):
        try:
            res = collectives.run_op(
                op, _coll_cfg(lo, multi_hi, cfg, op), rt, side_group=side, watchdog=watchdog, hosts=[n for n, _ in ids]
            )
        except hang.CollectiveTimeout as exc:
            if exc.missing:  # a rank is gone: the judge names its node from the status files
                raise
            # A collective that failed with every rank present names nobody by itself: record it and
            # let the pairwise search find who.
            result["multi_node_error"] = f"{op}: {str(exc)[:500]}"
            result["hung"] = True
            break
        multi[op] = res.to_json()
    result["multi_node"] = multi
    if rt.rank == 0:
        top = multi.get("all_reduce", {}).get("peak_busbw_gbps")
        print(f"validate[{cfg.phase}]: multi-node all_reduce peak busbw {top} GB/s", flush=True)
    if cfg.phase == "main" and len(nodes) >= 2 and pairs.want_pairs(cfg, result):
        result["pairs"] = pairs.run_pairs(cfg, rt, nodes, pair_bytes, side, watchdog, _coll_cfg)
    return result


def _mgmt_index(dev: torch.device) -> int:
    """The GPU's index as NVML/amdsmi count it: CUDA_VISIBLE_DEVICES renumbers CUDA's devices."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    idx = dev.index or 0
    return int(visible[idx]) if idx < len(visible) and visible[idx].strip().isdigit() else idx


def _node_gate(
    cfg: RunConfig, rt: device.Runtime, node: str, nodes: dict[str, list[int]], side: Any, watchdog: hang.Watchdog
) -> tuple[list[Any], dict[str, Any]]:
    """The GPU node gate, before anything else: the node's own checks (and DCGM's diagnostic,
    which wants the GPUs to itself) on its first rank while the others wait, then every rank's
    sustained GEMM at once with its GPU's clocks and XIDs watched. Settings from the
    environment (node_gate.config_from_env). Also records the node's software stack."""
    first = rt.rank == nodes[node][0]
    gcfg = node_gate.config_from_env(cfg.instance_type)
    vendor, lib, why = node_gate.open_library()
    # Each part under the watchdog: a GEMM's sync on a wedged GPU never returns, and no peer takes
    # part in it (local): the rank stuck there is the culprit, which its status line then says.
    with watchdog.phase("the node gate's checks (DCGM diagnostic)", calls=2, local=True):
        checks = node_gate.node_checks(gcfg, vendor, lib, why) if first else []
    with watchdog.phase("barrier after the node gate's checks", calls=2):
        dist.barrier(group=side)
    idx = [_mgmt_index(rt.device)] if rt.device.type == "cuda" else []
    with watchdog.phase("the node gate's sustained GEMM and its sync", calls=2, local=True):
        more, gemms = node_gate.gpu_checks(gcfg, vendor, lib, why, [rt.device], idx)
    doc = node_gate.GateReport(node=node, vendor=vendor, checks=checks + more, gemm=gemms).to_json()
    doc["rank"] = rt.rank
    versions = next((c.value for c in checks if c.name == "versions" and c.scope == "node"), None)
    mine = node_stack.collect(versions if isinstance(versions, dict) else None) if first else None
    gathered: list[Any] = [None] * rt.world_size
    dist.all_gather_object(gathered, (doc, node, mine), group=side)
    return [d for d, _, _ in gathered], {n: s for _, n, s in gathered if s is not None}


def _measure_health(rt: device.Runtime, node: str, side: Any, watchdog: hang.Watchdog) -> gpu_health.DeviceFigures:
    """Each GPU measures itself at once. CPU ranks share the host's cores, so they take turns:
    measured together they would each see a random share of the cores, and the comparison
    between nodes would measure the scheduler instead of the nodes."""

    def measure() -> gpu_health.DeviceFigures:
        wedge_here("health")  # test hook: a no-op unless GPUC_INJECT_WEDGE_NODE names this node
        return gpu_health.measure_device(
            rt.device, node=node, rank=rt.rank, local_rank=rt.local_rank, quick=rt.backend == "gloo"
        )

    if rt.device.type != "cpu":
        with watchdog.phase("health: matmul and memory copy, each with its sync", local=True):
            return measure()
    mine: gpu_health.DeviceFigures | None = None
    for turn in range(rt.world_size):
        if turn == rt.rank:
            with watchdog.phase("health: matmul and memory copy", local=True):
                mine = measure()
        with watchdog.phase("health: waiting for the other ranks' turns", calls=2):
            dist.barrier(group=side)
    assert mine is not None
    return mine


def _multi_ops(cfg: RunConfig) -> list[str]:
    ops = ["all_reduce"]
    if cfg.instance_type:
        from gpu_cluster.components.catalog import load_catalog

        op = load_catalog().get(cfg.instance_type).bandwidth.op
        if op not in ops:
            ops.append(op)
    return ops


def _single_node(
    cfg: RunConfig,
    rt: device.Runtime,
    node: str,
    nodes: dict[str, list[int]],
    lo: int,
    hi: int,
    side: Any,
    watchdog: hang.Watchdog,
) -> dict[str, Any]:
    # Every rank must create every group, in the same order, even those it is not in.
    # Their timeout is the default group's, stated: new_group() would take the backend's default
    # (10 min for NCCL), which the watchdog's ceiling does not know.
    limit = _dt.timedelta(seconds=hang.group_timeout_s(cfg.timeout_s))
    with watchdog.phase(f"new_group: {2 * len(nodes)} single-node groups", calls=2):
        groups = {
            n: (dist.new_group(ranks=rs, timeout=limit), dist.new_group(ranks=rs, backend="gloo", timeout=limit))
            for n, rs in nodes.items()
        }
    mine: dict[str, Any]
    if len(nodes[node]) < 2:
        mine = {"skipped": "one rank on this node: nothing to measure inside it"}
    else:
        group, gside = groups[node]
        try:
            res = collectives.run_op(
                "all_reduce", _coll_cfg(lo, hi, cfg, "all_reduce"), rt, side_group=gside, group=group, watchdog=watchdog
            )
            mine = res.to_json()
        except hang.CollectiveTimeout as exc:
            mine = {"error": str(exc)[:500]}
    gathered: list[Any] = [None] * rt.world_size
    dist.all_gather_object(gathered, (node, rt.rank == nodes[node][0], mine), group=side)
    return {n: m for n, first, m in gathered if first and "skipped" not in m}
