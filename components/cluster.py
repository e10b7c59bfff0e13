"""GpuCluster: the one component a stack creates. It picks the cloud package and composes
the four pillars (network + interconnect, compute, storage, orchestration) it builds.

Each cloud package exposes ``build(name, spec, opts, existing)``, returning the stack outputs
with exactly the keys of ``gpu_cluster.components.contract.OUTPUT_KEYS`` (values may be Outputs) plus
``COMPONENT_FACTS`` (the typed attributes that are not stack outputs); the pillar components it
creates carry type tokens ``gpu-cluster:<cloud>:<Pillar>`` with Pillar one of ``PILLARS``, which
is how the offline plan groups resources.

Two ways in, one spec: ``GpuCluster(name, GpuClusterArgs)`` (a program using the component, or
the package served by components/provider.py) parses the args through gpu_cluster.components.spec;
``GpuCluster.from_spec`` (the stack file, components/program.py) takes the spec the stack path
parsed. The component's annotated attributes are its schema outputs (the analyzer reads them).
"""

import importlib
from typing import Any, Mapping, Optional, TypedDict

import pulumi

from gpu_cluster.components.args import GpuClusterArgs, existing_network, to_spec
from gpu_cluster.components.cloud_sdk import require_cloud_sdk
from gpu_cluster.components.contract import COMPONENT_FACTS, OUTPUT_KEYS
from gpu_cluster.components.spec import ClusterSpec

PILLARS = ("Network", "Interconnect", "Compute", "Storage", "Orchestration")
TYPE = "gpu-cluster:index:GpuCluster"


class Mount(TypedDict, total=False):
    """The Lustre file system as nodes and pods mount it."""

    type: str
    """Always lustre."""
    mount_point: str
    """Where nodes and pods see it, e.g. /fsx."""
    dns_name: str
    """The file system's DNS name."""
    mount_name: str
    """The Lustre mount name (fsname)."""
    mount_command: str
    """The mount command a node runs."""
    volume_handle: str
    """How the CSI driver names the file system."""


class Fabric(TypedDict, total=False):
    """The GPU fabric of every node."""

    type: str
    """efa, tcpx, tcpxo, rdma or ib."""
    interfaces_per_node: int
    """GPU network interfaces per node."""
    placement: str
    """Placement group or compact policy the nodes share, if any."""
    mtu: int
    """MTU of the fabric networks."""


