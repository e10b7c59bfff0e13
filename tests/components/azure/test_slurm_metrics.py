"""The Azure Slurm stack's GPU metrics (components/azure/slurm_metrics.py): the GPU scale set's custom
data runs the exporters and a Prometheus agent whose remote write is the one Azure documents for scale
sets, with the scale set's user-assigned identity, which may only publish to the workspace's rule; Managed
Grafana over the workspace; and liveness sees the exporter in the custom data."""

from __future__ import annotations

import base64
import json
import subprocess
from typing import Any

import yaml

from gpu_cluster.components import liveness as live
from gpu_cluster.components.azure import slurm_metrics
from tests.components._liveness import bundled, mutate_plan

STACK = "azure-h100-slurm"
VMSS = "azure-native:compute:VirtualMachineScaleSet"
IDENTITY = "azure-native:managedidentity:UserAssignedIdentity"
ROLE = "azure-native:authorization:RoleAssignment"
DCR = "azure-native:monitor:DataCollectionRule"
DCE = "azure-native:monitor:DataCollectionEndpoint"
DCRA = "azure-native:monitor:DataCollectionRuleAssociation"
WORKSPACE = "azure-native:monitor:AzureMonitorWorkspace"
GRAFANA = "azure-native:dashboard:Grafana"
URL = (
    "https://x-0a1b.eastus-1.metrics.ingest.monitor.azure.com/dataCollectionRules/dcr-0123/streams/"
    "Microsoft-PrometheusMetrics/api/v1/write?api-version=2023-04-24"
)


def test_the_remote_write_is_the_one_the_vm_page_writes() -> None:
    # MicrosoftDocs azure-monitor-docs prometheus-remote-write.md at 004a44e (VM example) and
    # prometheus-remote-write-virtual-machines.md at 037c1b0 ("Configure remote write").
    assert slurm_metrics.remote_write_url("https://x-0a1b.eastus-1.metrics.ingest.monitor.azure.com", "dcr-0123") == URL
    c = slurm_metrics.prometheus_config(URL, "cid")
    assert c["remote_write"] == [
        {"url": URL, "azuread": {"cloud": "AzurePublic", "managed_identity": {"client_id": "cid"}}}
    ]
    targets = sorted(j["static_configs"][0]["targets"][0] for j in c["scrape_configs"])
    assert targets == ["localhost:9100", "localhost:9400"]
    from gpu_cluster.components.dashboard import NODE_LABEL

    for j in c["scrape_configs"]:
        labels = {r["target_label"]: r["replacement"] for r in j["relabel_configs"]}
        assert labels[NODE_LABEL["aks"]] == slurm_metrics.HOST_PLACEHOLDER


def test_the_node_lines_parse_and_start_the_agent_in_agent_mode() -> None:
    lines = slurm_metrics.node_lines(URL, "cid")
    script = "\n".join(["#!/bin/bash", "set -euo pipefail", *lines]) + "\n"
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    body = script.split("<<'GPUC_METRICS_EOF'\n", 1)[1].split("\nGPUC_METRICS_EOF\n", 1)[0]
    assert yaml.safe_load(body) == slurm_metrics.prometheus_config(URL, "cid")
    [prom] = [ln for ln in lines if "prometheus:v" in ln]
    # prometheus v3.14.0 cmd/prometheus/main.go: --agent and --config.file.
    assert "--agent" in prom and "--config.file=/etc/prometheus/prometheus.yml" in prom and "--net host" in prom
    [dcgm] = [ln for ln in lines if "dcgm-exporter:" in ln]
    assert "--gpus all" in dcgm and "--cap-add SYS_ADMIN" in dcgm
    # Every command that can fail is logged, never fatal under the custom data's ``set -e``.
    for ln in lines:
        if ln.startswith("docker run"):
            assert ln.endswith('"'), ln
            assert "|| log" in ln, ln


