"""AKS's GPU metrics path under strict mocks: Azure Managed Prometheus on the cluster, its
workspace, endpoint, rule and association as Azure's onboarding template makes them, and the
agent's scrape of the GPU Operator's DCGM exporter, and on MI300X of AMD's device-metrics exporter, shown
through a real Prometheus that discovers the exporter's pods as the agent does."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
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


# AMD's exporter through a real Prometheus: the agent's job as the stack writes it, its relabelling and
# scrape run by Prometheus itself against exporter pods that are servers on 127.0.0.1 serving the
# exporter's text format (series shaped as ROCm/device-metrics-exporter docs/configuration/
# metricslist.md's example at e2a7018, lines 229-246: one series per GPU with card_model, gpu_id,
# hostname, serial_number). The dashboard's AMD panels are then asked of it. Debian's Prometheus is
# built without Kubernetes discovery ("field kubernetes_sd_configs not found"), so the pods reach it
# through file discovery, as the targets and ``__meta_kubernetes_*`` labels the pod role makes of them:
# one target per declared container port, a port-less one for a container without ports, the pod's
# labels as ``__meta_kubernetes_pod_label_<name>`` with invalid characters made ``_`` (prometheus/
# prometheus docs/configuration/configuration.md at 1e317d0, ``<kubernetes_sd_config>``, role pod),
# from the job's own ``namespaces`` only.
EXPORTER_NODES = {"aks-gpu-0": ((10.0, 30.0), (1000.0, 2000.0)), "aks-gpu-1": ((50.0, 70.0), (4000.0, 500.0))}


class _Exporter:
    """One exporter pod's metrics endpoint: two GPUs, their XGMI counters growing by 2048 KB a scrape."""

    def __init__(self, node: str, activity: tuple[float, float], vram: tuple[float, float]) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.scrapes = 0
        me = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                me.scrapes += 1
                lines = []
                for gpu in (0, 1):
                    labels = f'card_model="xxxx",gpu_id="{gpu}",hostname="{node}",serial_number="s{gpu}"'
                    lines += [
                        f"gpu_gfx_activity{{{labels}}} {activity[gpu]}",
                        f"gpu_used_vram{{{labels}}} {vram[gpu]}",
                        f"gpu_power_usage{{{labels}}} 700",
                        f"gpu_junction_temperature{{{labels}}} {60 + gpu}",
                        f"gpu_health{{{labels}}} 1",
                        f"gpu_ecc_uncorrect_total{{{labels}}} 0",
                        f"gpu_ecc_correct_total{{{labels}}} {gpu}",
                    ]
                    for link in (0, 1):
                        for way in ("rx", "tx"):
                            lines.append(f'gpu_xgmi_link_{way}{{{labels},link_index="{link}"}} {2048 * me.scrapes}')
                body = ("\n".join(lines) + "\n").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _operator_pod(name: str, node: str, labels: dict[str, str], port: int) -> dict[str, Any]:
    """A pod as AMD's operator makes the exporter's (metricsexporter.go at v1.4.1: the driver-init init
    container without ports, then the exporter container with its one named port)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "kube-amd-gpu", "labels": labels},
        "spec": {
            "nodeName": node,
            "initContainers": [{"name": "driver-init", "image": "busybox:1.36"}],
            "containers": [
                {
                    "name": "metrics-exporter-container",
                    "image": "docker.io/rocm/device-metrics-exporter:v1.4.1",
                    "ports": [{"name": "exporter-port", "containerPort": port, "protocol": "TCP"}],
                }
            ],
        },
        "status": {"phase": "Running", "podIP": "127.0.0.1"},
    }


def _pod_role(pods: list[dict[str, Any]], namespaces: list[str]) -> list[dict[str, Any]]:
    """The target groups Kubernetes discovery's pod role makes of ``pods`` (the comment above)."""
    import re

    groups = []
    for pod in pods:
        meta, spec = pod["metadata"], pod["spec"]
        if meta["namespace"] not in namespaces:
            continue
        base = {
            "__meta_kubernetes_namespace": meta["namespace"],
            "__meta_kubernetes_pod_name": meta["name"],
            "__meta_kubernetes_pod_node_name": spec["nodeName"],
            "__meta_kubernetes_pod_ip": pod["status"]["podIP"],
            **{f"__meta_kubernetes_pod_label_{re.sub('[^a-zA-Z0-9_]', '_', k)}": v for k, v in meta["labels"].items()},
        }
        for init, containers in (("true", spec.get("initContainers", [])), ("false", spec["containers"])):
            for c in containers:
                own = {
                    **base,
                    "__meta_kubernetes_pod_container_name": c["name"],
                    "__meta_kubernetes_pod_container_init": init,
                }
                ports = c.get("ports") or [None]
                for port in ports:
                    if port is None:
                        groups.append({"targets": [pod["status"]["podIP"]], "labels": own})
                        continue
                    labels = {
                        **own,
                        "__meta_kubernetes_pod_container_port_name": port["name"],
                        "__meta_kubernetes_pod_container_port_number": str(port["containerPort"]),
                    }
                    groups.append({"targets": [f"{pod['status']['podIP']}:{port['containerPort']}"], "labels": labels})
    return groups


