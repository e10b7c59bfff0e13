"""Publishing a finished directory: the marker inside it, the rename over an older copy."""

from __future__ import annotations

from pathlib import Path

from gpu_cluster.workloads.runtime.atomic import publish_dir


def test_publish_dir_puts_the_marker_in_and_the_directory_in_place(tmp_path: Path) -> None:
    tmp = tmp_path / ".step_3.tmp"
    tmp.mkdir()
    (tmp / "shard-0").write_bytes(b"weights")
    final = tmp_path / "step_3"

    publish_dir(tmp, final, "COMPLETE", b'{"step": 3}')

    assert not tmp.exists()
    assert sorted(p.name for p in final.iterdir()) == ["COMPLETE", "shard-0"]
    assert (final / "COMPLETE").read_bytes() == b'{"step": 3}'
    assert (final / "shard-0").read_bytes() == b"weights"
    assert [p.name for p in tmp_path.iterdir()] == ["step_3"]  # no temporary of the marker left


def test_publish_dir_replaces_a_directory_of_the_same_step(tmp_path: Path) -> None:
    final = tmp_path / "step_3"
    final.mkdir()
    (final / "stale").write_bytes(b"old")
    tmp = tmp_path / ".step_3.tmp"
    tmp.mkdir()
    (tmp / "shard-0").write_bytes(b"new")

    publish_dir(tmp, final, "COMPLETE", b"{}")

    assert sorted(p.name for p in final.iterdir()) == ["COMPLETE", "shard-0"]
    assert (final / "shard-0").read_bytes() == b"new"
