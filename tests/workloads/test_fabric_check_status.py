"""Where the start-up fabric check runs, and how its failure reaches the judge."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

from gpu_cluster.workloads.runtime import device

from gpu_cluster.workloads.health import fabric as fabric_check
from gpu_cluster.workloads.health.fabric import FabricCheckFailed
from gpu_cluster.workloads.validate import run
from gpu_cluster.workloads.validate.blame import node_failures
from gpu_cluster.workloads.validate.judge import judge


@pytest.fixture
def multi_node_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 0 of a two-node job with one rank per node, as torchrun sets it."""
    for k, v in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("GPUC_FABRIC_CHECK", raising=False)
    monkeypatch.delenv("GPUC_FORCE_CPU", raising=False)


def test_cpu_local_path_never_runs_the_check(multi_node_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU/gloo run over several "nodes" (the local validation) with a GPU type named: no check."""
    ran: list[str] = []
    monkeypatch.setattr(fabric_check, "require", lambda *a, **k: ran.append("check"))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda **k: ran.append(f"group {k['backend']}"))
    stages: list[str] = []
    rt = device.setup(force_cpu=True, on_stage=stages.append, instance_type="p5.48xlarge")
    assert rt.backend == "gloo"
    assert ran == ["group gloo"]
    assert stages == ["device-init", "device-ready", "joined"]


def test_the_check_runs_only_where_the_fabric_carries_traffic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUC_FABRIC_CHECK", raising=False)
    monkeypatch.delenv("GPUC_INSTANCE_TYPE", raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert device._needs_fabric("p5.48xlarge", 16)
    assert not device._needs_fabric("p5.48xlarge", 8)  # one node: NVLink and SHM, no fabric
    assert not device._needs_fabric(None, 16)  # no catalog type: nothing to expect
    monkeypatch.setenv("GPUC_INSTANCE_TYPE", "p5.48xlarge")
    assert device._needs_fabric(None, 16)
    monkeypatch.setenv("GPUC_FABRIC_CHECK", "0")
    assert not device._needs_fabric("p5.48xlarge", 16)


def test_a_missing_fabric_is_the_nodes_own_failure_and_the_judge_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rank's status says "fabric check", not "joining the group", and is not a lost peer."""
    message = "fabric check on gpu-2: efa is not usable, NCCL would fall back to sockets: EFA is missing: ..."

    def setup(*, on_stage: Any, instance_type: str | None, **_: Any) -> device.Runtime:
        assert instance_type == "p5.48xlarge"
        on_stage("device-ready")
        raise FabricCheckFailed(message)

    monkeypatch.setattr(run.device, "setup", setup)
    monkeypatch.setenv("GPUC_NODE_NAME", "gpu-2")
    monkeypatch.setenv("RANK", "1")
    cfg = run.RunConfig(out_dir=tmp_path, instance_type="p5.48xlarge")
    assert run.run_phase(cfg) == 1
    status = json.loads((tmp_path / "status" / "main-gpu-2-r1.json").read_text())
    assert status["state"] == "error"
    assert status["peer_lost"] is False and status["fabric_missing"] is True
    assert status["error"] == f"fabric check: FabricCheckFailed: {message}"
    # Its peer, left waiting to join, is not blamed; the node without EFA is, with the reason.
    waiting = {
        "phase": "main",
        "rank": 0,
        "node": "gpu-1",
        "state": "fabric-ready",
        "beat": 9.0,
        "stages": {"started": 1.0, "device-ready": 2.0, "fabric-ready": 3.0},
    }
    blamed, _ = node_failures([waiting, status], ["gpu-1", "gpu-2"])
    assert set(blamed) == {"gpu-2"}
    assert blamed["gpu-2"].startswith("main: rank 1 lacks its fabric: fabric check: FabricCheckFailed: ")
    assert "EFA is missing" in blamed["gpu-2"]
    (tmp_path / "status" / "main-gpu-1-r0.json").write_text(json.dumps(waiting))
    rep = judge(tmp_path, instance_type="p5.48xlarge", local=False, expected_nodes=["gpu-1", "gpu-2"])
    doc = json.dumps(rep.to_json())
    assert "gpu-2" in doc and "EFA is missing" in doc
