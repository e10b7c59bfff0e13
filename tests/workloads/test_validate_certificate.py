"""The node gate in the judge and report, the per-node software stack, and `validate diff`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpu_cluster.workloads.validate import certificate, diff, stack
from gpu_cluster.workloads.validate.__main__ import main as validate_main
from gpu_cluster.workloads.validate.judge import judge
from gpu_cluster.workloads.validate.report import render_markdown, write
from gpu_cluster.workloads.validate.verdict import NodeVerdict, Verdict


def _check(name: str, scope: str, status: str, value: Any = None, detail: str = "") -> dict[str, Any]:
    return {"name": name, "scope": scope, "status": status, "value": value, "detail": detail}


def _gate_doc(
    node: str, rank: int, *extra: dict[str, Any], vendor: str = "nvidia", tflops: float = 700.0
) -> dict[str, Any]:
    checks = [
        _check("gpu.count", "node", "pass", 8),
        _check("ecc.volatile", f"gpu{rank}", "pass", 0),
        _check("dcgm.diag", "node", "not run", detail="DCGM is not installed (no dcgmi on PATH)"),
        _check("gemm.sustained", f"gpu{rank}", "pass", tflops),
        *extra,
    ]
    return {"node": node, "rank": rank, "vendor": vendor, "checks": checks, "gemm": [{"sustained_tflops": tflops}]}


def test_a_failed_gate_check_fails_its_node_and_is_a_measurement() -> None:
    main = {
        "gate": [
            _gate_doc("a", 0),
            _gate_doc("b", 1, _check("ecc.volatile", "gpu3", "fail", 2, "2 uncorrectable")),
            _gate_doc("b", 2, _check("clocks.throttle", "gpu2", "warn", None, "SW thermal")),
        ]
    }
    nodes = {"a": NodeVerdict(node="a"), "b": NodeVerdict(node="b")}
    ms, summary = certificate.judge_gate(main, nodes, gpu_run=True)
    assert nodes["a"].verdict == Verdict.PASS
    assert nodes["b"].verdict == Verdict.FAIL
    assert any("ecc.volatile (gpu3): 2 uncorrectable" in r for r in nodes["b"].reasons)
    row = next(m for m in ms if m.check == "gate.ecc.volatile")
    assert row.scope == "gpu:b/3" and row.value == 2.0 and row.verdict == Verdict.FAIL
    b = next(s for s in summary if s["node"] == "b")
    assert b["failed"] == ["ecc.volatile (gpu3)"] and b["warned"] == ["clocks.throttle (gpu2)"]
    assert b["not_run"] == ["dcgm.diag: DCGM is not installed (no dcgmi on PATH)"]
    md = "\n".join(certificate.render_gate(summary))
    assert "| b | FAIL | nvidia |" in md and "[all nodes]" in md


def test_gpu_node_without_readable_counters_is_a_warning_but_cpu_is_not() -> None:
    main = {"gate": [_gate_doc("a", 0, vendor="none")]}
    gpu = {"a": NodeVerdict(node="a")}
    certificate.judge_gate(main, gpu, gpu_run=True)
    assert gpu["a"].verdict == Verdict.WARN
    cpu = {"a": NodeVerdict(node="a")}
    _, summary = certificate.judge_gate(main, cpu, gpu_run=False)
    assert cpu["a"].verdict == Verdict.PASS and summary[0]["verdict"] == "PASS"


def test_stack_from_nccl_logs_and_efa_installer(tmp_path: Path) -> None:
    log = tmp_path / "nccl-p5-node-7-4242.log"
    log.write_text(
        "p5-node-7:4242:4242 [0] NCCL INFO NCCL version 2.26.2+cuda12.2\n"
        "p5-node-7:4242:4242 [0] NCCL INFO NET/Plugin: Loaded net plugin Libfabric (v11)\n"
        "p5-node-7:4242:4242 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.14.0\n",
        encoding="utf-8",
    )
    seen = stack.from_nccl_logs([log])
    assert seen == {
        "p5-node-7": {
            "nccl_log": "2.26.2+cuda12.2",
            "net_plugin": "Libfabric (v11)",
            "net_plugin_version": "aws-ofi-nccl 1.14.0",
        }
    }
    merged = stack.node_stacks({"stack": {"p5-node-7": {"kernel": "6.8.0"}}}, [log])
    assert merged["p5-node-7"]["kernel"] == "6.8.0" and merged["p5-node-7"]["net_plugin"] == "Libfabric (v11)"
    efa = tmp_path / "efa_installed_packages"
    efa.write_text("# EFA installer version: 1.38.0\n# Debug packages installed: no\n", encoding="utf-8")
    assert stack.efa_installer(efa) == "1.38.0"
    assert stack.efa_installer(tmp_path / "absent") is None


def test_collect_records_this_nodes_stack(monkeypatch: Any) -> None:
    monkeypatch.setenv("GPUC_IMAGE_DIGEST", "sha256:abc")
    s = stack.collect({"driver": "550.90.07", "cuda_driver": "12.4"})
    assert s["driver"] == "550.90.07" and s["image_digest"] == "sha256:abc" and s["torch"]
    assert s["kernel"]


def _report(
    values: dict[str, float],
    *,
    stack_: dict[str, dict[str, Any]],
    nodes: list[str],
    drained: list[str] | None = None,
    verdict: str = "PASS",
) -> dict[str, Any]:
    return {
        "verdict": verdict,
        "versions": {"torch": "2.13.0"},
        "stack": stack_,
        "nodes": [{"node": n, "verdict": "PASS", "reasons": []} for n in nodes],
        "drained": drained or [],
        "measurements": [
            {"check": c, "scope": "cluster", "value": v, "unit": "GB/s", "verdict": "PASS"} for c, v in values.items()
        ],
    }


def test_diff_lists_versions_figures_and_nodes_and_flags_a_regression() -> None:
    old = _report(
        {"multi_node.all_reduce": 480.0, "single_node.busbw": 470.0},
        stack_={"n1": {"driver": "550.90.07", "net_plugin_version": "aws-ofi-nccl 1.13.2"}, "n2": {}},
        nodes=["n1", "n2"],
    )
    new = _report(
        {"multi_node.all_reduce": 300.0, "single_node.busbw": 465.0},
        stack_={"n1": {"driver": "560.35.03", "net_plugin_version": "aws-ofi-nccl 1.14.0"}, "n3": {}},
        nodes=["n1", "n3"],
        drained=["n3"],
    )
    d = diff.diff_reports(old, new, threshold=0.1)
    assert {(v.scope, v.key, v.old, v.new) for v in d.versions} == {
        ("node:n1", "driver", "550.90.07", "560.35.03"),
        ("node:n1", "net_plugin_version", "aws-ofi-nccl 1.13.2", "aws-ofi-nccl 1.14.0"),
    }
    assert d.nodes_added == ["n3"] and d.nodes_removed == ["n2"] and d.drained == ["n3"]
    assert [(f.check, f.ratio) for f in d.regressions] == [("multi_node.all_reduce", 0.625)]
    small = next(f for f in d.figures if f.check == "single_node.busbw")
    assert not small.regressed and small.ratio == round(465 / 470, 4)
    md = "\n".join(diff.render_markdown(d))
    assert "| multi_node.all_reduce | cluster | 480.00 GB/s | 300.00 GB/s | 0.625 |" in md


def test_diff_cli_exit_codes_and_update(tmp_path: Path, capsys: Any) -> None:
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    old_dir.mkdir()
    new_dir.mkdir()
    base = _report({"multi_node.all_reduce": 480.0}, stack_={}, nodes=["n1"])
    (old_dir / "report.json").write_text(json.dumps(base), encoding="utf-8")
    (new_dir / "report.json").write_text(
        json.dumps(_report({"multi_node.all_reduce": 470.0}, stack_={}, nodes=["n1"])), encoding="utf-8"
    )
    (new_dir / "report.md").write_text("# Cluster validation: PASS\n", encoding="utf-8")
    assert validate_main(["diff", str(old_dir / "report.json"), str(new_dir), "--update"]) == diff.EXIT_OK
    # A 2 % drop passes at the default threshold and regresses at a 1 % one.
    assert (
        validate_main(["diff", str(old_dir), str(new_dir), "--threshold", "0.01", "--update"]) == diff.EXIT_REGRESSION
    )
    md = (new_dir / "report.md").read_text(encoding="utf-8")
    assert md.count(diff.SECTION) == 1 and "1 regression(s)" in md and md.startswith("# Cluster validation: PASS")
    assert json.loads((new_dir / "diff.json").read_text(encoding="utf-8"))["regressions"] == 1
    assert validate_main(["diff", str(old_dir), str(tmp_path / "missing")]) == diff.EXIT_UNREADABLE
    assert validate_main(["diff", str(old_dir), str(new_dir), "--threshold", "1.5"]) == diff.EXIT_UNREADABLE
    capsys.readouterr()


def test_judge_puts_the_gate_and_stack_in_the_report(tmp_path: Path) -> None:
    main = {
        "phase": "main",
        "world_size": 2,
        "backend": "gloo",
        "nodes": {"a": {"ranks": [0]}, "b": {"ranks": [1]}},
        "versions": {"torch": "2.13.0"},
        "health": [],
        "single_node": {},
        "multi_node": {},
        "gate": [_gate_doc("a", 0, vendor="none"), _gate_doc("b", 1, vendor="none")],
        "stack": {"a": {"kernel": "6.8.0", "torch": "2.13.0"}, "b": {"kernel": "6.9.1", "torch": "2.13.0"}},
    }
    (tmp_path / "phase-main.json").write_text(json.dumps(main), encoding="utf-8")
    rep = judge(tmp_path, instance_type=None, local=True, expected_nodes=["a", "b"])
    doc = rep.to_json()
    assert [g["node"] for g in doc["gate"]] == ["a", "b"] and doc["stack"]["b"]["kernel"] == "6.9.1"
    md = render_markdown(rep)
    assert "## Node gate" in md and "## Software stack" in md and "| b | 6.9.1 | 2.13.0 |" in md
    write(rep, tmp_path)
    assert json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))["gate"][0]["vendor"] == "none"


def test_diff_of_cpu_runs_says_the_figures_are_a_shared_hosts() -> None:
    a = dict(_report({"multi_node.all_reduce": 1.0}, stack_={}, nodes=["n1"]), local=True)
    b = dict(_report({"multi_node.all_reduce": 0.5}, stack_={}, nodes=["n1"]), local=True)
    d = diff.diff_reports(a, b)
    assert d.local and len(d.regressions) == 1
    assert "A CPU (--local) run is compared" in "\n".join(diff.render_markdown(d))


def test_a_gpus_lifetime_ecc_count_is_judged_by_its_change_since_the_last_certificate(tmp_path: Path) -> None:
    """Three runs of one cluster, each in its own directory beside the others: the first records
    the lifetime count as the baseline (an error long since retired does not warn forever), the
    second sees the same count (pass), the third one more (warn, naming the run it grew since)."""
    import os

    def run(name: str, count: int, at: float) -> dict[str, Any]:
        d = tmp_path / name
        d.mkdir()
        ecc = _check("ecc.aggregate", "gpu3", "info", count, f"{count} uncorrectable ECC errors (aggregate)")
        main = {
            "phase": "main",
            "world_size": 2,
            "backend": "nccl",
            "nodes": {"a": {"ranks": [0]}, "b": {"ranks": [1]}},
            "health": [],
            "single_node": {},
            "multi_node": {},
            "gate": [_gate_doc("a", 0), _gate_doc("b", 1, ecc)],
        }
        (d / "phase-main.json").write_text(json.dumps(main), encoding="utf-8")
        os.utime(d / "phase-main.json", (at, at))
        rep = judge(d, instance_type=None, local=False, expected_nodes=["a", "b"])
        write(rep, d)
        os.utime(d / "report.json", (at + 10, at + 10))
        return {n.node: n for n in rep.nodes} | {"_doc": rep.to_json()}

    first = run("20261201t000000z-aaaa", 2, 1_000_000.0)
    assert first["b"].verdict == Verdict.PASS
    assert first["_doc"]["gate"][1]["ecc_aggregate"] == {"gpu3": 2}
    second = run("20261202t000000z-bbbb", 2, 2_000_000.0)
    assert second["b"].verdict == Verdict.PASS
    third = run("20261203t000000z-cccc", 3, 3_000_000.0)
    assert third["b"].verdict == Verdict.WARN
    assert any("1 new uncorrectable ECC error(s) since run 20261202t000000z-bbbb" in r for r in third["b"].reasons)
