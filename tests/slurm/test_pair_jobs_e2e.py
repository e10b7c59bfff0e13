"""After a hang, the rendered Slurm job runs the pairwise search one ``srun -N2 -w A,B`` step per
pair, on a real three-node cluster: a node that hangs every collective it joins is named FAIL
(with the pairing against a known-good node), not left as two WARN suspects."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from components.engine import run_offline
from components.spec import read_stack_file
from tests.slurm.cluster import SlurmCluster, free_port

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def _outputs_file(cluster: SlurmCluster) -> Path:
    """aws-h200-slurm's outputs pointed at the three-node test cluster."""
    name, raw = read_stack_file("aws-h200-slurm")
    outs = json.loads(json.dumps(run_offline(name, raw).outputs))
    outs["nodes"] = 3
    outs["mount"]["mount_point"] = str(cluster.jobs / "fsx")
    outs["scheduler"]["partition"] = "test"
    path = cluster.jobs / "outputs3.json"
    path.write_text(json.dumps(outs))
    return path


def _submit(cluster: SlurmCluster, tmp_path: Path, inject: dict[str, str]) -> tuple[int, str, Path]:
    run_args = ["--multi-max", "1M", "--single-max", "1M", "--pair-size", "1M", "--iters", "3", "--warmup", "1"]
    run_args += ["--timeout", "15", "--pair-timeout", "10"]
    argv = [
        sys.executable,
        "-m",
        "workloads.validate",
        "submit",
        "aws-h200-slurm",
        "--outputs",
        str(_outputs_file(cluster)),
        "--here",
        "--cpu",
        "--procs-per-node",
        "1",
        "--python",
        sys.executable,
        "--shared",
        "--time-limit",
        "12",
        "--rdzv-port",
        str(free_port()),
        "--poll",
        "1",
        "--fetch-to",
        str(tmp_path / "back"),
        *[f"--run-arg={a}" for a in run_args],
        *[f"--env={k}={v}" for k, v in {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", **inject}.items()],
    ]
    env = {k: v for k, v in cluster.env.items() if k != "PYTHONPATH"}  # the job brings its own code
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, timeout=780)
    runs = sorted((tmp_path / "back" / "aws-h200-slurm").iterdir())
    return done.returncode, done.stdout + done.stderr, runs[-1]


def _node(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(n for n in report["nodes"] if n["node"] == name)


def test_a_node_that_hangs_is_named_fail_through_one_srun_step_per_pair(
    slurm_cluster3: SlurmCluster, tmp_path: Path
) -> None:
    try:
        code, out, back = _submit(
            slurm_cluster3, tmp_path, {"GPUC_INJECT_HANG_NODE": "n2", "GPUC_INJECT_HANG_PHASES": "main,pairs"}
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
