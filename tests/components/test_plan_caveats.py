"""The plan names each caveat with its own reason (issue 26): placement, flex-start, spot, and
an AWS zone that the offline checks could not look at."""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.components.plan import plan_stack, render
from gpu_cluster.components.plan_caveats import FLEX_START_MAX_DAYS, caveats
from gpu_cluster.components.spec import parse_spec, read_stack_file
from tests.components.test_spec import aws_base, gcp_base

REPO = Path(__file__).resolve().parents[2]


def _topics(obj: dict[str, Any], outputs: dict[str, Any] | None = None) -> dict[str, str]:
    spec = parse_spec(obj)
    return {c.topic: c.text for c in caveats(spec, outputs or {"fabric": {"placement": "pg"}})}


def test_each_placement_reason_is_its_own() -> None:
    on_demand = _topics(aws_base())
    assert on_demand["placement"].startswith("cluster placement group created")
    block = aws_base()
    block["compute"]["capacity"] = {"type": "capacity-block", "id": "cr-0123456789abcdef0"}
    text = _topics(block, {"fabric": {}})["placement"]
    assert "capacity block is delivered already placed" in text and " or " not in text
    odcr = aws_base()
    odcr["compute"]["capacity"] = {"type": "reservation", "id": "cr-0123456789abcdef0"}
    text = _topics(odcr, {"fabric": {}})["placement"]
    # An ODCR made without a group is not pre-placed: said as such, with the way to get a group.
    assert "made without one" in text and "not placed together" in text and "placement_group" in text
    in_group = copy.deepcopy(odcr)
    in_group["compute"]["capacity"]["placement_group"] = "train-pg"
    assert "own cluster placement group train-pg" in _topics(in_group)["placement"]
    off = aws_base()
    off["interconnect"] = {"placement": False}
    assert "interconnect.placement is false" in _topics(off, {"fabric": {}})["placement"]


def test_flex_start_says_scale_from_zero_run_limit_and_price() -> None:
    obj = gcp_base()
    obj["compute"]["capacity"] = {"type": "flex-start"}
    text = _topics(obj)["flex-start"]
    assert "starts at 0 nodes and scales to 2" in text
    assert f"at most {FLEX_START_MAX_DAYS} days" in text and FLEX_START_MAX_DAYS == 7
    assert "Dynamic Workload Scheduler prices" in text and "ceiling" in text
    assert "spot" not in _topics(obj)


@pytest.mark.parametrize("base", [aws_base, gcp_base])
def test_spot_says_interruption(base: Any) -> None:
    obj = base()
    obj["compute"]["capacity"] = {"type": "spot"}
    text = _topics(obj)["spot"]
    assert "can be reclaimed" in text and "checkpoint" in text
    assert ("two minutes" in text) == (obj["cloud"] == "aws")


def test_an_aws_zone_without_its_id_is_named_as_not_checked() -> None:
    obj = aws_base()
    text = _topics(obj)["zone"]
    assert text.startswith("us-east-1a was not checked offline") and "set zone_id" in text
    assert "gpu-cluster preflight" in text and "use1-az" in text
    obj["zone_id"] = "use1-az4"
    assert "zone" not in _topics(obj)
    assert "zone" not in _topics(gcp_base())


@pytest.mark.parametrize(
    ("stack", "topics"),
    [
        ("aws-h100-eks", {"placement", "zone", "images", "pulls", "metrics"}),
        ("aws-h100-capacity-block", {"placement", "capacity", "zone", "images", "pulls", "metrics"}),
        ("aws-h200-slurm", {"placement", "zone", "login", "metrics"}),
        ("gcp-h100-gke", {"placement", "flex-start", "images", "metrics"}),
        ("gcp-h200-slurm", {"placement", "metrics"}),
        ("gcp-h200-gke", {"placement", "installer", "images", "metrics"}),
    ],
)
def test_bundled_plans_print_their_caveats(stack: str, topics: set[str]) -> None:
    summary, run = plan_stack(stack)
    assert {c["topic"] for c in summary.caveats} == topics
    out = io.StringIO()
    render(summary, run, out)
    text = out.getvalue()
    assert "caveats" in text
    for c in summary.caveats:
        assert f"    {c['topic']:<11} {c['text']}" in text