def test_the_bundled_stack_has_exporter_store_grafana_and_least_privilege() -> None:
    p = bundled(STACK)
    run = p.run
    [vmss] = run.of_type(VMSS)
    [identity] = run.of_type(IDENTITY)
    # The scale set carries the one user-assigned identity.
    ident = vmss.inputs["identity"]
    assert ident["type"] == "UserAssigned" and list(ident["userAssignedIdentities"]) == [f"{identity.name}-id"]
    script = base64.b64decode(vmss.inputs["virtualMachineProfile"]["osProfile"]["customData"]).decode()
    # The slurmd setup first, the metrics after, with the rule's address and the identity's client id
    # as the mocks answer them (components/azure/mocks.py).
    assert script.index("slurmd") < script.index("# gpu-cluster: GPU metrics")
    body = script.split("<<'GPUC_METRICS_EOF'\n", 1)[1].split("\nGPUC_METRICS_EOF\n", 1)[0]
    [rw] = yaml.safe_load(body)["remote_write"]
    [rule] = run.of_type(DCR)
    assert "/dataCollectionRules/dcr-" in rw["url"] and rw["url"].endswith("api-version=2023-04-24")
    assert rw["azuread"]["managed_identity"]["client_id"] == "33333333-3333-3333-3333-333333333333"
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    # Least privilege: the identity may publish metrics to the rule, nothing else, nowhere else.
    publisher = [
        r for r in run.of_type(ROLE) if r.inputs["roleDefinitionId"].endswith("3913510d-42f4-4e42-8a64-420c390055eb")
    ]
    assert len(publisher) == 1
    assert publisher[0].inputs["scope"] == f"{rule.name}-id"
    assert publisher[0].inputs["principalId"] == "22222222-2222-2222-2222-222222222222"
    # The rule in the shape of Azure's template for a remote-write rule of one's own
    # (Prometheus-RemoteWrite-DCR-artifacts/CustomDCR.json): no data source, one flow to the workspace.
    assert not any((rule.inputs.get("dataSources") or {}).values())
    [dest] = rule.inputs["destinations"]["monitoringAccounts"]
    assert rule.inputs["dataFlows"] == [{"streams": ["Microsoft-PrometheusMetrics"], "destinations": [dest["name"]]}]
    # No cluster to associate the rule with on Slurm.
    assert not run.of_type(DCRA)
    assert run.of_type(WORKSPACE) and run.of_type(DCE)
    # Grafana over the workspace, as on AKS.
    [grafana] = run.of_type(GRAFANA)
    [ws] = run.of_type(WORKSPACE)
    integrations = grafana.inputs["properties"]["grafanaIntegrations"]["azureMonitorWorkspaceIntegrations"]
    assert integrations == [{"azureMonitorWorkspaceResourceId": f"{ws.name}-id"}]
    json.dumps(grafana.inputs)  # plain data, as the plan prints it


def test_liveness_sees_the_exporter_in_the_scale_sets_custom_data() -> None:
    p = bundled(STACK)
    [check] = p.checks("node-image", "GPU metrics exporter")
    assert check.holds and "NVIDIA's DCGM exporter" in check.why
    assert not p.failed()
    [vmss] = p.plan.of(VMSS)

    def drop(inputs: dict[str, Any]) -> None:
        prof = inputs["virtualMachineProfile"]["osProfile"]
        text = base64.b64decode(prof["customData"]).decode()
        prof["customData"] = base64.b64encode(text.replace("docker run", "true").encode()).decode()

    broken = live.evaluate(mutate_plan(p.plan, VMSS, vmss.name, drop), p.job)
    [failed] = [c for c in broken.failed if "GPU metrics exporter" in c.check]
    assert "starts no GPU metrics exporter" in failed.why


def test_liveness_sees_the_nodes_register_drained_and_fails_a_script_without_it() -> None:
    p = bundled(STACK)
    [check] = p.checks("node-image", "registers drained")
    assert check.holds and "State=DRAIN" in check.why
    [vmss] = p.plan.of(VMSS)

    def edit(old: str, new: str) -> Any:
        def apply(inputs: dict[str, Any]) -> None:
            prof = inputs["virtualMachineProfile"]["osProfile"]
            text = base64.b64decode(prof["customData"]).decode()
            assert old in text
            prof["customData"] = base64.b64encode(text.replace(old, new).encode()).decode()

        return apply

    for old, new, missing in (
        (" State=DRAIN", "", "State=DRAIN in slurmd's --conf"),
        ("gpu-cluster unvalidated", "registered", "the reason 'gpu-cluster unvalidated'"),
    ):
        broken = live.evaluate(mutate_plan(p.plan, VMSS, vmss.name, edit(old, new)), p.job)
        [failed] = [c for c in broken.failed if "registers drained" in c.check]
        assert missing in failed.why and not broken.holds, failed.why
