"""GPU metrics on AWS PCS: NVIDIA's DCGM exporter and Prometheus's node exporter on every GPU node,
scraped on the node by the AWS Distro for OpenTelemetry (ADOT) collector, which remote-writes to the
stack's Amazon Managed Service for Prometheus workspace; Amazon Managed Grafana over it, as on EKS.

The layout is AWS's own recipe for PCS, aws-samples/aws-hpc-recipes ``recipes/pcs/observability_for_pcs``
at 009a29a: Docker on the compute nodes from the launch template's user data (README.md lines 61-80,
``docker`` on Amazon Linux), the exporters as containers, an OpenTelemetry collector per node with a
``prometheus`` receiver over ``localhost:9100`` (node exporter) and ``localhost:9400`` (DCGM exporter),
``instance`` relabelled to the host, and a ``prometheusremotewrite`` exporter signed by ``sigv4auth``
for service ``aps`` (the awsome-distributed-training files it runs, at 7217859:
``1.architectures/5.sagemaker-hyperpod/LifecycleScripts/base-config/observability/``
``otel_config/config-compute-template.yaml``, ``install_node_exporter.sh``, ``install_dcgm_exporter.sh``);
its IAM policy lets the nodes ``aps:RemoteWrite`` on the one workspace (``observability-stack.yaml``,
``PrometheusWritePolicy``). Where the recipe pulls HyperPod's private images and clones a repository at
boot, this takes each piece from its publisher, pinned:

* DCGM exporter: ``nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless``, run as NVIDIA's README
  runs it (``docker run -d --gpus all --cap-add SYS_ADMIN ... -p 9400:9400``: NVIDIA/dcgm-exporter
  README.md line 14 at 691c927, tag 4.5.3-4.8.2), the release the EKS chart pins (components/k8s/metrics.py).
  ``--gpus all`` needs the NVIDIA container toolkit on the image. It depends on the AMI: the DLAMI
  "Base OSS Nvidia Driver GPU" AMIs that aws-hpc-recipes' ``recipes/pcs/dlami_for_pcs_imagebuilder``
  builds on list it (``nvidia_container_toolkit_version`` 1.20.0 in the AL2023 release of 2026-09-04,
  DLAMI developer guide, read 2026-12-07); the ``recipes/pcs/hpc_ready_ami`` scripts install none
  (``assets/scripts/`` at fbed9006: enroot and pyxis only). So the script checks for ``nvidia-ctk``
  and logs where it is missing.
* node exporter: ``quay.io/prometheus/node-exporter:v1.12.1`` with the README's host flags
  (``--net="host" --pid="host" -v "/:/host:ro,rslave" ... --path.rootfs=/host``: prometheus/node_exporter
  README.md lines 48-53 at v1.12.1, 6044da7). Its ``infiniband`` collector is on by default on Linux
  (README.md line 141, under "Enabled by default") and reads ``/sys/class/infiniband``.
* ADOT collector: the RPM and control script of ADOT's own EC2 template
  (aws-observability/aws-otel-collector ``deployment-template/ec2/aws-otel-ec2-deployment-cfn.yaml`` at
  ed0b1d5, line 130 ``rpm -Uvh .../amazon_linux/amd64/latest/aws-otel-collector.rpm``; ``tools/ctl/linux/
  aws-otel-collector-ctl.sh`` line 34 ``aws-otel-collector-ctl -c <config> -a start``), pinned to a
  release rather than ``latest``: the release notes' download table writes each release's RPM at
  ``https://aws-otel-collector.s3.amazonaws.com/amazon_linux/amd64/__VERSION__/aws-otel-collector.rpm``
  (``tools/release/downloading-links.md.template`` line 6 at ed0b1d5, filled from the ``VERSION`` file
  by ``tools/release/generate-release-note.sh`` line 19), and ``VERSION`` there is ``v0.49.0`` (tag
  v0.49.0, 0771477). Its build carries the three components
  (``pkg/defaultcomponents/defaults.go``: prometheusreceiver, prometheusremotewriteexporter,
  sigv4authextension), the set AWS documents for ADOT into AMP (docs.aws.amazon.com/prometheus/latest/
  userguide/AMP-onboard-ingest-metrics-OpenTelemetry.html, read 2026-12-07).

The remote-write address is the workspace's ``prometheus_endpoint`` and ``api/v1/remote_write``
(the form AWS APIs accept: ``https://aps-workspaces.<region>.amazonaws.com/workspaces/<id>/api/v1/
remote_write``, EMR Serverless API reference PrometheusMonitoringConfiguration.remoteWriteUrl, read
2026-12-07). Each series is labelled ``node`` with the host's name, the label the Grafana dashboard
groups by on EKS (components/dashboard.py NODE_LABEL); ``dashboards/gpu-grafana-pcs.json`` is that dashboard
with PCS's EFA panels, whose counters a timer the script installs writes (components/aws/efa_textfile.py).

The script never fails the node's boot (``exit 0``): what is missing goes to the journal (tag
``gpu-cluster-metrics``). Pure: strings only; the resources are in components/aws/metrics.py.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from gpu_cluster.components.aws import efa_textfile
from gpu_cluster.components.contract import METRICS_TEXTFILE_DIR
from gpu_cluster.components.node_textfile import NODE_EXPORTER_JOB_EXTRA, TEXTFILE_FLAG, TEXTFILE_MODE

DCGM_EXPORTER_IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless"
NODE_EXPORTER_IMAGE = "quay.io/prometheus/node-exporter:v1.12.1"
# aws-observability/aws-otel-collector VERSION at ed0b1d5 (tag v0.49.0, 0771477) into
# tools/release/downloading-links.md.template line 6 there (module docstring).
ADOT_VERSION = "v0.49.0"
ADOT_RPM = f"https://aws-otel-collector.s3.amazonaws.com/amazon_linux/amd64/{ADOT_VERSION}/aws-otel-collector.rpm"
ADOT_CTL = "/opt/aws/aws-otel-collector/bin/aws-otel-collector-ctl"
ADOT_CONFIG = "/opt/aws/aws-otel-collector/etc/gpu-cluster.yaml"
# The exporters' ports: dcgm-exporter README line 14 (9400); node exporter's default (9100, the
# recipe's compute template).
DCGM_PORT = 9400
NODE_EXPORTER_PORT = 9100
# The same 30 s as the EKS scraper (components/aws/metrics.py SCRAPE_INTERVAL), so the dashboard's
# rate() window holds the same number of samples on both.
SCRAPE_INTERVAL = "30s"
REMOTE_WRITE_PATH = "api/v1/remote_write"
JOURNAL_TAG = "gpu-cluster-metrics"

NODE_LABEL = "node"
HOST_PLACEHOLDER = "__HOSTNAME__"


def remote_write_url(prometheus_endpoint: str) -> str:
    """The workspace's remote-write address from its Prometheus endpoint (ends in ``/``)."""
    return prometheus_endpoint.rstrip("/") + "/" + REMOTE_WRITE_PATH


