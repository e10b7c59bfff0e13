"""Where a result goes is checked before the work that makes it (issue 47 item 4): `plan --json`,
`plan --outputs` and `schema --out` to a path that cannot be written stop in one line, exit 3, and
plan nothing; a stack file that is not UTF-8 is one line naming the byte, not a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_cluster.components import plan, provider
from gpu_cluster.components.spec import SpecError
from gpu_cluster.components.stack_file import read_stack_file


@pytest.fixture()
def no_planning(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("planned a stack whose results had nowhere to go")

    monkeypatch.setattr(plan, "plan_stack", refuse)


def _under_a_file(tmp_path: Path) -> Path:
    # unwritable for root too (the suite runs as root in CI, where a read-only mode means nothing)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    return blocker / "plan.json"


@pytest.mark.parametrize("flag", ["--json", "--outputs"])
@pytest.mark.parametrize(
    "where",
    [
        lambda t: t / "missing" / "plan.json",  # no such directory
        lambda t: t,  # a directory where a file is wanted
        _under_a_file,  # its directory is a file
    ],
    ids=["missing-dir", "a-directory", "under-a-file"],
)
def test_plan_refuses_an_output_it_cannot_write_before_planning(
    flag: str, where: object, tmp_path: Path, no_planning: None, capsys: pytest.CaptureFixture[str]
) -> None:
    target = where(tmp_path)  # type: ignore[operator]
    assert plan.main(["aws-h100-eks", flag, str(target)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"gpu-cluster: {flag}: ") and str(target.parent) in err[0], err


def test_schema_refuses_an_output_it_cannot_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert provider.schema_main(["--out", str(tmp_path / "nowhere" / "schema.json")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gpu-cluster schema: --out: directory {tmp_path / 'nowhere'} does not exist"]
    assert provider.schema_main(["--out", str(tmp_path)]) == 3
    assert "is a directory" in capsys.readouterr().err


def test_a_stack_file_that_is_not_utf8_is_one_named_problem(tmp_path: Path) -> None:
    bad = tmp_path / "Pulumi.latin1.yaml"
    bad.write_bytes("config:\n  gpu-cluster:cluster:\n    name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(SpecError) as err:
        read_stack_file(str(bad))
    text = err.value.render()
    assert "not UTF-8 text: byte 0xe9 at offset" in text and str(bad) in text and "Traceback" not in text


def test_a_folder_written_as_a_path_is_refused_as_a_folder_naming_its_stacks(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.mine.yaml").write_text("config: {}\n")
    for given in (f"{tmp_path}/", str(tmp_path)):
        with pytest.raises(SpecError) as err:
            read_stack_file(given)
        text = err.value.render()
        assert "a folder, not a stack file" in text and "this folder holds Pulumi.mine.yaml" in text, text


def test_a_directory_that_refuses_files_is_found_by_trying_not_by_mode_bits(
    no_planning: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Root passes os.access everywhere; sysfs still refuses it a file. The check tries a file."""
    from tests.workloads.test_bad_inputs import _read_only_dir

    ro = _read_only_dir()
    if ro is None:
        pytest.skip("no directory here refuses this user a file")
    assert plan.main(["aws-h100-eks", "--json", str(ro / "plan.json")]) == 3
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"gpu-cluster: --json: {ro / 'plan.json'} cannot be written: {ro} is not writable"), line
