"""GPU metrics on the Azure Slurm stack: NVIDIA's DCGM exporter and Prometheus's node exporter on every
GPU node, and a Prometheus in agent mode on the node that remote-writes them to an Azure Monitor
workspace with a user-assigned managed identity; Azure Managed Grafana over the workspace, as on AKS.

The path is the one Azure documents as generally available for VMs and scale sets, "Send Prometheus
metrics from virtual machines, scale sets, or Kubernetes clusters to an Azure Monitor workspace"
(MicrosoftDocs/azure-monitor-docs ``articles/azure-monitor/metrics/prometheus-remote-write-virtual-
machines.md`` at 037c1b0): a self-managed Prometheus later than 2.45 for user-assigned managed identity,
the identity assigned to the scale set, the Monitoring Metrics Publisher role on the workspace's data
collection rule, and ``remote_write`` with ``azuread: {cloud: AzurePublic, managed_identity: {client_id}}``.
The address is the rule's ingestion URL: ``<the endpoint's metrics ingestion URL>/dataCollectionRules/
<the rule's immutable id>/streams/Microsoft-PrometheusMetrics/api/v1/write?api-version=2023-04-24``
(``articles/azure-monitor/metrics/prometheus-remote-write.md`` at 004a44e, its virtual-machine example;
the same page's troubleshooting section gives the form). The endpoint and rule are of this stack
(components/azure/metrics.py ManagedPrometheus, with no cluster to associate), the rule in the shape
of Azure's template for a rule of one's own that takes remote writes into an existing workspace: no
data source, the workspace as its ``monitoringAccounts`` destination, one flow of
``Microsoft-PrometheusMetrics`` (Azure/prometheus-collector ``Azure-ARM-templates/Prometheus-
RemoteWrite-DCR-artifacts/CustomDCR.json`` at 446f94b, which Azure Monitor's remote-write and
ingestion-limit pages link where they say "consider creating additional DCRs and DCEs", MicrosoftDocs,
read through find_string 2026-12-07).
The VM page itself grants the role on "the workspace's data collection rule", the one Azure makes
with the workspace; a rule of our own keeps the identity's right to this stack's rule alone and
its name and deletion with the stack.

On the node (pieces pinned from their publishers):

* Docker and the NVIDIA container toolkit are on the HPC image the scale set runs: Azure/azhpc-images
  ``distros/ubuntu24.04/install.sh`` lines 78-89 at 8e9d055 (``install_docker.sh``, which installs Moby
  and runs ``install_nvidia_container_toolkit.sh``), so ``--gpus all`` works as NVIDIA's README runs the
  exporter (NVIDIA/dcgm-exporter README.md line 14 at 691c927, tag 4.5.3-4.8.2).
* node exporter ``quay.io/prometheus/node-exporter:v1.12.1`` with the README's host flags
  (prometheus/node_exporter README.md lines 48-53 at v1.12.1); its default ``infiniband`` collector reads
  the ND VMs' InfiniBand counters from ``/sys/class/infiniband`` (README line 141).
* Prometheus ``quay.io/prometheus/prometheus:v3.14.0`` (README.md line 55: images on Quay.io) with
  ``--agent`` (cmd/prometheus/main.go line 648 at d7598b7, "Run Prometheus in 'Agent mode'") and
  ``--config.file``; the remote-write ``azuread`` block's keys are storage/remote/azuread/azuread.go
  (``cloud``, ``managed_identity.client_id``) at the same commit.

Each series is labelled ``node`` with the host's name, the label the Grafana dashboard groups by
(components/dashboard.py NODE_LABEL), so the Grafana dashboards serve this stack too
(``dashboards/gpu-grafana-azure-slurm.json`` adds its InfiniBand panels). The lines never fail the
node's boot: every step that can fail ends in ``|| log``.
"""

from __future__ import annotations

import base64
from typing import Any

import pulumi
import pulumi_azure_native as azure
import yaml

