"""``gpu-cluster init``: a project of the user's own, outside the repository, that plans and builds
exactly what the bundled program does (issue 47, item 3)."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpu_cluster.components import program
from gpu_cluster.components.engine import run_offline, run_program
from gpu_cluster.components.stack_locate import BUNDLED_DIR

ROOT = Path(__file__).resolve().parents[1]


def gpu_cluster(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it, from a folder outside the checkout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "gpu_cluster", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    done = gpu_cluster("init", "mine", "--example", "aws-h100-eks", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "gpu-cluster plan aws-h100-eks" in done.stdout
    return tmp_path / "mine"


def test_init_writes_a_project_that_pulumi_can_run(project: Path) -> None:
    names = sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())
    assert names == [
        "Pulumi.aws-h100-eks.yaml",
        "Pulumi.yaml",
        "__main__.py",
        "policy-pack/PulumiPolicy.yaml",
        "policy-pack/__main__.py",
        "requirements.txt",
    ]
    meta = yaml.safe_load((project / "Pulumi.yaml").read_text())
    assert meta["name"] == "mine" and meta["runtime"]["name"] == "python"
    copied = yaml.safe_load((project / "Pulumi.aws-h100-eks.yaml").read_text())
    assert copied == yaml.safe_load((BUNDLED_DIR / "Pulumi.aws-h100-eks.yaml").read_text())
    assert "gpu-cluster[aws,policy]" in (project / "requirements.txt").read_text()
    compile((project / "__main__.py").read_text(), "__main__.py", "exec")
    pack = (project / "policy-pack" / "__main__.py").read_text()
    assert 'run_module("gpu_cluster.policies", run_name="__main__")' in pack


def test_plan_in_the_project_reads_its_stack_file(project: Path) -> None:
    stack_file = project / "Pulumi.aws-h100-eks.yaml"
    doc = yaml.safe_load(stack_file.read_text())
    doc["config"]["gpu-cluster:cluster"]["compute"]["nodes"] = 2  # the user's edit, not the example's 4
    stack_file.write_text(yaml.safe_dump(doc))
    done = gpu_cluster("plan", "aws-h100-eks", "--json", "plan.json", cwd=project)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "2 x p5.48xlarge" in done.stdout
    plan = json.loads((project / "plan.json").read_text())
    assert plan["summary"]["liveness"]["holds"] is True


def test_the_projects_program_builds_what_the_plan_plans(project: Path) -> None:
    doc = yaml.safe_load((project / "Pulumi.aws-h100-eks.yaml").read_text())["config"]
    cluster = doc.pop("gpu-cluster:cluster")
    config = {"gpu-cluster:cluster": json.dumps(cluster), **{k: str(v) for k, v in doc.items()}}
    program.OFFLINE_PLAN = True  # as the plan runs it: a placeholder for missing deployer_cidrs
    try:
        mine = run_program(
            "aws-h100-eks",
            lambda: runpy.run_path(str(project / "__main__.py"), run_name="__main__") and None,
            config=config,
        )
    finally:
        program.OFFLINE_PLAN = False
    planned = run_offline("aws-h100-eks", cluster, {k: v for k, v in config.items() if k != "gpu-cluster:cluster"})
    built = sorted((r.type, r.name) for r in mine.resources)
    assert len(built) > 50
    assert built == sorted((r.type, r.name) for r in planned.resources)
    assert set(mine.outputs) == set(planned.outputs)


def test_init_never_overwrites(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: theirs\n")
    done = gpu_cluster("init", "--example", "gcp-h100-gke", cwd=tmp_path)
    assert done.returncode == 3
    assert done.stderr.count("\n") == 1 and "already has Pulumi.yaml" in done.stderr and "Traceback" not in done.stderr
    assert (tmp_path / "Pulumi.yaml").read_text() == "name: theirs\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Pulumi.yaml"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--example", "aws-h100"], "--example 'aws-h100' is not a bundled example (allowed: aws-b200-capacity-block"),
        (["--example", "aws-h100-eks", "--stack", "my stack"], "--stack 'my stack': Pulumi allows only"),
        (["--example", "aws-h100-eks", "--name", "a/b"], "--name 'a/b': Pulumi allows only"),
    ],
)
def test_bad_input_is_one_line_naming_what_is_allowed(tmp_path: Path, args: list[str], said: str) -> None:
    done = gpu_cluster("init", "here", *args, cwd=tmp_path)
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "here").exists()


def test_init_into_a_file_or_unwritable_place_is_refused(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    done = gpu_cluster("init", "afile", "--example", "aws-h100-eks", cwd=tmp_path)
    assert done.returncode == 3 and "is not a directory" in done.stderr and "Traceback" not in done.stderr


def test_plan_all_in_a_project_plans_its_stacks_not_the_examples(project: Path) -> None:
    (project / "notes.yaml").write_text("a: 1\n")
    (project / "Pulumi.other.yaml").write_text("config:\n  aws:region: us-east-1\n")  # no cluster: not ours
    done = gpu_cluster("plan", "--all", cwd=project)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "[1/1] planning aws-h100-eks" in done.stderr
    empty = project / "empty"
    empty.mkdir()
    (empty / "Pulumi.yaml").write_text("name: empty\nruntime: python\n")
    done = gpu_cluster("plan", "--all", cwd=empty)
    assert done.returncode == 3 and "no stack file with a gpu-cluster:cluster object" in done.stderr


LIBRARY_CONFIG = """config:
  example:vpc_id: vpc-0a1b2c3d4e5f60718
  example:node_subnet_id: subnet-0a1b2c3d4e5f60718
  example:control_plane_subnet_id: subnet-0f1e2d3c4b5a69788
  example:deployer_cidr: 52.0.0.1/32
