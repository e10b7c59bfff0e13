"""Azure: compose the pillars in dependency order and return the stack outputs.

Network -> Storage -> Orchestration: AKS, whose GPU pool is the InfiniBand fabric, or Slurm
(orchestration_slurm.py), whose GPU scale set is. The InfiniBand fabric needs no resource of its
own: the ND sizes' eight 400 Gb NDR ports join one fabric among the VMs of one single-placement-group
scale set (an AKS pool is one such scale set), so the Interconnect pillar is the spec's rules
(components/azure/rules.py).
"""

from __future__ import annotations

from typing import Any

import pulumi

from gpu_cluster.components.azure.common import AddressPlan, address_plan
from gpu_cluster.components.azure.network import Network, NetworkArgs
from gpu_cluster.components.azure.orchestration_aks import (
    GPU_POOL,
    LUSTRE_CLAIM,
    POOL_LABEL,
    AksArgs,
    AksOrchestration,
    gpu_taint_keys,
)
from gpu_cluster.components.azure.orchestration_slurm import CONTROLLER_HOST, SlurmArgs, SlurmOrchestration
from gpu_cluster.components.azure.storage import Storage, StorageArgs
from gpu_cluster.components.azure.workload_identity import JOBS_SERVICE_ACCOUNT, POD_LABELS
from gpu_cluster.components.contract import COMPONENT_FACTS
from gpu_cluster.components.k8s.addons import JOB_NAMESPACE
from gpu_cluster.components.spec import ClusterSpec


def build(name: str, spec: ClusterSpec, opts: pulumi.ResourceOptions, existing: object = None) -> dict[str, Any]:
    if existing is not None:  # components/azure/rules.py refuses network.vpc_id on azure before this
        raise ValueError("network.vpc_id: an existing network is supported on aws only for now")
    plan = address_plan(spec)
    net = Network(f"{name}-network", NetworkArgs(spec=spec, plan=plan), opts)
    rg = net.resource_group.name
    st = Storage(
        f"{name}-storage",
        StorageArgs(
            spec=spec,
            resource_group=rg,
            lustre_subnet=net.lustre.id,
            node_subnets=[net.nodes.id, net.system.id],
        ),
        opts,
    )
    if spec.orchestration.kind == "slurm":
        return _slurm(name, spec, opts, net, st, plan)
    aks = AksOrchestration(
        f"{name}-orchestration",
        AksArgs(
            spec=spec,
            resource_group=rg,
            vnet_id=net.vnet.id,
            node_subnet=net.nodes.id,
            system_subnet=net.system.id,
            workspace_id=st.logs.id,
            egress_ips=[net.nat_ip.ip_address],
            lustre_id=st.lustre.id,
            lustre_mgs=st.mount["dns_name"],
            after=[st.lustre],
            checkpoint_container_id=st.container.id,
        ),
        opts,
    )
    inst = spec.instance
    jobs = aks.jobs
    assert jobs is not None  # the checkpoint container is always given above
    return {
        "cloud": "azure",
        "region": spec.region,
        "zone": spec.zone,
        "orchestrator": "aks",
        "cluster_name": spec.name,
        "instance_type": spec.compute.instance_type,
        "nodes": spec.compute.nodes,
        "gpus_per_node": inst.accelerator.count,
        "fabric": {
            "type": inst.network.fabric,
            "interfaces_per_node": inst.network.gpu_nics,
            # The fabric's boundary: the GPU pool's scale set (its single placement group).
            "placement": aks.gpu_pool.name,
            "mtu": inst.network.mtu,
            "networks": [],
        },
        "mount": st.mount,
        "bucket": st.container.name,
        "access": {
            "api_endpoint": pulumi.Output.format("https://{0}:443", aks.cluster.fqdn),
            # With Entra ID the fetched kubeconfig signs in through kubelogin, by device code unless
            # converted; converted to the Azure CLI's login, as the kubeconfig output is
            # (kubelogin-authentication.md:211-219 at fb060ab; common.py azurecli_kubeconfig).
            "kubeconfig_command": pulumi.Output.format(
                "az aks get-credentials --resource-group {0} --name {1} && kubelogin convert-kubeconfig -l azurecli",
                rg,
                aks.cluster.name,
            ),
            "kubeconfig": aks.kubeconfig,
        },
        "scheduler": {
            "kind": "kubernetes",
            "namespace": JOB_NAMESPACE,
            # Created by the in-cluster layer (components/k8s/aks.py lustre_volume) in the namespace.
            "lustre_claim": LUSTRE_CLAIM,
            "node_selector": {POOL_LABEL: GPU_POOL},
            # The GPU pool's taints, AKS's spot taint included on a Spot pool.
            "tolerations": gpu_taint_keys(spec),
            # The checkpoint container through Microsoft Entra Workload ID: pods run as this
            # account (annotated with the identity's client id) and carry the webhook's label
            # (components/azure/workload_identity.py).
            "service_account": JOBS_SERVICE_ACCOUNT,
            "pod_labels": dict(POD_LABELS),
            "workload_client_id": jobs.identity.client_id,
        },
        # The Azure Managed Grafana workspace the dashboard is imported into (components/azure/grafana.py).
        "dashboard": aks.grafana.dashboard(),
        COMPONENT_FACTS: {
            "network_id": net.vnet.id,
            "node_subnet_id": net.nodes.id,
            "security_group_id": net.node_nsg.id,
            "file_system_id": st.lustre.id,
            "node_groups": [aks.gpu_pool.name],
            "certificate_authority": None,
        },
    }