from gpu_cluster.components.azure.common import cluster_tags
from gpu_cluster.components.azure.grafana import ManagedGrafana
from gpu_cluster.components.azure.metrics import PROMETHEUS_STREAM, ManagedPrometheus
from gpu_cluster.components.contract import METRICS_TEXTFILE_DIR
from gpu_cluster.components.node_textfile import NODE_EXPORTER_JOB_EXTRA, TEXTFILE_FLAG, TEXTFILE_MODE
from gpu_cluster.components.spec import ClusterSpec

DCGM_EXPORTER_IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless"
NODE_EXPORTER_IMAGE = "quay.io/prometheus/node-exporter:v1.12.1"
PROMETHEUS_IMAGE = "quay.io/prometheus/prometheus:v3.14.0"
PROMETHEUS_CONFIG = "/etc/gpu-cluster/prometheus.yml"
DCGM_PORT = 9400
NODE_EXPORTER_PORT = 9100
# The same 30 s as the AKS and EKS scrapes, so the dashboard's rate() window holds as many samples.
SCRAPE_INTERVAL = "30s"
INGESTION_API_VERSION = "2023-04-24"
AZURE_CLOUD = "AzurePublic"
JOURNAL_TAG = "gpu-cluster-metrics"
NODE_LABEL = "node"
HOST_PLACEHOLDER = "__HOSTNAME__"
# Azure built-in roles: Monitoring Metrics Publisher, "Enables publishing metrics against Azure
# resources", id 3913510d-42f4-4e42-8a64-420c390055eb (MicrosoftDocs azure-docs
# articles/role-based-access-control/built-in-roles.md, the Monitor rows of its table, read through
# find_string 2026-12-07 in its Italian localisation, the copy the index holds). The role the remote-write page
# (prometheus-remote-write-virtual-machines.md at 037c1b0) assigns on the rule.
MONITORING_METRICS_PUBLISHER = "3913510d-42f4-4e42-8a64-420c390055eb"


def remote_write_url(metrics_ingestion_endpoint: str, rule_immutable_id: str) -> str:
    """The rule's Prometheus remote-write address (module docstring)."""
    return (
        f"{metrics_ingestion_endpoint.rstrip('/')}/dataCollectionRules/{rule_immutable_id}/streams/"
        f"{PROMETHEUS_STREAM}/api/v1/write?api-version={INGESTION_API_VERSION}"
    )


def prometheus_config(url: str, client_id: str) -> dict[str, Any]:
    """The node's Prometheus (agent mode): both exporters on this host, each series labelled with the
    host (``HOST_PLACEHOLDER``, replaced at boot), remote-written with the managed identity."""

    def job(name: str, port: int, **extra: Any) -> dict[str, Any]:
        return {
            "job_name": name,
            **extra,
            "static_configs": [{"targets": [f"localhost:{port}"]}],
            "relabel_configs": [
                {"target_label": "instance", "replacement": HOST_PLACEHOLDER},
                {"target_label": NODE_LABEL, "replacement": HOST_PLACEHOLDER},
            ],
        }

    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL},
        # The node exporter's job as on PCS (honor_labels: the validation's series keep their node).
        "scrape_configs": [
            job("dcgm-exporter", DCGM_PORT),
            job("node-exporter", NODE_EXPORTER_PORT, **NODE_EXPORTER_JOB_EXTRA),
        ],
        "remote_write": [{"url": url, "azuread": {"cloud": AZURE_CLOUD, "managed_identity": {"client_id": client_id}}}],
    }


