"""The validation run as a scheduler job: the phases of ``gpu_cluster.workloads.validate`` as steps.

On Slurm it is one batch job whose steps are: the main phase (srun, one torchrun per node),
the fabric-only phase (NVLink P2P and shared memory off), synthetic data for the short DDP
run, the DDP run, and the judge on the batch host, whose exit status (0 pass, 1 warn, 2 fail,
3 could not run) becomes the job's. Every step runs even when an earlier one failed, so the
report lands whatever happened.

On Kubernetes it is one JobSet whose pods run the same steps in turn (``jobset_spec``): the
torchrun steps on every pod, the data and judge steps on pod 0, whose status is the job's.

``for_cluster`` is the job ``python -m gpu_cluster.workloads.validate submit STACK`` runs on a cluster
from its stack outputs: a run directory of its own (``<mount>/validation/<cluster>/<run-id>``),
the code carried by the job (``gpu_cluster.workloads.launch.bundle``), the fabric's devices and
environment from the catalog.
"""

from __future__ import annotations

import secrets
import shlex
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from gpu_cluster.components.catalog import CatalogError, load_catalog
from gpu_cluster.components.contract import METRICS_PUSH_URL, METRICS_TEXTFILE_DIR, PUSHGATEWAY_STACKS, ClusterOutputs
from gpu_cluster.components import nccl_topology
from gpu_cluster.components.image_pins import mirrored
from gpu_cluster.components.image_pins import pinned as pinned_ref
from gpu_cluster.workloads.launch.bundle import Bundle
from gpu_cluster.workloads.launch import fabric as fabric_wiring
from gpu_cluster.workloads.launch.common import LaunchSpecError, Step, ranks_per_node
from gpu_cluster.workloads.launch.jobset import JobSetSpec
from gpu_cluster.workloads.launch.sbatch import LaunchSpec
from gpu_cluster.workloads.launch.validation_args import FABRIC_ONLY_ENV, ddp_args, synthetic_data_args
from gpu_cluster.workloads.launch.images import DEFAULT_IMAGE as DEFAULT_IMAGE
from gpu_cluster.workloads.launch.images import TESTED_TORCH as TESTED_TORCH
from gpu_cluster.workloads.launch.images import default_image as default_image
from gpu_cluster.workloads.launch.images import gpu_runtime_of as gpu_runtime_of
from gpu_cluster.workloads.launch.images import image_torch as image_torch
from gpu_cluster.workloads.launch.images import image_tested_torch as image_tested_torch
from gpu_cluster.workloads.launch.images import image_torch_note as image_torch_note
from gpu_cluster.workloads.launch.images import pinned as pinned
from gpu_cluster.workloads.launch.slurm_env import VENV_DIR as VENV_DIR
from gpu_cluster.workloads.launch.slurm_env import interpreter_lines as interpreter_lines
from gpu_cluster.workloads.launch.slurm_env import venv_path as venv_path
from gpu_cluster.workloads.launch.slurm_env import unpack_lines, venv_lines


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationJob:
    """What the validation job needs to know about the cluster (the stack outputs)."""

    nodes: int
    """Nodes to validate."""
    workdir: str
    """Run directory on shared storage (under the Lustre mount on a cluster)."""
    instance_type: str | None = None
    """Catalog type: GPUs per node, fabric environment and floors. None: CPU nodes, no floors."""
    python: str = "python3"
    """Interpreter with torch and this package on every node."""
    partition: str | None = None
    procs_per_node: int | None = None
    """Ranks per node on CPU nodes (ignored with an instance type: one per GPU)."""
    drain: bool = True
    """Drain the nodes the judge fails (Slurm ``scontrol update state=drain``)."""
    strict: bool = False
    """On CPU nodes, a matmul straggler fails its node (``judge --strict``); else an observation."""
    time_limit_min: int = 60
    run_args: tuple[str, ...] = ()
    """Extra arguments for every ``validate run`` phase (e.g. ``--multi-max 64M`` on small clusters)."""
    extra_env: Mapping[str, str] = field(default_factory=dict)
    exclusive: bool = True
    rdzv_port: int = 29500
    prologue: str = ""
    """Bash run before the first step (batch host on Slurm, every pod on Kubernetes)."""
    print_archive: bool = False
    cluster: str = ""
    """The cluster's name: the ``cluster`` label of the judge's metrics."""
    metrics_dir: str | None = None
    """Where the judge also writes its metrics: the node exporter's textfile directory on Slurm
    stacks (components/contract.py METRICS_TEXTFILE_DIR); None on Kubernetes."""
    metrics_push: str | None = None
    """The Pushgateway the judge also pushes its metrics to: the in-cluster one on the Kubernetes
    stacks that deploy it (components/contract.py METRICS_PUSH_URL); None elsewhere."""
    skip_steps: tuple[str, ...] = ()
    """Steps left out (``storage``, ``ddp``): what ``submit --budget`` gives up to fit."""
    """The judge prints the report files as an archive on stdout (Kubernetes: read back from
    pod 0's log, since nothing else leaves the pod)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Phases:
    first_args: tuple[str, ...]
    then: tuple[Step, ...]


def _phases(
    job: ValidationJob,
    *,
    expect_nodes: tuple[str, ...] = (),
    pair_search_ranks: int | None = None,
    gate_ranks: int = 1,
) -> _Phases:
    """The validation phases in order, shared by both launchers. ``pair_search_ranks`` (Slurm:
    the ranks per node): after a hang the pairs step is the driver on the batch host, which runs
    each pair as a job step of its own. A JobSet cannot start jobs of its own (its pods carry no
    API token) and holds every node's GPUs while it runs: there the pairs step is a gate on every
    pod (``gate_ranks`` ranks per pod) which, after a hang, ends the JobSet so that ``submit``
    runs one JobSet per pair on the nodes it gave back (gpu_cluster.workloads.validate.kube_pairs)."""
    out = job.workdir.rstrip("/")
    typed = ("--instance-type", job.instance_type) if job.instance_type else ()
    run = ("run", "--out", out, *typed, *job.run_args)
    data = Path(out) / "data"
    judge_args = ["judge", "--out", out, *typed]
    if expect_nodes:
        judge_args += ["--expect-nodes", ",".join(expect_nodes)]
    if job.drain:
        judge_args.append("--drain")
    if job.strict:
        judge_args.append("--strict")
    if job.print_archive:
        judge_args.append("--print-archive")
    if job.cluster:
        judge_args += ["--cluster", job.cluster]
    if job.metrics_dir:
        judge_args += ["--metrics-dir", job.metrics_dir]
    if job.metrics_push:
        judge_args += ["--metrics-push", job.metrics_push]
    # Runs only when the main phase left no results (a collective hung inside the backend and the
    # watchdog ended every rank): the pairwise search that names the node.
    if pair_search_ranks is None:
        pairs_step = Step(
            name="pairs-gate",
            module="gpu_cluster.workloads.validate",
            module_args=(
                "pair-gate",
                "--out",
                out,
                "--nodes",
                ",".join(expect_nodes),
                "--ranks-per-node",
                str(gate_ranks),
            ),
            torchrun=False,
            every_host=True,
            stop_on=PAIRS_NEEDED_EXIT,
        )
    else:
        # One `srun -N2 -w A,B` step per pair (gpu_cluster.workloads.validate.pair_jobs): a pair that hangs
        # again ends only its own step, as cluster-health-scanner's one job per pair does.
        pairs_step = Step(
            name="pairs",
            module="gpu_cluster.workloads.validate",
            module_args=(
                "pair-search",
                "--out",
                out,
                "--python",
                job.python,
                "--ranks-per-node",
                str(pair_search_ranks),
                "--rdzv-port",
                str(job.rdzv_port),
                "--",
                *run[3:],
            ),
            torchrun=False,
        )
    return _Phases(
        first_args=(*run, "--phase", "main"),
        then=tuple(
            step
            for step in (
                pairs_step,
                # Every node reads and writes the shared file system at once, then a DCP checkpoint.
                Step(name="storage", module="gpu_cluster.workloads.validate", module_args=(*run, "--phase", "storage")),
                Step(
                    name="fabric-only",
                    module="gpu_cluster.workloads.validate",
                    module_args=(*run, "--phase", "fabric"),
                    env=FABRIC_ONLY_ENV,
                ),
                Step(
                    name="ddp-data",
                    module="gpu_cluster.workloads.train.data",
                    module_args=tuple(synthetic_data_args(data)),
                    torchrun=False,
                ),
                Step(
                    name="ddp",
                    module="gpu_cluster.workloads.train",
                    module_args=tuple(ddp_args(data, Path(out), instance_type=job.instance_type)),
                ),
                Step(
                    name="judge", module="gpu_cluster.workloads.validate", module_args=tuple(judge_args), torchrun=False
                ),
            )
            if step.name not in job.skip_steps and not (step.name == "ddp-data" and "ddp" in job.skip_steps)
        ),
    )


def sbatch_spec(job: ValidationJob) -> LaunchSpec:
    it = load_catalog().get(job.instance_type) if job.instance_type else None
    slurm = fabric_wiring.wiring(it.network.fabric if it else None).slurm.for_collectives(
        it.software.collectives if it else None
    )
    phases = _phases(job, pair_search_ranks=ranks_per_node(it.accelerator.count if it else 0, job.procs_per_node))
    return LaunchSpec(
        job_name="gpuc-validate",
        nodes=job.nodes,
        module="gpu_cluster.workloads.validate",
        module_args=phases.first_args,
        workdir=job.workdir.rstrip("/"),
        python=job.python,
        gpus_per_node=it.accelerator.count if it else 0,
        procs_per_node=None if it else job.procs_per_node,
        partition=job.partition,
        time_limit_min=job.time_limit_min,
        exclusive=job.exclusive,
        rdzv_port=job.rdzv_port,
        kill_on_bad_exit=False,
        fabric_env={**(it.software.fabric_env if it else {}), **slurm.env},
        library_path=slurm.library_path,
        env_script=slurm.env_script,
        discover=slurm.discover,
        found_at_start=slurm.found_at_start,
        ib_hca_link_layer=slurm.ib_hca_link_layer,
        extra_env=dict(job.extra_env),
        then=phases.then,
        prologue=job.prologue,
        agent_logs=agent_logs_dir(job),
    )


def agent_logs_dir(job: ValidationJob) -> str:
    """Where each node's torchrun agent output is kept (gpu_cluster.workloads.validate.agents reads it)."""
    return f"{job.workdir.rstrip('/')}/agents"


