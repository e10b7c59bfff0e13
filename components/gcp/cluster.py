"""GCP: compose the pillars in dependency order and return the stack outputs.

Network -> Interconnect -> Storage -> (GKE: Orchestration then the node pool in Compute |
Slurm: Compute's node set then Cluster Director in Orchestration).
"""

from __future__ import annotations

from typing import Any

import pulumi

from components.gcp.common import address_plan, project
from components.gcp.compute import Compute, ComputeArgs
from components.gcp.interconnect import Interconnect, InterconnectArgs, nic_count
from components.gcp.network import Network, NetworkArgs
from components.gcp.orchestration_gke import GkeArgs, GkeOrchestration
from components.gcp.orchestration_slurm import LUSTRE_ID, SlurmArgs, SlurmOrchestration
from components.gcp.storage import Storage, StorageArgs
from components.spec import ClusterSpec
from workloads.launch import validation as vjob

# GKE taints GPU node pools nvidia.com/gpu=present:NoSchedule (GKE "Run GPUs in Standard
# node pools"); only pods that tolerate it land there.
GPU_TAINT = "nvidia.com/gpu"


def build(name: str, spec: ClusterSpec, opts: pulumi.ResourceOptions) -> dict[str, Any]:
    proj = project()
    plan = address_plan(spec, nic_count(spec))
    net = Network(f"{name}-network", NetworkArgs(spec=spec, plan=plan), opts)
    ic = Interconnect(f"{name}-interconnect", InterconnectArgs(spec=spec, plan=plan, project=proj), opts)
    st = Storage(f"{name}-storage", StorageArgs(spec=spec, network=net.vpc.id, psa=net.psa), opts)
    placement = ic.placement.name if ic.placement is not None else None
    inst = spec.instance
    o = spec.orchestration

    lu = spec.storage.lustre
    job = vjob.stack_job(cluster_name=spec.name, mount_point=lu.mount_point, nodes=spec.compute.nodes,
                         instance_type=spec.compute.instance_type,
                         partition=o.partition if o.kind == "slurm" else None,
                         # In a container the image's interpreter runs the package from Lustre.
                         python="python3" if o.kind == "gke" else None)
    access: dict[str, Any]
    validation: dict[str, Any]
    if o.kind == "gke":
        gke = GkeOrchestration(f"{name}-orchestration", GkeArgs(
            spec=spec, project=proj, plan=plan, network=net.vpc.id, subnet=net.subnet.id, nics=ic.nics,
            lustre_instance_id=st.instance_id, lustre_mount_point=st.lustre.mount_point,
            lustre_filesystem=st.filesystem, lustre=st.lustre,
        ), opts)
        comp = Compute(f"{name}-compute", ComputeArgs(
            spec=spec, project=proj, cluster=gke.cluster.id, nics=ic.nics, placement=placement,
        ), opts)
        assert comp.node_pool is not None
        image = vjob.validation_image()
        jobset_spec = vjob.jobset_spec(
            job, image=image, wait_for_path=vjob.package_path(lu.mount_point, image),
            lustre_pvc=gke.lustre_claim_name, lustre_mount=lu.mount_point,
            gpu_vendor=inst.accelerator.vendor,
            node_selector={"node.kubernetes.io/instance-type": spec.compute.instance_type},
            tolerate_taints=(GPU_TAINT,),
        )
        gke.create_validation(jobset_spec, comp.node_pool)
        validation = vjob.jobset_output(job, jobset_spec)
        internal = " --internal-ip" if gke.private_endpoint else ""
        access = {
            "api_endpoint": pulumi.Output.format("https://{0}", gke.cluster.endpoint),
            "kubeconfig_command": pulumi.Output.format(
                "gcloud container clusters get-credentials {0} --zone {1} --project {2}{3}",
                spec.name, spec.zone, proj, internal),
        }
        node_list_source = f"label:cloud.google.com/gke-nodepool={comp.node_pool_name}"
    else:
        comp = Compute(f"{name}-compute", ComputeArgs(spec=spec, project=proj, lustre_storage_id=LUSTRE_ID), opts)
        assert comp.compute_resource is not None and comp.node_set is not None
        slurm = SlurmOrchestration(f"{name}-orchestration", SlurmArgs(
            spec=spec, project=proj, network_name=f"{spec.name}-vpc", subnet_name=f"{spec.name}-subnet",
            lustre_instance_id=st.instance_id, lustre=st.lustre, bucket=st.bucket.name,
            compute_resource=comp.compute_resource, node_set=comp.node_set,
        ), pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[net.subnet])))
        login = slurm.login.apply(lambda n: n or f"{slurm.cluster_id} login node")
        access = {
            "login": login,
            "ssh_command": pulumi.Output.format(
                "gcloud compute ssh {0} --zone {1} --project {2} --tunnel-through-iap", login, spec.zone, proj),
        }
        node_list_source = f"partition:{o.partition}"
        validation = vjob.sbatch_output(job)

    return {
        "cloud": "gcp",
        "region": spec.region,
        "zone": spec.zone,
        "orchestrator": o.kind,
        "instance_type": spec.compute.instance_type,
        "nodes": spec.compute.nodes,
        "gpus_per_node": inst.accelerator.count,
        "fabric": {
            "type": inst.network.fabric,
            "interfaces_per_node": inst.network.gpu_nics,
            "placement": placement,
            "mtu": inst.network.mtu,
        },
        "mount": st.mount,
        "bucket": st.bucket.name,
        "access": access,
        "node_list_source": node_list_source,
        "validation": validation,
    }
