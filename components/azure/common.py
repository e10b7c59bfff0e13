"""Small facts every Azure pillar shares: tags, the address plan, the storage account name.

Pure: no Pulumi. Every figure a cloud receives is cited beside it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass

from gpu_cluster.components.azure.rules import AKS_DNS_SERVICE_IP, AKS_POD_CIDR, AKS_SERVICE_CIDR
from gpu_cluster.components.spec import ClusterSpec

__all__ = [
    "AKS_DNS_SERVICE_IP",
    "AKS_POD_CIDR",
    "AKS_SERVICE_CIDR",
    "AddressPlan",
    "address_plan",
    "azurecli_kubeconfig",
    "cluster_tags",
    "storage_account_name",
]

CLUSTER_TAG = "gpu-cluster"


def cluster_tags(spec: ClusterSpec) -> dict[str, str]:
    """The spec's tags plus the cluster's own name tag (written last: a stack cannot relabel
    its resources as another cluster's), merged into every resource."""
    return {**dict(spec.tags), CLUSTER_TAG: spec.name}


@dataclass(frozen=True, slots=True, kw_only=True)
class AddressPlan:
    vnet: str
    nodes: str
    """GPU nodes (the scale set, or the AKS GPU pool)."""
    lustre: str
    """Managed Lustre's own subnet: one file system per subnet, never shared (amlfs-prerequisites.md
    at f1e86c5); a /24 covers up to 196 TiB in Learn's table and is what the API docstring asks
    for ("at least a /24", pulumi-azure-native AmlFilesystemArgs.filesystem_subnet)."""
    system: str
    """The AKS system pool, or the Slurm controller and login nodes."""
    bastion: str
    """Azure Bastion's subnet (Slurm only), named AzureBastionSubnet and at least a /26 (Bastion
    configuration-settings, learn.microsoft.com/azure/bastion/configuration-settings, "Azure Bastion
    subnet"; read through the search corpus 2026-12-01)."""


def address_plan(spec: ClusterSpec) -> AddressPlan:
    """The VNet carved in order: nodes (a quarter of the VNet), then a /24 for Lustre, a /24 for the
    system nodes and a /26 for Bastion; a /20 VNet leaves 1024 addresses for the nodes."""
    vnet = ipaddress.IPv4Network(spec.network.cidr)
    nodes = next(vnet.subnets(new_prefix=vnet.prefixlen + 2))
    after = ipaddress.IPv4Network(f"{nodes.broadcast_address + 1}/24")
    system = ipaddress.IPv4Network(f"{after.broadcast_address + 1}/24")
    bastion = ipaddress.IPv4Network(f"{system.broadcast_address + 1}/26")
    assert after.subnet_of(vnet) and system.subnet_of(vnet) and bastion.subnet_of(vnet)
    return AddressPlan(vnet=str(vnet), nodes=str(nodes), lustre=str(after), system=str(system), bastion=str(bastion))


def storage_account_name(spec: ClusterSpec, stack: str) -> str:
    """Storage account names are global, 3-24 lower-case letters and digits (the Azure storage
    naming rules, learn.microsoft.com/azure/storage/common/storage-account-overview, not re-read
    this session): the cluster name's letters and digits plus a hash of the stack, so two stacks
    of one name do not collide."""
    digest = hashlib.sha256(f"{stack}/{spec.name}".encode()).hexdigest()[:8]
    return (re.sub(r"[^a-z0-9]", "", spec.name)[:16] + digest)[:24]


# The kubeconfig of an Entra ID cluster (local accounts off) runs kubelogin, which AKS writes for
# its device-code login: a person at a browser. `pulumi up` (the in-cluster layer) and `validate
# submit` sign in non-interactively instead, as the deployer's `az login`: kubelogin's own
# `convert-kubeconfig -l azurecli` rewrites the exec to `get-token --login azurecli --server-id <id>`,
# keeping only the server id (and a cache directory) of the original arguments and dropping the
# tenant, client and environment (Azure/kubelogin pkg/internal/converter/convert.go at 327ae3d:
# "all login methods require --server-id"; the azurecli case adds nothing else; learn.microsoft.com
# azure/aks/kubelogin-authentication, "Azure CLI authentication": the token is the signed-in `az`
# context's). Done here, on the text, so the output needs no kubelogin at plan time.
KUBELOGIN = "kubelogin"
KUBELOGIN_LOGIN = "azurecli"


def azurecli_kubeconfig(text: str) -> str:
    """``text`` (a kubeconfig) with every kubelogin user signing in through the Azure CLI; other
    users are left as they are. A kubelogin user without ``--server-id`` is an error: kubelogin
    itself refuses to convert one."""
    import yaml

    doc = yaml.safe_load(text) or {}
    for user in doc.get("users") or []:
        ex = (user.get("user") or {}).get("exec")
        if not ex or KUBELOGIN not in str(ex.get("command", "")).lower():
            continue
        args = [str(a) for a in ex.get("args") or []]

        def value(flag: str) -> str | None:
            return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else None

        server = value("--server-id")
        if not server:
            raise ValueError(f"kubeconfig user {user.get('name')!r}: kubelogin without --server-id cannot be converted")
        new = ["get-token", "--login", KUBELOGIN_LOGIN, "--server-id", server]
        cache = value("--cache-dir") or value("--token-cache-dir")
        if cache:
            new += ["--cache-dir", cache]
        ex["args"] = new
        ex["command"] = KUBELOGIN
        ex["apiVersion"] = ex.get("apiVersion") or "client.authentication.k8s.io/v1beta1"
    return yaml.safe_dump(doc, sort_keys=False)