JOBSET_NAME = "gpuc-validate"
PAIRS_NEEDED_EXIT = 10
"""The JobSet's pairs gate exits with this when the main phase hung: every pod ends there."""
JOBSET_REPLICATED_JOB = "node"


def pod_hostnames(name: str, replicated_job: str, nodes: int) -> tuple[str, ...]:
    """The host names the JobSet gives its pods (``<jobset>-<rjob>-<job>-<pod>``): the node
    names every rank reports under, so the judge can name a pod that never reported."""
    return tuple(f"{name}-{replicated_job}-0-{i}" for i in range(nodes))


def jobset_spec(
    job: ValidationJob,
    *,
    image: str,
    lustre_pvc: str | None,
    namespace: str = "default",
    efa_per_node: int = 0,
    rdma_per_node: int = 0,
    gpu_vendor: str = "nvidia",
    node_selector: Mapping[str, str] | None = None,
    tolerate_taints: tuple[str, ...] = (),
    lustre_mount: str = "/fsx",
    hugepages_2mi: str | None = None,
    cpu: str | None = None,
    name: str = JOBSET_NAME,
    wait_for_path: str | None = None,
    configmaps: Mapping[str, str] | None = None,
    queue: str | None = None,
    pins: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    service_account: str | None = None,
    pod_labels: Mapping[str, str] | None = None,
) -> JobSetSpec:
    """The validation run as one JobSet. ``job.drain`` is ignored: the pods carry no
    credentials to cordon nodes, and their host names are pods', not nodes'. ``pins``: the
    stack's image pins (scheduler.images), which the fabric's sidecar is pulled by."""
    it = load_catalog().get(job.instance_type) if job.instance_type else None
    wired = pin_sidecar(
        fabric_wiring.wiring(it.network.fabric if it else None).pod.for_collectives(
            it.software.collectives if it else None
        ),
        pins or {},
    )
    # The size's NCCL topology file, from the ConfigMap the stack makes in the jobs' namespace
    # (components/nccl_topology.py; only sizes the catalog has one for, all on AKS).
    topology = nccl_topology.for_instance(job.instance_type)
    topo_env = {nccl_topology.ENV: nccl_topology.PATH} if topology is not None else {}
    topo_mount = {nccl_topology.CONFIGMAP: nccl_topology.MOUNT_DIR} if topology is not None else {}
    nodes = pod_hostnames(name, JOBSET_REPLICATED_JOB, job.nodes)
    per_pod = ranks_per_node(it.accelerator.count if it else 0, job.procs_per_node)
    phases = _phases(replace(job, drain=False), expect_nodes=nodes, gate_ranks=per_pod)
    return JobSetSpec(
        name=name,
        nodes=job.nodes,
        image=image,
        module="gpu_cluster.workloads.validate",
        module_args=phases.first_args,
        workdir=job.workdir.rstrip("/"),
        namespace=namespace,
        replicated_job=JOBSET_REPLICATED_JOB,
        python=job.python,
        gpus_per_node=it.accelerator.count if it else 0,
        gpu_vendor=gpu_vendor,
        procs_per_node=None if it else job.procs_per_node,
        efa_per_node=efa_per_node,
        rdma_per_node=rdma_per_node,
        hugepages_2mi=hugepages_2mi,
        cpu=cpu,
        lustre_pvc=lustre_pvc,
        lustre_mount=lustre_mount,
        rdzv_port=job.rdzv_port,
        fabric_env={**(it.software.fabric_env if it else {}), **wired.env, **topo_env},
        library_path=wired.library_path,
        env_script=wired.env_script,
        found_at_start=wired.found_at_start,
        ib_hca_link_layer=wired.ib_hca_link_layer,
        fabric=wired,
        extra_env=dict(job.extra_env),
        node_selector=dict(node_selector or {}),
        tolerate_taints=tolerate_taints,
        then=phases.then,
        wait_for_path=wait_for_path,
        prologue=job.prologue,
        configmaps={**topo_mount, **dict(configmaps or {})},
        queue=queue,
        annotations=dict(annotations or {}),
        agent_logs=agent_logs_dir(job),
        service_account=service_account,
        pod_labels=dict(pod_labels or {}),
    )


