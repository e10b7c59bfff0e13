"""After a hang, one job per pair: the Slurm driver's srun steps and decisions (the steps
themselves run on the real three-node cluster in tests/slurm/test_pair_jobs_e2e.py), and the
per-pair JobSets for Kubernetes, checked against the Kubernetes and JobSet schemas."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from gpu_cluster.components.contract import ClusterOutputs
from tests.launch.test_jobset import K8S_VERSIONS, _crd_errors, _job, _pod, jobset_schema  # noqa: F401 - fixture
from tests.launch.test_render_stacks import outputs
from gpu_cluster.workloads.launch import sbatch
from gpu_cluster.workloads.launch.validation import (
    ValidationJob,
    for_cluster,
    pair_jobset,
    pair_jobset_name,
    sbatch_spec,
)
from gpu_cluster.workloads.launch.bundle import build as build_bundle
from gpu_cluster.workloads.validate import pair_jobs
from gpu_cluster.workloads.validate.run_config import RunConfig

REPO = Path(__file__).resolve().parents[2]
RUN_ARGS = ("--iters", "3", "--warmup", "1", "--timeout", "15", "--pair-timeout", "10", "--pair-size", "1M")


def _slurm(tmp_path: Path, **kw: Any) -> pair_jobs.SlurmPairs:
    base: dict[str, Any] = dict(
        out=tmp_path,
        python="/fsx/gpu-cluster/venv/bin/python",
        ranks_per_node=8,
        rdzv_port=29500,
        run_args=("--instance-type", "p5.48xlarge", *RUN_ARGS),
        time_limit_min=4,
        job_id="417",
        addr={"n1": "10.0.0.11", "n2": "10.0.0.12", "n3": "10.0.0.13"}.__getitem__,
    )
    return pair_jobs.SlurmPairs(**{**base, **kw})


def test_each_pair_is_one_srun_step_on_its_two_nodes(tmp_path: Path) -> None:
    argv = pair_jobs.srun_argv(_slurm(tmp_path), "n3", "n1", 1)
    head = argv[: argv.index("/fsx/gpu-cluster/venv/bin/python")]
    assert head == [
        "srun",
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--nodelist=n3,n1",
        "--job-name=pairs-n3+n1",
        "--time=4",
        "--whole",
        "--kill-on-bad-exit=0",
    ]
    rest = argv[len(head) :]
    # torchrun as the job's other steps start it, meeting on the pair's first node, on a port of
    # its own in the round (pairs of a round run at once).
    assert rest[1:3] == ["-m", "torch.distributed.run"] and "--nnodes=2" in rest and "--nproc-per-node=8" in rest
    assert "--rdzv-endpoint=10.0.0.13:29502" in rest and "--rdzv-id=417-pair-n3-n1" in rest
    assert "--rdzv-conf=join_timeout=15,read_timeout=15" in rest and "--max-restarts=0" in rest
    module = rest[rest.index("gpu_cluster.workloads.validate") + 1 :]
    assert module == ["run", "--out", str(tmp_path), "--instance-type", "p5.48xlarge", *RUN_ARGS] + [
        "--phase",
        "pairs",
        "--pair-job",
        "n3+n1",
    ]


def test_a_pair_steps_limit_covers_every_call_of_the_pair() -> None:
    cfg = RunConfig(out_dir=Path("."), phase="pairs", iters=3, warmup=1, timeout_s=15, pair_timeout_s=10)
    # join 15 + group setup 15 + 2 x 7.5 + calls 10 x (3 + 1 + 4) + grace 5 + start 60 = 190 s -> 4 min
    assert pair_jobs.step_time_limit_min(cfg, 15) == 4
    # The defaults: 300 + (300 + 2 x 150) + 120 x (20 + 5 + 4) + 60 + 60 = 4500 s
    gpu = RunConfig(out_dir=Path("."), phase="pairs")
    assert pair_jobs.step_time_limit_min(gpu, 300) == 75


def _hang_on(bad: str, out: Path, seen: list[list[tuple[str, str]]]) -> pair_jobs.RunRound:
    def run_round(rnd: list[tuple[str, str]]) -> None:
        seen.append(list(rnd))
        for a, b in rnd:
            if bad not in (a, b):
                doc = {"phase": "pairs", "pairs": {"first": [[a, b, 3.5]]}}
                (out / f"phase-pairs-{a}+{b}.json").write_text(json.dumps(doc))

    return run_round


def _hung_main(out: Path, nodes: list[str]) -> None:
    """The main phase's status lines after a hang that tore every rank down: each joined, silent."""
    (out / "status").mkdir()
    for r, n in enumerate(nodes):
        doc = {"phase": "main", "node": n, "rank": r, "state": "joined", "stages": {"started": 1.0, "joined": 2.0}}
        (out / "status" / f"main-{n}-r{r}.json").write_text(json.dumps(doc))


