"""The stack outputs: what ``pulumi up`` hands to the validation command and to the user.

This module is the contract between the two sides of the house. The Pulumi program
(``components/<cloud>/cluster.py``) returns a mapping with exactly ``OUTPUT_KEYS``; the
validation command (``python -m gpu_cluster.workloads.validate submit|render|status STACK``) reads the
JSON that ``pulumi stack output --json --show-secrets`` prints back through
:func:`read_outputs` into :class:`ClusterOutputs`. It imports neither Pulumi nor torch, so
both sides can share it, as they share the catalog.

Shapes (every value plain JSON once the stack is up):

* ``fabric``  ``{type: efa|tcpx|tcpxo|rdma|ib, interfaces_per_node, placement, mtu, networks}``,
  ``networks`` the GKE Network objects of the additional NICs (``[]`` elsewhere)
* ``mount``   ``{type: lustre, mount_point, dns_name, mount_name, volume_handle, mount_command}``: the one
  description of the Lustre file system on every cloud (``mount_point`` is where nodes and
  pods see it)
* ``access``  Kubernetes: ``{api_endpoint, kubeconfig_command, kubeconfig}`` (the kubeconfig is
  a secret output); Slurm: ``{login, ssh_command, cluster_id?, scale_set_id?}``
* ``scheduler`` Slurm: ``{kind: slurm, partition}``; Kubernetes: ``{kind: kubernetes,
  namespace, lustre_claim, node_selector, tolerations, queue?, images?, service_account?, pod_labels?}``
  (service_account and pod_labels: what the jobs' pods run as and carry; queue: the Kueue LocalQueue
  jobs go through where the nodes come only with a ProvisioningRequest; images: the stack's image
  pins, components/image_pins.py)
* ``dashboard`` where the stack's GPU dashboard is: ``{kind: grafana, url, id}`` on AWS and Azure (the
  Grafana workspace's https address and its id: Amazon Managed Grafana's ``g-...`` workspace id, Azure
  Managed Grafana's ARM resource id), which ``gpu-cluster dashboards import`` puts the dashboard into;
  ``{kind: cloud-monitoring, id}`` on GCP (the Cloud Monitoring dashboard ``pulumi up`` created)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gpu_cluster.components.problems import Problems, ProblemsError

OUTPUT_KEYS = (
    "cloud",
    "region",
    "zone",
    "orchestrator",
    "cluster_name",
    "instance_type",
    "nodes",
    "gpus_per_node",
    "fabric",
    "mount",
    "bucket",
    "access",
    "scheduler",
    "dashboard",
)
# Keys a stack last updated by an older gpu-cluster lacks and that the validation does not need: read
# as None (``dashboards import`` then asks for ``--url``) rather than refused, so such a stack stays
# validatable and healable without a ``pulumi up``.
LATER_KEYS = ("dashboard",)


# The registration taint of the GPU pools (issue 41, I6): a new node (a replacement, a scale-up, a
# cloud's own repair) registers with it and takes no work until a validation passes it: `validate
# submit` removes it from each node the judge PASSed, heal's return to service from a replacement
# that passed its revalidation. The validation job's and heal's check pods tolerate it (the stacks
# list it in scheduler.tolerations); the user's pods do not. Which pools carry it, and why some do
# not, is in components/<cloud>/ beside each pool and in docs/heal.md (I6).
# The directory on a Slurm stack's GPU nodes whose ``*.prom`` files the node exporter's textfile
# collector serves (``--collector.textfile.directory``, prometheus/node_exporter README.md lines
# 324-340 at v1.12.1): the boot scripts make it and pass it to the exporter (components/aws/
# slurm_metrics.py, components/azure/slurm_metrics.py), the validation's judge writes its figures
# into it (gpu_cluster.workloads.validate.metrics_export). Our own path, under /var/lib as the
# README's examples and Debian's package (/var/lib/prometheus/node-exporter) keep theirs.
METRICS_TEXTFILE_DIR = "/var/lib/gpu-cluster/node-exporter"
# The Kubernetes stacks' Pushgateway (components/k8s/metrics.py pushgateway): the in-cluster address the
# validation's judge pushes its figures to (cluster DNS <service>.<namespace>.svc, kubernetes.io/docs/
# concepts/services-networking/dns-pod-service, read 2026-12-07; port 9091, the Pushgateway's default,
# prometheus/pushgateway README.md line 264 at v1.11.3, e803ebd) and the service heal reaches through
# the API server's proxy. The chart's fullnameOverride names the Service.
METRICS_PUSH_NAMESPACE = "kube-system"
METRICS_PUSH_SERVICE = "gpu-cluster-pushgateway"
METRICS_PUSH_PORT = 9091
METRICS_PUSH_URL = f"http://{METRICS_PUSH_SERVICE}.{METRICS_PUSH_NAMESPACE}.svc:{METRICS_PUSH_PORT}"
# The orchestrators whose stacks deploy it and scrape it (EKS: the AMP scraper; AKS: the ama-metrics
# agent; GKE: managed collection's PodMonitoring, components/gcp/metrics.py).
PUSHGATEWAY_STACKS = ("eks", "aks", "gke")
UNVALIDATED_TAINT_KEY = "gpu-cluster.io/unvalidated"
UNVALIDATED_TAINT_VALUE = "true"
UNVALIDATED_TAINT_EFFECT = "NoSchedule"
# The same mark on a Slurm stack whose nodes register themselves (Azure Slurm's dynamic nodes,
# components/azure/slurm_config.py): the node registers drained (``slurmd -Z --conf "... State=DRAIN"``)
# and its boot script sets this reason (Slurm appends ``[user@time]``). Only a passed check
# resumes it: ``validate submit`` (gpu_cluster.workloads.validate.slurm_admit) and heal's release.
UNVALIDATED_SLURM_REASON = "gpu-cluster unvalidated"


def unvalidated_reason(reason: str) -> bool:
    """A Slurm drain reason that is the registration's mark (:data:`UNVALIDATED_SLURM_REASON`)."""
    return reason.startswith(UNVALIDATED_SLURM_REASON)


