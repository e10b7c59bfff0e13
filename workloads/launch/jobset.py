"""Render the JobSet (jobset.x-k8s.io/v1alpha2) that runs one torchrun per node on Kubernetes.

One replicated job of one Indexed Job: ``parallelism = completions = nodes``, one pod per node,
each pod asking for the node's GPUs and fabric devices. The JobSet controller gives every pod a
stable DNS name through a headless service (``<jobset>-<rjob>-<job>-<pod>.<subdomain>``), so
the c10d rendezvous lives at pod 0 of job 0. That name only resolves once pod 0 exists, so each
pod waits for it before starting torchrun instead of failing on a lookup. Nothing restarts:
``backoffLimit: 0``, ``failurePolicy.maxRestarts: 0`` and ``torchrun --max-restarts=0``; a
restart would hide the fault a validation run looks for.

A spec with ``then`` steps runs them in the same pod after the first torchrun, the way the
Slurm launcher runs job steps: each torchrun step on every pod, each on its own rendezvous
port (a pod that finishes a step early must not join the store pod 0 still holds for it);
steps with ``torchrun=False`` only in pod 0 (``JOB_COMPLETION_INDEX`` 0), in their place in
the order. Every step runs even when an earlier one failed.
"""

from __future__ import annotations

import copy
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpu_cluster.workloads.launch import common, pod
from gpu_cluster.workloads.launch.common import Problems, Step, check_int, check_path
from gpu_cluster.workloads.launch.fabric import PodWiring
from gpu_cluster.workloads.launch.job import TorchrunJob, check_job, step_lines, step_name

API_VERSION = "jobset.x-k8s.io/v1alpha2"
GPU_RESOURCES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
EFA_RESOURCE = "vpc.amazonaws.com/efa"
# InfiniBand HCAs on AKS, one per HCA: the Network Operator's SR-IOV device plugin (rdma prefix,
# ib name; components/k8s/aks.py, from Azure/ai-infrastructure-on-azure a01b073 sriov.yaml).
RDMA_IB_RESOURCE = "rdma/ib"
CONTAINER = "torchrun"

# A JobSet's name is also its headless Service's name, so it must be a DNS-1035 label.
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
# Kubernetes resource.Quantity, the forms a person writes (no exponent forms).
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?\Z")
# Label keys/values and taint keys: an optional DNS prefix and a name (k8s validation rules).
_QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?\Z")
# Kueue's queue label (kubernetes-sigs/kueue site/content/en/docs/tasks/run/jobsets.md at v0.17.8, "Run A
# JobSet"; cluster-toolkit
# examples/gke-consumption-options/dws-flex-start-queued-provisioning/nccl-jobset-example.yaml).
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*\Z")