def test_the_driver_names_the_hung_node_after_pairing_it_with_a_known_good_one(tmp_path: Path) -> None:
    _hung_main(tmp_path, ["n1", "n2", "n3"])
    seen: list[list[tuple[str, str]]] = []
    said: list[str] = []
    found = pair_jobs.drive(
        tmp_path, ["n1", "n2", "n3"], RUN_ARGS, _hang_on("n2", tmp_path, seen), ranks_per_node=1, say=said.append
    )
    assert seen == [[("n1", "n2")], [("n3", "n1")], [("n2", "n1")]]
    assert set(found["bad"]) == {"n2"} and "known-good n1" in found["bad"]["n2"] and found["jobs"] == "per-pair"
    doc = json.loads((tmp_path / "phase-pairs.json").read_text())
    assert doc["pairs"] == found and doc["backend"] == "gloo" and found["message_bytes"] == 1 << 20
    assert said[-1] == "validate[pairs]: named: n2"


def test_with_two_nodes_a_hung_pair_stays_unresolved(tmp_path: Path) -> None:
    _hung_main(tmp_path, ["n1", "n2"])
    found = pair_jobs.drive(tmp_path, ["n1", "n2"], RUN_ARGS, _hang_on("n2", tmp_path, []), ranks_per_node=1)
    assert found["bad"] == {} and set(found["unresolved"]) == {"n1", "n2"}


def test_the_driver_does_nothing_after_a_finished_main_phase_and_skips_after_a_node_that_never_started(
    tmp_path: Path,
) -> None:
    def never(rnd: list[tuple[str, str]]) -> None:
        raise AssertionError(f"no pair should run: {rnd}")

    (tmp_path / "phase-main.json").write_text("{}")
    assert pair_jobs.drive(tmp_path, ["n1", "n2", "n3"], RUN_ARGS, never, ranks_per_node=1) == {}
    assert not (tmp_path / "phase-pairs.json").exists()
    (tmp_path / "phase-main.json").unlink()
    (tmp_path / "status").mkdir()
    for rank, node in enumerate(("n1", "n2")):  # n3's rank never wrote a line
        line = {"phase": "main", "node": node, "rank": rank, "state": "error", "peer_lost": True}
        (tmp_path / "status" / f"main-{node}-r{rank}.json").write_text(json.dumps(line))
    doc = pair_jobs.drive(tmp_path, ["n1", "n2", "n3"], RUN_ARGS, never, ranks_per_node=1)
    assert "rank(s) 2 never started" in doc["skipped"]
    assert json.loads((tmp_path / "phase-pairs.json").read_text()) == doc


