"""One place that decides where a job runs: the local device, the backend, the process group.

Every job calls :func:`setup` once. It reads torchrun's environment (``LOCAL_RANK``, ``RANK``,
``WORLD_SIZE``), picks CUDA (which is also how PyTorch exposes ROCm) or the CPU, binds the
process to its GPU *before* the process group starts (NCCL otherwise opens a context on GPU 0
from every rank), and starts the group with a timeout so a missing rank ends the job instead
of hanging it.
"""

from __future__ import annotations

import datetime as _dt
import gc
import os
import socket
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Callable, NoReturn

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import HashStore

from gpu_cluster.workloads.runtime.flags import fail
from gpu_cluster.workloads.runtime.nccl_env import NCCL_ERROR_HANDLING

DEFAULT_TIMEOUT_S = 600.0
# Set by ``validate rehearse``: the directory where each rank records its first collective.
REHEARSAL_MARKS_ENV = "GPUC_REHEARSAL_MARKS"


@dataclass(frozen=True, slots=True, kw_only=True)
class Runtime:
    """Where this process runs and who its peers are."""

    rank: int
    """Global rank (torchrun's ``RANK``)."""
    local_rank: int
    """Rank on this node (torchrun's ``LOCAL_RANK``); the GPU index on GPU nodes."""
    world_size: int
    """Number of processes in the job."""
    device: torch.device
    """``cuda:<local_rank>`` on GPU nodes, ``cpu`` otherwise."""
    backend: str
    """``nccl`` on GPUs (RCCL on ROCm builds answers to the same name), ``gloo`` on CPU."""
    accelerator: str
    """``cuda``, ``rocm`` or ``cpu``."""
    hostname: str
    """This node's host name, used in messages that name a rank."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"environment variable {name}={raw!r} is not an integer") from None


def detect_accelerator(force_cpu: bool = False) -> str:
    """``cuda`` or ``rocm`` when a GPU is visible (and not ``force_cpu``), else ``cpu``."""
    if force_cpu or not torch.cuda.is_available():
        return "cpu"
    return "rocm" if getattr(torch.version, "hip", None) else "cuda"


def require_gpus() -> None:
    """The start-up gate (workloads/health/fabric.py require_gpus) with this process's torch: exit 3
    where the launcher expects GPUs on this node and torch sees none."""
    from gpu_cluster.workloads.health.fabric import require_gpus as gate

    gate(
        visible=torch.cuda.device_count() if torch.cuda.is_available() else 0,
        cuda=torch.version.cuda,
        hip=getattr(torch.version, "hip", None),
        torch_version=torch.__version__,
    )


def setup(
    timeout_s: float | None = None,
    force_cpu: bool | None = None,
    on_stage: Callable[[str], None] | None = None,
    instance_type: str | None = None,
) -> Runtime:
    """Bind this process to its device and start the default process group.

    ``timeout_s`` bounds every collective (env ``GPUC_PG_TIMEOUT_S`` overrides the default); on
    NCCL, what happens at that timeout is stated too (:data:`NCCL_ERROR_HANDLING`);
    ``force_cpu`` (env ``GPUC_FORCE_CPU=1``) runs on gloo even where GPUs exist. ``on_stage``
    hears ``device-ready`` once the device is bound and ``joined`` once the group has formed,
    so a rank that fails between them can say which step it got to; it hears ``device-init`` first,
    before the device's context is created (CUDA or ROCm init and ``set_device``), so a watchdog can
    bound that too.

    On GPUs, in a job over several nodes of a catalog ``instance_type`` (env ``GPUC_INSTANCE_TYPE``
    when not given), the node's fabric is checked between the two (:mod:`gpu_cluster.workloads.health.fabric`;
    ``fabric-ready`` once it passes, :class:`~gpu_cluster.workloads.health.fabric.FabricCheckFailed` naming what
    is missing otherwise). ``GPUC_FABRIC_CHECK=0`` skips it, e.g. to measure the socket fallback.
    """
    from gpu_cluster.workloads.runtime.node import no_device_here, wedge_here

    if on_stage is not None:
        # Creating the device's context (the driver's first call, cudaSetDevice) can hang on a
        # wedged GPU or driver; the caller's watchdog bounds it from here.
        on_stage("device-init")
    if force_cpu is None:
        force_cpu = os.environ.get("GPUC_FORCE_CPU", "") == "1"
    if timeout_s is None:
        timeout_s = float(os.environ.get("GPUC_PG_TIMEOUT_S", DEFAULT_TIMEOUT_S))
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", 0)
    world_size = _env_int("WORLD_SIZE", 1)
    accelerator = detect_accelerator(force_cpu)
    if accelerator == "cpu" and not force_cpu:
        # A GPU job whose node shows no GPU stops, naming its driver and CUDA (not gloo on CPU).
        require_gpus()
    injected = no_device_here()
    if injected:
        raise RuntimeError(injected)
    if accelerator == "cpu":
        device = torch.device("cpu")
        backend = "gloo"
    else:
        if local_rank >= torch.cuda.device_count():
            raise SystemExit(
                f"LOCAL_RANK={local_rank} but only {torch.cuda.device_count()} GPUs are visible "
                f"on {socket.gethostname()}: --nproc-per-node must not exceed the GPU count"
            )
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    wedge_here("device")  # test hook: a no-op unless GPUC_INJECT_WEDGE_NODE names this node
    if on_stage is not None:
        on_stage("device-ready")
    if accelerator != "cpu" and _needs_fabric(instance_type, world_size):
        # NCCL falls back to sockets when the fabric is missing; stop here and say what is missing.
        from gpu_cluster.workloads.health import fabric as fabric_check

        report = fabric_check.require(
            str(instance_type or os.environ.get("GPUC_INSTANCE_TYPE")), rocm=accelerator == "rocm"
        )
        if local_rank == 0:
            print(report.message(), flush=True)
        if on_stage is not None:
            on_stage("fabric-ready")
    if backend == "nccl":
        # Read by ProcessGroupNCCL when the group is created: set before init_process_group. Under
        # torchrun the agent has already put its own 1 there when the job's environment had none,
        # so the launcher's job environment (gpu_cluster.workloads.launch.job) states it; this covers the rest.
        for name, value in NCCL_ERROR_HANDLING.items():
            os.environ.setdefault(name, value)
    marks = os.environ.get(REHEARSAL_MARKS_ENV, "")
    rehearsed_type = instance_type or os.environ.get("GPUC_INSTANCE_TYPE")
    if marks and rehearsed_type and os.environ.get("GPUC_FABRIC_CHECK", "") != "0":
        # A rehearsal (gpu_cluster.workloads.validate.rehearse) runs on CPU, where the fabric check above is
        # skipped; the plugin part of it needs no device, so it runs under the job's own environment.
        from gpu_cluster.workloads.health import fabric as fabric_check

        try:
            found = fabric_check.require_plugin(str(rehearsed_type))
        except fabric_check.FabricCheckFailed as exc:
            # Recorded for the rehearsal: the job's later steps run on, and must not pass for it.
            _rehearsal_mark(marks, rank, world_size, failed=str(exc))
            raise
        if local_rank == 0 and found:
            print(f"rehearsal: {found}", flush=True)
    if not dist.is_initialized():
        # A plain `python -m workloads.X` run is a group of one: its store lives in the process, so
        # no port is picked and then raced for (two such runs on one host once took the same one).
        alone = "MASTER_ADDR" not in os.environ and world_size == 1
        dist.init_process_group(
            backend=backend,
            rank=rank,
            world_size=world_size,
            timeout=_dt.timedelta(seconds=timeout_s),
            device_id=device if backend == "nccl" else None,
            store=HashStore() if alone else None,
        )
    if on_stage is not None:
        on_stage("joined")
    if marks:
        _rehearsal_mark(marks, rank, world_size)
    return Runtime(
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        device=device,
        backend=backend,
        accelerator=accelerator,
        hostname=socket.gethostname(),
    )


def _rehearsal_mark(marks: str, rank: int, world_size: int, failed: str | None = None) -> None:
    """The job's first collective, then a record of it that the rehearsal waits for (it ends the
    job there); or, with ``failed``, why this rank never got to it. Written by the job's own
    user, inside the run directory the job made."""
    import json

    record: dict[str, Any] = {"rank": rank, "world_size": world_size, "uid": os.getuid()}
    if failed is None:
        t = torch.ones(1)
        dist.all_reduce(t)
        record["sum"] = float(t.item())
    else:
        record["failed"] = failed
    os.makedirs(marks, exist_ok=True)
    name = f"{'failed' if failed else 'first-collective'}-rank{rank}.json"
    with open(os.path.join(marks, name), "w", encoding="utf-8") as fh:
        json.dump(record, fh)


def _needs_fabric(instance_type: str | None, world_size: int) -> bool:
    """A catalog type is named, the job spans nodes (one node's ranks talk over NVLink/SHM, never the
    fabric), and the check is not switched off."""
    if os.environ.get("GPUC_FABRIC_CHECK", "") == "0":
        return False
    if not (instance_type or os.environ.get("GPUC_INSTANCE_TYPE")):
        return False
    return world_size > _env_int("LOCAL_WORLD_SIZE", world_size)


def fail_together(problems: list[tuple[str, str]]) -> NoReturn:
    """Exit 2 with ``problems`` (as :func:`~gpu_cluster.workloads.runtime.flags.fail`) when every rank found the
    same ones: the ranks meet once first. Without it a rank that tears its gloo group down while a
    peer is still finishing the last collective can die in C++ ("terminate called without an active
    exception", SIGABRT) instead of exiting 2: a refused resume did so 4 times in 12 on this loaded
    2-core machine, 1 in 32 with this barrier alone, 0 in 20 with :func:`teardown`'s collection alone.
    Only for problems every rank reaches at the same point: a rank alone would wait here."""
    if dist.is_initialized():
        dist.barrier()
    fail(problems)


def teardown() -> None:
    """Destroy the process group if one was started (safe to call twice).

    Called from a ``finally``, it may run while an exception (a usage error's ``SystemExit``)
    is on its way out, and that exception's frames still hold the model, its device mesh and so
    the groups. Left to the interpreter's exit, those are destroyed in no set order and gloo can
    die in C++ ("terminate called without an active exception", no Python frame on the stack):
    1 run in 10 of a refused resume on this loaded 2-core machine. So the finished frames' locals
    are dropped (the traceback still prints: it needs only code and line numbers) and collected
    before the groups go."""
    if not dist.is_initialized():
        return
    _, _, tb = sys.exc_info()
    if tb is not None:
        traceback.clear_frames(tb)  # executing frames (this caller's) are skipped by clear_frames
        del tb
    gc.collect()
    dist.destroy_process_group()


def synchronize(device: torch.device) -> None:
    """Wait for queued device work; a no-op on CPU, where collectives return when done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def memory_cap(device_bytes: int, check: bool) -> int:
    """The largest message that fits, as nccl-tests computes it (src/common.cu): send, receive and,
    with the data check, expected buffers, plus 1 GiB for the rest: (memory - 1 GiB) / (3 or 2)."""
    return max(1, (device_bytes - (1 << 30)) // (3 if check else 2))


def smallest_device_memory(rt: Runtime) -> int | None:
    """The smallest GPU's memory over the whole job (every rank must sweep the same sizes); None off GPU."""
    if rt.device.type != "cuda":
        return None
    t = torch.tensor([torch.cuda.get_device_properties(rt.device).total_memory], dtype=torch.int64, device=rt.device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def exit_process(code: int) -> NoReturn:
    """End a torchrun worker once its results are written: flush, then leave without
    interpreter shutdown, where gloo's threads can still be alive and abort the process
    (SIGABRT after the job printed "done"), which torchrun reports as a failed job and, with
    restarts allowed, reruns a finished one."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def global_rank(group: Any, group_rank: int) -> int:
    """The global rank of ``group_rank`` in ``group`` (None or the default group: itself)."""
    try:
        return int(dist.get_global_rank(group, group_rank))
    except (RuntimeError, ValueError):  # the default group: its ranks are the global ones
        return group_rank