class GpuCluster(pulumi.ComponentResource):
    """A multi-node GPU training cluster (compute, GPU fabric, Lustre, EKS/GKE/Slurm) on AWS or GCP."""

    cluster_name: pulumi.Output[str]
    """The cluster's name (EKS/GKE cluster, Slurm cluster), the prefix of every resource."""
    cloud: pulumi.Output[str]
    """aws or gcp."""
    region: pulumi.Output[str]
    """The region it runs in."""
    zone: pulumi.Output[str]
    """The zone every GPU node is in."""
    orchestrator: pulumi.Output[str]
    """eks, gke or slurm."""
    instance_type: pulumi.Output[str]
    """The GPU nodes' instance type."""
    nodes: pulumi.Output[int]
    """GPU nodes."""
    gpus_per_node: pulumi.Output[int]
    """GPUs per node."""
    kubeconfig: pulumi.Output[Optional[str]]
    """EKS/GKE: a kubeconfig for the cluster (secret; it holds no token, only the exec plugin)."""
    api_endpoint: pulumi.Output[Optional[str]]
    """EKS/GKE: the Kubernetes API endpoint."""
    certificate_authority: pulumi.Output[Optional[str]]
    """EKS/GKE: the API's certificate authority data (base64 PEM)."""
    login: pulumi.Output[Optional[str]]
    """Slurm: the login node."""
    ssh_command: pulumi.Output[Optional[str]]
    """Slurm: the command that opens a shell on the login node."""
    network_id: pulumi.Output[str]
    """The VPC (AWS) or VPC network (GCP) the nodes are in."""
    node_subnet_id: pulumi.Output[str]
    """The subnet of the GPU nodes and the file system."""
    security_group_id: pulumi.Output[str]
    """AWS: the nodes' (EFA) security group; GCP: the firewall rule admitting the cluster's range."""
    file_system_id: pulumi.Output[str]
    """The Lustre file system (FSx id, Managed Lustre instance id)."""
    mount: pulumi.Output[Mount]
    """How nodes and pods mount the file system."""
    bucket: pulumi.Output[str]
    """The checkpoint bucket."""
    node_groups: pulumi.Output[list[str]]
    """The GPU node groups (EKS), node pools (GKE), compute node groups (PCS) or node sets (Cluster Director)."""
    fabric: pulumi.Output[Fabric]
    """The GPU fabric."""
    stack_outputs: pulumi.Output[dict[str, Any]]
    """The validation command's launch facts: the stack outputs exactly as `pulumi up` of a stack file
    exports them (components/contract.py), secret as they hold the kubeconfig. Export them to run
    `python -m gpu_cluster.workloads.validate` against this cluster."""

    _outputs: dict[str, Any]

    def __init__(self, name: str, args: GpuClusterArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        spec = to_spec(name, args)
        require_cloud_sdk(spec.cloud)  # before the caller's network, which imports the cloud's SDK
        super().__init__(TYPE, name, None, opts)
        self._build(name, spec, existing_network(spec, args))

    @classmethod
    def from_spec(cls, name: str, spec: ClusterSpec, opts: Optional[pulumi.ResourceOptions] = None) -> "GpuCluster":
        """The component for a spec already parsed (the stack file's, components/program.py)."""
        self = cls.__new__(cls)
        require_cloud_sdk(spec.cloud)
        pulumi.ComponentResource.__init__(self, TYPE, name, None, opts)
        self._build(name, spec, existing_network(spec))
        return self

    @property
    def outputs(self) -> Mapping[str, Any]:
        """The stack outputs (``OUTPUT_KEYS``), as plain values and Outputs."""
        return self._outputs

    def _build(self, name: str, spec: ClusterSpec, existing: Any) -> None:
        # A cloud's package, and so its SDK, is imported only for a stack on that cloud; an SDK
        # that is an extra (Azure's) and is missing stops here with one line naming it.
        require_cloud_sdk(spec.cloud)
        cloud = importlib.import_module(f"gpu_cluster.components.{spec.cloud}.cluster")
        built: dict[str, Any] = dict(cloud.build(name, spec, pulumi.ResourceOptions(parent=self), existing))
        facts: Mapping[str, Any] = built.pop(COMPONENT_FACTS)
        if spec.images and built.get("scheduler", {}).get("kind") == "kubernetes":
            # The pins reach the jobs through the outputs (components/contract.py scheduler.images).
            built["scheduler"] = {**built["scheduler"], "images": dict(spec.images)}
        missing = [k for k in OUTPUT_KEYS if k not in built]
        if missing:
            raise RuntimeError(f"gpu_cluster.components.{spec.cloud}.cluster.build did not return outputs {missing}")
        self._outputs = built
        out = pulumi.Output.from_input
        access, fabric = built["access"], built["fabric"]
        for key in (
            "cluster_name",
            "cloud",
            "region",
            "zone",
            "orchestrator",
            "instance_type",
            "nodes",
            "gpus_per_node",
            "bucket",
        ):
            setattr(self, key, out(built[key]))
        self.kubeconfig = out(access.get("kubeconfig"))
        self.api_endpoint = out(access.get("api_endpoint"))
        self.login = out(access.get("login"))
        self.ssh_command = out(access.get("ssh_command"))
        self.certificate_authority = out(facts["certificate_authority"])
        self.network_id = out(facts["network_id"])
        self.node_subnet_id = out(facts["node_subnet_id"])
        self.security_group_id = out(facts["security_group_id"])
        self.file_system_id = out(facts["file_system_id"])
        self.node_groups = out(list(facts["node_groups"]))
        self.mount = out(built["mount"])
        self.fabric = out({k: fabric[k] for k in ("type", "interfaces_per_node", "placement", "mtu")})  # type: ignore[arg-type]
        self.stack_outputs = out(built)
        self.register_outputs(
            {
                k: getattr(self, k)
                for k in (
                    "cluster_name",
                    "cloud",
                    "region",
                    "zone",
                    "orchestrator",
                    "instance_type",
                    "nodes",
                    "gpus_per_node",
                    "kubeconfig",
                    "api_endpoint",
                    "certificate_authority",
                    "login",
                    "ssh_command",
                    "network_id",
                    "node_subnet_id",
                    "security_group_id",
                    "file_system_id",
                    "mount",
                    "bucket",
                    "node_groups",
                    "fabric",
                    "stack_outputs",
                )
            }
        )