def _pair_search(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpu_cluster.workloads.validate", "pair-search", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )


def test_pair_search_names_each_bad_argument(tmp_path: Path) -> None:
    done = _pair_search(
        "--out", str(tmp_path / "nope"), "--ranks-per-node", "0", "--nodes", "n1,n2", "--", "--iters", "x"
    )
    assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr
    assert f"--out {tmp_path / 'nope'}: no such run directory" in done.stderr
    assert "--ranks-per-node 0: allowed 1 or more" in done.stderr
    assert "run arguments '--iters x': not what `validate run` takes" in done.stderr
    done = _pair_search("--out", str(tmp_path), "--rdzv-port", "65535", "--nodes", "n1,n2,n3,n4")
    assert done.returncode == 3 and "--rdzv-port 65535: allowed 1..65533" in done.stderr, done.stderr


def test_the_rendered_slurm_job_runs_the_driver_with_the_runs_arguments() -> None:
    job = ValidationJob(nodes=3, workdir="/fsx/v/r1", procs_per_node=2, run_args=RUN_ARGS, python="/venv/bin/python")
    script = sbatch.render(sbatch_spec(job))
    line = next(x for x in script.splitlines() if "pair-search" in x)
    words = shlex.split(line.split(" || ")[0])
    assert words == [
        "/venv/bin/python",
        "-m",
        "gpu_cluster.workloads.validate",
        "pair-search",
        "--out",
        "/fsx/v/r1",
        "--python",
        "/venv/bin/python",
        "--ranks-per-node",
        "2",
        "--rdzv-port",
        "29500",
        "--",
        *RUN_ARGS,
    ]
    # The driver is on the batch host, not under srun: it starts the srun steps itself.
    assert not line.lstrip().startswith("srun") and "step 2: pairs" in script


# ---- Kubernetes -------------------------------------------------------------------------------


def _eks() -> tuple[ClusterOutputs, ValidationJob]:
    outs = outputs("aws-h100-eks")
    job = for_cluster(outs, "20261201t070102z-3fa9", build_bundle(), run_args=RUN_ARGS)
    return outs, job


def test_a_pairs_jobset_is_valid_kubernetes_and_pins_each_side(jobset_schema: dict[str, Any]) -> None:  # noqa: F811
    outs, job = _eks()
    a, b = "gpuc-20261201t070102z-3fa9-node-0-4", "gpuc-20261201t070102z-3fa9-node-0-1"
    hosts = {a: "ip-10-0-1-17.ec2.internal", b: "ip-10-0-1-9.ec2.internal"}
    manifest, policy = pair_jobset(outs, job, "20261201t070102z-3fa9", a, b, hosts=hosts)
    assert manifest["metadata"]["name"] == pair_jobset_name("20261201t070102z-3fa9", a, b)
    assert pair_jobset_name("20261201t070102z-3fa9", b, a) != manifest["metadata"]["name"]
    assert _crd_errors(jobset_schema, manifest) == []
    rjobs = manifest["spec"]["replicatedJobs"]
    assert [r["name"] for r in rjobs] == ["a", "b"] and all(r["replicas"] == 1 for r in rjobs)
    for rjob, (report_as, host) in zip(rjobs, ((a, hosts[a]), (b, hosts[b])), strict=True):
        one = {**manifest, "spec": {**manifest["spec"], "replicatedJobs": [rjob]}}
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(_job(one), version, strict=True)
            kubernetes_validate.validate(_pod(one), version, strict=True)
        spec = rjob["template"]["spec"]
        assert spec["parallelism"] == spec["completions"] == 1
        pod = spec["template"]["spec"]
        assert pod["nodeSelector"]["kubernetes.io/hostname"] == host
        assert {k: v for k, v in pod["nodeSelector"].items() if k != "kubernetes.io/hostname"} == dict(
            outs.scheduler.node_selector
        )
        (c,) = pod["containers"]
        env = {e["name"]: e["value"] for e in c["env"]}
        assert env["GPUC_NODE_NAME"] == report_as
        script = c["command"][-1]
        # One torchrun of two nodes, meeting on side a's pod, running this pair's job and no other step.
        name = manifest["metadata"]["name"]
        assert f"rdzv_host={name}-a-0-0.{name}" in script and "--nnodes=2" in script
        assert f"--phase pairs --pair-job {a}+{b}" in script and "--phase main" not in script
        assert "--iters 3" in script and "--pair-timeout 10" in script
        assert pod["containers"][0]["resources"]["limits"]["vpc.amazonaws.com/efa"] == "32"
    # The code is the run's own ConfigMap; the NetworkPolicy admits the pair's pods only from each other.
    vols = {v["name"]: v for v in rjobs[0]["template"]["spec"]["template"]["spec"]["volumes"]}
    assert any(v.get("configMap", {}).get("name") == "gpuc-20261201t070102z-3fa9" for v in vols.values())
    kubernetes_validate.validate(policy, K8S_VERSIONS[-1], strict=True)
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == manifest["metadata"]["name"]


def test_a_pairs_jobset_refuses_a_bad_node_name() -> None:
    outs, job = _eks()
    from gpu_cluster.workloads.launch.common import LaunchSpecError

    with pytest.raises(LaunchSpecError, match=r"sides\[1\].*'Bad_Node!' is not a Kubernetes node name"):
        pair_jobset(outs, job, "r1", "p0", "p1", hosts={"p1": "Bad_Node!"})
