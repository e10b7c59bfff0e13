"""How long the validation job holds the cluster, and what that costs: a model the plan prints
and ``validate submit --budget`` fits the phases to. Pure: no Pulumi, no torch.

Per phase, a fixed cost plus the sweep's own time. The fixed costs are this project's own
estimates (start-up of one torchrun launch: rendezvous, CUDA and NCCL initialisation; the
storage and DDP phases at their default sizes), stated here so a reader can redo the sums; the
sweep time follows from the catalog's expected bus bandwidth (gpu_cluster.components.bandwidth) with
nccl-tests' formulas: one call of ``size`` bytes takes ``size / algbw`` and
``algbw = busbw / factor(op, ranks)``. A row runs ``warmup`` untimed calls, ``iters`` host-timed
calls, ``iters`` CUDA-event-timed calls and one checked call, per placement torch offers.

Not in the model: pulling the container image onto new nodes (minutes for a 20 GB image, once
per node), and the queue wait before the job starts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpu_cluster.components.bandwidth import FLOOR_MESSAGE_BYTES
from gpu_cluster.components.catalog import InstanceType

LAUNCH_S = 30.0
"""One torchrun launch across the nodes: rendezvous, CUDA context, NCCL communicator (estimate)."""
ROW_OVERHEAD_S = 0.05
"""Per row: the arrival barrier, the rank combine, the check's fill and count (estimate)."""
HEALTH_S = 10.0
"""Per-GPU matmul and copy figures (gpu_cluster.workloads.health.gpu, short form)."""
STORAGE_S = 70.0
"""The storage phase at its default sizes: about 30 s streaming, 2 x 20 s checkpoint (workloads/
validate/run.py storage_sizes)."""
DDP_S = 60.0
"""The short DDP run: synthetic data, 30 steps of a small GPT (estimate)."""
STEPS_S = 20.0
"""The small steps: the pairs step finding the main phase finished, writing the DDP data, judging."""
SEARCH_ROUNDS = 2
"""Pairwise rounds for a search that finds few bad nodes (the 1,024-node simulation took 2)."""

OPS_PLACEMENTS = {"all_reduce": 1, "broadcast": 1, "all_gather": 2, "reduce_scatter": 2, "all_to_all": 1}
"""Placements torch offers per op (no out-of-place all_reduce or broadcast, no in-place
all_to_all): as gpu_cluster.workloads.collectives.ops' table says."""


def _factor(op: str, n: int) -> float:
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    return 1.0 if op == "broadcast" else (n - 1) / n


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """The knobs ``--budget`` turns, at the validation job's defaults."""

    iters: int = 20
    warmup: int = 5
    sweep_min_bytes: int = 1 << 20
    gemm_seconds: float = 30.0
    storage: bool = True
    ddp: bool = True

    def run_args(self) -> tuple[str, ...]:
        return ("--iters", str(self.iters), "--warmup", str(self.warmup), "--sweep-min", str(self.sweep_min_bytes))


@dataclass(frozen=True, slots=True, kw_only=True)
class PhaseTime:
    phase: str
    seconds: float
    basis: str


def sweep_sizes(lo: int, hi: int = FLOOR_MESSAGE_BYTES) -> list[int]:
    """The sizes a phase sweeps: x4 steps landing exactly on ``hi`` (gpu_cluster.workloads.validate.run)."""
    factor = 4 if hi > lo * 64 else 2
    start = hi
    while start // factor >= 1 and start > lo:
        start //= factor
    sizes = []
    while start <= hi:
        sizes.append(start)
        start *= factor
    return sizes


def _sweep_s(op: str, busbw_gbps: float | None, ranks: int, s: Settings, sizes: list[int]) -> float:
    calls = s.warmup + 2 * s.iters + 1
    rows = len(sizes) * OPS_PLACEMENTS.get(op, 1)
    if not busbw_gbps or ranks < 2:
        return rows * ROW_OVERHEAD_S
    algbw = busbw_gbps / _factor(op, ranks) * 1e9
    return rows * ROW_OVERHEAD_S + OPS_PLACEMENTS.get(op, 1) * sum(calls * size / algbw for size in sizes)


