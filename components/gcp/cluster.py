"""GCP: compose the pillars in dependency order and return the stack outputs.

Project APIs -> Network -> Interconnect -> Storage -> (GKE: Orchestration then the node pool in
Compute | Slurm: Compute's node set then Cluster Director in Orchestration). Every pillar uses the
provider of ``ProjectServices``, so nothing is created before the APIs it needs are on.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_gcp as gcp

from gpu_cluster.components.contract import COMPONENT_FACTS, UNVALIDATED_TAINT_KEY
from gpu_cluster.components.gcp.common import address_plan, project
from gpu_cluster.components.gcp.compute import FLEX_START_MAX_DURATION, Compute, ComputeArgs, holds_new_nodes
from gpu_cluster.components.gcp.interconnect import Interconnect, InterconnectArgs, nic_count
from gpu_cluster.components.gcp.network import Network, NetworkArgs
from gpu_cluster.components.gcp.orchestration_gke import (
    JOB_NAMESPACE,
    GkeArgs,
    GkeOrchestration,
    job_queue,
    node_networks,
)
from gpu_cluster.components.gcp.orchestration_slurm import EXTRA_MOUNTS, LUSTRE_ID, SlurmArgs, SlurmOrchestration
from gpu_cluster.components.gcp.services import ProjectServices, ServicesArgs
from gpu_cluster.components.gcp.rules import CHECKPOINT_KSA
from gpu_cluster.components.k8s.kueue import MAX_RUN_ANNOTATION
from gpu_cluster.components.gcp.storage import Storage, StorageArgs
from gpu_cluster.components.spec import ClusterSpec

# GKE taints GPU node pools nvidia.com/gpu=present:NoSchedule (GKE "Run GPUs in Standard
# node pools"); only pods that tolerate it land there.
GPU_TAINT = "nvidia.com/gpu"
QUEUED_TAINT = "cloud.google.com/gke-queued"


def build(name: str, spec: ClusterSpec, opts: pulumi.ResourceOptions, existing: object = None) -> dict[str, Any]:
    if existing is not None:  # components/gcp/rules.py refuses network.vpc_id on gcp before this
        raise ValueError("network.vpc_id: an existing network is supported on aws only for now")
    # The caller's provider (opts.providers of the component), if any: its project, and every child uses it.
    given = opts.parent.get_provider("gcp:index:x") if opts.parent is not None else None
    proj = (
        project()
        if given is None
        else gcp.organizations.get_client_config_output(opts=pulumi.InvokeOutputOptions(provider=given)).project
    )
    plan = address_plan(spec, nic_count(spec))
    services = ProjectServices(f"{name}-services", ServicesArgs(spec=spec, project=proj), opts)
    opts = pulumi.ResourceOptions.merge(opts, services.after_apis())
    net = Network(f"{name}-network", NetworkArgs(spec=spec, plan=plan), opts)
    ic = Interconnect(f"{name}-interconnect", InterconnectArgs(spec=spec, plan=plan, project=proj), opts)
    st = Storage(f"{name}-storage", StorageArgs(spec=spec, network=net.vpc.id, psa=net.psa), opts)
    placement = ic.placement.name if ic.placement is not None else None
    inst = spec.instance
    o = spec.orchestration

    access: dict[str, Any]
    scheduler: dict[str, Any]
    if o.kind == "gke":
        gke = GkeOrchestration(
            f"{name}-orchestration",
            GkeArgs(
                spec=spec,
                project=proj,
                plan=plan,
                network=net.vpc.id,
                subnet=net.subnet.id,
                nics=ic.nics,
                lustre_instance_id=st.instance_id,
                lustre_mount_point=st.lustre.mount_point,
                lustre_filesystem=st.filesystem,
                lustre=st.lustre,
                bucket=st.bucket.name,
            ),
            opts,
        )
        comp = Compute(
            f"{name}-compute",
            ComputeArgs(
                spec=spec,
                project=proj,
                cluster=gke.cluster.id,
                nics=ic.nics,
                placement=placement,
            ),
            opts,
        )
        internal = " --internal-ip" if gke.private_endpoint else ""
        access = {
            "api_endpoint": pulumi.Output.format("https://{0}", gke.cluster.endpoint),
            "kubeconfig_command": pulumi.Output.format(
                "gcloud container clusters get-credentials {0} --zone {1} --project {2}{3}",
                spec.name,
                spec.zone,
                proj,
                internal,
            ),
            "kubeconfig": pulumi.Output.secret(gke.kubeconfig),
        }
        node_groups: list[Any] = [comp.node_pool_name]
        dashboard: Any = gke.dashboard.id
        ca: Any = gke.cluster.master_auth.cluster_ca_certificate
        scheduler = {
            "kind": "kubernetes",
            "namespace": JOB_NAMESPACE,
            "lustre_claim": gke.lustre_claim_name,
            "node_selector": {"cloud.google.com/gke-nodepool": comp.node_pool_name},
            # GKE's GPU taint, and ours where the pool registers its nodes with it (compute.py).
            "tolerations": [GPU_TAINT, *([UNVALIDATED_TAINT_KEY] if holds_new_nodes(spec) else [])],
            # The checkpoint bucket through GCS FUSE: pods run as this Kubernetes account (bound
            # to workload_account by Workload Identity) and carry gke-gcsfuse/volumes: "true".
            "checkpoint_claim": gke.checkpoint_claim_name,
            "service_account": CHECKPOINT_KSA,
            "workload_account": gke.workload_account.email,
        }
        queue = job_queue(spec)
        if queue is not None:
            # Multi-node flex-start: jobs go through this Kueue LocalQueue, admitted only once
            # every node exists (components/k8s/kueue.py).
            scheduler["queue"] = queue
            # GKE taints queued nodes cloud.google.com/gke-queued=true:NoSchedule itself
            # (cluster-toolkit gke-node-pool/main.tf at 1047080, "GKE automatically applies the
            # taint"; nccl-jobset-example.yaml of the queued example tolerates it).
            scheduler["tolerations"] = [GPU_TAINT, QUEUED_TAINT]
            # How long the ProvisioningRequest's nodes live: flex-start's seven-day maximum, asked
            # through the JobSet (compute.py, where the pool no longer carries it).
            scheduler["job_annotations"] = {MAX_RUN_ANNOTATION: str(int(FLEX_START_MAX_DURATION.removesuffix("s")))}
    else:
        comp = Compute(
            f"{name}-compute",
            ComputeArgs(spec=spec, project=proj, lustre_storage_id=LUSTRE_ID, extra_storage=EXTRA_MOUNTS),
            opts,
        )
        assert comp.compute_resource is not None and comp.node_set is not None
        slurm = SlurmOrchestration(
            f"{name}-orchestration",
            SlurmArgs(
                spec=spec,
                project=proj,
                network_name=net.vpc.name,
                subnet_name=net.subnet.name,
                lustre_instance_id=st.instance_id,
                lustre=st.lustre,
                bucket=st.bucket.name,
                compute_resource=comp.compute_resource,
                node_set=comp.node_set,
            ),
            opts,
        )
        login = slurm.login.apply(lambda n: n or f"{slurm.cluster_id} login node")
        access = {
            "login": login,
            "ssh_command": pulumi.Output.format(
                "gcloud compute ssh {0} --zone {1} --project {2} --tunnel-through-iap", login, spec.zone, proj
            ),
        }
        scheduler = {"kind": "slurm", "partition": o.partition}
        node_groups = [comp.node_set.id]
        dashboard = slurm.dashboard.id
        ca = None

    return {
        "cloud": "gcp",
        "region": spec.region,
        "zone": spec.zone,
        "orchestrator": o.kind,
        "cluster_name": spec.name,
        "instance_type": spec.compute.instance_type,
        "nodes": spec.compute.nodes,
        "gpus_per_node": inst.accelerator.count,
        "fabric": {
            "type": inst.network.fabric,
            "interfaces_per_node": inst.network.gpu_nics,
            "placement": placement,
            "mtu": inst.network.mtu,
            # The GKE Network objects of the additional NICs (pod annotations name them).
            "networks": [
                {"name": n.name, "vpc": n.vpc, "subnet": n.subnet, "device_mode": n.device_mode}
                for n in node_networks(ic.nics)
            ]
            if o.kind == "gke"
            else [],
        },
        # The Lustre CSI driver's volume handle is <project>/<zone>/<instance>.
        "mount": {**st.mount, "volume_handle": pulumi.Output.format("{0}/{1}/{2}", proj, spec.zone, st.instance_id)},
        "bucket": st.bucket.name,
        "access": access,
        "scheduler": scheduler,
        # The Cloud Monitoring dashboard pulumi up made (components/gcp/dashboard.py): nothing to import.
        "dashboard": {"kind": "cloud-monitoring", "id": dashboard},
        # Not stack outputs: the component's typed attributes (components/cluster.py).
        COMPONENT_FACTS: {
            "network_id": net.vpc.id,
            "node_subnet_id": net.subnet.id,
            "security_group_id": net.firewall.id,
            "file_system_id": st.instance_id,
            "node_groups": node_groups,
            "certificate_authority": ca,
        },
    }