def test_a_real_prometheus_scrapes_each_exporter_pod_and_the_amd_panels_chart_each_node(
    azure_run: Run, tmp_path: Path
) -> None:
    import json
    import shutil
    import subprocess
    import time

    from gpu_cluster.components.dashboard import AMD_PANELS
    from tests.prom_stack import free_port as _free_port
    from tests.prom_stack import query as _query
    from tests.prom_stack import stop as _stop
    from tests.prom_stack import wait_http as _wait_http

    def per_node(base: str, expr: str) -> list[dict[str, Any]]:
        """Poll until every exporter node has its line (a generous bound, never a fixed wait)."""
        end = time.monotonic() + 90
        while True:
            got = _query(base, expr)
            if {r["metric"].get("node") for r in got} >= set(EXPORTER_NODES) or time.monotonic() > end:
                return got
            time.sleep(0.5)

    prometheus = shutil.which("prometheus")
    if not prometheus:
        pytest.skip("prometheus (scripts/install-system-deps.sh)")
    job = _scrape_jobs(azure_run(azure_obj(MI300X)))["amd-device-metrics-exporter"]
    (sd,) = job["kubernetes_sd_configs"]
    assert sd["role"] == "pod"
    exporters = {node: _Exporter(node, *figures) for node, figures in EXPORTER_NODES.items()}
    # Pods the job must leave alone, each serving figures that would add a node or move a panel:
    # another operand of the same DeviceConfig with a port of that name, an exporter of another
    # DeviceConfig, and one of this DeviceConfig's name in another namespace.
    decoy = _Exporter("decoy", (100.0, 100.0), (1e6, 1e6))
    own = {"daemonset-name": "gpu-operator", "app.kubernetes.io/name": "metrics-exporter"}
    pods = [
        _operator_pod(f"gpu-operator-metrics-exporter-{i}", n, own, e.port)
        for i, (n, e) in enumerate(exporters.items())
    ]
    pods += [
        _operator_pod(
            "gpu-operator-device-plugin-x", "aks-gpu-2", {**own, "app.kubernetes.io/name": "device-plugin"}, decoy.port
        ),
        _operator_pod("other-metrics-exporter-x", "aks-gpu-3", {**own, "daemonset-name": "other"}, decoy.port),
    ]
    elsewhere = _operator_pod("gpu-operator-metrics-exporter-z", "aks-gpu-4", own, decoy.port)
    elsewhere["metadata"]["namespace"] = "default"
    (tmp_path / "sd.json").write_text(json.dumps(_pod_role([*pods, elsewhere], sd["namespaces"]["names"])))
    # The job as the stack writes it, its discovery those target groups, read from a file.
    local = {k: v for k, v in job.items() if k != "kubernetes_sd_configs"}
    local |= {
        "file_sd_configs": [{"files": [str(tmp_path / "sd.json")]}],
        "scrape_interval": "1s",
        "scrape_timeout": "1s",
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({"scrape_configs": [local]}))
    port = _free_port()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(
            subprocess.Popen(
                [
                    prometheus,
                    f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=(tmp_path / "prometheus.log").open("wb"),
            )
        )
        base = f"http://127.0.0.1:{port}"
        _wait_http(f"{base}/-/ready", procs[-1])
        # Every exporter pod, and nothing else, is a target, each labelled with its node.
        up = per_node(base, f'count by (node) (up{{job="{job["job_name"]}"}} == 1)')
        assert {r["metric"]["node"]: r["value"][1] for r in up} == {"aks-gpu-0": "1", "aks-gpu-1": "1"}
        charted = {p.metric: p for p in AMD_PANELS}
        for metric, want in (
            ("gpu_gfx_activity", {"aks-gpu-0": 20.0, "aks-gpu-1": 60.0}),
            ("gpu_used_vram", {"aks-gpu-0": 3000.0, "aks-gpu-1": 4500.0}),
            ("gpu_power_usage", {"aks-gpu-0": 1400.0, "aks-gpu-1": 1400.0}),
            ("gpu_junction_temperature", {"aks-gpu-0": 61.0, "aks-gpu-1": 61.0}),
            ("gpu_health", {"aks-gpu-0": 1.0, "aks-gpu-1": 1.0}),
            ("gpu_ecc_correct_total", {"aks-gpu-0": 1.0, "aks-gpu-1": 1.0}),
        ):
            got = per_node(base, charted[metric].promql("node"))
            assert {r["metric"]["node"]: float(r["value"][1]) for r in got} == want, metric
        # XGMI: a rate once two scrapes of a node are in, positive, one line per node.
        for metric in ("gpu_xgmi_link_rx", "gpu_xgmi_link_tx"):
            got = per_node(base, charted[metric].promql("node") + " > 0")
            assert sorted(r["metric"]["node"] for r in got) == sorted(EXPORTER_NODES), metric
        assert decoy.scrapes == 0 and all(e.scrapes >= 2 for e in exporters.values())
    finally:
        _stop(procs)
        for exp in (*exporters.values(), decoy):
            exp.close()
