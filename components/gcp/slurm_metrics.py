"""GPU metrics on Cluster Director (managed Slurm): Google's Ops Agent with its DCGM receiver on every
GPU node, into Cloud Monitoring, and the GPU panels over what that receiver writes.

The path is the one Google's own Slurm blueprints take on the same machine: cluster-toolkit
``examples/machine-learning/a3-ultragpu-8g/a3ultra-slurm-blueprint.yaml`` at 1047080 (lines 563-606,
``enable_dcgm.yml``) adds a ``dcgm`` receiver and pipeline to ``/etc/google-cloud-ops-agent/config.yaml``,
restarts ``google-cloud-ops-agent.service`` and starts ``nvidia-dcgm.service`` on the GPU nodes.
Google documents the receiver as the Ops Agent's NVIDIA DCGM integration (cloud.google.com/monitoring/
agent/ops-agent/third-party-nvidia, read 2026-12-07): DCGM must run as a service, and ``receiver_version:
2`` gives the curated set "for monitoring the performance and state of the GPUs" (Ops Agent 2.51.0 or
later). The config is the one the Ops Agent's own integration test writes
(GoogleCloudPlatform/ops-agent ``integration_test/third_party_apps_test/applications/dcgm/enable`` at
257b782). Cluster Director runs a node set's ``startup_script`` on each VM of the set (pulumi_gcp 10.2.0
``ClusterOrchestratorSlurmNodeSetComputeInstanceArgs.startup_script``, "Max 256KB").

Whether the image carries the Ops Agent and DCGM depends on how it was built: slurm-gcp's Ansible
installs the Ops Agent only when ``monitoring_agent`` is ``cloud-ops`` (GoogleCloudPlatform/slurm-gcp
``ansible/roles/cloudagents/tasks/main.yml`` at 3cab4651; the default is ``legacy``,
``roles/cloudagents/defaults/main.yaml`` at 12418cb0), which cluster-toolkit's A3 Ultra blueprint
passes when it builds its own image, installing ``datacenter-gpu-manager-4-core`` beside it
(``examples/machine-learning/a3-ultragpu-8g/a3ultra-slurm-blueprint.yaml`` at 509c0fb6); which image
Cluster Director itself boots was not read in a source. So the
script installs the agent the documented way where it is missing (``add-google-cloud-ops-agent-repo.sh
--also-install``: ops-agent ``dev-docs/test-3rd-party-apps-manually.md`` at 588c4b9, lines 15-16), and
starts DCGM where the image has its unit (cluster-toolkit installs ``datacenter-gpu-manager-4`` into its
A3 Ultra image and leaves the unit off until boot, lines 155-225). It never fails the node's boot: a
missing piece is written to the node's journal (tag ``gpu-cluster-metrics``) and the node still joins.

The store is the project's Cloud Monitoring: there is no workspace to create. The series are
``workload.googleapis.com/gpu.dcgm.*`` on the ``gce_instance`` resource (ops-agent ``apps/dcgm.go`` at
588c4b9: ``AddPrefix("workload.googleapis.com")``, labels renamed to ``pipe``, ``state``,
``direction``, ``error_type``); their units and kinds are the receiver's
(GoogleCloudPlatform/opentelemetry-operations-collector ``receiver/dcgmreceiver/metadata.yaml`` at
34805c0). PromQL reads them under Cloud Monitoring's mapping: first ``/`` to ``:``, every other special
character to ``_`` (cloud.google.com/monitoring/promql/promql-mapping, read 2026-12-07). A VM's
series carry the resource's labels ``project_id``, ``instance_id`` and ``zone`` (the MonitoredResource
reference's gce_instance example), so a node is its ``instance_id``.

Pure: it builds strings and panels and creates no resource.
"""

from __future__ import annotations

import yaml

from gpu_cluster.components.dashboard import RATE_WINDOW, Panel

OPS_AGENT_CONFIG = "/etc/google-cloud-ops-agent/config.yaml"
OPS_AGENT_UNIT = "google-cloud-ops-agent.service"
DCGM_UNIT = "nvidia-dcgm.service"
# ops-agent dev-docs/test-3rd-party-apps-manually.md at 588c4b9, lines 15-16.
OPS_AGENT_REPO_SCRIPT = "https://dl.google.com/cloudagents/add-google-cloud-ops-agent-repo.sh"
# The curated set (third-party-nvidia page; apps/dcgm.go: ``if r.ReceiverVersion == "2"``).
RECEIVER_VERSION = 2
JOURNAL_TAG = "gpu-cluster-metrics"
# How a VM's series name their node (module docstring).
NODE_LABEL = "instance_id"


def ops_agent_config() -> str:
    """The Ops Agent's user configuration: the DCGM receiver (version 2) in a pipeline of its own.
    The agent merges it with its built-in host metrics and logs (the integration test writes only
    this)."""
    config = {
        "metrics": {
            "receivers": {"dcgm": {"type": "dcgm", "receiver_version": RECEIVER_VERSION}},
            "service": {"pipelines": {"dcgm": {"receivers": ["dcgm"]}}},
        }
    }
    return yaml.safe_dump(config, sort_keys=False)