# ---------------------------------------------------------------------------------------------
# The job ``submit`` runs on a cluster, from its stack outputs.

RUNS_DIR = "validation"


# Kubernetes: the bundle's ConfigMap is mounted here and unpacked into the pod's scratch space.
BUNDLE_MOUNT = "/opt/gpuc-bundle"
BUNDLE_KEY = "bundle.tar.gz"
POD_CODE_DIR = "/tmp/gpuc-code"


# Hugepages: none requested. The EKS EFA page's and awsome's pods ask for hugepages-2Mi, which a
# pod gets only from pages the node has reserved; no source read here shows the EKS AL2023
# NVIDIA AMI or our launch template reserving any (awslabs/amazon-eks-ami at 81fec2e: nothing
# under templates/ or nodeadm/internal sets hugepages; templates/al2023/provisioners/install-efa.sh
# runs efa_installer.sh --minimal, whose effect on hugepages no source here states), and a
# request the node cannot meet leaves every pod Pending. Kubernetes wants
# no memory request without hugepages; a CPU request sets no limit, so ranks are never throttled
# by it (8 is our choice, not a provider value). Every GPU pod states it (Checkov CKV_K8S_10).
EFA_POD_CPU = "8"


def new_run_id(now: datetime | None = None) -> str:
    """``20261201t070102z-3fa9``: sortable by time, unique across submitters, and a valid part
    of a Kubernetes name (lower case)."""
    at = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return f"{at:%Y%m%dt%H%M%Sz}-{secrets.token_hex(2)}"


