"""What the offline plan cannot promise, each caveat with its own reason (issue 26): where the
nodes are placed and why, what flex-start and spot capacity mean for a job that spans every
node, and a zone the offline checks could not look at. Pure: spec, catalog and the program's
outputs in, ``(topic, text)`` out; components/plan.py prints them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from gpu_cluster.components.aws.common import ECR_PUBLIC as UPSTREAM
from gpu_cluster.components.aws.common import cache_prefix
from gpu_cluster.components.aws.rules import capacity_note
from gpu_cluster.components.catalog import load_fabric_facts
from gpu_cluster.components.catalog_file import CATALOG_PATH
from gpu_cluster.components.gcp import rules as gcp_rules
from gpu_cluster.components.image_pins import unpinned
from gpu_cluster.components.spec import ClusterSpec

# Google, "About flex-start provisioning mode" (GKE, cloud.google.com/kubernetes-engine/docs/concepts/dws,
# read 2026-12-01): flex-start VMs are provisioned when the capacity is available, run for up to
# seven days, and are billed at Dynamic Workload Scheduler prices (discounted vCPUs and GPUs,
# pay as you go). The program sets the same limit (components/gcp/compute.py FLEX_START_MAX_DURATION).
FLEX_START_MAX_DAYS = 7
FLEX_START_SOURCE = "cloud.google.com/kubernetes-engine/docs/concepts/dws"
# AWS, "Spot Instance interruption notices" (docs.aws.amazon.com/AWSEC2/latest/UserGuide/
# spot-instance-termination-notices.html, read 2026-12-01): "a warning that is issued two minutes
# before Amazon EC2 stops or terminates your Spot Instance", on a best-effort basis.
# Google, "Create and use Spot VMs" (cloud.google.com/compute/docs/instances/create-use-spot, read
# 2026-12-01): "Compute Engine might reclaim the resources by preempting Spot VMs at any time".
# Azure, "Scheduled Events for Linux VMs" (MicrosoftDocs/azure-compute-docs
# articles/virtual-machines/linux/scheduled-events.md @533281d, "Event scheduling"): EventType
# Preempt, "The Spot Virtual Machine is being deleted ... made available on a best effort basis",
# minimum notice 30 seconds. An AKS spot pool's nodes are Azure Spot VMs of a scale set.
SPOT_NOTICE = {
    "aws": "EC2 warns two minutes before it interrupts a spot instance (best effort; "
    "docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html)",
    "gcp": "Compute Engine may preempt a Spot VM at any time (cloud.google.com/compute/docs/instances/create-use-spot)",
    "azure": "Azure evicts a Spot VM with a Scheduled Events Preempt notice at least 30 seconds ahead (best effort; "
    "learn.microsoft.com/azure/virtual-machines/linux/scheduled-events)",
}


# Amazon ECR Public user guide, "Amazon ECR Public service quotas" (docs.aws.amazon.com/AmazonECR/latest/
# public/public-service-quotas.html, read 2026-12): "For unauthenticated customers, Amazon ECR Public
# supports up to 500GB of data per month. This is the max amount of data supported and isn't adjustable."
ECR_PUBLIC_ANONYMOUS_GB_PER_MONTH = 500
ECR_PUBLIC_QUOTAS = "docs.aws.amazon.com/AmazonECR/latest/public/public-service-quotas.html"


@dataclass(frozen=True, slots=True)
class Caveat:
    topic: str
    """placement | capacity | gdr | flex-start | spot | zone | installer | images | pulls | metrics | login | logs."""
    text: str


def placement(spec: ClusterSpec, outputs: Mapping[str, Any]) -> Caveat:
    """Why the nodes have, or have not, a placement group / compact policy: one reason, not a list."""
    cap = spec.compute.capacity
    kind = {
        "aws": "cluster placement group",
        "azure": "single-placement-group scale set (its InfiniBand fabric)",
    }.get(spec.cloud, "compact placement policy")
    created = (outputs.get("fabric") or {}).get("placement")
    if spec.cloud == "azure":
        # The fabric is the GPU pool's own scale set (components/azure/cluster.py), whatever
        # interconnect.placement says; no proximity placement group (components/azure/rules.py).
        return Caveat(
            "placement",
            f"{kind} created: the GPU pool's scale set, whose nodes share one InfiniBand fabric (at most 100 "
            "nodes); no proximity placement group, which InfiniBand does not need and which can fail allocation",
        )
    if spec.cloud == "aws" and cap.type == "reservation" and cap.placement_group:
        return Caveat(
            "placement",
            f"the reservation's own cluster placement group {cap.placement_group} (an ODCR made in a group "
            "matches only launches into that group)",
        )
    if spec.cloud == "aws" and cap.type == "reservation":
        return Caveat(
            "placement",
            f"no {kind}: the ODCR {cap.id} was made without one, so it matches only launches outside any "
            "group, and its instances are not placed together for EFA; if they must be, create the "
            "reservation in a cluster placement group and set compute.capacity.placement_group",
        )
    if spec.cloud == "aws" and cap.type == "capacity-block":
        return Caveat(
            "placement",
            f"no {kind}: a capacity block is delivered already placed, and a group on top of it is refused",
        )
    if spec.cloud == "gcp" and cap.type == "reservation":
        # components/spec_model.py PRE_PLACED: GCP reservation blocks are compact by construction.
        return Caveat("placement", f"no {kind}: the reservation's blocks are compact by construction")
    if spec.cloud == "gcp" and spec.orchestration.kind == "slurm" and not created:
        return Caveat("placement", f"no {kind}: Cluster Director places its nodes itself")
    refused = (
        gcp_rules.placement_refused(spec.compute.instance_type, cap.type, spec.compute.nodes)
        if spec.cloud == "gcp"
        else None
    )
    if refused is not None and not created:
        # The rule's reason, less its "(allowed: ...)" tail, which is for a stack that asks for one.
        return Caveat("placement", f"no {kind}: {refused.split(' (allowed:')[0]}")
    if not spec.interconnect.placement:
        return Caveat(
            "placement",
            f"no {kind}: interconnect.placement is false in the stack, so nodes may land far apart on the network",
        )
    return Caveat("placement", f"{kind} created: the nodes are packed close on the network")


def azure_reservation(spec: ClusterSpec) -> Caveat | None:
    """AKS: a capacity reservation group is used only once the cluster's identity holds Contributor on
    the group's resource group, an assignment that can take up to 60 minutes to propagate
    (components/azure/orchestration_aks.py, use-capacity-reservation-groups.md)."""
    cap = spec.compute.capacity
    if spec.cloud != "azure" or cap.type != "reservation" or not cap.id:
        return None
    group = "/".join(cap.id.strip("/").split("/")[:4])
    return Caveat(
        "capacity",
        f"the cluster's identity gets Contributor on /{group}, which holds the capacity reservation group, and "
        "the GPU pool is created after that assignment; the role can take up to 60 minutes to propagate "
        "(learn.microsoft.com/azure/aks/use-capacity-reservation-groups): if the pool is refused for want of "
        "it, run `pulumi up` again once it has; its upgrades surge no node (maxSurge 0), so the group needs "
        "no capacity beyond the pool's nodes",
    )


def flex_start(spec: ClusterSpec) -> Caveat | None:
    if spec.compute.capacity.type != "flex-start":
        return None
    n = spec.compute.nodes
    return Caveat(
        "flex-start",
        f"the GPU pool starts at 0 nodes and scales to {n} when a job asks, once the capacity is found "
        f"(`pulumi up` does not wait for it; a job's pods wait until the pool has scaled); each node runs at "
        f"most {FLEX_START_MAX_DAYS} days (its maximum run duration); billed at Dynamic Workload Scheduler prices, "
        f"discounted from on-demand, so the on-demand cost shown is a ceiling ({FLEX_START_SOURCE})",
    )


def spot(spec: ClusterSpec) -> Caveat | None:
    if spec.compute.capacity.type != "spot":
        return None
    return Caveat(
        "spot",
        f"any node can be reclaimed: {SPOT_NOTICE[spec.cloud]}; a job that spans every node stops when one "
        "goes, so checkpoint (gpu_cluster.workloads.train --ckpt-dir) and launch it elastic (docs/workloads-jobs.md); the cost "
        "shown is the on-demand ceiling",
    )


def zone(spec: ClusterSpec) -> Caveat | None:
    """AWS zone names differ per account: offline, the zone is checked only through zone_id."""
    if spec.cloud != "aws" or spec.zone_id:
        return None
    offered = spec.instance.zone_ids.get(spec.region) or ()
    where = (
        f"; the catalog has {spec.compute.instance_type} offered in {len(offered)} zone ID(s) of "
        f"{spec.region}: {', '.join(offered)}"
        if offered
        else ""
    )
    return Caveat(
        "zone",
        f"{spec.zone} was not checked offline: AWS maps zone names to zone IDs differently in every "
        f"account, and the type's offering and the zones EKS refuses are known by ID{where}; set zone_id "
        "(`aws ec2 describe-availability-zones`) or run `gpu-cluster preflight STACK`",
    )


def capacity_block(spec: ClusterSpec) -> Caveat | None:
    """An AWS capacity block: when its nodes appear (components/aws/rules.py, with its sources)."""
    note = capacity_note(spec) if spec.cloud == "aws" else None
    return Caveat("capacity", note) if note else None


def installer(spec: ClusterSpec) -> Caveat | None:
    """GKE: the NCCL plugin installer is pulled by digest only; where no published reference gives
    the digest and the stack names none, the offline plan has no installer (and `pulumi up` refuses)."""
    if spec.cloud != "gcp" or spec.orchestration.kind != "gke" or spec.orchestration.installer_image:
        return None
    missing = gcp_rules.installer_image_missing(spec.compute.instance_type, spec.images)
    if missing is None:
        return None
    return Caveat(
        "installer",
        f"no NCCL plugin installer is planned: {gcp_rules.INSTALLER_IMAGE_KEY} is {missing}; "
        "`pulumi up` refuses the stack until it is set",
    )


def images(spec: ClusterSpec) -> Caveat | None:
    """Kubernetes (EKS, GKE, AKS): what the in-cluster layer still pulls by tag (components/k8s/
    image_uses.py) and how to pin it, and what it pulls that no pin can name (EKS's managed add-ons,
    AKS's Lustre CSI driver and AMD's cert-manager and KMM). One caveat, each image named once.
    The GKE installer without a digest has its own caveat (it is not planned at all)."""
    if spec.orchestration.kind == "slurm":
        return None
    from gpu_cluster.components.k8s.image_uses import layer_image_uses, unpinnable

    left = [u for u in unpinned(layer_image_uses(spec), spec.images) if not u.installer]
    theirs = unpinnable(spec)
    if not left and not theirs:
        return None
    parts = []
    if left:
        # AKS's pins go into the charts' values and the operators' custom resources, and a pinned
        # DOCA driver can only be the compiled one (components/k8s/aks.py LAYER_IMAGES).
        aks = (
            "; the charts and the NicClusterPolicy/DeviceConfig then pull by those digests (a pinned DOCA driver "
            "is the compiled image, never a precompiled one)"
            if spec.orchestration.kind == "aks"
            else ""
        )
        parts.append(
            "pulled by tag, which its publisher can move: "
            + "; ".join(f"{u.ref}, {u.what}" for u in left)
            + ". No public source read gives their digests; `gpu-cluster pin STACK` asks each registry and "
            "writes them to the stack's images: (the validation job's image too, which `submit` otherwise "
            f"resolves when it runs){aks}"
        )
    parts += theirs
    # Sentences, not "; ": each part lists its images with "; " between them.
    return Caveat("images", ". ".join(p if i == 0 else p[0].upper() + p[1:] for i, p in enumerate(parts)))


def pulls(spec: ClusterSpec) -> Caveat | None:
    """EKS: the job's image comes from ECR Public, whose anonymous pulls are capped per month, unless
    the stack pulls it through its own ECR pull-through cache (components/aws/image_cache.py)."""
    if spec.orchestration.kind != "eks":
        return None
    img = load_fabric_facts()[1].get(spec.instance.network.fabric)
    if img is None or not img.repository.startswith(f"{UPSTREAM}/"):
        return None
    ref = f"{img.repository}:{img.tag}"
    if spec.orchestration.pull_through_cache:
        return Caveat(
            "pulls",
            f"the job's image {ref} is pulled through the account's ECR pull-through cache "
            f"(<account>.dkr.ecr.{spec.region}.amazonaws.com/{cache_prefix(spec.name)}/...): the first pull fills it "
            f"from {UPSTREAM}, the nodes pull it from the account's registry",
        )
    return Caveat(
        "pulls",
        f"the job's image {ref} comes from {UPSTREAM}, anonymously, to each of the {spec.compute.nodes} nodes "
        f"through one NAT address: ECR Public serves unauthenticated pulls up to "
        f"{ECR_PUBLIC_ANONYMOUS_GB_PER_MONTH} GB a month, not adjustable ({ECR_PUBLIC_QUOTAS}); "
        "orchestration.pull_through_cache: true fetches it once into the account's ECR",
    )


# Where each Kubernetes stack's GPU metrics go (components/gcp/metrics.py, components/azure/metrics.py,
# components/aws/metrics.py). Not in the plan's cost: each store bills by what is ingested and
# queried, which depends on the series and the scrape interval, and no price page was read for
# GKE's or AMP's rates here. Azure's: "Pricing is based on ingestion and query with no additional
# storage cost" (learn.microsoft.com/azure/azure-monitor/metrics/prometheus-metrics-overview, read
# 2026-12-07).
METRICS_STORE = {
    "gke": "GKE's managed DCGM metrics into Managed Service for Prometheus (Cloud Monitoring)",
    "aks": "Azure Managed Prometheus into the stack's Azure Monitor workspace (the GPU Operator's DCGM exporter)",
    # The MI300X stack: AMD's device-metrics exporter, scraped by the agent's job (components/k8s/metrics.py).
    "aks-amd": "Azure Managed Prometheus into the stack's Azure Monitor workspace (AMD's device-metrics exporter, "
    "job amd-device-metrics-exporter)",
    "eks": "the DCGM exporter chart, scraped by an AMP managed collector into an AMP workspace",
    # Cluster Director: byte-priced like every Ops Agent integration ("Metrics ingested by using
    # existing integrations are charged by the number of bytes", cloud.google.com/stackdriver/docs/
    # managed-prometheus/setup-opsagent, read 2026-12-07); no rate was read, so unpriced too.
    "gcp-slurm": "the Ops Agent's DCGM receiver (version 2) on every GPU node, from the node set's startup script, "
    "into the project's Cloud Monitoring",
    "aws-slurm": "the DCGM exporter and node exporter in Docker on every GPU node (launch template user data), "
    "scraped by an ADOT collector on the node into an AMP workspace the node role may only write to",
    "azure-slurm": "the DCGM exporter and node exporter in Docker on every GPU node (the scale set's custom data), "
    "scraped by a Prometheus agent on the node that remote-writes with the scale set's managed identity, "
    "which may only publish to the workspace's data collection rule, into an Azure Monitor workspace",
}
# Where each looks at them: the GPU dashboard's resources (components/gcp/dashboard.py,
# components/azure/grafana.py, components/aws/grafana.py). No price page was read for Azure
# Managed Grafana's or Amazon Managed Grafana's rates (both bill per instance or active user), so
# these are unpriced too; a Cloud Monitoring dashboard has no charge of its own that was found.
_AMG = (
    "an Amazon Managed Grafana workspace (IAM Identity Center sign-in) with a role that may only query the "
    "AMP workspace; import dashboards/gpu-grafana-{}.json"
)
METRICS_DASHBOARD = {
    "gke": "a Cloud Monitoring dashboard (the GPU panels of dashboards/gpu-cloud-monitoring.json)",
    "aks": "an Azure Managed Grafana workspace (Standard) linked to the Azure Monitor workspace, with Monitoring "
    "Data Reader on it and Grafana Admin for the deployer; import dashboards/gpu-grafana-aks.json",
    "eks": _AMG.format("eks"),
    "gcp-slurm": "a Cloud Monitoring dashboard (the GPU panels over the Ops Agent's series, per VM instance_id)",
    "aws-slurm": _AMG.format("pcs"),
    "azure-slurm": "an Azure Managed Grafana workspace (Standard) linked to the Azure Monitor workspace; import "
    "dashboards/gpu-grafana-azure-slurm.json",
}
# Each platform's Grafana file carries its fabric panels (components/dashboard.py files()).
METRICS_DASHBOARD["aks-amd"] = METRICS_DASHBOARD["aks"].replace("gpu-grafana-aks.json", "gpu-grafana-aks-mi300x.json")


def _metrics_key(spec: ClusterSpec) -> str:
    """The orchestrator, and for Slurm the cloud too (each cloud's Slurm takes its own path)."""
    kind = spec.orchestration.kind
    if kind == "aks" and spec.instance.accelerator.vendor == "amd":
        return "aks-amd"
    return f"{spec.cloud}-{kind}" if kind == "slurm" else kind


def metrics(spec: ClusterSpec) -> Caveat | None:
    key = _metrics_key(spec)
    store = METRICS_STORE.get(key)
    if store is None:
        return None
    return Caveat(
        "metrics",
        f"GPU metrics: {store}; dashboard: {METRICS_DASHBOARD[key]}; billed by samples ingested and "
        "queried (and Grafana by workspace or user), not in the cost above: the cost's metrics line "
        "estimates it and names what is not priced (components/metrics_cost.py; docs/day2.md, GPU metrics)",
    )


def login(spec: ClusterSpec) -> Caveat | None:
    """AWS PCS without a key pair: the stack's access command is an interactive Session Manager
    session, which runs no command, so `validate submit` cannot use it (workloads/validate/slurm.py
    shell_for). With ``orchestration.ssh_key_name`` it is ssh as ec2-user through Session Manager's
    AWS-StartSSHSession document (components/aws/orchestration_pcs.py login_command, with its sources)."""
    o = spec.orchestration
    if spec.cloud != "aws" or o.kind != "slurm" or o.login_nodes < 1 or o.ssh_key_name:
        return None
    return Caveat(
        "login",
        "no orchestration.ssh_key_name: access.ssh_command opens an interactive Session Manager session, which "
        "runs no command, so `gpu-cluster validate submit STACK` cannot reach the login node from here; name an "
        "EC2 key pair (the login nodes then take ssh as ec2-user through Session Manager's AWS-StartSSHSession), "
        "or open the session, `sudo -iu ec2-user`, and run `gpu-cluster validate submit STACK --here` there "
        "(a Session Manager shell runs as ssm-user, which SSM Agent makes on each instance for itself)",
    )


def control_plane_logs(spec: ClusterSpec) -> Caveat | None:
    """EKS without ``orchestration.cluster_name``: the cluster keeps Pulumi's generated name, so the
    stack cannot declare the log group EKS writes to, and EKS makes it (components/spec_eks.py)."""
    o = spec.orchestration
    if spec.cloud != "aws" or o.kind != "eks" or o.cluster_name:
        return None
    return Caveat(
        "logs",
        "no orchestration.cluster_name: EKS creates the control plane's log group /aws/eks/<cluster>/cluster "
        "itself, outside the stack: with the retention and encryption EKS gives it, not security.log_retention_days "
        "and a key of the stack's. A new stack names its cluster; a running one adopts the group with cluster_name "
        "set to the name it has (the stack output cluster_name) and adopt_log_group: true (docs/aws.md)",
    )


@functools.cache
def _aks_rccl_env() -> Mapping[str, str]:
    """The RCCL environment the catalog gives an AKS pod (fabrics.infiniband.pod.collectives.rccl)."""
    with open(CATALOG_PATH, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh)
    env = doc["fabrics"]["infiniband"]["pod"]["collectives"]["rccl"]["env"]
    return {str(k): str(v) for k, v in env.items()}


def gdr(spec: ClusterSpec) -> Caveat | None:
    """AMD GPUs on AKS: what GPUDirect RDMA over InfiniBand rests on, which the plan cannot see (the
    catalog's fabrics.infiniband.pod.collectives.rccl, with its sources: the image's RCCL takes it only
    through DMA-BUF, off unless asked; the node kernel decides whether DMA-BUF works)."""
    if spec.cloud != "azure" or spec.orchestration.kind != "aks" or spec.instance.accelerator.vendor != "amd":
        return None
    dmabuf = _aks_rccl_env().get("NCCL_DMABUF_ENABLE")
    return Caveat(
        "gdr",
        f"RCCL reaches GPU memory over InfiniBand (GPUDirect RDMA) here only through DMA-BUF: the image's RCCL "
        f"(ROCm 7.2) leaves it off unless asked (the pods set NCCL_DMABUF_ENABLE={dmabuf}; on by default from RCCL "
        "2.28.3 for ROCm 7.12, ROCm/rocm-systems PR 3607), and amdgpu's peer-memory path is not open to it on "
        "kernels >= 6.3 (ROCm/mori PR 560); RCCL also checks the node kernel for CONFIG_DMABUF_MOVE_NOTIFY and "
        "CONFIG_PCI_P2PDMA, which no source read states for AKS's Ubuntu node image. Without GDR every byte "
        "stages through host memory (ROCm/rccl issue 1377): the judge's GDR check says which it was",
    )


def caveats(spec: ClusterSpec, outputs: Mapping[str, Any]) -> list[Caveat]:
    found = [
        placement(spec, outputs),
        capacity_block(spec),
        azure_reservation(spec),
        gdr(spec),
        flex_start(spec),
        spot(spec),
        zone(spec),
        installer(spec),
        images(spec),
        pulls(spec),
        metrics(spec),
        login(spec),
        control_plane_logs(spec),
    ]
    return [c for c in found if c is not None]