def test_a_capacity_block_says_when_its_nodes_appear() -> None:
    obj = aws_base()
    obj["compute"]["capacity"] = {"type": "capacity-block", "id": "cr-0123456789abcdef0"}
    text = _topics(obj, {"fabric": {"placement": None}})["capacity"]
    n = obj["compute"]["nodes"]
    assert text.startswith(f"capacity block cr-0123456789abcdef0: the {n} GPU nodes appear when the block starts")
    assert f"desired size {n}" in text
    assert "capacity" not in _topics(aws_base())


def test_gcp_flex_start_placement_says_the_rule_not_the_stack() -> None:
    """A multi-node flex-start pool gets no compact policy because queued provisioning takes none
    (components/gcp/rules.py placement_refused), not because the stack turned placement off."""
    obj = gcp_base()
    obj["compute"]["capacity"] = {"type": "flex-start"}
    text = _topics(obj, {"fabric": {}})["placement"]
    assert "queued provisioning" in text and "interconnect.placement is false" not in text
    assert "(allowed:" not in text


def test_the_installer_caveat_names_the_field_and_goes_once_it_is_set() -> None:
    from tests.components.gcp.conftest import gcp_obj, supplied_installer

    obj = gcp_obj("a3-ultragpu-8g")
    assert "installer" not in _topics(obj)
    del obj["orchestration"]["installer_image"]
    spec = parse_spec(obj, deployer_placeholder=True)
    [text] = [c.text for c in caveats(spec, {"fabric": {}}) if c.topic == "installer"]
    assert "orchestration.installer_image" in text and "nccl-plugin-gib:v1.1.1@sha256:<64 hex digits>" in text
    assert supplied_installer("a3-megagpu-8g") is None  # TCPXO's is pinned in the catalog: no caveat
    assert "installer" not in _topics(gcp_obj("a3-megagpu-8g"))


def test_a_kubernetes_plan_names_its_metrics_store_and_points_to_its_estimate() -> None:
    aws = _topics(aws_base())["metrics"]
    assert "AMP workspace" in aws and "not in the cost" in aws and "the cost's metrics line" in aws
    assert "Amazon Managed Grafana workspace" in aws and "dashboards/gpu-grafana-eks.json" in aws
    gcp = _topics(gcp_base())["metrics"]
    assert "Managed Service for Prometheus" in gcp and "Cloud Monitoring dashboard" in gcp
    slurm = copy.deepcopy(aws_base())
    slurm["orchestration"] = {"kind": "slurm"}
    pcs = _topics(slurm)["metrics"]  # PCS: the exporters and ADOT on the nodes (components/aws/slurm_metrics.py)
    assert "ADOT collector" in pcs and "AMP workspace" in pcs and "Amazon Managed Grafana" in pcs
    assert "components/metrics_cost.py" in pcs


def test_the_azure_slurm_plan_names_its_metrics_path() -> None:
    _, raw = read_stack_file("azure-h100-slurm")
    spec = parse_spec(raw, deployer_placeholder=True)
    [text] = [c.text for c in caveats(spec, {"fabric": {}}) if c.topic == "metrics"]
    assert "Prometheus agent" in text and "managed identity" in text and "Azure Managed Grafana" in text
    assert "the cost's metrics line" in text


@pytest.mark.parametrize(
    ("stack", "exporter", "dashboard"),
    [
        ("azure-h100-aks", "DCGM exporter", "dashboards/gpu-grafana-aks.json"),
        ("azure-mi300x-aks", "AMD's device-metrics exporter", "dashboards/gpu-grafana-aks-mi300x.json"),
        ("azure-h100-slurm", "DCGM exporter", "dashboards/gpu-grafana-azure-slurm.json"),
        ("aws-h100-eks", "DCGM exporter", "dashboards/gpu-grafana-eks.json"),
        ("aws-h200-slurm", "DCGM exporter", "dashboards/gpu-grafana-pcs.json"),
    ],
)
def test_a_grafana_plan_names_the_exporter_and_dashboard_of_its_platform(
    stack: str, exporter: str, dashboard: str
) -> None:
    """Each Grafana stack's plan names the file with its platform's panels (its fabric, and AMD's GPU
    panels on MI300X), and the exporter its GPUs have; the file is one the repository ships."""
    _, raw = read_stack_file(stack)
    spec = parse_spec(raw, deployer_placeholder=True)
    [text] = [c.text for c in caveats(spec, {"fabric": {}}) if c.topic == "metrics"]
    assert exporter in text and f"import {dashboard}" in text
    assert (REPO / dashboard).is_file()