def _slurm(
    name: str, spec: ClusterSpec, opts: pulumi.ResourceOptions, net: Network, st: Storage, plan: AddressPlan
) -> dict[str, Any]:
    assert net.bastion is not None and spec.orchestration.ssh_public_key is not None  # slurm: both made/required
    slurm = SlurmOrchestration(
        f"{name}-orchestration",
        SlurmArgs(
            spec=spec,
            resource_group=net.resource_group.name,
            node_subnet=net.nodes.id,
            system_subnet=net.system.id,
            system_prefix=plan.system,
            bastion_subnet=net.bastion.id,
            lustre_mgs=st.mount["dns_name"],
            lustre=st.lustre,
            ssh_public_key=spec.orchestration.ssh_public_key,
        ),
        opts,
    )
    inst = spec.instance
    return {
        "cloud": "azure",
        "region": spec.region,
        "zone": spec.zone,
        "orchestrator": "slurm",
        "cluster_name": spec.name,
        "instance_type": spec.compute.instance_type,
        "nodes": spec.compute.nodes,
        "gpus_per_node": inst.accelerator.count,
        "fabric": {
            "type": inst.network.fabric,
            "interfaces_per_node": inst.network.gpu_nics,
            # The fabric's boundary: the GPU scale set (its single placement group).
            "placement": slurm.gpu_nodes.name,
            "mtu": inst.network.mtu,
            "networks": [],
        },
        "mount": st.mount,
        "bucket": st.container.name,
        "access": {
            "login": CONTROLLER_HOST,
            # Bastion's tunnel to the controller's SSH, then ssh through it (orchestration_slurm.py).
            "tunnel_command": slurm.tunnel_command,
            "ssh_command": slurm.ssh_command,
            # What heal replaces a node through (deleteInstances, gpu_cluster/heal/azure_vmss.py).
            "scale_set_id": slurm.gpu_nodes.id,
        },
        "scheduler": {"kind": "slurm", "partition": spec.orchestration.partition},
        # The Azure Managed Grafana workspace the dashboard is imported into (components/azure/grafana.py).
        "dashboard": slurm.metrics.grafana.dashboard(),
        COMPONENT_FACTS: {
            "network_id": net.vnet.id,
            "node_subnet_id": net.nodes.id,
            "security_group_id": net.node_nsg.id,
            "file_system_id": st.lustre.id,
            "node_groups": [slurm.gpu_nodes.name],
            "certificate_authority": None,
        },
    }