def metric(name: str) -> str:
    """An Ops Agent DCGM metric's PromQL name: ``gpu.dcgm.temperature`` ->
    ``workload_googleapis_com:gpu_dcgm_temperature`` (the promql-mapping rules)."""
    full = f"workload.googleapis.com/{name}"
    domain, path = full.split("/", 1)
    return domain.replace(".", "_") + ":" + "".join(c if c.isalnum() or c == "_" else "_" for c in path)


def startup_script() -> str:
    """The GPU node set's startup script: DCGM on, the Ops Agent present and configured, restarted."""
    return f"""#!/bin/bash
# gpu-cluster: GPU metrics through the Ops Agent's DCGM receiver (components/gcp/slurm_metrics.py).
# Best effort: whatever is missing is logged, and the node still joins the cluster.
set -u
log() {{ logger -t {JOURNAL_TAG} "$*"; echo "{JOURNAL_TAG}: $*" >&2; }}
metrics() {{
  if ! systemctl cat {DCGM_UNIT} >/dev/null 2>&1; then
    log "{DCGM_UNIT} is not on this image: no DCGM metrics from this node"
    return 0
  fi
  systemctl enable --now {DCGM_UNIT} || log "{DCGM_UNIT} did not start"
  if ! systemctl cat {OPS_AGENT_UNIT} >/dev/null 2>&1; then
    (cd /tmp && curl -sSfO {OPS_AGENT_REPO_SCRIPT} && bash add-google-cloud-ops-agent-repo.sh --also-install) \\
      || {{ log "the Ops Agent could not be installed"; return 0; }}
  fi
  mkdir -p "$(dirname {OPS_AGENT_CONFIG})"
  [ -f {OPS_AGENT_CONFIG} ] && cp {OPS_AGENT_CONFIG} {OPS_AGENT_CONFIG}.bak
  cat > {OPS_AGENT_CONFIG} <<'EOF'
{ops_agent_config()}EOF
  systemctl enable {OPS_AGENT_UNIT} && systemctl restart {OPS_AGENT_UNIT} || log "{OPS_AGENT_UNIT} did not restart"
}}
metrics
exit 0
"""


# The panels of components/dashboard.py over the receiver's series. Ratios (unit "1") are charted
# as percent; energy (J, cumulative) becomes power by rate(); the I/O byte counters (By, cumulative)
# become bytes per second. XID has no panel: the receiver ships gpu.dcgm.xid_errors disabled
# (metadata.yaml at 34805c0, ``enabled: false``) and the Ops Agent's version 2 does not turn it on.
PANELS: tuple[Panel, ...] = (
    Panel(
        title="GPU utilisation (mean of the node's GPUs)",
        metric=metric("gpu.dcgm.utilization"),
        expr="100 * avg by ({node}) ({metric})",
        grafana_unit="percent",
        monitoring_unit="%",
    ),
    Panel(
        title="Tensor pipe active (mean of the node's GPUs)",
        metric=metric("gpu.dcgm.pipe.utilization"),
        expr='100 * avg by ({node}) ({metric}{{pipe="tensor"}})',
        grafana_unit="percent",
        monitoring_unit="%",
    ),
    Panel(
        title="GPU memory used (sum of the node's GPUs)",
        metric=metric("gpu.dcgm.memory.bytes_used"),
        expr='sum by ({node}) ({metric}{{state="used"}})',
        grafana_unit="bytes",
        monitoring_unit="By",
    ),
    Panel(
        title="Power draw (sum of the node's GPUs)",
        metric=metric("gpu.dcgm.energy_consumption"),
        expr="sum by ({node}) (rate({metric}[" + RATE_WINDOW + "]))",
        grafana_unit="watt",
        monitoring_unit="W",
    ),
    Panel(
        title="GPU temperature (hottest GPU of the node)",
        metric=metric("gpu.dcgm.temperature"),
        expr="max by ({node}) ({metric})",
        grafana_unit="celsius",
        monitoring_unit="Cel",
    ),
    Panel(
        title="ECC errors, rate (single- and double-bit, all GPUs)",
        metric=metric("gpu.dcgm.ecc_errors"),
        expr="sum by ({node}) (rate({metric}[" + RATE_WINDOW + "]))",
        grafana_unit="none",
        monitoring_unit="1/s",
    ),
    Panel(
        title="NVLink traffic (sum of the node's GPUs)",
        metric=metric("gpu.dcgm.nvlink.io"),
        expr="sum by ({node}) (rate({metric}[" + RATE_WINDOW + "]))",
        grafana_unit="Bps",
        monitoring_unit="By/s",
    ),
    Panel(
        title="PCIe traffic (sum of the node's GPUs)",
        metric=metric("gpu.dcgm.pcie.io"),
        expr="sum by ({node}) (rate({metric}[" + RATE_WINDOW + "]))",
        grafana_unit="Bps",
        monitoring_unit="By/s",
    ),
)