def estimate(it: InstanceType, nodes: int, s: Settings = Settings()) -> list[PhaseTime]:
    """Every phase's expected wall time on ``nodes`` x ``it``."""
    bw = it.bandwidth
    g = it.accelerator.count
    sizes = sweep_sizes(s.sweep_min_bytes)
    ops = ["all_reduce"] + ([bw.op] if bw.op != "all_reduce" else [])
    out = []
    single = bw.expected("all_reduce", 1, "single-node").expected_gbps
    gate = s.gemm_seconds + 15.0
    main = LAUNCH_S + gate + HEALTH_S + _sweep_s("all_reduce", single, g, s, sizes)
    for op in ops:
        main += _sweep_s(
            op, bw.expected(op, nodes, "multi-node").expected_gbps if nodes > 1 else None, nodes * g, s, sizes
        )
    out.append(
        PhaseTime(
            phase="main",
            seconds=main,
            basis=f"launch {LAUNCH_S:g} s, node gate {gate:g} s (GEMM {s.gemm_seconds:g} s), health "
            f"{HEALTH_S:g} s, single-node and multi-node sweeps {len(sizes)} sizes to 8 GiB "
            f"({', '.join(ops)}), {s.iters} iters",
        )
    )
    if s.storage:
        out.append(PhaseTime(phase="storage", seconds=LAUNCH_S + STORAGE_S, basis="launch, streaming and checkpoint"))
    if nodes > 1:
        fabric = LAUNCH_S + sum(
            _sweep_s(op, bw.expected(op, nodes, "fabric-only").expected_gbps, nodes * g, s, sizes) for op in ops
        )
        out.append(
            PhaseTime(phase="fabric-only", seconds=fabric, basis="launch, the multi-node sweeps through the NICs")
        )
    if s.ddp:
        out.append(PhaseTime(phase="ddp", seconds=LAUNCH_S + DDP_S, basis="launch, 30 steps"))
    out.append(
        PhaseTime(
            phase="steps",
            seconds=STEPS_S,
            basis="the pairs step (a no-op after a finished main phase), the DDP data, the judge",
        )
    )
    return out


def search_estimate(it: InstanceType, nodes: int, s: Settings = Settings()) -> PhaseTime:
    """What the pairwise search adds when it runs (a cluster figure under its warn floor, a hang)."""
    bw = it.bandwidth
    pair = bw.expected(bw.op, 2, "pair").expected_gbps
    per_round = _sweep_s(bw.op, pair, 2 * it.accelerator.count, s, [FLOOR_MESSAGE_BYTES]) + 5.0
    rounds = SEARCH_ROUNDS if nodes > 2 else 1
    return PhaseTime(
        phase="pairs", seconds=rounds * per_round, basis=f"{rounds} round(s) of all pairs at once, {bw.op} at 8 GiB"
    )


def total_s(phases: list[PhaseTime]) -> float:
    return sum(p.seconds for p in phases)


def cost_usd(seconds: float, it: InstanceType, nodes: int) -> float:
    if it.price is None:  # a judge-only type: no price was read for it
        return float("nan")
    return seconds / 3600.0 * nodes * it.price.usd_per_hour