def run_dir(outputs: ClusterOutputs, run_id: str, runs_dir: str = RUNS_DIR) -> str:
    return f"{outputs.mount.mount_point.rstrip('/')}/{runs_dir}/{outputs.cluster_name}/{run_id}"


def for_cluster(
    outputs: ClusterOutputs,
    run_id: str,
    bundle: Bundle,
    *,
    python: str | None = None,
    cpu: bool = False,
    procs_per_node: int | None = None,
    run_args: tuple[str, ...] = (),
    extra_env: Mapping[str, str] | None = None,
    drain: bool = True,
    strict: bool = False,
    time_limit_min: int = 60,
    rdzv_port: int = 29500,
    exclusive: bool = True,
    runs_dir: str = RUNS_DIR,
) -> ValidationJob:
    """The validation job for a deployed cluster. ``cpu``: the nodes have no GPU (a test
    cluster): ranks on CPU over gloo, no floors."""
    run = run_dir(outputs, run_id, runs_dir)
    env = {**(extra_env or {})}
    kubernetes = outputs.scheduler.kind == "kubernetes"
    if kubernetes:
        code = POD_CODE_DIR
        # --no-same-owner: the container holds no CAP_CHOWN (all capabilities dropped).
        prologue = [
            f"mkdir -p {POD_CODE_DIR}",
            f"tar -xzf {BUNDLE_MOUNT}/{BUNDLE_KEY} -C {POD_CODE_DIR} --no-same-owner",
        ]
        interpreter = python or "python3"
    else:
        code = f"{run}/code"
        prologue = unpack_lines(bundle, code) + interpreter_lines(python)
        if python is None:
            prologue += venv_lines(venv_path(outputs))
        interpreter = python or f"{venv_path(outputs)}/bin/python"
        if not cpu:
            # Each node's fabric in the job log before torchrun; its ranks repeat the check for the judge.
            prologue.append(
                f'srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 --kill-on-bad-exit=0 {shlex.quote(interpreter)} '
                f"-m gpu_cluster.workloads.health.fabric --instance-type {shlex.quote(outputs.instance_type)} "
                '|| echo "fabric check failed on a node above"'
            )
    if cpu:
        env.setdefault("GPUC_FORCE_CPU", "1")
    elif gpus := _gpus_of(outputs.instance_type):
        # The start-up gate (workloads/health/fabric.py require_gpus): a node that shows none stops.
        env.setdefault("GPUC_EXPECT_GPUS", str(gpus))
    env["PYTHONPATH"] = code
    return ValidationJob(
        nodes=outputs.nodes,
        workdir=run,
        instance_type=None if cpu else outputs.instance_type,
        python=interpreter,
        partition=outputs.scheduler.partition,
        procs_per_node=procs_per_node if cpu else None,
        drain=drain,
        strict=strict,
        time_limit_min=time_limit_min,
        run_args=run_args,
        extra_env=env,
        exclusive=exclusive,
        rdzv_port=rdzv_port,
        prologue="\n".join(prologue),
        print_archive=kubernetes,
        cluster=outputs.cluster_name,
        # The judge runs on the batch host, a compute node whose node exporter serves this directory.
        metrics_dir=None if kubernetes else METRICS_TEXTFILE_DIR,
        # The judge pod pushes to the stack's Pushgateway (components/k8s/metrics.py), through the
        # cluster's DNS; the job's NetworkPolicy leaves egress open (workloads/launch/pod.py).
        metrics_push=METRICS_PUSH_URL if outputs.orchestrator in PUSHGATEWAY_STACKS else None,
    )


