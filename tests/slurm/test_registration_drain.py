"""Issue 41, I6 on Azure Slurm, on the real Slurm: a dynamic node registers drained as the stack's
boot script starts it (``slurmd -Z --conf "... State=DRAIN"``, then the registration reason set from
the node), takes no user job until ``validate submit`` passes it, stays drained when the judge fails
it; a node drained for another reason is left alone; a submit killed between its reservation and
its resume leaves no node resumed outside a reservation, and a rerun passes the node; heal's release
returns a registration-drained replacement."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from gpu_cluster.components.azure.slurm_config import REGISTER_DRAINED, registration_reason_lines
from gpu_cluster.components.contract import UNVALIDATED_SLURM_REASON
from gpu_cluster.heal.slurm import SlurmScheduler
from gpu_cluster.workloads.validate import slurm_admit
from gpu_cluster.workloads.validate.slurm import Shell
from tests.slurm.cluster import SlurmCluster, report_node, submit_validation, unavailable_reason

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

NODE = "d1"
OTHER_REASON = "ops: DIMM swap booked"


@pytest.fixture(scope="module")
def dyn() -> Iterator[SlurmCluster]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    cluster = SlurmCluster.start(dynamic=True)
    try:
        yield cluster
    finally:
        cluster.stop()
    left = cluster.leftover_processes()
    assert not left, f"processes of the dynamic test cluster outlived its teardown: {left}"
    cluster.cleanup_files()


def _register(cluster: SlurmCluster) -> None:
    """A fresh VM's boot: the dynamic slurmd with the stack's registration words, then the boot
    script's own reason lines (components/azure/slurm_config.py), run by bash as on the node."""
    cluster.remove_dynamic(NODE)
    cluster.start_dynamic(NODE, REGISTER_DRAINED)
    script = "\n".join(["set -euo pipefail", *registration_reason_lines(NODE)])
    subprocess.run(["bash", "-c", script], env=cluster.env, check=True, timeout=60, capture_output=True)
    info = cluster.node(NODE)
    assert "DRAIN" in info.flags and info.reason.startswith(UNVALIDATED_SLURM_REASON), info


def _submit(
    cluster: SlurmCluster, tmp_path: Path, nodes: int, inject: dict[str, str], worker: Sequence[str] | None = None
) -> tuple[int, str, Path]:
    return submit_validation(
        cluster,
        tmp_path,
        inject,
        run_args=("--timeout", "60"),
        time_limit_min=10,
        timeout_s=480,
        nodes=nodes,
        worker=worker or ("-m", "gpu_cluster.workloads.validate"),
    )


def _ours(cluster: SlurmCluster) -> list[str]:
    shown = cluster.run("scontrol", "show", "reservation", "-o").stdout
    names = [
        dict(f.split("=", 1) for f in ln.split() if "=" in f).get("ReservationName", "") for ln in shown.splitlines()
    ]
    return [n for n in names if n.startswith(slurm_admit.RESERVATION_PREFIX)]


def _resumed_outside_a_reservation(cluster: SlurmCluster) -> list[str]:
    """Nodes a submit marked and resumed that no reservation of ours holds (the invariant)."""
    shell = Shell((), cluster.env)
    held = {n for r in _ours(cluster) for n in (slurm_admit.reservation_nodes(shell, r) or [])}
    out = []
    for name in [*cluster.nodes, NODE]:
        info = cluster.node(name)
        marked = slurm_admit.comment(shell, name).startswith(slurm_admit.MARK)
        if not info.draining_or_drained and (marked or name == NODE) and name not in held:
            out.append(f"{name} {info.state} comment marked={marked}")
    return out