# The order --budget gives things up in, least missed first: repetitions (the figures stay,
# their spread widens), small sizes (the floors are judged at 8 GiB), the GEMM's length (the
# throttling check needs tens of seconds: 10 s still shows a hot GPU slowing), the DDP smoke run
# (it judges no fabric), then fewer repetitions still, and last the storage phase.
_STEPS: tuple[tuple[str, dict[str, object]], ...] = (
    ("iterations 20 -> 10", {"iters": 10}),
    ("sizes below 64 MiB", {"sweep_min_bytes": 64 << 20}),
    ("sustained GEMM 30 s -> 10 s", {"gemm_seconds": 10.0}),
    ("the short DDP run", {"ddp": False}),
    ("iterations 10 -> 5, warm-up 5 -> 2", {"iters": 5, "warmup": 2}),
    ("the storage phase", {"storage": False}),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Fit:
    settings: Settings
    dropped: tuple[str, ...]
    seconds: float
    fits: bool


def fit_budget(it: InstanceType, nodes: int, budget_s: float) -> Fit:
    """The least the validation gives up to fit ``budget_s`` (the search's time included)."""
    s, dropped = Settings(), []

    def need(x: Settings) -> float:
        return total_s(estimate(it, nodes, x)) + search_estimate(it, nodes, x).seconds

    for what, change in _STEPS:
        if need(s) <= budget_s:
            break
        s = replace(s, **change)  # type: ignore[arg-type]
        dropped.append(what)
    return Fit(settings=s, dropped=tuple(dropped), seconds=need(s), fits=need(s) <= budget_s)


# ---- Replacing a node and revalidating it (gpu-cluster heal, issue 34) ------------------------

JOIN_BOUND_S = 1800.0
"""How long a replacement instance may take to register: ParallelCluster's own bound on replacing
a node, ``node_replacement_timeout`` = 1800 s (aws/aws-parallelcluster-node,
src/slurm_plugin/clustermgtd.py DEFAULTS; shared/reference/SELFHEAL.md P3). No cloud below
publishes an expected time for its replacement path, so the bound stands in for the estimate."""
REPORT_S = 720.0
"""Reporting a faulty host takes 10-12 minutes before the repair starts (Google, "Report faulty
hosts through GKE", cloud.google.com/ai-hypercomputer/docs/manage/manage-gke-clusters;
SELFHEAL.md G2): the upper end."""

# Where Google's faulty-host reporting applies. GKE's report-and-replace label: A4X, A4, A3 Ultra,
# A3 Mega, A3 High nodes in a reservation (SELFHEAL.md G2); Compute Engine's
# instances.reportHostAsFaulty for VMs (Slurm): A4X Max, A4X, A4 and A3 Ultra, reservation-bound
# ("Report faulty host", cloud.google.com/ai-hypercomputer/docs/manage/report-faulty-host, read
# 2026-12-03: "The compute instance uses an A4X Max, A4X, A4, or A3 Ultra machine type").
GKE_REPORT_SERIES = ("a4x-", "a4-", "a3-ultragpu", "a3-megagpu", "a3-highgpu")
GCE_REPORT_SERIES = ("a4x-", "a4-", "a3-ultragpu")

REPLACE_PATHS: dict[str, tuple[float, str, str]] = {
    # path: (seconds, the documented call, the basis of the seconds)
    "eks-asg": (
        JOIN_BOUND_S,
        "autoscaling TerminateInstanceInAutoScalingGroup, ShouldDecrementDesiredCapacity=false",
        "the 1800 s bound a node replacement is held to (ParallelCluster node_replacement_timeout)",
    ),
    "eks-capacity-block": (
        JOIN_BOUND_S,
        "autoscaling TerminateInstanceInAutoScalingGroup, ShouldDecrementDesiredCapacity=false; the group "
        "relaunches into the same capacity block after its clean-up",
        "the 1800 s bound; the block's clean-up takes 'several minutes' (EC2 capacity-blocks-launch), no figure",
    ),
    "pcs": (
        JOIN_BOUND_S,
        "ec2 TerminateInstances; the compute node group keeps its minimum count",
        "the 1800 s bound a node replacement is held to (ParallelCluster node_replacement_timeout)",
    ),
    "gke-report-and-replace": (
        REPORT_S + JOIN_BOUND_S,
        "node label cloud.google.com/fault-behavior, then cloud.google.com/report-and-replace-status",
        "the report's 10-12 min (Google, manage-gke-clusters) plus the 1800 s bound to register",
    ),
    "gke-mig-recreate": (
        JOIN_BOUND_S,
        "compute instanceGroupManagers.recreateInstances",
        "the 1800 s bound a node replacement is held to (ParallelCluster node_replacement_timeout)",
    ),
    "gce-report-host-as-faulty": (
        REPORT_S + JOIN_BOUND_S,
        "compute instances.reportHostAsFaulty, disruptionSchedule IMMEDIATE",
        "the report's 10-12 min (Google, report-faulty-host) plus the 1800 s bound to register",
    ),
    "slurm-power-cycle": (
        JOIN_BOUND_S,
        "scontrol update state=POWER_DOWN, then state=POWER_UP (slurm-gcp deletes and recreates the VM)",
        "the 1800 s bound a node replacement is held to (ParallelCluster node_replacement_timeout)",
    ),
    "aks-delete-machines": (
        JOIN_BOUND_S,
        "agentPools deleteMachines, then the pool's count restored (agentPools createOrUpdate)",
        "the 1800 s bound a node replacement is held to (ParallelCluster node_replacement_timeout)",
    ),
    # Azure Slurm (components/azure/orchestration_slurm.py): a Uniform scale set's instance is deleted
    # and the capacity put back; the new instance joins as a dynamic node (gpu_cluster/heal/azure_vmss.py).
    "vmss-delete-instances": (
        JOIN_BOUND_S,
        "virtualMachineScaleSets deleteInstances, the old dynamic node deleted from Slurm, then the scale set's "
        "capacity restored (virtualMachineScaleSets update, sku.capacity)",
        "the 1800 s bound a node replacement is held to (ParallelCluster node_replacement_timeout)",
    ),
}


def replace_path(cloud: str, orchestrator: str, capacity: str, instance_type: str) -> str:
    """Which documented replacement a stack's nodes get (gpu_cluster/heal picks its adapter the same way)."""
    reserved = capacity in ("reservation", "capacity-block")
    if cloud == "aws":
        if orchestrator == "slurm":
            return "pcs"
        return "eks-capacity-block" if capacity == "capacity-block" else "eks-asg"
    if cloud == "gcp":
        if orchestrator == "slurm":
            return (
                "gce-report-host-as-faulty"
                if reserved and instance_type.startswith(GCE_REPORT_SERIES)
                else ("slurm-power-cycle")
            )
        return (
            "gke-report-and-replace"
            if reserved and instance_type.startswith(GKE_REPORT_SERIES)
            else ("gke-mig-recreate")
        )
    return "vmss-delete-instances" if orchestrator == "slurm" else "aks-delete-machines"


def replace_estimate(path: str) -> PhaseTime:
    seconds, call, basis = REPLACE_PATHS[path]
    return PhaseTime(phase="replace", seconds=seconds, basis=f"{call}: {basis}")


def revalidate_estimate(it: InstanceType, s: Settings = Settings()) -> PhaseTime:
    """What heal's revalidation holds two nodes for: one launch of the main phase on the new node
    and a cleared peer (node gate, health, the single-node and the two-node collectives at the
    floor's size only, no pairwise search), then the judge."""
    bw = it.bandwidth
    g = it.accelerator.count
    size = [FLOOR_MESSAGE_BYTES]
    ops = ["all_reduce"] + ([bw.op] if bw.op != "all_reduce" else [])
    gate = s.gemm_seconds + 15.0
    seconds = LAUNCH_S + gate + HEALTH_S + STEPS_S
    seconds += _sweep_s("all_reduce", bw.expected("all_reduce", 1, "single-node").expected_gbps, g, s, size)
    seconds += sum(_sweep_s(op, bw.expected(op, 2, "multi-node").expected_gbps, 2 * g, s, size) for op in ops)
    return PhaseTime(
        phase="revalidate",
        seconds=seconds,
        basis=f"launch {LAUNCH_S:g} s, node gate {gate:g} s, health {HEALTH_S:g} s, the single-node and two-node "
        f"sweeps at 8 GiB ({', '.join(ops)}), the judge",
    )
