"""After a hang, the rendered Slurm job runs the pairwise search one ``srun -N2 -w A,B`` step per
pair, on a real three-node cluster: a node that hangs every collective it joins is named FAIL
(with the pairing against a known-good node), not left as two WARN suspects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.slurm.cluster import SlurmCluster, submit_validation
from tests.slurm.cluster import report_node as _node

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_a_node_that_hangs_is_named_fail_through_one_srun_step_per_pair(
    slurm_cluster3: SlurmCluster, tmp_path: Path
) -> None:
    try:
        code, out, back = submit_validation(
            slurm_cluster3,
            tmp_path,
            {"GPUC_INJECT_HANG_NODE": "n2", "GPUC_INJECT_HANG_PHASES": "main,pairs"},
            run_args=("--timeout", "15", "--pair-timeout", "10"),
            time_limit_min=12,
            timeout_s=780,
        )
        (log,) = back.glob("gpuc-validate-*.out")
        text = log.read_text()
        report = json.loads((back / "report.json").read_text())
        assert report["verdict"] == "FAIL" and code == 2, out + text
        n2 = _node(report, "n2")
        assert n2["verdict"] == "FAIL" and any("known-good" in r for r in n2["reasons"]), json.dumps(report["nodes"])
        assert _node(report, "n1")["verdict"] != "FAIL" and _node(report, "n3")["verdict"] != "FAIL", json.dumps(
            report["nodes"]
        )
        assert report["drained"] == ["n2"]
        # The search ran as steps of its own, one per pair, on the pair's two nodes: the first pass
        # (n1+n2 hangs, n3+n1 passes), then the suspect with a known-good node (n2+n1 hangs again).
        run_dir = slurm_cluster3.jobs / "fsx" / "validation" / "h200-slurm" / back.name
        doc = json.loads((run_dir / "phase-pairs.json").read_text())["pairs"]
        assert doc["jobs"] == "per-pair" and set(doc["bad"]) == {"n2"} and doc["bad_links"] == []
        assert [(a, b, v is None) for a, b, v in doc["first"]] == [("n1", "n2", True), ("n3", "n1", False)]
        assert [(a, b, v is None) for a, b, v in doc["second"]] == [("n2", "n1", True)]
        for pair in ("n1+n2", "n3+n1", "n2+n1"):
            assert (
                f"pair {pair}: srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --nodelist={pair.replace('+', ',')}"
                in text
            )
        assert "pair n3+n1: step exit 0" in text and "validate[pairs]: named: n2" in text
        assert (run_dir / "phase-pairs-n3+n1.json").is_file() and not (run_dir / "phase-pairs-n1+n2.json").exists()
        # Each pair's ranks ran where Slurm put the step: the pair's own nodes, by their Slurm names.
        statuses = [json.loads(p.read_text()) for p in (run_dir / "status").glob("pairs-n3+n1-*.json")]
        assert sorted(s["node"] for s in statuses) == ["n1", "n3"] and all(s["state"] == "finished" for s in statuses)
    finally:
        slurm_cluster3.resume("n2")