@dataclass(kw_only=True, frozen=True, slots=True)
class JobSetSpec(TorchrunJob):
    """One multi-node torchrun job (what runs: :class:`TorchrunJob`) as a JobSet (where: the pod
    options below). ``then``: torchrun steps run on every pod, the others on pod 0 only. When the
    last step is pod 0's alone (a judge reading what every pod wrote), the other pods exit 0 and
    pod 0 exits with that step's status: a failed pod would make the Job controller end pod 0
    before it judged. Otherwise every pod exits with its last step's status."""

    name: str
    """JobSet name, also the headless Service and DNS subdomain (DNS-1035 label)."""
    image: str
    """Container image holding Python, torch and the workloads package."""
    namespace: str = "default"
    """Namespace of the JobSet (and of the PVC it mounts)."""
    replicated_job: str = "workers"
    """Name of the single replicated job; part of every pod's host name."""
    gpu_vendor: str = "nvidia"
    """``nvidia`` (resource ``nvidia.com/gpu``) or ``amd`` (``amd.com/gpu``)."""
    efa_per_node: int = 0
    """``vpc.amazonaws.com/efa`` devices per pod (the catalog's EFA interface count); 0 off AWS."""
    rdma_per_node: int = 0
    """``rdma/ib`` devices per pod (the catalog's InfiniBand HCA count); 0 off AKS."""
    hugepages_2mi: str | None = None
    """``hugepages-2Mi`` per pod (e.g. ``5120Mi``); the EFA/libfabric path allocates from it."""
    memory: str | None = None
    """Memory request and limit per pod (e.g. ``1000Gi``); required with hugepages."""
    cpu: str | None = None
    """CPU request per pod (e.g. ``90``); unset leaves it to the namespace defaults."""
    shm_size: str = "64Gi"
    """Size limit of the memory-backed ``/dev/shm`` (NCCL and dataloaders use shared memory)."""
    lustre_pvc: str | None = None
    """PersistentVolumeClaim of the Lustre file system; unset mounts none."""
    lustre_mount: str = "/fsx"
    """Where the Lustre claim is mounted in the container."""
    dns_wait_s: int = 600
    """How long a pod waits for the rendezvous name to resolve before failing."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    """Node labels the pods require, e.g. the GPU node group's label."""
    tolerate_taints: tuple[str, ...] = ()
    """Taint keys tolerated with ``Exists``/``NoSchedule``, e.g. ``nvidia.com/gpu``."""
    ttl_seconds_after_finished: int | None = None
    """Delete the finished JobSet after this many seconds; unset keeps it for inspection."""
    wait_for_path: str | None = None
    """A path every pod waits for before its first step, e.g. the package's checkout on
    Lustre when the image does not carry it: a JobSet created with the cluster starts before
    anyone could copy code onto the new file system."""
    wait_for_path_s: int = 3600
    """How long a pod waits for ``wait_for_path`` before failing."""
    configmaps: Mapping[str, str] = field(default_factory=dict)
    """ConfigMaps mounted read-only into the container: name -> mount path (e.g. the job's
    code bundle)."""
    fabric: PodWiring = field(default_factory=PodWiring)
    """What the pod needs to reach the fabric (annotations, sidecar, volumes, capabilities;
    :mod:`gpu_cluster.workloads.launch.fabric`); the default wires nothing."""
    run_as_user: int | None = None
    """Run every container of the job as this non-root user (``runAsNonRoot``), where the image
    and the shared file system allow it; unset runs as the image's user (root in NGC images:
    the run directory is made under a root-owned Lustre mount). The fabric's sidecar keeps root."""
    queue: str | None = None
    """Kueue LocalQueue the JobSet is submitted through (label ``kueue.x-k8s.io/queue-name`` on
    the JobSet, as cluster-toolkit's queued flex-start example at 1047080 sets it); Kueue then
    starts it only once the ProvisioningRequest has all its nodes. Unset: no queue."""
    annotations: Mapping[str, str] = field(default_factory=dict)
    """Annotations of the JobSet itself: the cluster's (stack output scheduler.job_annotations, e.g.
    the ProvisioningRequest parameters Kueue passes on under provreq.kueue.x-k8s.io/)."""
    node_wait_s: int = 900
    """How long the gate waits for the node installers' paths (``fabric.node_waits``) before the
    pod fails naming what never appeared."""
    rdzv_host: str | None = None
    """Rendezvous address instead of pod 0's service name: for running the pod script outside
    Kubernetes (one node, ``localhost``)."""

    @property
    def rendezvous_host(self) -> str:
        """Pod 0 of job 0, through the JobSet's headless service (subdomain = JobSet name)."""
        if self.rdzv_host is not None:
            return self.rdzv_host
        return f"{self.name}-{self.replicated_job}-0-0.{self.name}"

    @property
    def rdzv_ports(self) -> tuple[int, ...]:
        """One rendezvous port per torchrun step, the first step's first."""
        count = 1 + sum(1 for step in self.then if isinstance(step, Step) and step.torchrun)
        return tuple(self.rdzv_port + i for i in range(count))

    @property
    def pod0_decides(self) -> bool:
        """The last step runs on pod 0 alone, so pod 0's status is the job's."""
        return bool(self.then) and isinstance(self.then[-1], Step) and not self.then[-1].torchrun


