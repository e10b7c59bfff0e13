"""The one-way flow of shared/DESIGN.md, held by reading every import in the product:
stack -> components -> outputs -> launch -> workloads -> report. A component never imports
``workloads``; a workload never imports Pulumi, and of ``components`` only the modules both
sides share (the catalog with its bandwidth model, the validation-time model, the output
contract, and the one problem type)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = {
    "components",
    "components.catalog",
    "components.contract",
    "components.bandwidth",
    "components.validation_time",
    "components.problems",
}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def _graph(package: str) -> dict[str, set[str]]:
    return {str(p.relative_to(ROOT)): _imports(p) for p in sorted((ROOT / package).rglob("*.py"))}


def test_components_never_import_workloads() -> None:
    bad = {f: sorted(i for i in imps if i.split(".")[0] == "workloads") for f, imps in _graph("components").items()}
    assert not {f: i for f, i in bad.items() if i}


def test_workloads_import_no_pulumi_and_only_the_shared_components() -> None:
    problems = {}
    for f, imps in _graph("workloads").items():
        wrong = sorted(
            i
            for i in imps
            if i.split(".")[0].startswith("pulumi")
            or (
                i.split(".")[0] == "components"
                and i not in SHARED
                and not any(i.startswith(s + ".") and s != "components" for s in SHARED)
            )
        )
        if wrong:
            problems[f] = wrong
    assert not problems


def test_shared_modules_import_neither_side() -> None:
    for mod in (
        "components/catalog.py",
        "components/contract.py",
        "components/bandwidth.py",
        "components/validation_time.py",
        "components/problems.py",
    ):
        imps = _imports(ROOT / mod)
        assert not {i for i in imps if i.split(".")[0] in ("pulumi", "workloads", "torch")} and not {
            i for i in imps if i.startswith("pulumi")
        }, mod


def test_the_check_sees_an_arrow_back(tmp_path: Path) -> None:
    bad = tmp_path / "x.py"
    bad.write_text("from workloads.launch import validation\nimport pulumi_aws as aws\n")
    assert {"workloads.launch", "workloads.launch.validation", "pulumi_aws"} <= _imports(bad)
