"""The managed Prometheus add-on's settings on AKS: its ``nodeexporter`` keep-list widened by the
InfiniBand data counters, so the fabric panels have series (components/dashboard.py, "Fabric panels").

The add-on keeps, from each default target, only the metrics its minimal ingestion profile lists
(on by default), and "to allowlist more metrics in addition to default metrics ... edit the settings
under ``default-targets-metrics-keep-list`` for the corresponding job", a regex per target, in the
ConfigMap ``ama-metrics-settings-configmap`` in ``kube-system``, which does not exist until one
applies it (MicrosoftDocs/azure-monitor-docs articles/azure-monitor/containers/
prometheus-metrics-scrape-configuration.md at 0e48cd4, "Customize metrics collected by default
targets" and "Configmaps"; learn.microsoft.com/azure/azure-monitor/containers/
prometheus-metrics-scrape-configuration, read 2026-12-07).

The ConfigMap is the add-on's own template with every other value left as the template has it
(Azure/prometheus-collector otelcollector/configmaps/ama-metrics-settings-configmap.yaml at 02e468d:
``schema-version`` v1, the TOML-like ``key = value`` sections), so applying it changes only the
keep-list. The regex names the two counters the node exporter's ``infiniband`` collector writes
(components/dashboard.py INFINIBAND_PANELS); it has no quotation marks or backslashes, which the
page says would need escaping.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

SETTINGS_CONFIGMAP = "ama-metrics-settings-configmap"
NAMESPACE = "kube-system"
NODE_EXPORTER_KEEP = "node_infiniband_port_data_(received|transmitted)_bytes_total"

# The template's sections (ama-metrics-settings-configmap.yaml at 02e468d), each a block of
# ``key = value`` lines; only ``nodeexporter`` under the keep-list differs.
_ENABLED = {
    "kubelet": "true",
    "coredns": "false",
    "cadvisor": "true",
    "kubeproxy": "false",
    "apiserver": "false",
    "kubestate": "true",
    "nodeexporter": "true",
    "windowsexporter": "false",
    "windowskubeproxy": "false",
    "kappiebasic": "true",
    "networkobservabilityRetina": "true",
    "networkobservabilityHubble": "true",
    "networkobservabilityCilium": "true",
    "prometheuscollectorhealth": "false",
    "controlplane-apiserver": "true",
    "controlplane-cluster-autoscaler": "false",
    "controlplane-kube-scheduler": "false",
    "controlplane-kube-controller-manager": "false",
    "controlplane-etcd": "true",
    "acstor-capacity-provisioner": "true",
    "acstor-metrics-exporter": "true",
}
_KEEP_TARGETS = (
    "kubelet",
    "coredns",
    "cadvisor",
    "kubeproxy",
    "apiserver",
    "kubestate",
    "nodeexporter",
    "windowsexporter",
    "windowskubeproxy",
    "podannotations",
    "kappiebasic",
    "networkobservabilityRetina",
    "networkobservabilityHubble",
    "networkobservabilityCilium",
    "controlplane-apiserver",
    "controlplane-cluster-autoscaler",
    "controlplane-kube-scheduler",
    "controlplane-kube-controller-manager",
    "controlplane-etcd",
    "acstor-capacity-provisioner",
    "acstor-metrics-exporter",
)
_INTERVAL_TARGETS = (
    "kubelet",
    "coredns",
    "cadvisor",
    "kubeproxy",
    "apiserver",
    "kubestate",
    "nodeexporter",
    "windowsexporter",
    "windowskubeproxy",
    "kappiebasic",
    "networkobservabilityRetina",
    "networkobservabilityHubble",
    "networkobservabilityCilium",
    "prometheuscollectorhealth",
    "acstor-capacity-provisioner",
    "acstor-metrics-exporter",
    "podannotations",
)


def _lines(pairs: dict[str, str]) -> str:
    return "\n".join(f"{k} = {v}" for k, v in pairs.items())


def settings_data() -> dict[str, str]:
    """The ConfigMap's data: the template's, with the node exporter's keep-list widened."""
    keep = {t: f'"{NODE_EXPORTER_KEEP}"' if t == "nodeexporter" else '""' for t in _KEEP_TARGETS}
    keep["minimalingestionprofile"] = "true"
    return {
        "schema-version": "v1",
        "config-version": "ver1",
        "prometheus-collector-settings": _lines({"cluster_alias": '""', "https_config": "true"}),
        "opentelemetry-metrics": _lines({"enabled": "false"}),
        "default-scrape-settings-enabled": _lines(_ENABLED),
        "pod-annotation-based-scraping": _lines({"podannotationnamespaceregex": '""'}),
        "default-targets-metrics-keep-list": _lines(keep),
        "default-targets-scrape-interval-settings": _lines({t: '"30s"' for t in _INTERVAL_TARGETS}),
        "debug-mode": _lines({"enabled": "false"}),
    }


def ama_settings(name: str, *, opts: pulumi.ResourceOptions) -> k8s.core.v1.ConfigMap:
    """The add-on's settings ConfigMap (module docstring)."""
    return k8s.core.v1.ConfigMap(
        f"{name}-ama-metrics-settings",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=SETTINGS_CONFIGMAP, namespace=NAMESPACE),
        data=settings_data(),
        opts=opts,
    )
