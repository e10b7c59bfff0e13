"""The node gate's script and the found-at-start lines, run for real (sh, bash) on a stand-in tree:
what the pod waits for and what the job looks for decide as the liveness model says they do."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_cluster.workloads.launch import pod
from gpu_cluster.workloads.launch.fabric import found_lines, wiring


def _gate(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", pod.gate_script()],
        env={"PATH": "/usr/bin:/bin", "GPUC_NODE": "node-7", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_gate_passes_once_every_path_is_there(tmp_path: Path) -> None:
    (tmp_path / "lib64").mkdir()
    (tmp_path / "lib64" / "libnccl-net.so").write_bytes(b"")
    (tmp_path / "aperture" / "0000:8f:00.0").mkdir(parents=True)
    done = _gate({"GPUC_WAIT_FOR": f"{tmp_path}/lib64/libnccl-net.so {tmp_path}/aperture/", "GPUC_WAIT_S": "0"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("node ready:")


@pytest.mark.parametrize("empty_dir", [True, False])
def test_the_gate_fails_with_one_line_naming_what_never_appeared(tmp_path: Path, empty_dir: bool) -> None:
    (tmp_path / "lib64").mkdir()
    (tmp_path / "lib64" / "libnccl-net.so").write_bytes(b"")
    (tmp_path / "aperture").mkdir()  # bound, but still empty: the blocker's case
    missing = f"{tmp_path}/aperture/" if empty_dir else f"{tmp_path}/lib64/a3plus_tuner_config.textproto"
    done = _gate({"GPUC_WAIT_FOR": f"{tmp_path}/lib64/libnccl-net.so {missing}", "GPUC_WAIT_S": "0"})
    assert done.returncode == 1
    assert done.stderr.splitlines() == [f"node installer not done on node-7: {missing} never appeared within 0s"]


def _found_script(tmp: Path) -> str:
    found = tuple(replace(f, dirs=tuple(f"{tmp}{d}" for d in f.dirs)) for f in wiring("efa").slurm.found_at_start)
    lines = [
        "set -euo pipefail",
        *found_lines(found),
        'echo "LIBS=$gpuc_found_libs"',
        'echo "TUNER=${NCCL_TUNER_PLUGIN:-}"',
        'echo "NET=${NCCL_NET_PLUGIN:-}"',
    ]
    return "\n".join(lines)


def _run_found(tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", _found_script(tmp)], capture_output=True, text=True, timeout=60)


def _touch(root: Path, *rel: str) -> None:
    for r in rel:
        (root / r.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / r.lstrip("/")).write_bytes(b"")


def test_the_al2023_layout_is_found_with_its_tuner(tmp_path: Path) -> None:
    # The PCS sample AMI: AL2023, EFA installer 1.47.0 (catalog node_images.pcs-al2023).
    _touch(tmp_path, "/opt/amazon/efa/lib64/libfabric.so.1", "/opt/amazon/ofi-nccl/lib64/libnccl-net-ofi.so")
    _touch(tmp_path, "/opt/amazon/ofi-nccl/lib64/libnccl-ofi-tuner.so")
    done = _run_found(tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"LIBS={tmp_path}/opt/amazon/efa/lib64:{tmp_path}/opt/amazon/ofi-nccl/lib64" in done.stdout
    assert f"TUNER={tmp_path}/opt/amazon/ofi-nccl/lib64/libnccl-ofi-tuner.so" in done.stdout
    # NCCL dlopens only libnccl-net.so unless told: named by path (catalog fabrics.efa.slurm).
    assert f"NET={tmp_path}/opt/amazon/ofi-nccl/lib64/libnccl-net-ofi.so" in done.stdout


def test_the_dlami_layout_is_found_without_naming_a_tuner_it_lacks(tmp_path: Path) -> None:
    _touch(tmp_path, "/opt/amazon/efa/lib/libfabric.so", "/opt/amazon/ofi-nccl/lib/libnccl-net.so")
    done = _run_found(tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"LIBS={tmp_path}/opt/amazon/efa/lib:{tmp_path}/opt/amazon/ofi-nccl/lib" in done.stdout
    assert "TUNER=\n" in done.stdout
    assert "NET=\n" in done.stdout  # libnccl-net.so is NCCL's default name: nothing to set


def test_a_node_without_the_plugin_stops_naming_where_it_looked(tmp_path: Path) -> None:
    _touch(tmp_path, "/opt/amazon/efa/lib64/libfabric.so.1")
    done = _run_found(tmp_path)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert (
        line.startswith("the aws-ofi-nccl plugin not found on ") and "libnccl-net-ofi.so or libnccl-net.so in" in line
    )
    assert f"{tmp_path}/opt/amazon/ofi-nccl/lib64, {tmp_path}/opt/amazon/ofi-nccl/lib" in line
