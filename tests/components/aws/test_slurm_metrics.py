"""PCS's GPU metrics (components/aws/slurm_metrics.py): the GPU nodes' user data runs the exporters
and an ADOT collector configured as AWS's PCS observability recipe configures its collector, the node
role may only write to the stack's AMP workspace, Grafana queries it, and liveness sees the exporter."""

from __future__ import annotations

import base64
import email
import json
import subprocess
from email.message import Message
from pathlib import Path
from typing import Any

import yaml

from gpu_cluster.components import liveness as live
from gpu_cluster.components.aws import slurm_metrics
from gpu_cluster.components.aws.metrics import REMOTE_WRITE_ACTIONS
from gpu_cluster.components.aws.mocks import ACCOUNT
from tests.components._liveness import bundled, mutate_plan

STACK = "aws-h200-slurm"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
WORKSPACE = "aws:amp/workspace:Workspace"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
GRAFANA = "aws:grafana/workspace:Workspace"
ENDPOINT = "https://aps-workspaces.us-east-2.amazonaws.com/workspaces/ws-1/"

# aws-samples/awsome-distributed-training at 7217859, 1.architectures/5.sagemaker-hyperpod/
# LifecycleScripts/base-config/observability/otel_config/config-compute-template.yaml (the collector
# config AWS's PCS recipe runs, aws-hpc-recipes recipes/pcs/observability_for_pcs at 009a29a): what
# ours must keep of it. The EFA exporter job is left out (no EFA exporter runs here).
RECIPE_TARGETS = {"node_exporter": "localhost:9100", "dcgm_exporter": "localhost:9400"}
RECIPE_EXPORTER = {"prometheusremotewrite": {"auth": {"authenticator": "sigv4auth"}}}
RECIPE_EXTENSION = {"sigv4auth": {"service": "aps"}}


def _parts(mime: str) -> list[str]:
    msg = email.message_from_string(mime)
    parts = msg.get_payload()
    assert msg.is_multipart() and isinstance(parts, list)
    out = []
    for p in parts:
        assert isinstance(p, Message)
        body = p.get_payload()
        assert isinstance(body, str)
        out.append(body)
    return out


def test_the_collector_config_keeps_the_recipes_shape() -> None:
    c = slurm_metrics.collector_config(ENDPOINT, "us-east-2")
    jobs = c["receivers"]["prometheus"]["config"]["scrape_configs"]
    targets = {j["job_name"]: j["static_configs"][0]["targets"] for j in jobs}
    assert sorted(t for (t,) in targets.values()) == sorted(RECIPE_TARGETS.values())
    for j in jobs:  # every series names its host, as the recipe's relabel does, and its node
        labels = {r["target_label"]: r["replacement"] for r in j["relabel_configs"]}
        assert labels == {"instance": slurm_metrics.HOST_PLACEHOLDER, "node": slurm_metrics.HOST_PLACEHOLDER}
    exp = c["exporters"]["prometheusremotewrite"]
    assert exp["auth"] == RECIPE_EXPORTER["prometheusremotewrite"]["auth"]
    # The AMP remote-write form (EMR Serverless API, PrometheusMonitoringConfiguration.remoteWriteUrl).
    assert exp["endpoint"] == ENDPOINT + "api/v1/remote_write"
    assert c["extensions"]["sigv4auth"] == {"region": "us-east-2", **RECIPE_EXTENSION["sigv4auth"]}
    assert c["service"]["extensions"] == ["sigv4auth"]
    assert c["service"]["pipelines"]["metrics"] == {"receivers": ["prometheus"], "exporters": ["prometheusremotewrite"]}
    # The dashboard's node label (components/dashboard.py NODE_LABEL for EKS, the same Grafana file).
    from gpu_cluster.components.dashboard import NODE_LABEL

    assert slurm_metrics.NODE_LABEL == NODE_LABEL["eks"]


