"""Cluster Director: the gIB plugin's root and the gVNIC names are found on the node when the job
starts (catalog fabrics.rdma.slurm.discover), and a node without them stops the job naming what
was looked for. Run in bash here: this machine has neither, which is the failing case; the
rehearsal (tests/rehearse) runs the passing one on a stand-in node."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpu_cluster.workloads.launch import fabric

RDMA = fabric.wiring("rdma").slurm


def _run(lines: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = "\n".join(["set -euo pipefail", *lines, 'echo "root=$gpuc_plugin_root"'])
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", **env})


def test_catalog_names_what_to_discover_and_nothing_fixed() -> None:
    assert RDMA.discover is not None
    assert RDMA.discover.socket_ifname_driver == "gve" and RDMA.discover.plugin_package == "nccl-gib"
    assert "NCCL_SOCKET_IFNAME" not in RDMA.env
    lines = "\n".join(
        fabric.shell_lines(
            library_path=RDMA.library_path, env_script=RDMA.env_script, reexport={}, discover=RDMA.discover
        )
    )
    assert "enp0s19" not in lines and 'LD_LIBRARY_PATH="$gpuc_plugin_root"/lib64' in lines
    assert 'source "$gpuc_plugin_root"/scripts/set_nccl_env.sh' in lines


def test_plugin_root_from_the_environment_then_a_missing_one_is_named(tmp_path: Path) -> None:
    assert RDMA.discover is not None
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "set_nccl_env.sh").write_text("")
    ok = _run(fabric.discover_lines(RDMA.discover, RDMA.env_script), {"GPUC_PLUGIN_ROOT": str(tmp_path)})
    assert ok.returncode == 0 and ok.stdout.strip() == f"root={tmp_path}", ok.stderr
    # This machine has no nccl-gib package and no /usr/local/gib.
    assert not Path("/usr/local/gib").exists()
    gone = _run(fabric.discover_lines(RDMA.discover, RDMA.env_script), {})
    assert gone.returncode == 1
    assert gone.stderr.strip().endswith(
        "looked for $GPUC_PLUGIN_ROOT, the files of package nccl-gib (dpkg -L), /usr/local/gib "
        "(each with scripts/set_nccl_env.sh)"
    ), gone.stderr


def test_no_gvnic_stops_the_job_naming_the_driver() -> None:
    assert RDMA.discover is not None
    here = [p.name for p in Path("/sys/class/net").iterdir() if (p / "device" / "driver").resolve().name == "gve"]
    assert here == []  # this machine is no GCE VM
    got = _run(['gpuc_plugin_root=""', *fabric.nic_lines(RDMA.discover)], {})
    assert got.returncode == 1
    assert "no network interface bound to the gve driver on " in got.stderr
    assert got.stderr.strip().endswith("looked in /sys/class/net/*/device/driver")


def test_a_socket_ifname_the_job_was_given_wins() -> None:
    lines = fabric.shell_lines(
        library_path=RDMA.library_path,
        env_script=RDMA.env_script,
        reexport={"NCCL_SOCKET_IFNAME": "eth9"},
        discover=RDMA.discover,
    )
    assert not any("/sys/class/net" in line for line in lines)
