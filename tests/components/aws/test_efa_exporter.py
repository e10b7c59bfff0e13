"""EFA throughput on EKS: the EFA exporter DaemonSet as the plan writes it, held by the liveness model
to every GPU node; and its two containers' commands run for real: the writer's loop as the pod's user
over a fake sysfs tree into a world-writable directory (an emptyDir's mode), and the node exporter
with the DaemonSet's own flags served to a real Prometheus running the AMP scraper's own job, its
relabelling fed the labels Kubernetes discovery gives the pod."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_cluster.components import dashboard
from gpu_cluster.components.aws import efa_exporter, efa_textfile
from gpu_cluster.components.aws.metrics import scrape_configuration
from gpu_cluster.components.spec import read_stack_file
from tests.components._liveness import bundled, plan_raw
from tests.components.aws.test_efa_textfile import NODE_EXPORTER, PROMETHEUS, _port, _samples
from tests.prom_stack import free_port as _free_port
from tests.prom_stack import query as _query
from tests.prom_stack import stop as _stop
from tests.prom_stack import wait_http as _wait_http

STACK = "aws-h100-eks"
DS = "kubernetes:apps/v1:DaemonSet"
SETPRIV = shutil.which("setpriv")
as_root = pytest.mark.skipif(os.geteuid() != 0 or not SETPRIV, reason="setpriv as root, to run as the pod's user")


def _daemonset(p: Any) -> Any:
    (ds,) = [r for r in p.run.of_type(DS) if r.inputs["metadata"]["name"] == efa_exporter.NAME]
    return ds


def test_the_daemonset_runs_on_every_gpu_node_reading_sys_read_only() -> None:
    p = bundled(STACK)
    ds = _daemonset(p)
    pod = ds.inputs["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": p.spec.compute.instance_type}
    assert pod["tolerations"] == [{"key": "gpu-cluster.io/unvalidated", "operator": "Exists", "effect": "NoSchedule"}]
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and pod["automountServiceAccountToken"] is False
    (sys_volume,) = [v for v in pod["volumes"] if "hostPath" in v]
    assert sys_volume["hostPath"]["path"] == "/sys"
    exporter, writer = pod["containers"]
    # Only the writer sees the host's /sys, and read-only; the exporter reads the shared directory only.
    assert [m for m in writer["volumeMounts"] if m["name"] == sys_volume["name"]] == [
        {"name": sys_volume["name"], "mountPath": efa_exporter.SYSFS_MOUNT, "readOnly": True}
    ]
    assert all(m["name"] != sys_volume["name"] for m in exporter["volumeMounts"])
    assert exporter["ports"] == [{"name": "metrics", "containerPort": 9100}]
    assert writer["command"][-2:] == [efa_exporter.SYSFS_MOUNT, efa_exporter.TEXTFILE_MOUNT]
    # The writer is PCS's own script, from the ConfigMap the pod mounts.
    (script,) = [
        r
        for r in p.run.of_type("kubernetes:core/v1:ConfigMap")
        if r.inputs["metadata"]["name"] == f"{efa_exporter.NAME}-script"
    ]
    assert script.inputs["data"] == {efa_exporter.SCRIPT_KEY: efa_textfile.script()}
    for c in (exporter, writer):
        assert c["image"] == "quay.io/prometheus/node-exporter:v1.12.1"
        box = c["securityContext"]
        assert box["runAsNonRoot"] and box["readOnlyRootFilesystem"] and not box["allowPrivilegeEscalation"]
        assert box["capabilities"]["drop"] == ["ALL"] and set(c["resources"]) == {"requests", "limits"}
    # By tag, so the by-digest rule is waived with its reason; and listed for `gpu-cluster pin`.
    assert ds.inputs["metadata"]["annotations"] == {"checkov.io/skip1": f"CKV_K8S_43={efa_exporter.UNPINNED_REASON}"}
    (check,) = p.checks("scheduling", f"DaemonSet kube-system/{efa_exporter.NAME}")
    assert check.holds and "runs on every node of pool" in check.check


def test_a_pinned_image_is_pulled_by_digest_and_loses_the_waiver() -> None:
    name, raw = read_stack_file(STACK)
    digest = "sha256:" + "a" * 64
    raw = {**raw, "images": {efa_exporter.IMAGE: digest}}
    p = plan_raw(name, raw)
    ds = _daemonset(p)
    assert {c["image"] for c in ds.inputs["spec"]["template"]["spec"]["containers"]} == {
        f"{efa_exporter.IMAGE}@{digest}"
    }
    assert not ds.inputs["metadata"].get("annotations")


def test_an_exporter_that_does_not_tolerate_the_registration_taint_breaks_liveness(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        efa_exporter, "toleration", lambda: {"key": "example.com/other", "operator": "Exists", "effect": "NoSchedule"}
    )
    name, raw = read_stack_file(STACK)
    failed = [c for c in plan_raw(name, raw).failed() if efa_exporter.NAME in c.object]
    assert failed and failed[0].kind == "scheduling" and "gpu-cluster.io/unvalidated" in failed[0].why


def test_the_scraper_keeps_the_exporters_metrics_port_and_names_the_node() -> None:
    jobs = {j["job_name"]: j for j in yaml.safe_load(scrape_configuration())["scrape_configs"]}
    job = jobs["gpu-cluster-efa"]
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": ["kube-system"]}}]
    assert {tuple(r["source_labels"]): r["regex"] for r in job["relabel_configs"] if r.get("action") == "keep"} == {
        ("__meta_kubernetes_pod_label_app_kubernetes_io_name",): efa_exporter.NAME,
        ("__meta_kubernetes_pod_container_port_name",): "metrics",
    }


def _writer(sys_root: Path, textfile: Path, script_dir: Path) -> subprocess.Popen[bytes]:
    """The DaemonSet's writer command, as the pod's user, its script at the mount's path replaced by
    ``script_dir`` and its two arguments by the fake tree and the directory."""
    (script_dir / efa_exporter.SCRIPT_KEY).write_text(efa_textfile.script())
    command = efa_exporter.writer_command()
    loop = command[2].replace(f"{efa_exporter.SCRIPT_MOUNT}/", f"{script_dir}/")
    user = str(efa_exporter.USER)
    return subprocess.Popen(
        [SETPRIV or "", f"--reuid={user}", f"--regid={user}", "--clear-groups", *command[:2], loop, command[3]]
        + [str(sys_root), str(textfile)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _wait_file(path: Path, proc: subprocess.Popen[bytes], bound_s: float = 60.0) -> str:
    end = time.monotonic() + bound_s
    while time.monotonic() < end:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else proc.returncode
        if path.exists():
            return path.read_text()
        time.sleep(0.2)
    raise AssertionError(f"{path} not written within {bound_s} s")


@pytest.fixture
def shared() -> Iterator[tuple[Path, Path, Path]]:
    """The fake sysfs, the emptyDir (mode 0777, as Kubernetes makes it) and the script's directory,
    all reachable by the pod's user: under a directory of their own in /tmp, since pytest's own
    temporary root is its owner's alone."""
    root = Path(tempfile.mkdtemp(prefix="efa-exporter-"))
    try:
        root.chmod(0o755)
        sys_root, textfile, script_dir = root / "sys", root / "textfile", root / "efa"
        for d in (textfile, script_dir):
            d.mkdir()
        textfile.chmod(0o777)
        yield sys_root, textfile, script_dir
    finally:
        shutil.rmtree(root)