def test_the_node_script_runs_the_exporters_as_their_readmes_do() -> None:
    script = slurm_metrics.node_script(ENDPOINT, "us-east-2")
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    lines = [ln.strip() for ln in script.replace("\\\n", " ").splitlines()]
    [dcgm] = [ln for ln in lines if ln.startswith("docker run") and "dcgm-exporter:" in ln]
    # NVIDIA/dcgm-exporter README.md line 14 at 691c927.
    assert "--gpus all" in dcgm and "--cap-add SYS_ADMIN" in dcgm
    assert "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless" in dcgm
    [node] = [ln for ln in lines if ln.startswith("docker run") and "node-exporter:" in ln]
    # prometheus/node_exporter README.md lines 48-53 at v1.12.1.
    for flag in ("--net host", "--pid host", "-v /:/host:ro,rslave", "--path.rootfs=/host"):
        assert flag in node, flag
    # The collector's config is written before it starts, with the host in place of the placeholder.
    assert script.index(f"cat > {slurm_metrics.ADOT_CONFIG}") < script.index(f"{slurm_metrics.ADOT_CTL} -c")
    body = script.split("<<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
    assert yaml.safe_load(body) == slurm_metrics.collector_config(ENDPOINT, "us-east-2")
    assert script.rstrip().endswith("exit 0") and "set -e" not in script
    # The collector is a pinned release (aws-otel-collector downloading-links.md.template at
    # ed0b1d5 with VERSION v0.49.0), never the moving ``latest``.
    [rpm] = [ln for ln in lines if "rpm -Uvh" in ln]
    assert "https://aws-otel-collector.s3.amazonaws.com/amazon_linux/amd64/v0.49.0/aws-otel-collector.rpm" in rpm
    assert "/latest/" not in script


def test_the_node_script_logs_and_exits_0_where_docker_cannot_be_had(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    for tool, rc in (("dnf", 1), ("logger", 0), ("docker", 1), ("systemctl", 1)):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\nexit {rc}\n')
        (bin_dir / tool).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/bin:/usr/bin"}
    # ``command -v docker`` finds the stub: hide it to model an image without Docker.
    (bin_dir / "docker").unlink()
    done = subprocess.run(
        ["/bin/bash", "-c", slurm_metrics.node_script(ENDPOINT, "us-east-2")], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0
    assert calls.read_text().splitlines() == [
        "dnf install -y docker",
        "logger -t gpu-cluster-metrics docker could not be installed",
    ]


def test_the_bundled_pcs_stack_has_exporter_store_grafana_and_least_privilege() -> None:
    p = bundled(STACK)
    run = p.run
    (ws,) = run.of_type(WORKSPACE)
    templates = {r.name: r for r in run.of_type(LT)}
    gpu = next(r for n, r in templates.items() if n.endswith("-compute-lt") or "compute" in n)
    login = next(r for n, r in templates.items() if "login" in n)
    gpu_parts = _parts(base64.b64decode(gpu.inputs["userData"]).decode())
    login_parts = _parts(base64.b64decode(login.inputs["userData"]).decode())
    # The GPU nodes run the login nodes' part (the Lustre mount) first, then the metrics part, with the
    # workspace's endpoint as the mocks answer it (components/aws/mocks.py).
    assert gpu_parts[:-1] == login_parts and "gpu-cluster-metrics" not in "".join(login_parts)
    endpoint = f"https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-{ws.name}/"
    assert gpu_parts[-1] == slurm_metrics.node_script(endpoint, p.spec.region)
    # The node role: aps:RemoteWrite on this workspace, nothing else.
    [write] = [r for r in run.of_type(ROLE_POLICY) if r.name.endswith("-remote-write")]
    doc = json.loads(write.inputs["policy"])
    assert doc["Statement"] == [
        {
            "Sid": "RemoteWrite",
            "Effect": "Allow",
            "Action": list(REMOTE_WRITE_ACTIONS),
            "Resource": f"arn:aws:aps:us-east-1:{ACCOUNT}:workspace/ws-{ws.name}",
        }
    ]
    # On the GPU nodes' role (the one PCS passes: path /aws-pcs/), and only there.
    [role] = [r for r in run.of_type("aws:iam/role:Role") if r.inputs.get("path") == "/aws-pcs/"]
    assert role.name in str(write.inputs["role"])
    # Grafana over it, as on EKS.
    (grafana,) = run.of_type(GRAFANA)
    assert grafana.inputs["dataSources"] == ["PROMETHEUS"]


def test_liveness_sees_the_exporter_in_the_gpu_user_data() -> None:
    p = bundled(STACK)
    [check] = p.checks("node-image", "GPU metrics exporter")
    assert check.holds and "NVIDIA's DCGM exporter" in check.why and "user data" in check.why
    assert not p.failed()
    gpu = next(r for r in p.plan.of(LT) if "login" not in r.name)

    def drop(inputs: dict[str, Any]) -> None:
        text = base64.b64decode(inputs["userData"]).decode()
        inputs["userData"] = base64.b64encode(text.replace("docker run", "true").encode()).decode()

    broken = live.evaluate(mutate_plan(p.plan, LT, gpu.name, drop), p.job)
    [failed] = [c for c in broken.failed if "GPU metrics exporter" in c.check]
    assert "starts no GPU metrics exporter" in failed.why