def test_cluster_director_names_its_metrics_path_and_points_to_its_estimate() -> None:
    _, raw = read_stack_file("gcp-h200-slurm")
    spec = parse_spec(raw, deployer_placeholder=True)
    [text] = [c.text for c in caveats(spec, {"fabric": {}}) if c.topic == "metrics"]
    assert "Ops Agent's DCGM receiver" in text and "startup script" in text and "Cloud Monitoring dashboard" in text
    assert "the cost's metrics line" in text and "not in the cost" in text


@pytest.mark.parametrize("stack", ["azure-h100-aks", "azure-mi300x-aks"])
def test_an_aks_plan_says_its_images_once(stack: str) -> None:
    """AKS plans printed two overlapping images caveats (issue 47 item 5): now one, naming each
    image, the way to pin them and what no pin reaches exactly once."""
    summary, run = plan_stack(stack)
    images = [c["text"] for c in summary.caveats if c["topic"] == "images"]
    assert len(images) == 1, images
    text = images[0]
    out = io.StringIO()
    render(summary, run, out)
    assert out.getvalue().count("    images ") == 1
    for ref in ("registry.k8s.io/jobset/jobset:v0.12.0", "nvcr.io/nvidia/cloud-native/network-operator:v26.1.0"):
        assert text.count(ref) == 1, ref
    for once in ("`gpu-cluster pin STACK`", "NicClusterPolicy/DeviceConfig", "pulled by tag, which", "Managed Lustre"):
        assert text.count(once) == 1, once
    assert ("cert-manager" in text) == (stack == "azure-mi300x-aks")


def test_a_pcs_stack_without_a_key_pair_says_how_submit_reaches_it() -> None:
    """No ssh_key_name: the access command is an interactive Session Manager session, which runs no
    command (workloads/validate/slurm.py shell_for refuses it); the plan says so and both ways out."""

    def slurm_base() -> dict[str, Any]:
        obj = aws_base()
        obj["compute"]["instance_type"] = "p5en.48xlarge"
        obj["region"], obj["zone"] = "us-east-2", "us-east-2b"
        obj["orchestration"] = {"kind": "slurm", "login_nodes": 1, "partition": "gpu", "size": "SMALL"}
        return obj

    text = _topics(slurm_base())["login"]
    assert "interactive Session Manager session" in text and "orchestration.ssh_key_name" in text
    assert "sudo -iu ec2-user" in text and "--here" in text
    keyed = slurm_base()
    keyed["orchestration"]["ssh_key_name"] = "research"
    assert "login" not in _topics(keyed)
    assert "login" not in _topics(aws_base())  # EKS: kubeconfig, not a login node


def test_mi300x_on_aks_says_what_gdr_rests_on() -> None:
    """The MI300X AKS stack's plan names the DMA-BUF switch the pods carry and what it cannot check;
    an NVIDIA size on AKS has no such caveat (its GPU operator loads nvidia-peermem)."""
    from gpu_cluster.components.spec import read_stack_file

    _, amd = read_stack_file("azure-mi300x-aks")
    amd["orchestration"]["deployer_cidrs"] = ["52.0.0.1/32"]
    text = _topics(amd)["gdr"]
    assert "NCCL_DMABUF_ENABLE=1" in text and "CONFIG_DMABUF_MOVE_NOTIFY" in text and "PR 3607" in text
    _, nvidia = read_stack_file("azure-h100-aks")
    nvidia["orchestration"]["deployer_cidrs"] = ["52.0.0.1/32"]
    assert "gdr" not in _topics(nvidia)