def _gpus_of(instance_type: str) -> int:
    """The catalog's GPUs per node of ``instance_type`` (0 where the catalog has no such type)."""
    try:
        return load_catalog().get(instance_type).accelerator.count
    except CatalogError:
        return 0


def jobset_name(run_id: str) -> str:
    """One JobSet per run (a JobSet's spec is immutable and each run is new)."""
    return f"gpuc-{run_id}"


def check_networks(outputs: ClusterOutputs, wired: fabric_wiring.PodWiring) -> None:
    """The pod's interface annotation names GKE Network objects; each must be one the stack
    made (its ``fabric.networks`` output), or the pod would never start."""
    made = {str(n.get("name")) for n in outputs.fabric.networks}
    missing = [n for n in wired.interfaces.values() if n not in made]
    if missing:
        raise LaunchSpecError(
            "stack outputs",
            [
                (
                    "fabric.networks",
                    f"has no Network {', '.join(missing)} for the {outputs.fabric.type} pod interfaces "
                    f"(the stack made: {', '.join(sorted(made)) or 'none'})",
                )
            ],
        )


def stack_image(outputs: ClusterOutputs, cpu: bool = False) -> str:
    """The image the stack's pods run when none is named: :func:`default_image`, by the digest
    the stack pins its tag to (scheduler.images, from the stack's ``images``) where it does."""
    runtime = gpu_runtime_of(outputs.instance_type)
    return pinned_ref(default_image(outputs.fabric.type, cpu=cpu, gpu_runtime=runtime), outputs.scheduler.images)


