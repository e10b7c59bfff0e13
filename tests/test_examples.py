"""examples/: the library example under the offline engine (its own test file, also run by
tests/test_packaging.py against the installed package)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _example_test():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("example_test_program", ROOT / "examples/python/test_program.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_library_example() -> None:
    example = _example_test()
    # The example's own tests (caller's provider, caller's VPC, outputs; the set_mocks recipe) run
    # as a user runs them: `make test` runs pytest on examples/ too. The two claims docs/library.md
    # makes of it are held here, so this test fails by itself.
    run = example.example_run()
    assert [r.name for r in run.resources if r.type == "pulumi:providers:aws"] == ["deploy"]
    assert not [r for r in run.resources if r.type in ("aws:ec2/vpc:Vpc", "aws:ec2/subnet:Subnet")]
    assert run.outputs["gpu_cluster"]["orchestrator"] == "eks"


def _library_snippet() -> str:
    """docs/library.md's Python block under "Use it from your own program", as a user copies it."""
    page = (ROOT / "docs/library.md").read_text(encoding="utf-8")
    section = page[page.index("## Use it from your own program") :]
    section = section[: section.index("\n## ", 1)]
    blocks = [b.split("```", 1)[0] for b in section.split("```python\n")[1:]]
    assert len(blocks) == 1, "one Python snippet in the library section"
    return blocks[0]


def test_library_snippet_runs_as_written() -> None:
    """Run under the offline engine with only the config its comment names: no edits, no
    placeholders, an address the spec accepts, the caller's provider and VPC honoured."""
    from gpu_cluster.components.engine import run_program

    code = _library_snippet()
    assert "OWNER" not in code and "..." not in code
    config = {
        "net:vpc_id": "vpc-0a1b2c3d4e5f60718",
        "net:node_subnet_id": "subnet-0a1b2c3d4e5f60718",
        "net:other_zone_subnet_id": "subnet-0f1e2d3c4b5a69788",
    }
    run = run_program(
        "snippet", lambda: exec(compile(code, "docs/library.md", "exec"), {"__name__": "__main__"}), config=config
    )
    assert [r.name for r in run.resources if r.type == "pulumi:providers:aws"] == ["deploy"]
    assert not [r for r in run.resources if r.type in ("aws:ec2/vpc:Vpc", "aws:ec2/subnet:Subnet")]
    (eks,) = [r for r in run.resources if r.type == "aws:eks/cluster:Cluster"]
    assert eks.inputs["vpcConfig"]["subnetIds"] == [config["net:node_subnet_id"], config["net:other_zone_subnet_id"]]
    assert run.outputs["gpu_cluster"]["orchestrator"] == "eks" and run.outputs["gpu_cluster"]["nodes"] == 2


def test_no_owner_placeholders_in_what_a_user_runs() -> None:
    for path in ("README.md", "docs/library.md", "examples/python/requirements.txt", "examples/yaml/Pulumi.yaml"):
        assert "OWNER" not in (ROOT / path).read_text(encoding="utf-8"), path
    # The example's requirement is this checkout, resolved from the example's folder.
    reqs = [ln for ln in (ROOT / "examples/python/requirements.txt").read_text().splitlines() if ln and ln[0] != "#"]
    assert reqs == ["../.."] and ((ROOT / "examples/python") / reqs[0] / "pyproject.toml").resolve().is_file()


def test_make_test_runs_the_examples_own_tests() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    test_target = makefile[makefile.index("\ntest:") :].split("\n\n", 1)[0]
    (line,) = [ln for ln in test_target.splitlines() if "pytest" in ln and "--ignore=tests/preflight" in ln]
    assert line.split()[-2:] == ["tests", "examples"]
    assert (ROOT / "examples/python/test_program.py").is_file()
