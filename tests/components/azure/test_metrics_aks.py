"""AKS's GPU metrics path under strict mocks: Azure Managed Prometheus on the cluster, its
workspace, endpoint, rule and association as Azure's onboarding template makes them, and the
agent's scrape of the GPU Operator's DCGM exporter, and on MI300X of AMD's device-metrics exporter, shown
through a real Prometheus that discovers the exporter's pods as the agent does."""

from __future__ import annotations

from typing import Any, Callable

import yaml

from gpu_cluster.components.engine import OfflineRun, Recorded
from tests.components.azure.conftest import azure_obj

Run = Callable[..., OfflineRun]
H100, MI300X = "Standard_ND96isr_H100_v5", "Standard_ND96isr_MI300X_v5"
CLUSTER = "azure-native:containerservice:ManagedCluster"
WORKSPACE = "azure-native:monitor:AzureMonitorWorkspace"
DCE = "azure-native:monitor:DataCollectionEndpoint"
DCR = "azure-native:monitor:DataCollectionRule"
DCRA = "azure-native:monitor:DataCollectionRuleAssociation"
CONFIGMAP = "kubernetes:core/v1:ConfigMap"


def _prometheus_rule(run: OfflineRun) -> Recorded:
    (rule,) = [r for r in run.of_type(DCR) if (r.inputs.get("dataSources") or {}).get("prometheusForwarder")]
    return rule


def test_managed_prometheus_is_on_and_its_rule_carries_the_metrics_to_the_workspace(azure_run: Run) -> None:
    run = azure_run(azure_obj(H100))
    cluster = run.one(CLUSTER).inputs
    # prometheus-collector nested_azuremonitormetrics_profile_clusterResourceId.bicep at 14922b9
    assert cluster["azureMonitorProfile"] == {"metrics": {"enabled": True}}
    workspace = run.one(WORKSPACE)
    assert workspace.inputs["location"] == cluster["location"]
    (endpoint,) = run.of_type(DCE)
    assert endpoint.inputs["kind"] == "Linux"
    rule = _prometheus_rule(run).inputs
    # FullAzureMonitorMetricsProfile.bicep at 4729fae: source, destination and flow by name.
    assert rule["kind"] == "Linux"
    assert rule["dataCollectionEndpointId"] == f"{endpoint.name}-id"
    assert rule["dataSources"]["prometheusForwarder"] == [
        {"name": "PrometheusDataSource", "streams": ["Microsoft-PrometheusMetrics"], "labelIncludeFilter": {}}
    ]
    (account,) = rule["destinations"]["monitoringAccounts"]
    assert account == {"name": "MonitoringAccount1", "accountResourceId": f"{workspace.name}-id"}
    assert rule["dataFlows"] == [{"streams": ["Microsoft-PrometheusMetrics"], "destinations": ["MonitoringAccount1"]}]
    # Names within the 44 characters ARO-HCP's module keeps.
    assert len(rule["dataCollectionRuleName"]) <= 44 and rule["dataCollectionRuleName"].startswith("MSProm-")
    # The association ties this rule to this cluster.
    (assoc,) = [a for a in run.of_type(DCRA) if a.inputs["associationName"].startswith("MSProm-")]
    assert assoc.inputs["resourceUri"] == f"{run.one(CLUSTER).name}-id"
    assert assoc.inputs["dataCollectionRuleId"] == f"{_prometheus_rule(run).name}-id"


def test_the_agent_scrapes_the_gpu_operators_dcgm_exporter_on_nvidia(azure_run: Run) -> None:
    run = azure_run(azure_obj(H100))
    (cm,) = [c for c in run.of_type(CONFIGMAP) if c.inputs["metadata"]["name"] == "ama-metrics-prometheus-config"]
    assert cm.inputs["metadata"]["namespace"] == "kube-system"
    job, push = yaml.safe_load(cm.inputs["data"]["prometheus-config"])["scrape_configs"]
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": ["gpu-operator"]}}]
    # The Pushgateway's pods where its chart is installed; honor_labels keeps the pushed node.
    (gateway,) = [
        r
        for r in run.of_type("kubernetes:helm.sh/v4:Chart")
        if str(r.inputs["chart"]).endswith("/prometheus-pushgateway")
    ]
    assert push["honor_labels"] is True
    assert push["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": [gateway.inputs["namespace"]]}}]
    keep = {tuple(r["source_labels"]): r["regex"] for r in job["relabel_configs"] if r.get("action") == "keep"}
    # NVIDIA/gpu-operator state-dcgm-exporter/0900_daemonset.yaml: the pods' label and port name.
    assert keep == {
        ("__meta_kubernetes_pod_label_app",): "nvidia-dcgm-exporter",
        ("__meta_kubernetes_pod_container_port_name",): "metrics",
    }
    assert job["scrape_interval"] == "30s"
    # The operator that runs the exporter is the one this cluster installs, in that namespace.
    assert any(
        r.inputs.get("chart") == "gpu-operator" and r.inputs.get("namespace") == "gpu-operator"
        for r in run.of_type("kubernetes:helm.sh/v4:Chart")
    )


def _scrape_jobs(run: OfflineRun) -> dict[str, dict[str, Any]]:
    (cm,) = [c for c in run.of_type(CONFIGMAP) if c.inputs["metadata"]["name"] == "ama-metrics-prometheus-config"]
    assert cm.inputs["metadata"]["namespace"] == "kube-system"
    return {j["job_name"]: j for j in yaml.safe_load(cm.inputs["data"]["prometheus-config"])["scrape_configs"]}