def test_a_fresh_node_takes_no_user_job_until_submit_passes_it(dyn: SlurmCluster, tmp_path: Path) -> None:
    _register(dyn)
    user = dyn.run(
        "sbatch", "--parsable", "-w", NODE, "-t", "2", f"--output={dyn.jobs}/user-%j.out", "--wrap", "hostname"
    )
    user_id = int(user.stdout.strip().split(";")[0])
    dyn.wait_for(lambda: dyn.job_field(user_id, "Reason") not in ("", "None"), 30, "the scheduler's look at the job")
    assert dyn.job_field(user_id, "JobState") == "PENDING"

    code, out, back = _submit(dyn, tmp_path, 3, {})
    report = json.loads((back / "report.json").read_text())
    assert code == 0 and report["verdict"] == "PASS", out
    assert report_node(report, NODE)["verdict"] == "PASS" and report["admitted"] == [NODE], out
    assert f"{NODE}: registered unvalidated; resumed inside" in out and f"{NODE}: passed; returned to service" in out
    info = dyn.node(NODE)
    assert not info.draining_or_drained and not _ours(dyn), (info, out)
    assert slurm_admit.comment(Shell((), dyn.env), NODE) == ""
    # The user's job ran on the node only after the validation's job had ended (Slurm's own records).
    validation_id = int(out.split("submitted Slurm job ", 1)[1].split()[0])
    dyn.wait_for(lambda: dyn.job_field(user_id, "JobState") == "COMPLETED", 60, "the user's job to run")
    assert dyn.job_field(user_id, "NodeList") == NODE
    assert dyn.job_field(user_id, "StartTime") >= dyn.job_field(validation_id, "EndTime")


def test_a_node_the_judge_fails_stays_drained_and_a_drain_of_another_reason_is_untouched(
    dyn: SlurmCluster, tmp_path: Path
) -> None:
    _register(dyn)
    dyn.drain("n2", OTHER_REASON)
    try:
        code, out, back = _submit(
            dyn, tmp_path, 2, {"GPUC_INJECT_FAIL_NODE": NODE, "GPUC_INJECT_FAIL_PHASE": "main,pairs"}
        )
        report = json.loads((back / "report.json").read_text())
        assert report["verdict"] == "FAIL" and code == 2, out
        assert report_node(report, NODE)["verdict"] == "FAIL" and "admitted" not in report, out
        d1 = dyn.node(NODE)
        assert "DRAIN" in d1.flags and d1.reason.startswith(UNVALIDATED_SLURM_REASON), (d1, out)
        assert f"{NODE}: FAIL; drained again with the registration reason" in out
        n2 = dyn.node("n2")
        assert "DRAIN" in n2.flags and n2.reason.startswith(OTHER_REASON), n2
        assert f"n2: drained for another reason ({OTHER_REASON}" in out
        assert "n2" not in {n["node"] for n in report["nodes"]} and not _ours(dyn)
    finally:
        dyn.resume("n2")


def test_kill_submit_between_reservation_and_resume_then_rerun_leaves_no_node_resumed_outside(
    dyn: SlurmCluster, tmp_path: Path
) -> None:
    _register(dyn)
    worker = ("-m", "tests.slurm._admit_kill_worker")
    for n in (1, 2, 3):  # after the reservation, after the node's mark, after its resume
        code, out, _ = _submit(dyn, tmp_path / f"kill{n}", 3, {}, worker=(*worker, str(n)))
        assert code == 137 and f"killed after state change {n}" in out, out
        assert not _resumed_outside_a_reservation(dyn), out
        assert _ours(dyn), out  # what the killed submit left, for the rerun to find
    code, out, back = _submit(dyn, tmp_path / "rerun", 3, {})
    report = json.loads((back / "report.json").read_text())
    assert code == 0 and report["verdict"] == "PASS" and report["admitted"] == [NODE], out
    assert f"{NODE}: resumed by an earlier submit that did not finish; drained again" in out
    assert not dyn.node(NODE).draining_or_drained and not _ours(dyn), out


def test_heal_release_returns_a_registration_drained_replacement_and_no_other_drain(dyn: SlurmCluster) -> None:
    _register(dyn)
    heal = SlurmScheduler(Shell((), dyn.env))
    done = heal.release(NODE, "h-0001")
    assert done.ok and "registration drain lifted" in done.detail, done
    assert not dyn.node(NODE).draining_or_drained
    dyn.drain("n2", OTHER_REASON)
    try:
        refused = heal.release("n2", "h-0001")
        assert not refused.ok and dyn.node("n2").reason.startswith(OTHER_REASON), refused
    finally:
        dyn.resume("n2")
    _register(dyn)  # back to what a fresh replacement looks like, for whoever runs next
