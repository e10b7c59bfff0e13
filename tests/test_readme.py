"""What the README states that the code can contradict (issue 26's first-hour bugs): the plan's
resource counts, the drain flags, the files it and policies/README.md cite, requirements.txt."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _plan_scale_rows() -> dict[str, tuple[list[int], list[int]]]:
    """stack -> (node counts, resource counts) from the README's plan-scale table."""
    rows = {}
    for line in README.splitlines():
        m = re.match(r"\| (\S+) \| ([\d /]+) \| ([\d /]+) \| ", line)
        if m and "bench.plan_scale" in README[: README.index(line)].rsplit("## ", 1)[-1]:
            rows[m.group(1)] = ([int(x) for x in m.group(2).split("/")], [int(x) for x in m.group(3).split("/")])
    return rows


@pytest.mark.slow
def test_readme_plan_scale_counts_are_the_plans() -> None:
    from bench.plan_scale import SIZES, at_nodes
    from components.engine import run_offline
    from components.spec import read_stack_file

    rows = _plan_scale_rows()
    assert set(rows) == {"aws-h100-eks", "aws-h200-slurm", "gcp-h100-gke"}, rows
    for stack, (sizes, counts) in rows.items():
        assert tuple(sizes) == SIZES
        name, raw = read_stack_file(stack)
        # The smallest and the largest: the largest is where the EKS split steps the count up.
        for nodes, count in [(sizes[0], counts[0]), (sizes[-1], counts[-1])]:
            assert len(run_offline(name, at_nodes(raw, nodes)).resources) == count, f"{stack} at {nodes} nodes"


def test_plan_scale_passes_the_eks_split_and_fails_other_growth() -> None:
    from collections import Counter

    from bench.plan_scale import EKS_NODE_GROUP, SIZES, scale_problems

    eks = {"cloud": "aws", "orchestration": {"kind": "eks"}}
    groups = {2: 2, 16: 2, 128: 2, 1024: 4}  # 1024 nodes: three GPU groups (<= 450 each) + system
    ok = {n: Counter({"aws:s3/bucket:Bucket": 3, EKS_NODE_GROUP: groups[n]}) for n in SIZES}
    assert scale_problems(eks, ok) == []
    flat = {n: Counter({"aws:s3/bucket:Bucket": 3, EKS_NODE_GROUP: 2}) for n in SIZES}
    assert scale_problems(eks, flat) == [f"{EKS_NODE_GROUP}: 2 at 1024 nodes (the 450-node split gives 4)"]
    grown = {n: Counter({"aws:ec2/instance:Instance": n}) for n in SIZES}
    slurm = {"cloud": "aws", "orchestration": {"kind": "slurm"}}
    assert scale_problems(slurm, grown)[0] == "aws:ec2/instance:Instance: 2 at 2 nodes, 16 at 16"


def _help(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", *args, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_readme_drain_flags_are_the_commands() -> None:
    """Slurm drains by default (`submit --no-drain` keeps nodes); `judge --drain` taints or drains."""
    assert "`--drain` drains them in Slurm" not in README
    assert "`--no-drain` keeps them in service" in README and "`validate judge --drain`" in README
    assert "--no-drain" in _help("workloads.validate", "submit")
    assert "--drain" in _help("workloads.validate", "judge")


# Files a command writes, which the docs name without citing them.
OUTPUTS = {"report.md"}


@pytest.mark.parametrize("doc", ["README.md", "policies/README.md", "docs/architecture.md"])
def test_cited_markdown_files_exist(doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    cited = set(re.findall(r"(?<![\w/.-])([\w./-]+\.md)\b", text))
    cited -= OUTPUTS
    missing = [c for c in cited if not (ROOT / c).exists() and not (ROOT / doc).parent.joinpath(c).exists()]
    # Files of other repositories a sentence names with their repository (nccl-tests' README ...)
    missing = [c for c in missing if not re.search(rf"`[\w.-]+/[\w.-]+` `?{re.escape(c)}", text)]
    assert not missing, f"{doc} cites files that are not in the repository: {missing}"


def test_requirements_name_each_package_once() -> None:
    names = [
        re.split(r"[=<>\[ ]", ln, maxsplit=1)[0].lower()
        for ln in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
