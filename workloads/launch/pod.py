"""The hardened pod of a JobSet job, with its fabric wiring: security contexts, the
receive-datapath sidecar, the fabric's volumes, and the NetworkPolicy that admits only the
job's own pods.

The workload container drops all capabilities and adds back only what the fabric's catalog
entry names, each with its reason (the receive-datapath sidecar adds its own on top of the
runtime's defaults, as upstream runs it); no container may escalate privileges; the pod runs under the
runtime's default seccomp profile, mounts no service-account token (nothing in the job talks
to the API server) and, where the job says so, as a non-root user. These are the Kubernetes
checks Checkov runs (CKV_K8S_20, 23, 28, 29, 30, 31, 37, 38, CKV2_K8S_6; images by digest
CKV_K8S_43 where the catalog has the digest).

Deliberate exceptions, each for a reason the fabric gives:
* the workload runs as root where the fabric says so (EFA: ``runAsUser: 0``, the catalog's
  ``pod.run_as_root`` with its reason), else as the image's user, unless ``run_as_user`` is set
  (CKV_K8S_23, 40): the run directory is made under a root-owned Lustre mount and IPC_LOCK is
  effective only for root;
* the TCPX/TCPXO sidecar does not drop ALL (CKV_K8S_37): upstream adds its capabilities on top
  of the runtime's defaults;
* the TCPX/TCPXO receive-datapath daemon runs as root with NET_ADMIN (and NET_BIND_SERVICE on
  TCPXO) and mounts the host's ``/sys`` and ``/proc/sys``: it programs the GPU NICs, and a
  non-root process cannot use added capabilities (container-engine-accelerators' unprivileged
  profile, the least upstream documents).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gpu_cluster.components.catalog import load_fabric_facts
from gpu_cluster.workloads.launch.fabric import Capability, PodWiring, Sidecar

# What the rxdm's startup probe reads (container-engine-accelerators gpudirect-tcpxo/
# best-practice.md at 992db81: with HEALTH_CHECK_LOG_FILE set, the daemon writes the file once
# its buffer manager is up, "typically takes ~ 30s"; the file name may not contain '_'). A native
# sidecar's startup probe also holds the workload back until the daemon is ready.
RXDM_HEALTH_FILE = "/run/health-check"
# How long the probe waits. best-practice.md's sample probes every 5 s, 6 tries after 1 s: about 31 s,
# for an initialisation it says typically takes about 30 s, so a slow node's daemon is killed and
# restarted just as it would have come up. Google's Slurm prolog for the same daemon waits up to 60 x
# 2 s for its "Buffer manager initialization complete" (slurm-gcp tools/prologs-epilogs/
# receive-data-path-manager-mega at 13fd92b), the catalog's fabrics.tcpxo.startup_check.rxdm_wait_s,
# which the job's own fabric check waits too. The probe keeps the sample's period, timeout and first
# delay and allows that wait: failureThreshold = ceil(rxdm_wait_s / period).
RXDM_PROBE_PERIOD_S = 5


def rxdm_failure_threshold() -> int:
    """Probe tries that cover the catalog's rxdm wait (120 s: 24 tries of 5 s)."""
    wait = load_fabric_facts()[0]["tcpxo"].rxdm_wait_s
    return max(1, math.ceil(wait / RXDM_PROBE_PERIOD_S))


def container_security(
    caps: tuple[Capability, ...], run_as_user: int | None = None, *, root: bool = False
) -> dict[str, Any]:
    """Drop ALL, add back the fabric's. ``run_as_user``: that non-root uid; ``root``: uid 0
    stated (the fabric needs it, whatever the image's USER); neither: the image's user."""
    capabilities: dict[str, Any] = {"drop": ["ALL"]}
    if caps:
        capabilities["add"] = [c.add for c in caps]
    out: dict[str, Any] = {"allowPrivilegeEscalation": False, "capabilities": capabilities}
    if run_as_user is not None:
        out.update(runAsNonRoot=True, runAsUser=run_as_user, runAsGroup=run_as_user)
    elif root:
        out.update(runAsNonRoot=False, runAsUser=0, runAsGroup=0)
    return out


def sidecar_security(caps: tuple[Capability, ...]) -> dict[str, Any]:
    """The receive-datapath daemon keeps the runtime's default capabilities and adds the fabric's
    on top, as every upstream manifest does (container-engine-accelerators gpudirect-tcpxo/
    nccl-test-latest.yaml at 992db81, cluster-toolkit enable-tcpxo-in-workload.py at 1047080:
    ``capabilities: {add: [NET_ADMIN, NET_BIND_SERVICE]}``, no drop); dropping ALL would take away
    what its start-up script uses (chmod of its entrypoint, binding as root)."""
    out: dict[str, Any] = {"allowPrivilegeEscalation": False}
    if caps:
        out["capabilities"] = {"add": [c.add for c in caps]}
    return out


def pod_security(run_as_user: int | None) -> dict[str, Any]:
    """The pod's part: seccomp for every container; with ``run_as_user`` the volumes' group.
    The user itself is set on the workload container, not here: the fabric's sidecar must keep
    the image's root user (see the module notes)."""
    out: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
    if run_as_user is not None:
        out["fsGroup"] = run_as_user
    return out


def _env(env: Mapping[str, str]) -> list[dict[str, str]]:
    # Values with '$' are doubled by the caller where Kubernetes would expand them; the
    # sidecar's are plain paths.
    return [{"name": k, "value": v} for k, v in env.items()]