def pin_sidecar(wired: fabric_wiring.PodWiring, pins: Mapping[str, str]) -> fabric_wiring.PodWiring:
    """The wiring with its sidecar's image at the pinned digest where the catalog has none."""
    sc = wired.sidecar
    digest = pins.get(f"{sc.image.image}:{sc.image.tag}") if sc is not None and not sc.image.digest else None
    if sc is None or not digest:
        return wired
    return replace(wired, sidecar=replace(sc, image=replace(sc.image, digest=digest)))


def cluster_jobset(outputs: ClusterOutputs, job: ValidationJob, run_id: str, *, image: str | None = None) -> JobSetSpec:
    """The run as a JobSet on the cluster's GPU nodes, with the fabric's devices and wiring.
    ``image``: default the catalog's image for the fabric (by digest), else DEFAULT_IMAGE, each by
    the stack's pin where it has one (:func:`stack_image`)."""
    it = load_catalog().get(outputs.instance_type)
    # A tag the stack pins is pulled by its digest, whether it is the default or named by --image;
    # then through the stack's mirror of its registry, if it has one (scheduler.mirrors).
    image = pinned_ref(image, outputs.scheduler.images) if image else stack_image(outputs, job.instance_type is None)
    image = mirrored(image, outputs.scheduler.mirrors)
    # What the certificate records (workloads/validate/stack.py): the image every pod runs, by
    # digest once submit has resolved it, and the receive-datapath daemon's.
    recorded = {"GPUC_IMAGE_DIGEST": image}
    if job.instance_type:
        sc = pin_sidecar(fabric_wiring.wiring(it.network.fabric).pod, outputs.scheduler.images).sidecar
        if sc is not None:
            recorded["GPUC_RXDM_IMAGE"] = sc.image.ref
    job = replace(job, extra_env={**recorded, **job.extra_env})
    efa = it.network.efa_interfaces if outputs.fabric.type == "efa" and job.instance_type else 0
    # Every HCA of the node, one pod per node (the "Maximum Performance" layout, AZURE.md §4.1).
    rdma = it.network.gpu_nics if outputs.fabric.type == "infiniband" and job.instance_type else 0
    if job.instance_type:
        check_networks(outputs, fabric_wiring.wiring(it.network.fabric).pod)
    sched = outputs.scheduler
    if not sched.namespace:
        # The stacks name the jobs' namespace, where their claims are (never `default`, CKV_K8S_21);
        # read_outputs requires it of a Kubernetes cluster, so this is a hand-built ClusterOutputs.
        raise ValueError("scheduler.namespace: missing (the stack output names the jobs' namespace)")
    return jobset_spec(
        job,
        image=image,
        lustre_pvc=sched.lustre_claim,
        namespace=sched.namespace,
        efa_per_node=efa,
        rdma_per_node=rdma,
        gpu_vendor=it.accelerator.vendor,
        node_selector=sched.node_selector,
        tolerate_taints=sched.tolerations,
        lustre_mount=outputs.mount.mount_point,
        cpu=EFA_POD_CPU if job.instance_type else None,
        name=jobset_name(run_id),
        configmaps={jobset_name(run_id): BUNDLE_MOUNT},
        # The stack's Kueue queue where its nodes come only through one (GKE multi-node flex-start).
        queue=sched.queue,
        # What the pods run as and carry (on AKS: the checkpoint container's workload identity).
        service_account=sched.service_account,
        pod_labels=sched.pod_labels,
        pins=sched.images,
        # The cluster's own JobSet annotations (GKE queued provisioning: how long the nodes live).
        annotations=sched.job_annotations,
    )


