"""EFA's byte counters on PCS, by the real programs: the boot script's writer run by ``sh`` over a
fake sysfs tree, ``promtool`` linting its file, ``systemd-analyze`` checking its units, and a real
node exporter's textfile collector served to a real Prometheus with the PCS collector's own
node-exporter job, answering the dashboard's EFA panels."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_cluster.components import dashboard
from gpu_cluster.components.aws import efa_textfile, slurm_metrics
from gpu_cluster.components.contract import METRICS_TEXTFILE_DIR
from tests.prom_stack import NODE_EXPORTER, PROMETHEUS, PROMTOOL, query, scraped_textfile

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_prometheus = pytest.mark.skipif(
    not (PROMETHEUS and NODE_EXPORTER and PROMTOOL),
    reason="prometheus, promtool and prometheus-node-exporter (scripts/install-system-deps.sh)",
)


def _port(sys_root: Path, device: str, port: str, **counters: str) -> None:
    hw = sys_root / "class" / "infiniband" / device / "ports" / port / "hw_counters"
    hw.mkdir(parents=True, exist_ok=True)
    for name, value in counters.items():
        (hw / name).write_text(value + "\n")


def _run(tmp_path: Path, sys_root: Path, out: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "gpu-cluster-efa-textfile"
    script.write_text(efa_textfile.script())
    return subprocess.run(["sh", str(script), str(sys_root), str(out)], capture_output=True, text=True, timeout=60)


def _samples(text: str) -> dict[tuple[str, str, str], int]:
    got = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        series, value = line.rsplit(" ", 1)
        name, labels = series.rstrip("}").split("{")
        kv = dict(part.split("=") for part in labels.split(","))
        got[(name, kv["device"].strip('"'), kv["port"].strip('"'))] = int(value)
    return got


def test_the_writer_copies_each_efa_ports_byte_counters(tmp_path: Path) -> None:
    sys_root, out = tmp_path / "sys", tmp_path / "out"
    out.mkdir()
    _port(sys_root, "rdmap16s27", "1", rx_bytes="1000", tx_bytes="2000", rx_pkts="7")
    _port(sys_root, "rdmap32s27", "1", rx_bytes="18446744073709551615", tx_bytes="0")
    # An mlx5-style device has hw_counters without rx_bytes: not EFA, not written.
    _port(sys_root, "mlx5_0", "1", out_of_buffer="3")
    # A counter the driver cannot read is left out, not written as a bad sample.
    _port(sys_root, "rdmap48s27", "1", rx_bytes="N/A (no PMA)", tx_bytes="5")
    (out / efa_textfile.TEXTFILE).write_text("stale\n")
    done = _run(tmp_path, sys_root, out)
    assert done.returncode == 0, done.stderr
    # Only the finished file is there: the temporary name was renamed, and it never ended in .prom.
    assert sorted(p.name for p in out.iterdir()) == [efa_textfile.TEXTFILE]
    text = (out / efa_textfile.TEXTFILE).read_text()
    rx, tx = efa_textfile.RX_BYTES, efa_textfile.TX_BYTES
    assert _samples(text) == {
        (rx, "rdmap16s27", "1"): 1000,
        (tx, "rdmap16s27", "1"): 2000,
        (rx, "rdmap32s27", "1"): 18446744073709551615,
        (tx, "rdmap32s27", "1"): 0,
        (tx, "rdmap48s27", "1"): 5,
    }
    assert f"# TYPE {rx} counter" in text and f"# TYPE {tx} counter" in text
    if PROMTOOL:
        lint = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
        assert lint.returncode == 0, lint.stdout + lint.stderr


def test_a_node_without_efa_gets_an_empty_file_and_a_missing_directory_fails(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    done = _run(tmp_path, tmp_path / "no-sys", out)
    assert done.returncode == 0, done.stderr
    assert (out / efa_textfile.TEXTFILE).read_text() == ""
    gone = _run(tmp_path, tmp_path / "no-sys", tmp_path / "missing")
    assert gone.returncode != 0


@pytest.mark.skipif(not SYSTEMD_ANALYZE, reason="systemd-analyze")
def test_systemd_accepts_the_units(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / efa_textfile.UNIT_DIR.lstrip("/")).mkdir(parents=True)
    # The machine's own units (sysinit.target, timers.target), which the verifier resolves in --root.
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    exe = root / efa_textfile.SCRIPT_PATH.lstrip("/")
    exe.parent.mkdir(parents=True)
    exe.write_text(efa_textfile.script())
    exe.chmod(0o755)
    paths = []
    for name, text in efa_textfile.units().items():
        p = root / efa_textfile.UNIT_DIR.lstrip("/") / name
        p.write_text(text)
        paths.append(str(p))
    done = subprocess.run(
        [SYSTEMD_ANALYZE or "", "verify", f"--root={root}", *paths], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    timer = efa_textfile.units()[f"{efa_textfile.UNIT}.timer"]
    assert "AccuracySec=1s" in timer and "WantedBy=timers.target" in timer


def test_the_pcs_boot_script_installs_the_writer_after_the_directory() -> None:
    script = slurm_metrics.node_script("https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/", "us-east-1")
    assert efa_textfile.script() in script
    for text in efa_textfile.units().values():
        assert text in script
    assert script.index(f"mkdir -p {METRICS_TEXTFILE_DIR}") < script.index(f"enable --now {efa_textfile.UNIT}.timer")
    done = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def efa_node(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """The writer's file served by a node exporter and scraped by a Prometheus with PCS's node-exporter
    job; yields Prometheus's address, the fake sysfs and the textfile directory."""
    sys_root, textfile = tmp_path / "sys", tmp_path / "textfile"
    textfile.mkdir()
    config = slurm_metrics.collector_config("https://aps.example/ws/", "us-east-1")["receivers"]["prometheus"]["config"]
    with scraped_textfile(
        tmp_path, textfile, config["scrape_configs"], slurm_metrics.HOST_PLACEHOLDER, "pcs-gpu-1"
    ) as prom:
        yield prom, sys_root, textfile


@needs_prometheus
def test_prometheus_charts_efa_throughput_per_node_through_the_textfile_collector(
    efa_node: tuple[str, Path, Path], tmp_path: Path
) -> None:
    base, sys_root, textfile = efa_node
    _port(sys_root, "rdmap16s27", "1", rx_bytes="1000", tx_bytes="4000")
    _port(sys_root, "rdmap32s27", "1", rx_bytes="3000", tx_bytes="0")
    assert _run(tmp_path, sys_root, textfile).returncode == 0
    got = query(base, f'{efa_textfile.RX_BYTES}{{node="pcs-gpu-1"}}')
    assert {r["metric"]["device"]: r["value"][1] for r in got} == {"rdmap16s27": "1000", "rdmap32s27": "3000"}
    # The counters move; the panels' rate() over the node's devices turns positive once Prometheus has
    # scraped both values (polled, never a fixed wait).
    _port(sys_root, "rdmap16s27", "1", rx_bytes="1000001000", tx_bytes="2000004000")
    assert _run(tmp_path, sys_root, textfile).returncode == 0
    assert query(base, f'{efa_textfile.RX_BYTES}{{device="rdmap16s27"}} == 1000001000')
    panels = dashboard.FABRIC_PANELS["aws-slurm"]
    assert {p.metric for p in panels} == set(efa_textfile.COUNTERS)
    for p in panels:
        expr = p.promql(dashboard.NODE_LABEL["eks"])
        rows = query(base, f"({expr}) > 0")
        assert [r["metric"] for r in rows] == [{"node": "pcs-gpu-1"}], (p.title, expr)
