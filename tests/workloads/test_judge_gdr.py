"""The judge holds InfiniBand runs (Azure ND) to GPUDirect RDMA: channels the logs set up without
/GDRDMA make the cluster WARN with what to look at; an EFA run is not held to it (its plugin's GDR
behaviour was not read). The run files are the judge tests' own (test_validate_judge._write_run)."""

from __future__ import annotations

from pathlib import Path

from tests.workloads.test_transport_rccl import RCCL_IB_LOG, RCCL_NO_GDR_LOG
from tests.workloads.test_validate_judge import _write_run
from gpu_cluster.workloads.validate.judge import judge
from gpu_cluster.workloads.validate.verdict import Verdict

ND_H100 = "Standard_ND96isr_H100_v5"


def _ib_run(root: Path, log: str) -> None:
    _write_run(root, multi=480.0, node2_rate=730.0)
    (root / "nccl" / "nccl-n1-1.log").write_text(log)


def test_an_infiniband_run_with_gdr_everywhere_passes_the_check(tmp_path: Path) -> None:
    _ib_run(tmp_path, RCCL_IB_LOG)
    rep = judge(tmp_path, instance_type=ND_H100, local=False)
    assert rep.transport["gdr"]["ok"] is True
    assert not [m for m in rep.measurements if m.check == "transport.gdr"]


def test_an_infiniband_run_without_gdr_on_some_channels_warns(tmp_path: Path) -> None:
    _ib_run(tmp_path, RCCL_NO_GDR_LOG)
    rep = judge(tmp_path, instance_type=ND_H100, local=False)
    (m,) = [m for m in rep.measurements if m.check == "transport.gdr"]
    assert m.verdict == Verdict.WARN and m.value == 0.5 and m.scope == "cluster"
    assert "GPUDirect RDMA on 2 of 4 network channels" in m.detail
    assert rep.verdict in (Verdict.WARN, Verdict.FAIL)
    # A cluster-wide finding: no node is failed for it.
    assert all(n.verdict != Verdict.FAIL or "gdr" not in " ".join(n.reasons).lower() for n in rep.nodes)


def test_an_efa_run_is_not_held_to_gdr(tmp_path: Path) -> None:
    _write_run(tmp_path, multi=480.0, node2_rate=730.0)
    rep = judge(tmp_path, instance_type="p5.48xlarge", local=False)
    assert "gdr" not in rep.transport
