"""EKS's GPU metrics path: NVIDIA's DCGM exporter chart on every GPU node, scraped by an AMP managed
collector into an AMP workspace; the liveness model holds the exporter to landing on the GPU pool."""

from __future__ import annotations

import pytest
import yaml

from gpu_cluster.components.k8s import metrics as k8s_metrics
from gpu_cluster.components.spec import read_stack_file
from tests.components._liveness import bundled, plan_raw

STACK = "aws-h100-eks"
CHART = "kubernetes:helm.sh/v4:Chart"


def test_the_scraper_fills_the_workspace_from_the_exporters_pods() -> None:
    p = bundled(STACK)
    run = p.run
    (workspace,) = run.of_type("aws:amp/workspace:Workspace")
    (scraper,) = run.of_type("aws:amp/scraper:Scraper")
    (cluster,) = run.of_type("aws:eks/cluster:Cluster")
    # AMP-collector-how-to: the EKS source (cluster, subnets, security groups) and the workspace.
    eks = scraper.inputs["source"]["eks"]
    assert eks["clusterArn"].endswith(f":cluster/{cluster.name}")
    # Two zones' subnets (the control plane's) and the security group the nodes share (the EFA one).
    efa = [g for g in run.of_type("aws:ec2/securityGroup:SecurityGroup") if g.name.endswith("-interconnect-efa")]
    assert len(eks["subnetIds"]) == 2 and eks["securityGroupIds"] == [f"{efa[0].name}-id"]
    # The destination is this stack's workspace (its ARN is known only after create; the scraper waits for it).
    assert workspace.urn in scraper.dependencies
    assert workspace.inputs["tags"] and scraper.inputs["tags"] == workspace.inputs["tags"]
    config = yaml.safe_load(scraper.inputs["scrapeConfiguration"])
    # The collector refuses intervals under 30 s and any discovery but kubernetes_sd_configs.
    assert config["global"]["scrape_interval"] == "30s"
    job, efa, push = config["scrape_configs"]
    # The EFA exporter's pods (components/aws/efa_exporter.py; tests/components/aws/test_efa_exporter.py).
    assert efa["job_name"] == "gpu-cluster-efa"
    assert set(job) == {"job_name", "kubernetes_sd_configs", "relabel_configs"}
    # The Pushgateway's pods, in the namespace its chart is installed in, keeping the pushed labels.
    (gateway,) = [c for c in run.of_type(CHART) if c.inputs["chart"].endswith("/prometheus-pushgateway")]
    assert push["honor_labels"] is True and "scrape_interval" not in push
    assert push["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": [gateway.inputs["namespace"]]}}]
    assert {r["regex"] for r in push["relabel_configs"] if r.get("action") == "keep"} == {
        "prometheus-pushgateway",
        "metrics",
    }
    (charts,) = [c for c in run.of_type(CHART) if c.inputs["chart"] == "dcgm-exporter"]
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": [charts.inputs["namespace"]]}}]
    keep = {tuple(r["source_labels"]): r["regex"] for r in job["relabel_configs"] if r.get("action") == "keep"}
    # NVIDIA/dcgm-exporter 4.5.3-4.8.2: _helpers.tpl 61-65 and templates/daemonset.yaml 167-168.
    assert keep == {
        ("__meta_kubernetes_pod_label_app_kubernetes_io_name",): "dcgm-exporter",
        ("__meta_kubernetes_pod_container_port_name",): "metrics",
    }


def test_the_exporter_chart_is_pinned_on_the_gpu_nodes_without_a_service_monitor() -> None:
    p = bundled(STACK)
    (chart,) = [c for c in p.run.of_type(CHART) if c.inputs["chart"] == "dcgm-exporter"]
    assert chart.inputs["version"] == "4.8.2"
    assert chart.inputs["repositoryOpts"]["repo"] == "https://nvidia.github.io/dcgm-exporter/helm-charts"
    values = chart.inputs["values"]
    assert values["serviceMonitor"] == {"enabled": False}  # no Prometheus Operator CRD on the cluster
    assert values["nodeSelector"] == {"node.kubernetes.io/instance-type": p.spec.compute.instance_type}
    (check,) = p.checks("scheduling", "chart dcgm-exporter 4.8.2: dcgm-exporter")
    assert check.holds and "runs on every node of pool" in check.check


def test_the_pushgateway_chart_is_pinned_hardened_on_the_system_pool() -> None:
    p = bundled(STACK)
    (chart,) = [c for c in p.run.of_type(CHART) if c.inputs["chart"].endswith("/prometheus-pushgateway")]
    assert chart.inputs["version"] == "3.8.0" and chart.inputs["namespace"] == "kube-system"
    values = chart.inputs["values"]
    assert values["fullnameOverride"] == "gpu-cluster-pushgateway" and values["automountServiceAccountToken"] is False
    box = values["containerSecurityContext"]
    assert (
        box["readOnlyRootFilesystem"] and not box["allowPrivilegeEscalation"] and box["capabilities"]["drop"] == ["ALL"]
    )
    assert set(values["resources"]) == {"requests", "limits"}
    (check,) = p.checks("scheduling", "chart prometheus-pushgateway 3.8.0: gpu-cluster-pushgateway")
    assert check.holds and values["nodeSelector"] == {"gpu-cluster/role": "system"}


def test_an_exporter_that_lands_on_no_gpu_node_breaks_liveness(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        k8s_metrics,
        "dcgm_exporter_values",
        lambda instance_type: {"nodeSelector": {"node.kubernetes.io/instance-type": "m5.large"}},
    )
    name, raw = read_stack_file(STACK)
    p = plan_raw(name, raw)
    failed = [c for c in p.failed() if "dcgm-exporter" in c.object]
    assert failed and failed[0].kind == "scheduling" and "runs on every node of pool" in failed[0].check


def test_managed_grafana_queries_only_this_workspace() -> None:
    import json

    run = bundled(STACK).run
    (workspace,) = run.of_type("aws:amp/workspace:Workspace")
    (grafana,) = run.of_type("aws:grafana/workspace:Workspace")
    g = grafana.inputs
    # AMG-manage-permissions.html: the customer-managed mode, with the stack's own role.
    assert g["permissionType"] == "CUSTOMER_MANAGED" and g["accountAccessType"] == "CURRENT_ACCOUNT"
    assert g["dataSources"] == ["PROMETHEUS"] and g["authenticationProviders"] == ["AWS_SSO"]
    (role,) = [r for r in run.of_type("aws:iam/role:Role") if g["roleArn"].endswith(f"/{r.name}")]
    trust = json.loads(role.inputs["assumeRolePolicy"])
    assert [s["Principal"] for s in trust["Statement"]] == [{"Service": "grafana.amazonaws.com"}]
    (policy,) = [p for p in run.of_type("aws:iam/rolePolicy:RolePolicy") if p.inputs["role"] == f"{role.name}-id"]
    (statement,) = json.loads(policy.inputs["policy"])["Statement"]
    # The AMP data source's four query actions, on this workspace's ARN and nothing else.
    assert sorted(statement["Action"]) == [
        "aps:GetLabels",
        "aps:GetMetricMetadata",
        "aps:GetSeries",
        "aps:QueryMetrics",
    ]
    assert statement["Resource"] == f"arn:aws:aps:us-east-1:123456789012:workspace/ws-{workspace.name}"
    assert g["tags"] == workspace.inputs["tags"]