def _check_quantity(p: Problems, name: str, value: object, *, optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or not _QUANTITY.match(value):
        p.add(name, f"{value!r} is not a Kubernetes quantity (allowed: e.g. 5120Mi, 64Gi, 90, 500m)")


# An annotation key is a qualified name: an optional DNS-subdomain prefix and '/', then a name of at
# most 63 characters, alphanumeric at both ends with '-', '_', '.' between (Kubernetes docs,
# "Annotations": syntax and character set). This pattern is the name part only; _QUALIFIED_NAME above
# is a whole label key, prefix included, and must not be shadowed by it.
_ANNOTATION_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")


def _check_annotations(p: Problems, annotations: object) -> None:
    if not isinstance(annotations, Mapping):
        p.add("annotations", f"{annotations!r} is not a mapping of annotation keys to strings")
        return
    for key, value in annotations.items():
        prefix, _, name = key.rpartition("/") if isinstance(key, str) else ("", "", "")
        if not (
            isinstance(key, str)
            and _ANNOTATION_NAME.match(name)
            and (not prefix or (_DNS1123_SUBDOMAIN.match(prefix) and len(prefix) <= 253))
        ):
            p.add(
                "annotations", f"{key!r} is not an annotation key (allowed: [prefix/]name, name at most 63 characters)"
            )
        if not isinstance(value, str) or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            p.add("annotations", f"{key!r}: {value!r} is not a string without control characters")


def validate(spec: JobSetSpec) -> None:
    """Raise :class:`LaunchSpecError` naming every bad field at once."""
    p = Problems()
    if not isinstance(spec.name, str) or not _DNS1035.match(spec.name):
        p.add("name", f"{spec.name!r} is not a DNS-1035 label (allowed: [a-z]([-a-z0-9]*[a-z0-9])?)")
    if not isinstance(spec.replicated_job, str) or not _DNS1123_LABEL.match(spec.replicated_job):
        p.add(
            "replicated_job",
            f"{spec.replicated_job!r} is not a DNS-1123 label (allowed: [a-z0-9]([-a-z0-9]*[a-z0-9])?)",
        )
    check_job(p, spec, max_nodes=100_000)
    if spec.queue is not None and not (
        isinstance(spec.queue, str) and _DNS1123_SUBDOMAIN.match(spec.queue) and len(spec.queue) <= 63
    ):
        p.add("queue", f"{spec.queue!r} is not a LocalQueue name (allowed: a DNS-1123 name of at most 63 characters)")
    _check_annotations(p, spec.annotations)
    if (
        isinstance(spec.name, str)
        and isinstance(spec.replicated_job, str)
        and isinstance(spec.nodes, int)
        and spec.nodes >= 1
    ):
        # The last pod's host name must fit a DNS label, as the JobSet webhook requires.
        longest = f"{spec.name}-{spec.replicated_job}-0-{spec.nodes - 1}"
        if len(longest) > 63:
            p.add(
                "name",
                f"pod host name {longest!r} is {len(longest)} characters (allowed: at most 63); shorten name or replicated_job",
            )
    if not isinstance(spec.namespace, str) or not _DNS1123_LABEL.match(spec.namespace) or len(spec.namespace) > 63:
        p.add("namespace", f"{spec.namespace!r} is not a namespace name (DNS-1123 label)")
    if not isinstance(spec.image, str) or not _IMAGE.match(spec.image):
        p.add("image", f"{spec.image!r} is not an image reference (allowed: registry/name:tag or @digest, no blanks)")
    if not isinstance(spec.gpu_vendor, str) or spec.gpu_vendor not in GPU_RESOURCES:
        p.add("gpu_vendor", f"{spec.gpu_vendor!r} is not a GPU vendor (allowed: {', '.join(GPU_RESOURCES)})")
    check_int(p, "efa_per_node", spec.efa_per_node, minimum=0, maximum=64)
    check_int(p, "rdma_per_node", spec.rdma_per_node, minimum=0, maximum=64)
    _check_quantity(p, "hugepages_2mi", spec.hugepages_2mi, optional=True)
    _check_quantity(p, "memory", spec.memory, optional=True)
    _check_quantity(p, "cpu", spec.cpu, optional=True)
    _check_quantity(p, "shm_size", spec.shm_size, optional=False)
    if spec.hugepages_2mi is not None and spec.memory is None and spec.cpu is None:
        p.add("hugepages_2mi", "Kubernetes requires a memory or cpu request alongside hugepages; set memory")
    if spec.lustre_pvc is not None and (
        not isinstance(spec.lustre_pvc, str) or not _DNS1123_SUBDOMAIN.match(spec.lustre_pvc)
    ):
        p.add("lustre_pvc", f"{spec.lustre_pvc!r} is not a PersistentVolumeClaim name (DNS-1123 subdomain)")
    check_path(p, "lustre_mount", spec.lustre_mount)
    if spec.lustre_mount in ("/", "/dev/shm"):
        p.add("lustre_mount", f"{spec.lustre_mount!r} would hide a path the container needs")
    if spec.wait_for_path is not None:
        check_path(p, "wait_for_path", spec.wait_for_path)
    check_int(p, "wait_for_path_s", spec.wait_for_path_s, minimum=1)
    if isinstance(spec.rdzv_port, int) and not p.items and spec.rdzv_ports[-1] > 65535:
        p.add("rdzv_port", f"{spec.rdzv_port} + {len(spec.rdzv_ports) - 1} torchrun steps passes 65535")
    if spec.rdzv_host is not None and (
        not isinstance(spec.rdzv_host, str) or not _DNS1123_SUBDOMAIN.match(spec.rdzv_host)
    ):
        p.add("rdzv_host", f"{spec.rdzv_host!r} is not a host name (allowed: a DNS name or IPv4 address)")
    if not isinstance(spec.configmaps, Mapping):
        p.add("configmaps", f"{spec.configmaps!r} is not a mapping of ConfigMap name to mount path")
    else:
        for cm, mount in spec.configmaps.items():
            if not isinstance(cm, str) or not _DNS1123_SUBDOMAIN.match(cm) or len(cm) > 253:
                p.add(f"configmaps[{cm!r}]", "is not a ConfigMap name (DNS-1123 subdomain)")
            check_path(p, f"configmaps[{cm!r}]", mount)
    check_int(p, "dns_wait_s", spec.dns_wait_s, minimum=1)
    # The liveness model holds the gate to a deadline of at most an hour (components/liveness/ordering.py).
    check_int(p, "node_wait_s", spec.node_wait_s, minimum=1, maximum=3600)
    if not isinstance(spec.node_selector, Mapping):
        p.add("node_selector", f"{spec.node_selector!r} is not a mapping of label to value")
    else:
        for key, value in spec.node_selector.items():
            if not isinstance(key, str) or not _QUALIFIED_NAME.match(key):
                p.add(f"node_selector[{key!r}]", "is not a label key (allowed: [prefix/]name)")
            if not isinstance(value, str) or not _LABEL_VALUE.match(value) or len(value) > 63:
                p.add(f"node_selector[{key!r}]", f"value {value!r} is not a label value")
    if isinstance(spec.tolerate_taints, str) or not isinstance(spec.tolerate_taints, (list, tuple)):
        p.add("tolerate_taints", f"{spec.tolerate_taints!r} must be a sequence of taint keys")
    else:
        for i, key in enumerate(spec.tolerate_taints):
            if not isinstance(key, str) or not _QUALIFIED_NAME.match(key):
                p.add(f"tolerate_taints[{i}]", f"{key!r} is not a taint key (allowed: [prefix/]name)")
    if spec.ttl_seconds_after_finished is not None:
        check_int(p, "ttl_seconds_after_finished", spec.ttl_seconds_after_finished, minimum=0, maximum=2**31 - 1)
    if not isinstance(spec.fabric, PodWiring):
        p.add("fabric", f"{spec.fabric!r} is not a PodWiring (gpu_cluster.workloads.launch.fabric.wiring(f).pod)")
    if spec.run_as_user is not None:
        check_int(p, "run_as_user", spec.run_as_user, minimum=1, maximum=2**31 - 1)
    p.raise_if_any("JobSetSpec")


def _k8s_escape(text: str) -> str:
    # Kubernetes expands $(VAR) in command, args and env values, and turns $$ into $;
    # doubling every $ hands bash exactly the text rendered here.
    return text.replace("$", "$$")


def _torchrun(spec: JobSetSpec, module: str, args: tuple[str, ...], *, port: int, rdzv_id: str) -> list[str]:
    return common.torchrun_argv(
        python=spec.python,
        nnodes=str(spec.nodes),
        nproc_per_node=spec.ranks_per_node,
        endpoint=f'"$rdzv_host:{port}"',
        rdzv_id=shlex.quote(rdzv_id),
        join_timeout_s=spec.rdzv_join_timeout_s,
        module=module,
        module_args=args,
    )


def _torchrun_step(spec: JobSetSpec) -> Callable[[int, str, tuple[str, ...], str, int], str]:
    """Each torchrun step on its own port: a pod that finishes a step early must not join the
    store pod 0 still holds for it."""

    def cmd(n: int, module: str, args: tuple[str, ...], env_prefix: str, index: int) -> str:
        rdzv_id = spec.name if n == 1 else f"{spec.name}-{n}"
        line = env_prefix + " ".join(_torchrun(spec, module, args, port=spec.rdzv_port + index, rdzv_id=rdzv_id))
        if spec.agent_logs:
            # Kept beside the pod's log, on the shared file system the judge in pod 0 reads.
            line += f' 2>&1 | tee -a {shlex.quote(spec.agent_logs)}/{step_name(spec, n)}-"$(hostname)".log'
        return line

    return cmd


def _steps(spec: JobSetSpec) -> list[str]:
    """Every step in order, each recording its status; pod-0-only steps inside an if."""
    lines = step_lines(spec, _torchrun_step(spec), announce_first=False, local_guard='[ "$pod_index" -eq 0 ]')
    if spec.pod0_decides:
        lines += [
            "",
            'if [ "$pod_index" -ne 0 ]; then',
            f'  echo "pod $pod_index done; pod 0 decides the status of {spec.name}"',
            "  exit 0",
            "fi",
        ]
    lines.append('exit "$step_rc"')
    return lines


def _wait_for_path(spec: JobSetSpec) -> list[str]:
    if spec.wait_for_path is None:
        return []
    q = shlex.quote
    path = q(spec.wait_for_path)
    return [
        f"deadline=$((SECONDS + {spec.wait_for_path_s}))",
        f"until [ -e {path} ]; do",
        '  if [ "$SECONDS" -ge "$deadline" ]; then',
        f"    echo {q(f'{spec.wait_for_path} did not appear within {spec.wait_for_path_s}s')} >&2",
        "    exit 1",
        "  fi",
        "  sleep 10",
        "done",
    ]


def pod_script(spec: JobSetSpec) -> str:
    """The container's bash script, before Kubernetes ``$`` escaping: wait for the
    rendezvous name, then exec torchrun (or run every step in turn). Every value from the
    spec is shell-quoted."""
    q = shlex.quote
    head = ["set -euo pipefail", f"rdzv_host={q(spec.rendezvous_host)}"]
    if spec.agent_logs:
        # A pod that started says so where the judge reads, before it waits for pod 0's name: a
        # rendezvous that never completes is then told from a pod that never started.
        agent_log = f'{q(spec.agent_logs)}/{spec.first_step}-"$(hostname)".log'
        head += [
            f"mkdir -p {q(spec.agent_logs)}",
            f'echo "pod ${{JOB_COMPLETION_INDEX:-?}} started on $(hostname); waiting for the rendezvous host '
            f'$rdzv_host" >> {agent_log}',
        ]
    if spec.then:
        # An Indexed Job always sets it; without it no pod could know whether it is pod 0.
        head.append('pod_index="${JOB_COMPLETION_INDEX:?not set: the pod must belong to an Indexed Job}"')
    launch = (
        ["exec " + " ".join(_torchrun(spec, spec.module, spec.module_args, port=spec.rdzv_port, rdzv_id=spec.name))]
        if not spec.then
        else _steps(spec)
    )
    return "\n".join(
        [
            *head,
            f"deadline=$((SECONDS + {spec.dns_wait_s}))",
            # Pod 0's record appears only once pod 0 exists; torchrun would fail on the
            # lookup instead of waiting for it. Python resolves the way torch will.
            f"until {q(spec.python)} -c 'import socket, sys; socket.getaddrinfo(sys.argv[1], None)' \"$rdzv_host\" 2>/dev/null; do",
            '  if [ "$SECONDS" -ge "$deadline" ]; then',
            f'    echo "rendezvous host $rdzv_host did not resolve within {spec.dns_wait_s}s" >&2',
            *(
                [
                    f'    echo "rendezvous host $rdzv_host did not resolve within {spec.dns_wait_s}s" '
                    f'>> {q(spec.agent_logs)}/{spec.first_step}-"$(hostname)".log'
                ]
                if spec.agent_logs
                else []
            ),
            "    exit 1",
            "  fi",
            "  sleep 2",
            "done",
            f"mkdir -p {q(spec.workdir)} {q(spec.nccl_dir)}",
            *_wait_for_path(spec),
            f"cd {q(spec.workdir)}",
            *([spec.prologue.rstrip(chr(10))] if spec.prologue else []),
            *spec.fabric_lines(),
            f'echo "pod ${{JOB_COMPLETION_INDEX:-?}} of {spec.nodes}: rendezvous $rdzv_host:{spec.rdzv_port}"',
            *launch,
            "",
        ]
    )


def _resources(spec: JobSetSpec) -> dict[str, dict[str, str]]:
    # Extended resources and hugepages must have request == limit; memory is set the same
    # way so a training pod is never evicted for exceeding a lower request.
    limits: dict[str, str] = {}
    if spec.gpus_per_node > 0:
        limits[GPU_RESOURCES[spec.gpu_vendor]] = str(spec.gpus_per_node)
    if spec.efa_per_node > 0:
        limits[EFA_RESOURCE] = str(spec.efa_per_node)
    if spec.rdma_per_node > 0:
        limits[RDMA_IB_RESOURCE] = str(spec.rdma_per_node)
    if spec.hugepages_2mi is not None:
        limits["hugepages-2Mi"] = spec.hugepages_2mi
    if spec.memory is not None:
        limits["memory"] = spec.memory
    requests = dict(limits)
    if spec.cpu is not None:
        requests["cpu"] = spec.cpu
    out: dict[str, dict[str, str]] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def render(spec: JobSetSpec) -> dict[str, Any]:
    """The JobSet manifest as a dict (after :func:`validate`)."""
    validate(spec)
    wiring = spec.fabric
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.image,
        # Always: a tag is re-resolved at every start (a digest-pinned image is only re-checked).
        "imagePullPolicy": "Always",
        "command": ["/bin/bash", "-c", _k8s_escape(pod_script(spec))],
        "env": [{"name": k, "value": _k8s_escape(v)} for k, v in spec.environment().items()],
        "ports": [
            {"name": "rdzv" if i == 0 else f"rdzv-{i + 1}", "containerPort": port, "protocol": "TCP"}
            for i, port in enumerate(spec.rdzv_ports)
        ],
        "securityContext": pod.container_security(
            wiring.capabilities, spec.run_as_user, root=wiring.run_as_root is not None
        ),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, *pod.mounts(wiring)],
    }
    resources = _resources(spec)
    if resources:
        container["resources"] = resources
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm_size}},
        *pod.volumes(wiring),
    ]
    if spec.lustre_pvc is not None:
        container["volumeMounts"].append({"name": "lustre", "mountPath": spec.lustre_mount})
        volumes.append({"name": "lustre", "persistentVolumeClaim": {"claimName": spec.lustre_pvc}})
    for i, (cm, mount) in enumerate(sorted(spec.configmaps.items())):
        container["volumeMounts"].append({"name": f"cm-{i}", "mountPath": mount, "readOnly": True})
        volumes.append({"name": f"cm-{i}", "configMap": {"name": cm}})
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": pod.pod_security(spec.run_as_user),
    }
    inits: list[dict[str, Any]] = []
    waits, wait_volumes = wiring.node_waits()
    if waits:
        gate_security = pod.container_security((), spec.run_as_user, root=wiring.run_as_root is not None)
        inits.append(pod.wait_gate(spec.image, waits, wait_volumes, wiring, spec.node_wait_s, gate_security))
    if wiring.sidecar is not None:
        inits.append(pod.sidecar(wiring.sidecar))
    if inits:
        pod_spec["initContainers"] = inits
    pod_spec.update(containers=[container], volumes=volumes)
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerate_taints:
        pod_spec["tolerations"] = [
            {"key": k, "operator": "Exists", "effect": "NoSchedule"} for k in spec.tolerate_taints
        ]
    labels = {"app.kubernetes.io/name": spec.name, "app.kubernetes.io/component": "torchrun"}
    job_spec = {
        "parallelism": spec.nodes,
        "completions": spec.nodes,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        # A copy: one dict in two places would come out of YAML as an anchor and alias.
        "template": {
            "metadata": {
                "labels": dict(labels),
                **({"annotations": wiring.annotations()} if wiring.annotations() else {}),
            },
            "spec": pod_spec,
        },
    }
    js_spec: dict[str, Any] = {
        "failurePolicy": {"maxRestarts": 0},
        # publishNotReadyAddresses: pod 0 must be resolvable before it is Ready, or the
        # rendezvous could never start.
        "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True, "subdomain": spec.name},
        "replicatedJobs": [{"name": spec.replicated_job, "replicas": 1, "template": {"spec": job_spec}}],
    }
    if spec.ttl_seconds_after_finished is not None:
        js_spec["ttlSecondsAfterFinished"] = spec.ttl_seconds_after_finished
    js_labels = {**labels, **({QUEUE_LABEL: spec.queue} if spec.queue else {})}
    return {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": {
            "name": spec.name,
            "namespace": spec.namespace,
            "labels": js_labels,
            **({"annotations": dict(spec.annotations)} if spec.annotations else {}),
        },
        "spec": js_spec,
    }