def node_lines(url: str, client_id: str) -> list[str]:
    """What a GPU node runs at boot for its metrics, as shell lines (appended to its custom data)."""
    config = yaml.safe_dump(prometheus_config(url, client_id), sort_keys=False)
    docker = "docker run -d --restart always --net host"
    return [
        "# gpu-cluster: GPU metrics into the Azure Monitor workspace (components/azure/slurm_metrics.py).",
        f'log() {{ logger -t {JOURNAL_TAG} "$*"; echo "{JOURNAL_TAG}: $*" >&2; }}',
        f"{docker} --name dcgm-exporter --gpus all --cap-add SYS_ADMIN {DCGM_EXPORTER_IMAGE} "
        '|| log "the DCGM exporter did not start"',
        # The validation's figures through the textfile collector, as on PCS (components/aws/slurm_metrics.py).
        f'mkdir -p {METRICS_TEXTFILE_DIR} && chmod {TEXTFILE_MODE} {METRICS_TEXTFILE_DIR} || log "no textfile directory"',
        f"{docker} --name node-exporter --pid host -v /:/host:ro,rslave {NODE_EXPORTER_IMAGE} --path.rootfs=/host "
        f'{TEXTFILE_FLAG} || log "the node exporter did not start"',
        f"mkdir -p {PROMETHEUS_CONFIG.rsplit('/', 1)[0]}",
        f"cat > {PROMETHEUS_CONFIG} <<'GPUC_METRICS_EOF'",
        *config.rstrip("\n").splitlines(),
        "GPUC_METRICS_EOF",
        f'sed -i "s/{HOST_PLACEHOLDER}/$(hostname -s)/g" {PROMETHEUS_CONFIG}',
        f"{docker} --name prometheus -v {PROMETHEUS_CONFIG}:/etc/prometheus/prometheus.yml:ro {PROMETHEUS_IMAGE} "
        '--config.file=/etc/prometheus/prometheus.yml --agent || log "the Prometheus agent did not start"',
    ]


def with_metrics(custom_data: str, lines: list[str]) -> str:
    """A base64 custom-data script (components/azure/slurm_config.py) with ``lines`` run after it."""
    script = base64.b64decode(custom_data).decode()
    return base64.b64encode((script.rstrip("\n") + "\n" + "\n".join(lines) + "\n").encode()).decode()


class SlurmMetrics(pulumi.ComponentResource):
    """The workspace with its endpoint and rule, the GPU nodes' identity with the right to publish to
    that rule only, and Managed Grafana over the workspace."""

    prometheus: ManagedPrometheus
    identity: azure.managedidentity.UserAssignedIdentity
    grafana: ManagedGrafana
    lines: pulumi.Output[list[str]]

    def __init__(
        self,
        name: str,
        *,
        spec: ClusterSpec,
        resource_group: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpu-cluster:metrics:AzureSlurmMetrics", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        client = azure.authorization.get_client_config_output(opts=pulumi.InvokeOutputOptions(parent=self))
        self.prometheus = ManagedPrometheus(
            f"{name}-prometheus", spec=spec, resource_group=resource_group, cluster_id=None, opts=child
        )
        self.identity = azure.managedidentity.UserAssignedIdentity(
            f"{name}-identity",
            resource_group_name=resource_group,
            location=spec.region,
            tags=cluster_tags(spec),
            opts=child,
        )
        azure.authorization.RoleAssignment(
            f"{name}-publisher-role",
            principal_id=self.identity.principal_id,
            principal_type="ServicePrincipal",
            role_definition_id=pulumi.Output.format(
                "/subscriptions/{0}/providers/Microsoft.Authorization/roleDefinitions/{1}",
                client.subscription_id,
                MONITORING_METRICS_PUBLISHER,
            ),
            scope=self.prometheus.rule.id,
            opts=child,
        )
        self.grafana = ManagedGrafana(
            f"{name}-grafana",
            spec=spec,
            resource_group=resource_group,
            workspace_id=self.prometheus.workspace.id,
            subscription_id=client.subscription_id,
            deployer=client.object_id,
            opts=child,
        )
        url = pulumi.Output.all(
            self.prometheus.endpoint.metrics_ingestion.apply(lambda m: m.endpoint if m else ""),
            self.prometheus.rule.immutable_id,
        ).apply(lambda a: remote_write_url(str(a[0]), str(a[1])))
        self.lines = pulumi.Output.all(url, self.identity.client_id).apply(lambda a: node_lines(a[0], str(a[1])))
        self.register_outputs({"workspace": self.prometheus.workspace.id, "identity": self.identity.id})

    def identity_args(self) -> azure.compute.VirtualMachineScaleSetIdentityArgs:
        """The scale set's identity: the one user-assigned identity above (the remote-write page's
        "Assign the managed identity to a virtual machine or a virtual machine scale set")."""
        return azure.compute.VirtualMachineScaleSetIdentityArgs(
            type=azure.compute.ResourceIdentityType.USER_ASSIGNED,
            user_assigned_identities=[self.identity.id],
        )
