"""Stacks where the user keeps them: a name is found as Pulumi finds it (the Pulumi.yaml here or
above, its stackConfigDir, Pulumi.<name>.yaml), a path works wherever a name does, the bundled
examples are the names outside any project, and every miss says where it looked."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from gpu_cluster.components import stack_locate
from gpu_cluster.components.stack_file import read_stack_file
from gpu_cluster.components.spec_reader import SpecError
from gpu_cluster import cli

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = "aws-h200-slurm"


def _project(root: Path, stack_dir: str | None = "stacks", name: str = "mine") -> Path:
    """A user's Pulumi project: Pulumi.yaml (with stackConfigDir) and one stack file, a copy of an example."""
    root.mkdir(parents=True, exist_ok=True)
    text = "name: theirs\nruntime: python\n" + (f"stackConfigDir: {stack_dir}\n" if stack_dir else "")
    (root / "Pulumi.yaml").write_text(text, encoding="utf-8")
    folder = root / stack_dir if stack_dir else root
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "stacks" / f"Pulumi.{EXAMPLE}.yaml", folder / f"Pulumi.{name}.yaml")
    return folder / f"Pulumi.{name}.yaml"


def test_a_name_is_found_in_the_stack_config_dir_from_the_project_or_below(tmp_path: Path) -> None:
    stack = _project(tmp_path / "proj")
    deep = tmp_path / "proj" / "src" / "infra"
    deep.mkdir(parents=True)
    for cwd in (tmp_path / "proj", deep):
        where = stack_locate.locate("mine", cwd)
        assert (where.path, where.name, where.where, where.found) == (stack.resolve(), "mine", "project", True)
    # a fully qualified name names the file by its last part, as Pulumi's does
    assert stack_locate.locate("acme/theirs/mine", deep).path == stack.resolve()


def test_without_stack_config_dir_the_stack_file_is_beside_pulumi_yaml(tmp_path: Path) -> None:
    stack = _project(tmp_path, stack_dir=None)
    assert stack_locate.locate("mine", tmp_path).path == stack


def test_outside_a_project_the_names_are_the_bundled_examples(tmp_path: Path) -> None:
    where = stack_locate.locate(EXAMPLE, tmp_path)
    assert where.where == "bundled" and where.path == ROOT / "stacks" / f"Pulumi.{EXAMPLE}.yaml" and where.found
    assert set(stack_locate.bundled_stacks()) == {stack_locate.stack_name(p) for p in (ROOT / "stacks").glob("*.yaml")}


def test_a_miss_names_every_place_it_looked(tmp_path: Path) -> None:
    _project(tmp_path / "proj")
    inside = stack_locate.locate(EXAMPLE, tmp_path / "proj")
    assert not inside.found
    text = inside.missing()
    assert str(tmp_path / "proj" / "stacks" / f"Pulumi.{EXAMPLE}.yaml") in text
    assert f"stackConfigDir of {tmp_path / 'proj' / 'Pulumi.yaml'}" in text
    # inside a project, an example is reached by its path, which the miss prints
    assert str(ROOT / "stacks" / f"Pulumi.{EXAMPLE}.yaml") in text
    outside = stack_locate.locate("nope", tmp_path).missing()
    assert f"a Pulumi.yaml in {tmp_path.resolve()} and its parents (none)" in outside
    assert str(ROOT / "stacks" / "Pulumi.nope.yaml") in outside and EXAMPLE in outside
    with pytest.raises(SpecError) as err:
        read_stack_file(str(tmp_path / "Pulumi.gone.yaml"))
    assert str(tmp_path / "Pulumi.gone.yaml") in err.value.render()


def test_plan_mine_plans_the_users_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's check, in process: from the user's folder, `gpu-cluster plan mine`."""
    _project(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["plan", "mine"]) == 0
    out = capsys.readouterr().out
    assert "mine" in out and "liveness" in out


# Every subcommand that takes a stack, given a stack file's path that is not there: one message
# naming the path, a non-zero exit, never a traceback.
STACK_COMMANDS = (
    ["plan"],
    ["spec"],
    ["preflight"],
    ["pin", "--list"],
    ["validate", "render", "--out", "OUT"],
    ["validate", "submit"],
    ["validate", "status"],
    ["validate", "rehearse"],
    ["heal"],
)


@pytest.mark.parametrize("argv", STACK_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_a_stack_path_never_gives_a_traceback(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no `pulumi` on it, whatever the machine has
    missing = str(tmp_path / "stacks" / "Pulumi.gone.yaml")
    args = [a.replace("OUT", str(tmp_path / "out")) for a in argv]
    try:
        code = cli.main([*args[:2], missing, *args[2:]] if args[0] == "validate" else [args[0], missing, *args[1:]])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    assert code not in (0, None)
    captured = capsys.readouterr()
    said = captured.out + captured.err
    assert "Traceback" not in said
    assert "gone" in said, said


def test_runs_of_a_stack_given_by_path_are_filed_under_its_name(tmp_path: Path) -> None:
    """`validate submit /path/Pulumi.mine.yaml` once made out/validate/<the path>/ inside the file."""
    from gpu_cluster.workloads.validate.commands import _local_dir

    stack = _project(tmp_path)
    args = argparse.Namespace(fetch_to=str(tmp_path / "runs"), stack=str(stack))
    assert _local_dir(args, "r1") == tmp_path / "runs" / "mine" / "r1"


def test_render_of_the_users_stack_falls_back_to_its_offline_plan_and_says_so(tmp_path: Path) -> None:
    """As the bundled stacks do: no Pulumi CLI, no --outputs; the first line says whose plan it is."""
    import os
    import subprocess
    import sys

    _project(tmp_path)
    env = {**os.environ, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "gpu_cluster", "validate", "render", "mine", "--out", str(tmp_path / "job")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    first = (proc.stdout + proc.stderr).splitlines()[0]
    assert first == (
        f"outputs: the offline plan of stack mine, {tmp_path / 'stacks' / 'Pulumi.mine.yaml'} "
        "(the Pulumi CLI is not installed): placeholder endpoints and IDs"
    )
    assert (tmp_path / "job" / "validate.sbatch").is_file()
    assert "liveness: holds" in proc.stdout + proc.stderr