def network_policy(spec: JobSetSpec) -> dict[str, Any]:
    """The NetworkPolicy that admits the rendezvous and NCCL traffic of the job's pods only
    from each other (create it with the JobSet)."""
    labels = {"app.kubernetes.io/name": spec.name, "app.kubernetes.io/component": "torchrun"}
    return pod.network_policy(spec.name, spec.namespace, labels, labels)


def to_yaml(manifest: Mapping[str, Any]) -> str:
    """YAML in the field order rendered (readable next to the JobSet docs)."""
    return yaml.safe_dump(dict(manifest), sort_keys=False, default_flow_style=False, width=100)


# The label every node carries with its name (kubernetes.io docs, "Well-Known Labels, Annotations
# and Taints": kubernetes.io/hostname, read 2026-12-01); cluster-health-scanner pins each pair's
# job to its two nodes with it (deploy/helm/health_checks/nccl_healthcheck/templates/
# nccl_healthcheck.yaml at 81c525d8: nodeAffinity kubernetes.io/hostname In [NODE0, NODE1]).
HOSTNAME_LABEL = "kubernetes.io/hostname"
PAIR_SIDES = ("a", "b")
"""The replicated jobs of a pair's JobSet, one pod each: ``a`` holds the rendezvous."""


def pair_manifest(spec: JobSetSpec, sides: tuple[tuple[str, str | None], tuple[str, str | None]]) -> dict[str, Any]:
    """One pair's JobSet: ``spec`` (2 nodes, ``replicated_job`` ``a``, no further steps) split into
    two replicated jobs of one pod each, so each side is placed and named on its own: ``sides`` is
    ((name A reports under, Kubernetes node to pin it to or None), (B, ...)). The rendezvous stays
    on pod ``<name>-a-0-0``."""
    p = Problems()
    if spec.nodes != 2 or spec.replicated_job != PAIR_SIDES[0] or spec.then:
        p.add("spec", "a pair's JobSet has nodes=2, replicated_job='a' and no further steps")
    for i, (report_as, host) in enumerate(sides):
        if not isinstance(report_as, str) or not _LABEL_VALUE.match(report_as) or not report_as:
            p.add(f"sides[{i}]", f"{report_as!r} is not a node name")
        if host is not None and (not isinstance(host, str) or not _DNS1123_SUBDOMAIN.match(host) or len(host) > 63):
            p.add(
                f"sides[{i}]",
                f"{host!r} is not a Kubernetes node name (allowed: a DNS-1123 name, value of {HOSTNAME_LABEL})",
            )
    p.raise_if_any("pair JobSet")
    manifest = render(spec)
    (template,) = manifest["spec"]["replicatedJobs"]
    jobs = []
    for side, (report_as, host) in zip(PAIR_SIDES, sides, strict=True):
        rjob = copy.deepcopy(template)
        rjob["name"] = side
        job_spec = rjob["template"]["spec"]
        job_spec["parallelism"] = job_spec["completions"] = 1
        pod_spec = job_spec["template"]["spec"]
        (container,) = pod_spec["containers"]
        # The name the pair's ranks report under: the main job's, so the search reads them back.
        container["env"].append({"name": "GPUC_NODE_NAME", "value": _k8s_escape(report_as)})
        if host is not None:
            pod_spec["nodeSelector"] = {**pod_spec.get("nodeSelector", {}), HOSTNAME_LABEL: host}
        jobs.append(rjob)
    manifest["spec"]["replicatedJobs"] = jobs
    return manifest