"""


def test_plan_of_a_library_program_has_the_bundled_plans_sections(tmp_path: Path) -> None:
    """examples/python (its own provider and VPC, GpuCluster as a library) planned from its folder:
    cost, validation time, floors, liveness and the policy pack, as for a bundled stack."""
    for name in ("__main__.py", "Pulumi.yaml"):
        (tmp_path / name).write_text((ROOT / "examples" / "python" / name).read_text())
    (tmp_path / "Pulumi.dev.yaml").write_text(LIBRARY_CONFIG)
    done = gpu_cluster("plan", "dev", "--program", "__main__.py", "--policy", "--json", "plan.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    for section in ("  cost ", "  validation ", "  busbw floors ", "  liveness      holds:", "Policy ("):
        assert section in done.stdout, section
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert doc["summary"]["liveness"]["holds"] is True and "policy" in doc
    # the cluster's own launch facts, not the program's exports
    assert doc["outputs"]["instance_type"] == "p5.48xlarge" and doc["outputs"]["nodes"] == 2
    # the caller's VPC is not the plan's: its routes are unverified, not a failure
    (egress,) = [c for c in doc["summary"]["liveness"]["checks"] if "reach the registries" in c["check"]]
    assert egress["holds"] and egress.get("unverified") and "subnet-0a1b2c3d4e5f60718" in egress["why"]


def test_plan_of_a_program_that_builds_no_cluster_says_so(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: p\nruntime: python\n")
    (tmp_path / "Pulumi.dev.yaml").write_text("config:\n  aws:region: us-east-1\n")
    (tmp_path / "__main__.py").write_text("import pulumi\npulumi.export('x', 1)\n")
    done = gpu_cluster("plan", "dev", "--program", "__main__.py", cwd=tmp_path)
    assert done.returncode == 2 and "builds no GpuCluster" in done.stderr and "Traceback" not in done.stderr
    done = gpu_cluster("plan", "dev", "--program", "nope.py", cwd=tmp_path)
    assert done.returncode == 2 and "no such program file" in done.stderr and "Traceback" not in done.stderr
