"""``gpu-cluster heal``'s bad input: each is one line naming the bad value and the next step, exit
3, no traceback (an unknown node, a stack without outputs, no report, bad flags)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_cluster import cli
from gpu_cluster.heal.cli import main
from tests.heal.world import write_report
from tests.kubeapi import KubeApiServer
from tests.launch.test_render_stacks import outputs


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err
    return code, err


def run_out(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    got = capsys.readouterr()
    return code, got.out + got.err


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("gpu-cluster heal:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ((), "name a stack (gpu-cluster heal STACK), or --local"),
        (("--local",), "--local needs --out DIR"),
        (("--local", "--nodes", "1", "--out", "{d}"), "--nodes 1 (allowed: 2..8"),
        (("--local", "--fault", "local-9:slow", "--out", "{d}"), "no node local-9 among --nodes 4"),
        (("--local", "--fault", "local-3:melt", "--out", "{d}"), "unknown kind 'melt' (allowed: slow, dead)"),
        (("--local", "--max-per-hour", "-1", "--out", "{d}"), "--max-per-hour -1 (allowed: 0 or more"),
        (("--local", "--max-unhealthy", "1.5", "--out", "{d}"), "--max-unhealthy 1.5 (allowed: a fraction in (0, 1])"),
        (("--show", "{d}"), "no heal-journal.jsonl there"),
        (("mystack", "--local", "--out", "{d}"), "drop the stack name 'mystack'"),
    ],
)
def test_bad_flags_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], says: str
) -> None:
    code, err = run(capsys, *(a.format(d=tmp_path) for a in argv))
    assert code == 3 and says in one_line(err)


def test_a_node_the_report_does_not_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_report(tmp_path)
    code, err = run(capsys, "--local", "--out", str(tmp_path), "--node", "local-2")
    line = one_line(err)
    assert (
        code == 3
        and "--node local-2: not named by the report" in line
        and "named for a finding of its own: local-3" in line
    )


def test_a_stack_without_outputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no pulumi CLI
    code, err = run(capsys, "aws-h100-eks", "--report", str(write_report(tmp_path)))
    line = one_line(err)
    assert code == 3 and "no outputs for stack 'aws-h100-eks'" in line and "pass --outputs FILE" in line


def outputs_file(tmp_path: Path, kubeconfig: str) -> Path:
    """The offline plan's outputs of aws-h100-eks, its kubeconfig pointed at the test API server."""
    from gpu_cluster.components.engine import run_offline
    from gpu_cluster.components.spec import read_stack_file

    stack, raw_spec = read_stack_file("aws-h100-eks")
    outs = run_offline(stack, raw_spec).outputs
    outs["access"]["kubeconfig"] = kubeconfig
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outs), encoding="utf-8")
    return path


def test_no_report_then_an_unknown_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with KubeApiServer() as server:
        out = outputs_file(tmp_path, server.kubeconfig())
        code, err = run(capsys, "aws-h100-eks", "--outputs", str(out))
        line = one_line(err)
        assert code == 3 and "no validation report for aws-h100-eks under out/validate/aws-h100-eks/" in line
        assert "gpu-cluster validate submit aws-h100-eks" in line
        report = tmp_path / "report.json"
        named = {"node": "ip-10-9-9-9.ec2.internal", "verdict": "FAIL", "reasons": ["gate ecc.volatile (gpu0): 3"]}
        others = [{"node": f"ip-10-9-9-{i}.ec2.internal", "verdict": "PASS", "reasons": []} for i in range(4)]
        report.write_text(json.dumps({"verdict": "FAIL", "nodes": [named, *others], "measurements": []}))
        code, err = run(capsys, "aws-h100-eks", "--outputs", str(out), "--report", str(report))
        line = one_line(err)
        assert code == 3 and "the report names ip-10-9-9-9.ec2.internal, which the kubernetes scheduler" in line
        assert "validate again" in line
        # the rerun of an incident whose old node is gone (replaced: EKS names the new one anew) is
        # continued from the journal, not refused (issue 41, severity 2)
        from gpu_cluster.heal.journal import Entry, Journal
        from gpu_cluster.heal.states import State

        run_dir = tmp_path / "heal-run"
        with Journal(run_dir) as j:
            for state, event in (
                (State.SUSPECT, "enter"),
                (State.CONFIRMED, "enter"),
                (State.CONFIRMED, "intent"),
                (State.QUARANTINED, "enter"),
                (State.REPLACING, "intent"),
                (State.REPLACING, "done"),
                (State.JOINING, "enter"),
            ):
                j.append(
                    Entry(
                        at=1.0,
                        cluster="c",
                        slot=named["node"],
                        node=named["node"],
                        incident="h-0123456789",
                        state=state,
                        event=event,
                    )
                )
        code, printed = run_out(
            capsys, "aws-h100-eks", "--outputs", str(out), "--report", str(report), "--out", str(run_dir)
        )
        assert code == 0, printed
        assert "incident h-0123456789 (ip-10-9-9-9.ec2.internal) is open at JOINING: --apply continues it" in printed


def test_show_prints_the_journal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_cluster.heal.evidence import read_report
    from gpu_cluster.heal.journal import Journal
    from tests.heal.world import engine

    ev = read_report(write_report(tmp_path))
    with Journal(tmp_path) as j:
        e, _w = engine(tmp_path, j)
        e.run(ev)
    assert main(["--show", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 11 and "SUSPECT" in printed[0] and "HEALTHY" in printed[-2]
    assert printed[-1] == "out of service by heal (I7, this journal): 0"


def test_heal_is_a_subcommand() -> None:
    assert "heal" in {s.name for s in cli.SUBCOMMANDS}
    assert outputs("aws-h100-eks").orchestrator == "eks"