# The key under which components/<cloud>/cluster.py build() hands GpuCluster the facts that are
# its typed attributes but not stack outputs (network, subnet, security group, file system, ...).
COMPONENT_FACTS = "_component"


class OutputsError(ProblemsError):
    """Stack outputs that do not have the contract's shape; every problem at once (components/problems.py)."""

    def __init__(self, source: str, problems: Sequence[tuple[str, str]]) -> None:
        super().__init__(f"{source}: {len(problems)} problem(s) in the stack outputs:", problems)


@dataclass(frozen=True, slots=True, kw_only=True)
class Fabric:
    type: str
    """efa, tcpx, tcpxo, rdma or ib."""
    interfaces_per_node: int
    placement: str | None
    mtu: int
    networks: tuple[Mapping[str, Any], ...] = ()
    """GKE: ``{name, vpc, subnet, device_mode}`` per additional NIC."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Mount:
    mount_point: str
    """Where every node and pod sees the file system, e.g. ``/fsx``."""
    dns_name: str
    mount_name: str
    mount_command: str
    volume_handle: str = ""
    """How a CSI driver names the file system (FSx id; ``<project>/<zone>/<instance>``)."""
    type: str = "lustre"


@dataclass(frozen=True, slots=True, kw_only=True)
class Access:
    api_endpoint: str | None = None
    kubeconfig_command: str | None = None
    kubeconfig: str | None = None
    """The kubeconfig itself (a secret output; it holds no token, only the exec plugin)."""
    login: str | None = None
    """Slurm login node."""
    ssh_command: str | None = None
    """The command that opens a shell on the login node (ssh, gcloud compute ssh)."""
    cluster_id: str | None = None
    scale_set_id: str | None = None
    """Azure Slurm: the GPU scale set's resource ID, through which heal replaces a node."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Scheduler:
    kind: Literal["slurm", "kubernetes"]
    partition: str | None = None
    namespace: str | None = None
    lustre_claim: str | None = None
    """PersistentVolumeClaim of the Lustre file system, in ``namespace``."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[str, ...] = ()
    """Taint keys the GPU nodes carry (tolerated with Exists/NoSchedule)."""
    queue: str | None = None
    """Kueue LocalQueue (in ``namespace``) jobs are submitted through, where the GPU nodes come
    only through it (GKE multi-node flex-start: queued provisioning)."""
    images: Mapping[str, str] = field(default_factory=dict)
    """The stack's image pins, ``repo:tag`` to ``sha256:...`` (components/image_pins.py): the job's
    image and sidecar are pulled by these digests where the catalog has none."""
    job_annotations: Mapping[str, str] = field(default_factory=dict)
    """Annotations every JobSet of the cluster carries: on GKE queued provisioning, the
    ProvisioningRequest's parameters Kueue passes on (``provreq.kueue.x-k8s.io/maxRunDurationSeconds``)."""
    mirrors: Mapping[str, str] = field(default_factory=dict)
    """Registry host to the prefix pods pull its images through instead (``public.ecr.aws`` to an ECR
    pull-through cache of the account, components/aws/image_cache.py)."""
    service_account: str | None = None
    """The Kubernetes account (in ``namespace``) the jobs' pods run as: on AKS the one bound to the
    checkpoint container's identity (components/azure/workload_identity.py)."""
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    """Labels every job pod carries: on AKS ``azure.workload.identity/use: "true"``, which the
    workload identity webhook acts on."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Dashboard:
    kind: Literal["grafana", "cloud-monitoring"]
    url: str | None = None
    """Grafana: the workspace's base address, ``https://<host>``."""
    id: str | None = None
    """Amazon Managed Grafana: the workspace id (``g-...``), through which ``dashboards import`` mints its
    token; Azure Managed Grafana: the workspace's ARM resource id; GCP: the Cloud Monitoring dashboard."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterOutputs:
    cloud: str
    region: str
    zone: str
    orchestrator: Literal["eks", "gke", "aks", "slurm"]
    cluster_name: str
    instance_type: str
    nodes: int
    gpus_per_node: int
    fabric: Fabric
    mount: Mount
    bucket: str
    access: Access
    scheduler: Scheduler
    dashboard: Dashboard | None = None
    """None for a stack last updated before the key existed (``LATER_KEYS``)."""


class _Reader(Problems):
    """The shared collector (components/problems.py) with the readers the outputs need."""

    def obj(self, raw: Any, path: str) -> Mapping[str, Any]:
        if not isinstance(raw, Mapping):
            self.add(path, f"expected an object, got {type(raw).__name__}")
            return {}
        return raw

    def text(self, m: Mapping[str, Any], key: str, path: str, optional: bool = False) -> str | None:
        value = m.get(key)
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value:
            self.add(f"{path}{key}", f"expected a non-empty string, got {value!r}")
            return None
        return value

    def number(self, m: Mapping[str, Any], key: str, path: str, minimum: int) -> int:
        value = m.get(key)
        # Pulumi's JSON and the mock engine give numbers as floats (4.0): accept whole ones.
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            self.add(f"{path}{key}", f"expected an integer >= {minimum}, got {value!r}")
            return minimum
        return value


def read_outputs(raw: Any, source: str = "stack outputs") -> ClusterOutputs:
    """The typed outputs, or :class:`OutputsError` naming every missing or malformed key."""
    r = _Reader()
    top = r.obj(raw, "outputs")
    missing = [k for k in OUTPUT_KEYS if k not in top and k not in LATER_KEYS]
    for key in missing:
        r.add(key, "missing (is the stack up, and built by this version of gpu-cluster?)")
    if missing:
        raise OutputsError(source, r.items)
    orchestrator = r.text(top, "orchestrator", "")
    if orchestrator not in (None, "eks", "gke", "aks", "slurm"):
        r.add("orchestrator", f"{orchestrator!r} (allowed: eks, gke, aks, slurm)")
    fab = r.obj(top["fabric"], "fabric")
    networks = fab.get("networks") or []
    if not isinstance(networks, list) or not all(
        isinstance(n, Mapping) and isinstance(n.get("name"), str) for n in networks
    ):
        r.add("fabric.networks", f"expected a list of {{name, vpc, subnet, device_mode}}, got {networks!r}")
        networks = []
    fabric = Fabric(
        type=r.text(fab, "type", "fabric.") or "",
        interfaces_per_node=r.number(fab, "interfaces_per_node", "fabric.", 0),
        placement=r.text(fab, "placement", "fabric.", optional=True),
        mtu=r.number(fab, "mtu", "fabric.", 0),
        networks=tuple(dict(n) for n in networks),
    )
    mo = r.obj(top["mount"], "mount")
    mount = Mount(
        mount_point=r.text(mo, "mount_point", "mount.") or "/",
        dns_name=r.text(mo, "dns_name", "mount.") or "",
        mount_name=r.text(mo, "mount_name", "mount.") or "",
        mount_command=r.text(mo, "mount_command", "mount.") or "",
        volume_handle=r.text(mo, "volume_handle", "mount.") or "",
    )
    if not mount.mount_point.startswith("/"):
        r.add("mount.mount_point", f"{mount.mount_point!r} is not an absolute path")
    ac = r.obj(top["access"], "access")
    access = Access(
        **{
            k: r.text(ac, k, "access.", optional=True)
            for k in (
                "api_endpoint",
                "kubeconfig_command",
                "kubeconfig",
                "login",
                "ssh_command",
                "cluster_id",
                "scale_set_id",
            )
        }
    )
    sc = r.obj(top["scheduler"], "scheduler")
    raw_kind = sc.get("kind")
    kind: Literal["slurm", "kubernetes"] = "kubernetes" if raw_kind == "kubernetes" else "slurm"
    if raw_kind not in ("slurm", "kubernetes"):
        r.add("scheduler.kind", f"{raw_kind!r} (allowed: slurm, kubernetes)")
    selector = sc.get("node_selector") or {}
    if not isinstance(selector, Mapping) or not all(isinstance(v, str) for v in selector.values()):
        r.add("scheduler.node_selector", f"expected an object of label to value, got {selector!r}")
        selector = {}
    tolerations = sc.get("tolerations") or []
    if not isinstance(tolerations, list) or not all(isinstance(t, str) for t in tolerations):
        r.add("scheduler.tolerations", f"expected a list of taint keys, got {tolerations!r}")
        tolerations = []
    scheduler = Scheduler(
        kind=kind,
        partition=r.text(sc, "partition", "scheduler.", optional=kind != "slurm"),
        namespace=r.text(sc, "namespace", "scheduler.", optional=kind != "kubernetes"),
        lustre_claim=r.text(sc, "lustre_claim", "scheduler.", optional=True),
        node_selector=dict(selector),
        tolerations=tuple(tolerations),
        queue=r.text(sc, "queue", "scheduler.", optional=True),
        images=_images(r, sc.get("images")),
        mirrors=_mirrors(r, sc.get("mirrors")),
        job_annotations=_strings(r, sc.get("job_annotations"), "scheduler.job_annotations"),
        service_account=r.text(sc, "service_account", "scheduler.", optional=True),
        pod_labels=_strings(r, sc.get("pod_labels"), "scheduler.pod_labels"),
    )
    if orchestrator == "slurm" and kind != "slurm" or orchestrator in ("eks", "gke", "aks") and kind != "kubernetes":
        r.add("scheduler.kind", f"{kind!r} does not go with orchestrator {orchestrator!r}")
    if kind == "kubernetes" and not access.kubeconfig:
        r.add("access.kubeconfig", "missing: read the outputs with --show-secrets")
    dashboard = _dashboard(r, top["dashboard"]) if "dashboard" in top else None
    out = ClusterOutputs(
        cloud=r.text(top, "cloud", "") or "",
        region=r.text(top, "region", "") or "",
        zone=r.text(top, "zone", "") or "",
        orchestrator=orchestrator if orchestrator in ("eks", "gke", "aks", "slurm") else "slurm",  # type: ignore[arg-type]
        cluster_name=r.text(top, "cluster_name", "") or "",
        instance_type=r.text(top, "instance_type", "") or "",
        nodes=r.number(top, "nodes", "", 1),
        gpus_per_node=r.number(top, "gpus_per_node", "", 0),
        fabric=fabric,
        mount=mount,
        bucket=r.text(top, "bucket", "") or "",
        access=access,
        scheduler=scheduler,
        dashboard=dashboard,
    )
    if r:
        raise OutputsError(source, r.items)
    return out


def _dashboard(r: _Reader, raw: Any) -> Dashboard:
    da = r.obj(raw, "dashboard")
    raw_kind = da.get("kind")
    kind: Literal["grafana", "cloud-monitoring"] = "cloud-monitoring" if raw_kind == "cloud-monitoring" else "grafana"
    if raw_kind not in ("grafana", "cloud-monitoring"):
        r.add("dashboard.kind", f"{raw_kind!r} (allowed: grafana, cloud-monitoring)")
    # The address's scheme is judged where it is used (gpu_cluster/dashboards.py check_url).
    url = r.text(da, "url", "dashboard.", optional=kind != "grafana")
    return Dashboard(kind=kind, url=url, id=r.text(da, "id", "dashboard.", optional=True))


def _strings(r: _Reader, raw: Any, path: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        r.add(path, f"expected an object of strings, got {raw!r}")
        return {}
    return dict(raw)


def _mirrors(r: _Reader, raw: Any) -> dict[str, str]:
    return _strings(r, raw, "scheduler.mirrors")


def _images(r: _Reader, raw: Any) -> dict[str, str]:
    from gpu_cluster.components.image_pins import check_pins

    pins, problems = check_pins(raw)
    for path, why in problems:
        r.add(f"scheduler.{path}", why)
    return pins


def load_outputs(path: Path) -> ClusterOutputs:
    """Read a file holding ``pulumi stack output --json --show-secrets``."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise OutputsError(str(path), [("", f"cannot read JSON: {exc}")]) from None
    return read_outputs(raw, str(path))
