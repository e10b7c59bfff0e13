"""The stack creates no validation job: validation is a command over the stack's outputs
(``python -m gpu_cluster.workloads.validate submit STACK``), so it can be rerun. The outputs carry what
that command needs, in the contract's shape."""

from __future__ import annotations

import pytest

from gpu_cluster.components.contract import OUTPUT_KEYS, OutputsError, read_outputs
from gpu_cluster.components.engine import run_offline
from gpu_cluster.components.spec import bundled_stacks, read_stack_file


@pytest.mark.parametrize("stack", bundled_stacks())
def test_bundled_stack_has_no_validation_resource_and_typed_outputs(stack: str) -> None:
    name, raw = read_stack_file(stack)
    extra = {"gcp:project": "test-project"} if raw["cloud"] == "gcp" else None
    run = run_offline(name, raw, extra_config=extra)
    assert not [r.name for r in run.resources if "jobset.x-k8s.io" in r.type or r.name.endswith("-validation")]
    assert tuple(run.outputs) == OUTPUT_KEYS
    outs = read_outputs(run.outputs)
    k8s = raw["orchestration"]["kind"] in ("eks", "gke", "aks")
    assert outs.scheduler.kind == ("kubernetes" if k8s else "slurm")
    if k8s:
        assert outs.scheduler.lustre_claim and outs.scheduler.namespace and outs.scheduler.node_selector
        assert outs.access.kubeconfig and outs.access.api_endpoint
    else:
        assert outs.scheduler.partition and outs.access.ssh_command
    assert outs.mount.mount_point == raw["storage"]["lustre"].get("mount_point", "/fsx")
    # Where the dashboard is: the Grafana workspace `dashboards import` writes to, or Cloud Monitoring's.
    assert outs.dashboard is not None and outs.dashboard.id
    if raw["cloud"] == "gcp":
        assert outs.dashboard.kind == "cloud-monitoring" and outs.dashboard.url is None
    else:
        assert outs.dashboard.kind == "grafana" and (outs.dashboard.url or "").startswith("https://")


def test_the_dashboard_output_is_read_when_there_and_checked() -> None:
    name, raw = read_stack_file("aws-h100-eks")
    outputs = dict(run_offline(name, raw).outputs)
    # A stack updated before the key existed still reads (LATER_KEYS): validate and heal need no pulumi up.
    older = {k: v for k, v in outputs.items() if k != "dashboard"}
    assert read_outputs(older).dashboard is None
    with pytest.raises(OutputsError) as bad:
        read_outputs({**outputs, "dashboard": {"kind": "kibana"}})
    assert "dashboard.kind: 'kibana' (allowed: grafana, cloud-monitoring)" in str(bad.value)
    assert "dashboard.url" in str(bad.value)