@as_root
def test_rerun_the_writer_loop_as_the_pods_user_it_writes_the_efa_file(shared: tuple[Path, Path, Path]) -> None:
    sys_root, textfile, script_dir = shared
    _port(sys_root, "rdmap16s27", "1", rx_bytes="1000", tx_bytes="2000")
    _port(sys_root, "rdmap32s27", "1", rx_bytes="3000", tx_bytes="4000")
    sys_root.chmod(0o755)
    proc = _writer(sys_root, textfile, script_dir)
    try:
        text = _wait_file(textfile / efa_textfile.TEXTFILE, proc)
    finally:
        _stop([proc])
    rx, tx = efa_textfile.RX_BYTES, efa_textfile.TX_BYTES
    assert _samples(text) == {
        (rx, "rdmap16s27", "1"): 1000,
        (tx, "rdmap16s27", "1"): 2000,
        (rx, "rdmap32s27", "1"): 3000,
        (tx, "rdmap32s27", "1"): 4000,
    }
    # The file is the user's own (the loop ran as 65534), and nothing else was left in the directory.
    assert (textfile / efa_textfile.TEXTFILE).stat().st_uid == efa_exporter.USER
    assert sorted(p.name for p in textfile.iterdir()) == [efa_textfile.TEXTFILE]