def sidecar(sc: Sidecar) -> dict[str, Any]:
    """The daemon as a native sidecar (an init container that keeps running): it starts before
    the workload and does not keep the Job from completing (Kubernetes sidecar containers;
    container-engine-accelerators gpudirect-tcpxo/best-practice.md)."""
    env = dict(sc.env)
    out: dict[str, Any] = {
        "name": sc.name,
        "image": sc.image.ref,
        "imagePullPolicy": "Always",
        "restartPolicy": "Always",
        "command": list(sc.command),
        "securityContext": sidecar_security(sc.capabilities),
        "volumeMounts": [{"name": v, "mountPath": m} for v, m in sc.mounts.items()],
    }
    if sc.name == "tcpxo-daemon":
        env["HEALTH_CHECK_LOG_FILE"] = RXDM_HEALTH_FILE
        out["startupProbe"] = {
            "exec": {"command": ["cat", RXDM_HEALTH_FILE]},
            "initialDelaySeconds": 1,
            "periodSeconds": RXDM_PROBE_PERIOD_S,
            "timeoutSeconds": 1,
            "successThreshold": 1,
            "failureThreshold": rxdm_failure_threshold(),
        }
    out["env"] = _env(env)
    return out


def gate_script() -> str:
    """The wait gate's POSIX sh: wait for every path of ``$GPUC_WAIT_FOR`` (a trailing ``/``: a
    directory that must not be empty) until ``$GPUC_WAIT_S`` seconds have passed, then fail with
    one line naming what never appeared and on which node."""
    return "\n".join(
        [
            "set -u",
            "end=$(( $(date +%s) + GPUC_WAIT_S ))",
            "for p in $GPUC_WAIT_FOR; do",
            "  while :; do",
            '    case "$p" in',
            '      */) if [ -n "$(ls -A "$p" 2>/dev/null)" ]; then break; fi ;;',
            '      *) if [ -e "$p" ]; then break; fi ;;',
            "    esac",
            '    if [ "$(date +%s)" -ge "$end" ]; then',
            '      echo "node installer not done on ${GPUC_NODE:-$(hostname)}: $p never appeared within ${GPUC_WAIT_S}s" >&2',
            "      exit 1",
            "    fi",
            "    sleep 2",
            "  done",
            "done",
            'echo "node ready: $GPUC_WAIT_FOR"',
        ]
    )


def wait_gate(
    image: str,
    paths: tuple[str, ...],
    volumes: tuple[str, ...],
    wiring: PodWiring,
    seconds: int,
    security: dict[str, Any],
) -> dict[str, Any]:
    """The init container that holds the pod until the node's installers have left ``paths``,
    first among the init containers: the receive-datapath sidecar and the workload bind the same
    host directories only after it (Kubernetes init containers run in order, each to completion).
    Named and configured as the liveness model reads it (components/liveness/ordering.py)."""
    # Here, not at the top: the job's own code bundle (workloads/launch/bundle.py) carries no
    # liveness model, and a pod imports this module when it builds the validate command's parser.
    from gpu_cluster.components.liveness.ordering import GATE, GATE_DEADLINE_ENV, GATE_PATHS_ENV

    return {
        "name": GATE,
        "image": image,
        # As the workload pulls the same image (CKV_K8S_15: a tag is re-resolved at every start).
        "imagePullPolicy": "Always",
        "command": ["/bin/sh", "-c", gate_script().replace("$", "$$")],
        "env": [
            {"name": GATE_PATHS_ENV, "value": " ".join(paths)},
            {"name": GATE_DEADLINE_ENV, "value": str(seconds)},
            {"name": "GPUC_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        ],
        # A read-only root (CKV_K8S_22): the gate's shell loop only reads paths, it writes nothing.
        "securityContext": {**security, "readOnlyRootFilesystem": True},
        "volumeMounts": [
            {"name": v, "mountPath": wiring.mounts[v], "readOnly": True, "mountPropagation": "HostToContainer"}
            for v in volumes
        ],
    }


def volumes(wiring: PodWiring) -> list[dict[str, Any]]:
    return [
        {"name": v.name, "hostPath": {"path": v.host_path}} if v.host_path else {"name": v.name, "emptyDir": {}}
        for v in wiring.volumes
    ]


def mounts(wiring: PodWiring) -> list[dict[str, Any]]:
    """The workload's mounts; a host directory a node installer fills (or binds into, like the
    aperture devices) is mounted HostToContainer, so what the installer mounts there later reaches
    the container too (Kubernetes docs, "Volumes": mount propagation)."""
    filled = set(wiring.node_waits()[1])
    return [
        {"name": v, "mountPath": m, **({"mountPropagation": "HostToContainer"} if v in filled else {})}
        for v, m in wiring.mounts.items()
    ]


def network_policy(name: str, namespace: str, labels: Mapping[str, str], selector: Mapping[str, str]) -> dict[str, Any]:
    """Ingress to the job's pods only from the job's own pods, on any port: the rendezvous
    ports are fixed, but NCCL's bootstrap and socket connections listen on ephemeral ports, so
    a port list would cut NCCL off. Egress stays open (DNS, the image registry, storage)."""
    own = {"podSelector": {"matchLabels": dict(selector)}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "podSelector": {"matchLabels": dict(selector)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [own]}],
        },
    }