def collector_config(prometheus_endpoint: str, region: str) -> dict[str, Any]:
    """The ADOT collector's configuration: both exporters on this host, each series labelled with the
    host (``HOST_PLACEHOLDER``, which the script replaces at boot), remote-written to the workspace."""

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
        "receivers": {
            "prometheus": {
                "config": {
                    "global": {"scrape_interval": SCRAPE_INTERVAL},
                    "scrape_configs": [
                        job("dcgm-exporter", DCGM_PORT),
                        job("node-exporter", NODE_EXPORTER_PORT, **NODE_EXPORTER_JOB_EXTRA),
                    ],
                }
            }
        },
        "exporters": {
            "prometheusremotewrite": {
                "endpoint": remote_write_url(prometheus_endpoint),
                "auth": {"authenticator": "sigv4auth"},
            }
        },
        "extensions": {"sigv4auth": {"region": region, "service": "aps"}},
        "service": {
            "extensions": ["sigv4auth"],
            "pipelines": {"metrics": {"receivers": ["prometheus"], "exporters": ["prometheusremotewrite"]}},
        },
    }


def node_script(prometheus_endpoint: str, region: str) -> str:
    """The GPU nodes' user-data script: Docker, the two exporters, the collector."""
    config = yaml.safe_dump(collector_config(prometheus_endpoint, region), sort_keys=False)
    return f"""#!/bin/bash
# gpu-cluster: GPU metrics into Amazon Managed Service for Prometheus (components/aws/slurm_metrics.py).
# Best effort: whatever is missing is logged, and the node still joins the cluster.
set -u
log() {{ logger -t {JOURNAL_TAG} "$*"; echo "{JOURNAL_TAG}: $*" >&2; }}
metrics() {{
  command -v docker >/dev/null || dnf install -y docker || {{ log "docker could not be installed"; return 0; }}
  systemctl enable --now docker || {{ log "docker did not start"; return 0; }}
  command -v nvidia-ctk >/dev/null || log "no NVIDIA container toolkit (nvidia-ctk): the DCGM exporter cannot see the GPUs"
  docker run -d --restart always --name dcgm-exporter --gpus all --cap-add SYS_ADMIN --net host \\
    {DCGM_EXPORTER_IMAGE} || log "the DCGM exporter did not start"
  mkdir -p {METRICS_TEXTFILE_DIR} && chmod {TEXTFILE_MODE} {METRICS_TEXTFILE_DIR} || log "no textfile directory"
  docker run -d --restart always --name node-exporter --net host --pid host -v /:/host:ro,rslave \\
    {NODE_EXPORTER_IMAGE} --path.rootfs=/host {TEXTFILE_FLAG} || log "the node exporter did not start"
  # EFA's byte counters into the textfile directory (components/aws/efa_textfile.py)
{efa_textfile.install_lines()}  [ -x {ADOT_CTL} ] || rpm -Uvh {ADOT_RPM} || {{ log "the ADOT collector could not be installed"; return 0; }}
  mkdir -p "$(dirname {ADOT_CONFIG})"
  cat > {ADOT_CONFIG} <<'EOF'
{config}EOF
  sed -i "s/{HOST_PLACEHOLDER}/$(hostname -s)/g" {ADOT_CONFIG}
  {ADOT_CTL} -c {ADOT_CONFIG} -a start || log "the ADOT collector did not start"
}}
metrics
exit 0
"""


def add_part(mime: str, script: str) -> str:
    """``mime`` (a multipart/mixed document, as PCS requires of a launch template's user data:
    components/aws/orchestration_pcs.py lustre_user_data) with ``script`` as one more shell part,
    run after the parts before it."""
    m = re.search(r'boundary="([^"]+)"', mime)
    if m is None:
        raise ValueError("user data is not a MIME multipart document")
    closing = f"--{m.group(1)}--"
    head, sep, _ = mime.rpartition(closing)
    if not sep:
        raise ValueError("user data has no closing boundary")
    part = f'--{m.group(1)}\nContent-Type: text/x-shellscript; charset="us-ascii"\n\n{script}\n'
    return f"{head}{part}{closing}\n"