@pytest.fixture
def eks_node(shared: tuple[Path, Path, Path], tmp_path: Path) -> Iterator[tuple[str, Path, subprocess.Popen[bytes]]]:
    """The writer loop and the node exporter with the DaemonSet's flags, scraped by Prometheus with
    the AMP scraper's EFA job; yields Prometheus's address, the fake sysfs and the writer."""
    sys_root, textfile, script_dir = shared
    ne_port, prom_port = _free_port(), _free_port()
    job = next(
        j for j in yaml.safe_load(scrape_configuration())["scrape_configs"] if j["job_name"] == "gpu-cluster-efa"
    )
    # Kubernetes discovery replaced by one static target carrying the labels discovery gives the
    # exporter's pod (its app label, its container port's name, its node): the job's own relabelling runs.
    del job["kubernetes_sd_configs"]
    job["static_configs"] = [
        {
            "targets": [f"127.0.0.1:{ne_port}"],
            "labels": {
                "__meta_kubernetes_pod_label_app_kubernetes_io_name": efa_exporter.NAME,
                "__meta_kubernetes_pod_container_port_name": efa_exporter.PORT_NAME,
                "__meta_kubernetes_pod_node_name": "ip-10-0-1-17.ec2.internal",
            },
        }
    ]
    conf = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"}, "scrape_configs": [job]}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(conf))
    args = [a.replace(efa_exporter.TEXTFILE_MOUNT, str(textfile)) for a in efa_exporter.exporter_args()]
    procs: list[subprocess.Popen[bytes]] = [_writer(sys_root, textfile, script_dir)]
    try:
        procs.append(
            subprocess.Popen(
                [NODE_EXPORTER or "", *args, f"--web.listen-address=127.0.0.1:{ne_port}"],
                stdout=subprocess.DEVNULL,
                stderr=(tmp_path / "node-exporter.log").open("wb"),
            )
        )
        procs.append(
            subprocess.Popen(
                [
                    PROMETHEUS or "",
                    f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=(tmp_path / "prometheus.log").open("wb"),
            )
        )
        _wait_http(f"http://127.0.0.1:{ne_port}/metrics", procs[1])
        _wait_http(f"http://127.0.0.1:{prom_port}/-/ready", procs[2])
        yield f"http://127.0.0.1:{prom_port}", sys_root, procs[0]
    finally:
        _stop(procs)


@as_root
@pytest.mark.skipif(not (PROMETHEUS and NODE_EXPORTER), reason="prometheus, prometheus-node-exporter")
def test_rerun_prometheus_charts_eks_efa_throughput_per_node_with_the_scrapers_job(
    shared: tuple[Path, Path, Path], eks_node: tuple[str, Path, subprocess.Popen[bytes]]
) -> None:
    base, sys_root, writer = eks_node
    _port(sys_root, "rdmap16s27", "1", rx_bytes="1000", tx_bytes="4000")
    sys_root.chmod(0o755)
    got = _query(base, f'{efa_textfile.RX_BYTES}{{node="ip-10-0-1-17.ec2.internal"}}')
    assert [(r["metric"]["device"], r["metric"]["job"], r["value"][1]) for r in got] == [
        ("rdmap16s27", "gpu-cluster-efa", "1000")
    ]
    # The counters move; the loop's next round carries them, and the EKS panels' rate() turns positive.
    _port(sys_root, "rdmap16s27", "1", rx_bytes="1000001000", tx_bytes="2000004000")
    assert _query(base, f"{efa_textfile.RX_BYTES} == 1000001000")
    assert writer.poll() is None
    panels = dashboard.FABRIC_PANELS["aws-eks"]
    assert {p.metric for p in panels} == set(efa_textfile.COUNTERS)
    for p in panels:
        expr = p.promql(dashboard.NODE_LABEL["eks"])
        rows = _query(base, f"({expr}) > 0")
        assert [r["metric"] for r in rows] == [{"node": "ip-10-0-1-17.ec2.internal"}], (p.title, expr)
