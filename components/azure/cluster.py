"""Azure: compose the pillars in dependency order and return the stack outputs.

Network -> Storage -> (AKS: Orchestration, whose GPU pool is the InfiniBand fabric | Slurm: not
built yet). The InfiniBand fabric needs no resource of its own: the ND sizes' eight 400 Gb NDR
ports join one fabric among the VMs of one single-placement-group scale set (an AKS pool is one
such scale set), so the Interconnect pillar is the spec's rules (components/azure/rules.py).
"""

from __future__ import annotations

from typing import Any

import pulumi

from components.azure.common import address_plan
from components.azure.network import Network, NetworkArgs
from components.azure.orchestration_aks import (
    GPU_POOL,
    LUSTRE_CLAIM,
    POOL_LABEL,
    AksArgs,
    AksOrchestration,
    gpu_taint_keys,
)
from components.azure.storage import Storage, StorageArgs
from components.contract import COMPONENT_FACTS
from components.k8s.addons import JOB_NAMESPACE
from components.spec import ClusterSpec


def build(name: str, spec: ClusterSpec, opts: pulumi.ResourceOptions, existing: object = None) -> dict[str, Any]:
    if existing is not None:  # components/azure/rules.py refuses network.vpc_id on azure before this
        raise ValueError("network.vpc_id: an existing network is supported on aws only for now")
    if spec.orchestration.kind != "aks":
        raise ValueError("orchestration.kind: Slurm on Azure is not built yet (allowed: aks)")
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
        ),
        opts,
    )
    inst = spec.instance
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
        },
        COMPONENT_FACTS: {
            "network_id": net.vnet.id,
            "node_subnet_id": net.nodes.id,
            "security_group_id": net.node_nsg.id,
            "file_system_id": st.lustre.id,
            "node_groups": [aks.gpu_pool.name],
            "certificate_authority": None,
        },
    }