def test_mi300x_scrapes_amds_exporter_where_its_device_config_runs_it(azure_run: Run) -> None:
    """The agent scrapes the pods the plan's DeviceConfig makes: its namespace, its name as the pods'
    ``daemonset-name``, and the operator's own label and port name (ROCm/gpu-operator v1.4.1
    internal/metricsexporter/metricsexporter.go lines 61, 71, 193-196, 396-404); no DCGM job."""
    run = azure_run(azure_obj(MI300X))
    assert run.one(CLUSTER).inputs["azureMonitorProfile"] == {"metrics": {"enabled": True}}
    assert run.of_type(WORKSPACE)
    jobs = _scrape_jobs(run)
    assert list(jobs) == ["amd-device-metrics-exporter", "gpu-cluster-pushgateway"]
    (config,) = run.of_type("kubernetes:amd.com/v1alpha1:DeviceConfig")
    meta, spec = config.inputs["metadata"], config.inputs["spec"]
    assert spec["metricsExporter"]["enable"] is True and "rbacConfig" not in spec["metricsExporter"]
    job = jobs["amd-device-metrics-exporter"]
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": [meta["namespace"]]}}]
    keep = {tuple(r["source_labels"]): r["regex"] for r in job["relabel_configs"] if r.get("action") == "keep"}
    assert keep == {
        ("__meta_kubernetes_pod_label_app_kubernetes_io_name",): "metrics-exporter",
        ("__meta_kubernetes_pod_label_daemonset_name",): meta["name"],
        ("__meta_kubernetes_pod_container_port_name",): "exporter-port",
    }
    assert {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"} in job["relabel_configs"]
    # The NVIDIA sizes keep their DCGM job and get no AMD one.
    assert "amd-device-metrics-exporter" not in _scrape_jobs(azure_run(azure_obj(H100)))


GRAFANA = "azure-native:dashboard:Grafana"
ROLE = "azure-native:authorization:RoleAssignment"


def test_managed_grafana_reads_the_workspace_with_its_own_identity(azure_run: Run) -> None:
    run = azure_run(azure_obj(H100))
    workspace = run.one(WORKSPACE)
    grafana = run.one(GRAFANA)
    g = grafana.inputs
    # prometheus-metrics-multiple-workspaces.md at 6ee43cd: the integration names the workspace.
    assert g["properties"]["grafanaIntegrations"] == {
        "azureMonitorWorkspaceIntegrations": [{"azureMonitorWorkspaceResourceId": f"{workspace.name}-id"}]
    }
    assert g["identity"]["type"] == "SystemAssigned"
    assert g["sku"] == {"name": "Standard"} and g["properties"]["apiKey"] == "Disabled"
    assert g["location"] == workspace.inputs["location"] and g["tags"]["gpu-cluster"] == "nd"
    roles = {r.name: r.inputs for r in run.of_type(ROLE) if r.name.startswith(grafana.name.removesuffix("-workspace"))}
    reader = next(i for n, i in roles.items() if n.endswith("-data-reader-role"))
    # Monitoring Data Reader, to the Grafana identity, on the workspace only (not the subscription).
    assert reader["roleDefinitionId"].endswith("/roleDefinitions/b0d8363b-8ddd-447d-831f-62ca05bff136")
    assert reader["principalId"] == "44444444-4444-4444-4444-444444444444"
    assert reader["scope"] == f"{workspace.name}-id" and reader["principalType"] == "ServicePrincipal"
    admin = next(i for n, i in roles.items() if n.endswith("-deployer-grafana-admin"))
    assert admin["roleDefinitionId"].endswith("/roleDefinitions/22926164-76b3-42b3-bc55-97df8dab3e41")
    assert admin["scope"] == f"{grafana.name}-id" and admin["principalId"] == "offline-object"


def test_mi300x_gets_grafana_over_its_workspace_too(azure_run: Run) -> None:
    # The workspace holds the cluster's Kubernetes metrics on MI300X (no DCGM series): Grafana is still
    # where they are looked at.
    run = azure_run(azure_obj(MI300X))
    assert run.one(GRAFANA).inputs["properties"]["grafanaIntegrations"]["azureMonitorWorkspaceIntegrations"]


def test_the_addon_keeps_the_node_exporters_infiniband_counters_on_every_nd_size(azure_run: Run) -> None:
    """The settings ConfigMap widens the node exporter's keep-list by the two counters the AKS
    fabric panels chart, and leaves the template's other settings as they are."""
    import re
    import tomllib

    from gpu_cluster.components.dashboard import FABRIC_PANELS

    for size in (H100, MI300X):
        run = azure_run(azure_obj(size))
        (cm,) = [c for c in run.of_type(CONFIGMAP) if c.inputs["metadata"]["name"] == "ama-metrics-settings-configmap"]
        assert cm.inputs["metadata"]["namespace"] == "kube-system"
        data = cm.inputs["data"]
        assert data["schema-version"] == "v1"
        # The agent reads each section as TOML (key = "value").
        keep = tomllib.loads(data["default-targets-metrics-keep-list"])
        assert keep["minimalingestionprofile"] is True
        assert {k for k, v in keep.items() if v not in ("", True)} == {"nodeexporter"}
        regex = re.compile(keep["nodeexporter"])
        charted = {p.metric for p in FABRIC_PANELS["azure-aks"]}
        assert charted and all(regex.fullmatch(m) for m in charted)
        assert not regex.fullmatch("node_infiniband_port_packets_received_total")
        assert tomllib.loads(data["default-scrape-settings-enabled"])["nodeexporter"] is True