# ---------------------------------------------------------------------------------------------
# Kubernetes, after a hang: one JobSet per pair (what ``pair_jobs.search`` runs each round).


def pair_jobset_name(run_id: str, a: str, b: str) -> str:
    """``gpuc-<run-id>-p-<6 hex>``: one per pair and run (A+B and B+A differ: the second pass
    pairs a suspect with a known-good node in that order)."""
    import hashlib

    return f"gpuc-{run_id}-p-{hashlib.sha256(f'{a}+{b}'.encode()).hexdigest()[:6]}"


def pair_module_args(job: ValidationJob, a: str, b: str) -> tuple[str, ...]:
    """The pairs phase as one pair's job: the run's own arguments, ``--pair-job A+B``."""
    typed = ("--instance-type", job.instance_type) if job.instance_type else ()
    out = job.workdir.rstrip("/")
    return ("run", "--out", out, *typed, *job.run_args, "--phase", "pairs", "--pair-job", f"{a}+{b}")


def pair_jobset(
    outputs: ClusterOutputs,
    job: ValidationJob,
    run_id: str,
    a: str,
    b: str,
    *,
    hosts: Mapping[str, str] | None = None,
    image: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One pair's JobSet and its NetworkPolicy: the run's pods (same image, fabric wiring, code
    ConfigMap, run directory) on two pods of one node each, reporting under the main job's pod
    names ``a`` and ``b`` and pinned to the Kubernetes nodes ``hosts`` maps them to (read from
    the main job's pods, ``spec.nodeName``); a name missing from ``hosts`` is left to the scheduler."""
    from gpu_cluster.workloads.launch import jobset as js

    whole = cluster_jobset(outputs, replace(job, nodes=2), run_id, image=image)
    # Out of the stack's Kueue queue: pinned to nodes that exist, a pair through a queued pool's
    # ProvisioningRequest would wait for new nodes that never carry those names (js.unqueued).
    spec = js.unqueued(
        replace(
            whole,
            name=pair_jobset_name(run_id, a, b),
            nodes=2,
            replicated_job=js.PAIR_SIDES[0],
            module_args=pair_module_args(job, a, b),
            first_step="pairs",
            then=(),
            # A pair has one torchrun step: no pod waits for a judge.
        )
    )
    hosts = hosts or {}
    manifest = js.pair_manifest(spec, ((a, hosts.get(a)), (b, hosts.get(b))))
    return manifest, js.network_policy(spec)


def judge_jobset_name(run_id: str) -> str:
    return f"gpuc-{run_id}-judge"


def judge_jobset(
    outputs: ClusterOutputs, job: ValidationJob, run_id: str, pairs_result: str, *, image: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """After the per-pair JobSets: one pod, no GPU, on the stack's GPU nodes (where the Lustre
    claim mounts), that writes the search ``submit`` ran into the run directory (``pairs_result``:
    phase-pairs.json as base64) and runs the judge, whose report comes back through its log as the
    main JobSet's would have. It mounts the run's code ConfigMap (owned by the main JobSet, which
    is kept until this one has ended). Returns the JobSet and its NetworkPolicy."""
    from gpu_cluster.workloads.launch import jobset as js

    whole = cluster_jobset(outputs, job, run_id, image=image)
    out = job.workdir.rstrip("/")
    judge_step = next(step for step in whole.then if step.name == "judge")
    spec = replace(
        whole,
        name=judge_jobset_name(run_id),
        nodes=1,
        replicated_job="judge",
        gpus_per_node=0,
        procs_per_node=1,
        efa_per_node=0,
        rdma_per_node=0,
        cpu="1",
        fabric=fabric_wiring.PodWiring(),
        first_step="record-pairs",
        module_args=("record-pairs", "--out", out, "--result", pairs_result),
        then=(judge_step,),
        agent_logs=None,
    )
    # On the nodes the pairs just left, not new ones: out of the queue as they are (js.unqueued).
    spec = js.unqueued(spec)
    return js.render(spec), js.network_policy(spec)
